"""Static timeline of a trace's timed spans (matplotlib).

One row ("lane") per thread of work, grouped by worker: the host loop
(``transfer`` = waiting for the next distributed batch, ``consume`` = the
step) and, when the TF profiler ran, the tf.data threads (``produce``,
``map``, ``batch``, ``prefetch``). A strip under the lanes shows the
prefetch buffer depth the profiler measured.

Up to :data:`RASTER_THRESHOLD` spans are drawn as polygons, one per span.
Above it the figure is a per-pixel summary, painted when the figure is
drawn at the size it is drawn at: every span marks each pixel column it
touches (at least one, so none disappears), and a pixel column that several
spans share shows the stage drawn last there. The figure says so beside the
legend. 10^6 spans draw in about a second, 10^7 in a few.

Lanes that carry nothing in the drawn time range are hidden unless
``show_idle_lanes=True``: lanes with no span there, and profiler lanes
(tf.data threads) busy less than :data:`IDLE_BUSY_FRACTION` of it (a thread
that only ran a few microsecond-long function calls). The figure lists what
it hid.

The layout (:func:`vizdist.analysis.timeline_layout.timeline_layout`) is plain data shared with
the interactive widget (``trace.show("timeline")``) and the export, and never touches TensorFlow.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(events=[
    ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=2_000_000),
    ...     dict(lane="w0 host", stage="consume", step=0, t_start_ns=2_000_000, t_end_ns=9_000_000)])
    >>> fig = t.plot.timeline()
    >>> [a.get_ylabel() for a in fig.axes][:1]
    ['']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from vizdist.analysis.timeline import overlap_summary  # re-exported: it lives in the analysis layer
from vizdist.analysis.timeline_layout import (  # re-exported: the layout is plain data, below the renderer
    IDLE_BUSY_FRACTION,
    STAGES,
    TimelineLayout,
    idle_lanes,
    lane_order,
    timeline_layout,
)
from vizdist.render._text import described, plain_figure, short

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from vizdist.trace import Trace

__all__ = ["IDLE_BUSY_FRACTION", "MAX_BUFFERS", "MAX_LANES", "RASTER_THRESHOLD", "STAGE_COLORS", "TimelineLayout", "idle_lanes",
           "lane_order", "overlap_summary", "plot_timeline", "timeline_layout"]

#: Stage -> colour (colour-blind-safe Okabe-Ito palette), in pipeline order (the layout's ``STAGES``).
STAGE_COLORS: dict[str, str] = {
    "produce": "#56B4E9",
    "map": "#009E73",
    "batch": "#F0E442",
    "prefetch": "#CC79A7",
    "transfer": "#D55E00",
    "consume": "#0072B2",
}
OTHER_COLOR = "#999999"
assert tuple(STAGE_COLORS) == STAGES, "a colour for every stage of the layout, in its order"
#: Above this many spans the static figure is a per-pixel summary instead of one polygon per span.
RASTER_THRESHOLD = 20_000
#: The most lanes a figure draws (the first ones, in timeline order); it says how many it left out.
MAX_LANES = 48
#: The most prefetch buffers the buffer strip draws a line for; it says how many it left out.
MAX_BUFFERS = 8


def _palette(names: list[str]) -> np.ndarray:
    """RGBA (0..1) of each stage name (the stage codes index it)."""
    from matplotlib.colors import to_rgba_array

    return to_rgba_array([STAGE_COLORS.get(n, OTHER_COLOR) for n in names])


def _heights(depth: np.ndarray) -> np.ndarray:
    """Bar height by nesting depth: outer spans full, nested ones thinner (0.8, 0.6, ... >= 0.25)."""
    return np.maximum(0.8 - 0.16 * depth.astype(np.float64), 0.25)


def _rects(x0: np.ndarray, x1: np.ndarray, y: np.ndarray, h: float | np.ndarray) -> np.ndarray:
    v = np.empty((len(x0), 4, 2), dtype=np.float64)
    v[:, 0, 0] = x0
    v[:, 1, 0] = x0
    v[:, 2, 0] = x1
    v[:, 3, 0] = x1
    v[:, 0, 1] = y - h / 2
    v[:, 1, 1] = y + h / 2
    v[:, 2, 1] = y + h / 2
    v[:, 3, 1] = y - h / 2
    return v


@dataclass
class _Drawn:
    """The spans a figure draws: those on shown lanes, and each lane's row on the figure."""

    lanes: list[str]  # labels of the shown lanes, top to bottom
    hidden: list[str]  # labels of the idle lanes left out
    lane_row: np.ndarray  # row of each layout lane (0 = top, -1: hidden)
    keep: np.ndarray | None  # spans on shown lanes (None: all)
    n: int  # spans drawn
    cut: int = 0  # lanes left out beyond MAX_LANES

    def take(self, values: np.ndarray) -> np.ndarray:
        """``values`` of the drawn spans (no copy when every span is drawn)."""
        return values if self.keep is None else values[self.keep]


def _drawn(lay: TimelineLayout, lo: float, hi: float, show_idle_lanes: bool) -> _Drawn:
    hide = np.zeros(len(lay.lanes), bool) if show_idle_lanes else idle_lanes(lay, lo, hi)
    if hide.all():  # nothing carries anything: show every lane rather than an empty figure
        hide[:] = False
    hidden = [n for n, h in zip(lay.lanes, hide, strict=True) if h]
    shown = np.flatnonzero(~hide)
    cut = max(len(shown) - MAX_LANES, 0)
    hide[shown[MAX_LANES:]] = True  # beyond what a figure can show: left out, and said so
    lane_row = np.where(hide, -1, np.cumsum(~hide) - 1).astype(np.int32)
    keep = None if not hide.any() else ~hide[lay.lane]
    return _Drawn(lanes=[n for n, h in zip(lay.lanes, hide, strict=True) if not h], hidden=hidden, lane_row=lane_row,
                  keep=keep, n=len(lay) if keep is None else int(keep.sum()), cut=cut)


def _draw_polygons(ax: Axes, lay: TimelineLayout, d: _Drawn, colors: np.ndarray, faded: bool) -> None:
    """One PolyCollection, outer spans first so nested (deeper) spans stay visible on top."""
    from matplotlib.collections import PolyCollection

    idx = np.arange(len(lay)) if d.keep is None else np.flatnonzero(d.keep)
    order = idx[np.argsort(lay.depth[idx], kind="stable")]
    verts = _rects(lay.start_ms[order], lay.end_ms[order], d.lane_row[lay.lane[order]], _heights(lay.depth[order]))
    # matplotlib takes an (N, 4, 2) array of polygons (its docs); its stubs say a Sequence only
    ax.add_collection(PolyCollection(verts, facecolors=colors[lay.stage_code[order]], edgecolors="white",  # type: ignore[arg-type]
                                     linewidths=0.3 if len(order) < 3000 else 0.0,
                                     alpha=0.25 if faded else 0.95))


def _raster_artist(lay: TimelineLayout, d: _Drawn, palette: np.ndarray, faded: bool) -> Any:
    """The per-pixel summary as an artist that paints itself at the size the figure is drawn at."""
    from matplotlib.artist import Artist

    class SpanRaster(Artist):
        cache: tuple[Any, np.ndarray] | None = None  # the last image and what it was painted for

        def draw(self, renderer: Any) -> None:
            if not self.get_visible():
                return
            ax = self.axes
            assert ax is not None  # drawn only as an artist of the Axes it was added to
            bbox = ax.bbox
            width, height = max(round(bbox.width), 1), max(round(bbox.height), 1)
            key = (ax.get_xlim(), ax.get_ylim(), width, height)
            if self.cache is None or self.cache[0] != key:  # a layout pass and the real draw ask alike
                self.cache = (key, _paint(lay, d, palette, faded, key[0], key[1], width, height))
            img = self.cache[1]
            gc = renderer.new_gc()
            gc.set_clip_rectangle(bbox.frozen())
            renderer.draw_image(gc, round(bbox.x0), round(bbox.y0), img[::-1])  # draw_image: row 0 at the bottom
            gc.restore()

    artist = SpanRaster()
    artist.set_zorder(1)
    return artist


def _paint(lay: TimelineLayout, d: _Drawn, palette: np.ndarray, faded: bool, xlim: tuple[float, float],
           ylim: tuple[float, float], width: int, height: int) -> np.ndarray:
    """RGBA image (row 0 at the top) of the drawn spans, one column per output pixel, O(spans).

    Each span marks every pixel column it overlaps (at least one); per depth
    level, a pixel column shows the stage most of the spans there have
    (ties: the first in :data:`STAGE_COLORS` order).
    """
    x0, x1 = xlim
    m = (lay.end_ms >= x0) & (lay.start_ms <= x1)
    if d.keep is not None:
        m &= d.keep
    every = bool(m.all())
    cover, levels = _coverage((lambda a: a) if every else (lambda a: a[m]), lay, d, x0, x1, width)
    img = np.zeros((height, width, 4), dtype=np.uint8)
    colors = np.round(palette * 255).astype(np.uint8)
    colors[:, 3] = round((0.25 if faded else 0.95) * 255)
    y_bottom, y_top = ylim
    to_px = height / ((y_bottom - y_top) or 1.0)
    for k, level in enumerate(levels):
        top = np.where(cover[k].any(axis=0), np.argmax(cover[k], axis=0), -1)
        half = float(_heights(np.asarray([level]))[0]) / 2
        for r in range(len(d.lanes)):
            p0 = int(np.clip(np.floor((r - half - y_top) * to_px), 0, height - 1))
            p1 = int(np.clip(np.ceil((r + half - y_top) * to_px), p0 + 1, height))
            on = top[r] >= 0
            if on.any():
                img[p0:p1, on] = colors[top[r, on]]
    return img


def _coverage(pick: Any, lay: TimelineLayout, d: _Drawn, x0: float, x1: float,
              width: int) -> tuple[np.ndarray, list[int]]:
    """How many spans of each (depth level, stage, row) cover each pixel column, and the levels.

    One pair of ``bincount`` over all spans: +1 where a span starts, -1 after it ends, summed along x.
    """
    depth = pick(lay.depth)
    levels = np.flatnonzero(np.bincount(depth)).tolist() if len(depth) else []
    # every stage beyond the known ones is drawn in one colour: one slot for them all
    n_stages, n_rows, cols = min(len(lay.stage_names), len(STAGES) + 1), len(d.lanes), width + 1
    scale = width / ((x1 - x0) or 1.0)
    key = np.minimum(pick(lay.stage_code), n_stages - 1).astype(np.int64)
    key *= n_rows
    key += d.lane_row[pick(lay.lane)]
    key *= cols
    if len(levels) > 1:
        rank = np.zeros(levels[-1] + 1, dtype=np.int64)
        rank[levels] = np.arange(len(levels)) * (n_stages * n_rows * cols)
        key += rank[depth]
    first = np.clip(((pick(lay.start_ms) - x0) * scale).astype(np.int64), 0, width - 1)
    first += key
    after = np.clip(((pick(lay.end_ms) - x0) * scale).astype(np.int64), 0, width - 1)
    after += key
    after += 1
    total = max(len(levels), 1) * n_stages * n_rows * cols
    diff = np.bincount(first, minlength=total) - np.bincount(after, minlength=total)
    return np.cumsum(diff.reshape(-1, n_stages, n_rows, cols), axis=3)[..., :width], levels


def plot_timeline(
    trace: Trace | TimelineLayout,
    *,
    steps: tuple[int, int] | None = None,
    workers: list[int] | None = None,
    highlight_step: int | None = None,
    time_range_ms: tuple[float, float] | None = None,
    show_buffer: bool = True,
    show_idle_lanes: bool = False,
    title: str | None = None,
    ax: Axes | None = None,
    figsize: tuple[float, float] | None = None,
) -> Figure:
    """Draw the trace's timed spans as a static timeline.

    Args:
        trace: a trace recorded with ``timing=True`` (or a :class:`TimelineLayout`).
        steps: only spans of steps ``lo..hi`` (inclusive).
        workers: only these workers.
        highlight_step: outline this step's spans (the others fade).
        time_range_ms: x limits in ms from the first span.
        show_buffer: add a strip with the measured prefetch buffer depth
            (when the trace holds profiler spans).
        show_idle_lanes: also draw lanes that carry nothing in the drawn time
            range (see :func:`idle_lanes`); by default they are left out and
            the figure lists them.
        title: axes title (default: the strategy and the span count).
        ax: draw into this axes (then no buffer strip is added).
        figsize: figure size in inches.

    Returns:
        The matplotlib figure. Above :data:`RASTER_THRESHOLD` spans it is a
        per-pixel summary, and says so beside the legend.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="consume", step=s, t_start_ns=s * 10**6,
        ...          t_end_ns=s * 10**6 + 500_000) for s in range(3)])
        >>> fig = plot_timeline(t, highlight_step=1)
        >>> len(fig.axes)
        1
    """
    import matplotlib.pyplot as plt

    lay = trace if isinstance(trace, TimelineLayout) else timeline_layout(trace, steps=steps, workers=workers)
    lo = float(lay.start_ms.min()) if len(lay) else 0.0
    hi = float(lay.end_ms.max()) if len(lay) else 1.0
    if time_range_ms is not None:
        lo, hi = time_range_ms
    d = _drawn(lay, lo, hi, show_idle_lanes)
    fig, ax, bax = _axes(lay, d, show_buffer, ax, figsize)
    raster = d.n > RASTER_THRESHOLD
    _draw_spans(ax, lay, d, highlight_step, raster)
    _step_lines(ax, lay, len(d.lanes))
    ax.set_yticks(range(len(d.lanes)))
    ax.set_yticklabels(d.lanes, fontsize=8)
    ax.set_ylim(len(d.lanes) - 0.5, -0.5 - (0.45 if lay.step_starts_ms else 0))
    pad = (hi - lo) * 0.01 or 1.0
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylabel("")
    _legend(ax, lay, d)
    _notes(ax, d, raster)
    if title is None and not isinstance(trace, TimelineLayout):
        title = _default_title(trace, lay, d.n)
    if title:
        ax.set_title(title, fontsize=9, loc="left")
    if bax is not None:
        _buffer_strip(bax, lay)
        plt.setp(ax.get_xticklabels(), visible=False)
    else:
        ax.set_xlabel("time since first span (ms)")
    plt.close(fig)  # the caller displays it; keeps notebooks from showing it twice
    return described(plain_figure(fig), _timeline_summary(lay, d))


def _axes(lay: TimelineLayout, d: _Drawn, show_buffer: bool, ax: Axes | None,
          figsize: tuple[float, float] | None) -> tuple[Any, Any, Any]:
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax, None
    n_lanes = len(d.lanes)
    want_buffer = show_buffer and len(lay.buffer) > 0
    h = min(1.2 + 0.38 * n_lanes + (1.3 if want_buffer else 0), 14)
    fig = plt.figure(figsize=figsize or (10, h), layout="constrained")
    if not want_buffer:
        return fig, fig.add_subplot(), None
    gs = fig.add_gridspec(2, 1, height_ratios=[max(n_lanes, 2), 1.6])
    ax = fig.add_subplot(gs[0])
    return fig, ax, fig.add_subplot(gs[1], sharex=ax)


def _draw_spans(ax: Axes, lay: TimelineLayout, d: _Drawn, highlight_step: int | None, raster: bool) -> None:
    from matplotlib.collections import PolyCollection

    palette = _palette(lay.stage_names)
    faded = highlight_step is not None
    if raster:
        ax.add_artist(_raster_artist(lay, d, palette, faded))
    else:
        _draw_polygons(ax, lay, d, palette, faded)
    if highlight_step is None:
        return
    hl = lay.step == int(highlight_step)
    idx = np.flatnonzero(hl if d.keep is None else hl & d.keep)
    if len(idx):
        idx = idx[np.argsort(lay.depth[idx], kind="stable")]
        # matplotlib takes an (N, 4, 2) array of polygons (its docs); its stubs say a Sequence only
        ax.add_collection(PolyCollection(_rects(lay.start_ms[idx], lay.end_ms[idx], d.lane_row[lay.lane[idx]],  # type: ignore[arg-type]
                                                _heights(lay.depth[idx])),
                                         facecolors=palette[lay.stage_code[idx]], edgecolors="black",
                                         linewidths=0.6, zorder=2))


def _step_lines(ax: Axes, lay: TimelineLayout, n_lanes: int) -> None:
    from matplotlib.collections import LineCollection

    if not lay.step_starts_ms or len(lay.step_starts_ms) > 400:
        return
    xs = np.asarray(list(lay.step_starts_ms.values()))
    segs = np.stack([np.stack([xs, np.full_like(xs, -0.5)], 1), np.stack([xs, np.full_like(xs, n_lanes - 0.5)], 1)], 1)
    # matplotlib takes an (N, 2, 2) array of segments (its docs); its stubs say a Sequence only
    ax.add_collection(LineCollection(segs, colors="#444444", linewidths=0.5, linestyles=":", zorder=0))  # type: ignore[arg-type]
    if len(lay.step_starts_ms) <= 40:
        for s, x in lay.step_starts_ms.items():
            ax.text(x, -0.55, f"{s}", fontsize=7, color="#444444", va="bottom", ha="left", clip_on=True)


def _legend(ax: Axes, lay: TimelineLayout, d: _Drawn) -> None:
    from matplotlib.patches import Patch

    present = np.bincount(d.take(lay.stage_code), minlength=len(lay.stage_names)) > 0
    handles = [Patch(color=STAGE_COLORS[s], label=s) for i, s in enumerate(STAGE_COLORS) if present[i]]
    if present[len(STAGE_COLORS):].any():
        handles.append(Patch(color=OTHER_COLOR, label="other"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False,
              title="stage", title_fontsize=8)


def _notes(ax: Axes, d: _Drawn, raster: bool) -> None:
    """Say beside the legend what the figure summarised and which lanes it left out (one text per line)."""
    from matplotlib.offsetbox import AnchoredOffsetbox, TextArea, VPacker

    lines = []
    if raster:
        lines += [f"{d.n:,} spans, summarised", "per pixel: every span marks", "each pixel it touches; a",
                  "pixel shows the stage most", "spans there have", ""]
    if d.hidden:
        lines += [f"{len(d.hidden)} idle lane(s) hidden:", *[short(n, 28) for n in d.hidden[:4]]]
        lines += [f"and {len(d.hidden) - 4} more"] if len(d.hidden) > 4 else []
        lines.append("(show_idle_lanes=True shows them)")
    if d.cut:
        lines += [f"{d.cut:,} more lanes not drawn", f"(a figure draws {MAX_LANES};", "pass workers= or steps=)"]
    if not lines:
        return
    style = {"fontsize": 7, "color": "#444444"}
    box = VPacker(children=[TextArea(line, textprops=style) for line in lines], pad=0, sep=1)
    ax.add_artist(AnchoredOffsetbox(loc="lower left", child=box, frameon=False, pad=0, borderpad=0,
                                    bbox_to_anchor=(1.01, 0.0), bbox_transform=ax.transAxes))


def _default_title(trace: Trace, lay: TimelineLayout, n_drawn: int) -> str:
    strat = trace.meta.get("strategy", "")
    title = f"{strat + ': ' if strat else ''}{n_drawn:,} spans" + (
        "; step numbers on top, dotted lines = step starts" if lay.step_starts_ms else "")
    timing = trace.meta.get("timing")
    window = timing.get("profiled_steps") if isinstance(timing, dict) else None
    if window:
        title += f"; tf.data profiled for steps 0-{int(window) - 1}"
    return title


def _buffer_strip(bax: Axes, lay: TimelineLayout) -> None:
    groups = lay.buffer.groupby(["worker", "lane", "op"], sort=True)
    if groups.ngroups > MAX_BUFFERS:  # a line each for the first ones, and one note for the rest
        bax.plot([], [], " ", label=f"{groups.ngroups - MAX_BUFFERS:,} more buffers not drawn")
    for i, ((w, lane, op), g) in enumerate(groups):
        if i == MAX_BUFFERS:
            break
        where = "next to the step" if str(lane).endswith("(caller)") else str(lane).split(" ", 1)[-1]
        label = f"{str(op).rsplit('::', 1)[-1]} buffer, {where}"
        if lay.buffer["worker"].nunique() > 1:
            label = f"w{w} " + label
        lim = int(g["buffer_limit"].max())
        if lim > 0:
            label += f" (limit {lim})"
        bax.step(g["t_ms"], g["buffered"], where="post", lw=1, label=label)
    bax.set_ylabel("buffered", fontsize=8)
    bax.set_xlabel("time since first span (ms)")
    bax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    bax.set_ylim(bottom=-0.2)


def _timeline_summary(lay: TimelineLayout, d: _Drawn) -> str:
    """What plot_timeline drew: its steps and the host and replica lanes vizdist records itself.

    Profiler lanes (tf.data threads) are only counted in: which threads TF used, and which were idle,
    varies from run to run.
    """
    steps = d.take(lay.step)
    steps = steps[steps >= 0]
    shown = d.lane_row >= 0
    fixed = [n for n, p, s in zip(lay.lanes, lay.lane_profiler, shown, strict=True) if s and not p]
    more = " and TF profiler lanes" if any(p and s for p, s in zip(lay.lane_profiler, shown, strict=True)) else ""
    span = f"steps {steps.min()}..{steps.max()}" if len(steps) else "no steps"
    return f"timeline of {span}; lanes: {', '.join(fixed) or 'none'}{more}"


def _repr_png(fig: Figure, *, dpi: int = 80) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
