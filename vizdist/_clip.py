"""Text vizdist prints, draws or embeds is cut, and says so; the trace keeps the whole value.

A trace file may come from anyone, and a trace built in memory may hold anything: a 10 MB strategy
name must not become a 10 MB terminal line, error message or web page. :func:`clip` cuts a string
and says how much it left out; views that have room for only a label use
:func:`vizdist.render._text.short` (an ellipsis); an error message that quotes a value from a trace file
cuts it with :func:`ellipsis`.

Example:
    >>> clip("abc" * 10, 12)
    'abcabcabcabc… [18 more characters cut]'
    >>> clip("short")
    'short'
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_LINE", "MAX_MESSAGE", "clip", "ellipsis"]

#: A finding's message, at most (TF's whole error text fits; a megabyte does not).
MAX_MESSAGE = 10_000
#: A line the ``vizdist`` command prints, at most.
MAX_LINE = 20_000


def clip(text: Any, limit: int = MAX_MESSAGE) -> str:
    """``text`` as a string of at most ``limit`` characters, plus a note of how many were cut."""
    s = str(text)
    return s if len(s) <= limit else f"{s[:limit]}… [{len(s) - limit:,} more characters cut]"


def ellipsis(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters, the last three ``...`` (what a trace's error messages quote).

    Example:
        >>> ellipsis("abcdefgh", 6), ellipsis("abc", 6)
        ('abc...', 'abc')
    """
    return text if len(text) <= limit else text[: limit - 3] + "..."
