"""Whether a JSON value fits a type annotation: the checking under :func:`vizdist.contract.validate_meta`.

:func:`misfit` walks a value beside its type (a ``TypedDict``, a ``list[...]``, a union, ``int``, ``float``,
``str``, ``bool``, ``None``, ``Any``) and names the innermost place where they part (a key path such as
``stall.after_s``); :func:`describe` says a type in words for the error message. JSON's numbers: an ``int``
fits ``float``, a ``bool`` fits neither.

Example:
    >>> misfit({"a": [1, "x"]}, dict[str, Any], "meta"), misfit([1, "x"], list[int], "key")
    (None, ('key[1]', 'x', <class 'int'>))
    >>> describe(int | None), describe(list[float])
    ('int or null', 'a list of a number')
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any

__all__ = ["MISSING", "Problem", "describe", "misfit", "short", "type_hints"]


@functools.cache
def type_hints(td: type) -> dict[str, Any]:
    """A ``TypedDict``'s keys and their types (its annotations resolved; cached)."""
    return typing.get_type_hints(td)


def describe(tp: Any) -> str:
    """``tp`` in the words of an error message about a JSON value (``"int or null"``, ``"a list of str"``)."""
    if typing.is_typeddict(tp):
        return "an object"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else describe(a) for a in args)
    if origin is list:
        return f"a list of {describe(args[0])}" if args and args[0] is not Any else "a list"
    if origin is dict or tp is dict:
        return "an object"
    return "a number" if tp is float else getattr(tp, "__name__", str(tp))


class _Missing:
    """The value of a required key that is not there."""

    def __repr__(self) -> str:
        return "nothing"


MISSING = _Missing()
Problem = tuple[str, Any, Any]  # (key path, the value there, the type the contract gives it)


def misfit(value: Any, tp: Any, where: str) -> Problem | None:
    """None when ``value`` fits ``tp``, else the innermost place where it does not."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return None
    if origin in (typing.Union, types.UnionType):
        inner = [misfit(value, a, where) for a in args]
        if any(p is None for p in inner):
            return None
        deeper = [p for p in inner if p is not None and p[0] != where]
        return deeper[0] if deeper else (where, value, tp)
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return where, value, tp
        hints = type_hints(tp)
        missing = sorted(tp.__required_keys__ - value.keys())
        if missing:
            return f"{where}.{missing[0]}", MISSING, hints[missing[0]]
        return next((p for k, v in value.items() if k in hints
                     if (p := misfit(v, hints[k], f"{where}.{k}")) is not None), None)
    if origin is list:
        if not isinstance(value, list):
            return where, value, tp
        return next((p for i, v in enumerate(value)
                     if (p := misfit(v, args[0], f"{where}[{i}]")) is not None), None)
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is type(None):
        ok = value is None
    else:
        ok = isinstance(value, origin or tp)
    return None if ok else (where, value, tp)


def short(value: Any) -> str:
    """``repr(value)``, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
