"""User strings in views: plain text (never math markup), and short (the trace keeps them whole).

File names, lane names, titles and step results come from the user's run. Matplotlib reads ``$...$``
as math and fails on text like ``$\\frac{a}{$``; a megabyte-long label makes a figure take minutes
to lay out. Every figure vizdist draws passes through :func:`plain_figure` before it is returned.

Example:
    >>> short("x" * 200, 10)
    'xxxxxxxxx…'
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> _ = ax.set_title("part-$\\\\frac{a}{$.txt")
    >>> _ = plain_figure(fig).canvas.draw()      # no mathtext error
    >>> plt.close(fig)
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_LABEL", "MAX_RESULT", "MAX_WIDTH_IN", "MIN_TEXT_PT", "TITLE_PT", "described", "plain_figure", "short",
           "text_inches"]

MAX_LABEL = 120
MAX_RESULT = 200
#: The smallest text a figure draws, in points (readable at a notebook's width).
MIN_TEXT_PT = 9
#: Figure titles, in points.
TITLE_PT = 11
#: The widest figure, in inches: what a notebook's output area shows without scaling it down.
MAX_WIDTH_IN = 10.5


def short(text: Any, limit: int = MAX_LABEL) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks a cut)."""
    s = str(text)
    return s if len(s) <= limit else s[: max(limit - 1, 0)] + "…"


def text_inches(text: Any, size: float = MIN_TEXT_PT, *, bold: bool = False) -> tuple[float, float]:
    """Width and height, in inches, that ``text`` (one or more lines) takes at ``size`` points.

    Measured from the glyphs of matplotlib's default font, so figures can be sized to what they hold.

    Example:
        >>> w, h = text_inches("worker:0", 9)
        >>> 0.3 < w < 1.0 and 0.1 < h < 0.2
        True
    """
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath

    prop = FontProperties(size=size, weight="bold" if bold else "normal")
    lines = str(text).split("\n")
    # "$" would be read as math here (the figures draw it plain): measured as a letter of like width
    width = max(float(TextPath((0, 0), line.replace("$", "S"), prop=prop).get_extents().width) if line.strip()
                else 0.0 for line in lines)
    return width / 72, len(lines) * size * 1.2 / 72


def _tick(text: Any, limit: int) -> str:
    """A tick label: short, and with ``$`` escaped (tick labels are always parsed for math)."""
    return short(text, limit).replace("$", r"\$")


def plain_figure(fig: Any, *, limit: int = MAX_LABEL) -> Any:
    """Make every text of ``fig`` plain (no math parsing) and at most ``limit`` characters; return ``fig``."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    for artist in fig.findobj(Text):
        artist.set_parse_math(False)
        text = artist.get_text()
        if "$" in text:  # matplotlib measures wrapped lines as math whatever parse_math says
            artist.set_wrap(False)
        if len(text) > limit:
            artist.set_text(short(text, limit))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            formatter = axis.get_major_formatter()  # tick labels are re-made from it at each draw
            if isinstance(formatter, FixedFormatter):
                formatter.seq = [_tick(t, limit) for t in formatter.seq]
            elif isinstance(formatter, FuncFormatter) and not getattr(formatter, "_vizdist_plain", False):
                plain = FuncFormatter(lambda x, pos, f=formatter: _tick(f(x, pos), limit))
                plain._vizdist_plain = True  # type: ignore[attr-defined]  # our mark: made here, not wrapped again
                axis.set_major_formatter(plain)
    return fig


def described(fig: Any, summary: str) -> Any:
    """Give ``fig`` a plain-text repr that says what it drew (nbval compares it; the PNG it cannot).

    The figure stays a matplotlib ``Figure`` (``savefig`` and the rest work as before); only its
    ``repr`` changes, from ``<Figure size 640x480 with 1 Axes>`` to ``<Figure: {summary}>``.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import matplotlib.pyplot as plt
        >>> fig = described(plt.figure(), "2 steps x 4 replicas")
        >>> repr(fig)
        '<Figure: 2 steps x 4 replicas>'
        >>> plt.close(fig)
    """
    from matplotlib.figure import Figure

    if type(fig) is Figure:
        fig.__class__ = _described_class()
    fig.vizdist_summary = summary
    return fig


_DESCRIBED: list[type] = []


def _described_class() -> type:
    """The Figure subclass (made once, on first use, so importing this module needs no matplotlib)."""
    if not _DESCRIBED:
        from matplotlib.figure import Figure

        class DescribedFigure(Figure):  # type: ignore[misc]  # the base class comes from a package without types (Any)
            """A Figure whose repr says what vizdist drew in it."""

            def __repr__(self) -> str:
                return f"<Figure: {getattr(self, 'vizdist_summary', '')}>"

        _DESCRIBED.append(DescribedFigure)
    return _DESCRIBED[0]
