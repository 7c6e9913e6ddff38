"""Interactive timeline widget: a canvas of timed spans (anywidget).

``trace.show("timeline")`` shows the spans of ``trace.events`` in lanes
grouped by worker. In JupyterLab you can zoom (mouse wheel, ``+``/``-``),
pan (drag), reset (double click or ``fit``) and hover a span to see its
stage, step and the source element ids of that step. ``timeline(trace,
explorer=trace.show())`` links the explorer's step slider to the
timeline: the chosen step's spans are outlined, the rest fade.

What it syncs: ``spec`` (plain JSON: lanes, stages, colours, step
boundaries and element ids of the first :data:`MAX_STEPS_SYNCED` steps;
``steps_not_synced`` counts the rest), ``columns`` (the span columns as binary
buffers, one per column, sorted by depth then start: no JSON per span, so
10^6 spans are about 28 MB sent as they are), ``view`` (the visible range,
in ms from the first span), ``step`` (the highlighted step) and
``show_idle_lanes``.

With more than :data:`SUMMARY_ABOVE` spans in view the canvas draws a
per-pixel summary (every span marks each pixel it touches; a pixel shows
the stage most spans there have) and says so; zoom in and every span is
drawn. Lanes that carry nothing in view (see
:func:`~vizdist.analysis.timeline_layout.idle_lanes`) are hidden unless
``show_idle_lanes`` is on; the bar says how many. Outside a live kernel
(GitHub, nbval) it shows a static PNG of the same timeline and a one-line
text summary.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(events=[
    ...     dict(lane="w0 host", stage="consume", step=s, t_start_ns=s * 10**6,
    ...          t_end_ns=s * 10**6 + 400_000) for s in range(3)])
    >>> tl = t.show("timeline")
    >>> tl.view = [0.0, 1.5]
    >>> tl.visible_spans()
    2
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from vizdist._optional import require
from vizdist.analysis.timeline_layout import IDLE_BUSY_FRACTION, TimelineLayout, idle_lanes, timeline_layout
from vizdist.render.timeline_figure import OTHER_COLOR, STAGE_COLORS, plot_timeline
from vizdist.trace import Trace

__all__ = ["MAX_STEPS_SYNCED", "SUMMARY_ABOVE", "Timeline", "span_columns", "timeline", "timeline_spec"]

if TYPE_CHECKING:  # mypy reads the base classes from the package itself
    import anywidget
else:
    anywidget = require("anywidget", pip="anywidget", conda="anywidget")
traitlets = require("traitlets", pip="traitlets", conda="traitlets")

_HERE = Path(__file__).parent
_MAX_IDS_SHOWN = 48
#: With more spans than this in view, the widget draws a per-pixel summary instead of each span.
SUMMARY_ABOVE = 20_000
#: Steps whose start line and element ids the spec carries (the first ones): a million steps would be
#: megabytes of JSON, and past a few hundred the lines are not drawn anyway.
MAX_STEPS_SYNCED = 2_000


def _ids_label(ids: list[int]) -> str:
    if len(ids) <= _MAX_IDS_SHOWN:
        return ", ".join(map(str, ids))
    return ", ".join(map(str, ids[:_MAX_IDS_SHOWN])) + f", … ({len(ids)} in all)"


def _small_int(top: int) -> str:
    """The smallest little-endian dtype that holds codes 0..top."""
    return "<u1" if top < 1 << 8 else "<u2" if top < 1 << 16 else "<i4"


def span_columns(lay: TimelineLayout) -> dict[str, Any]:
    """The span columns the widget syncs: binary little-endian buffers, sorted by depth then start.

    ``start``/``end`` are float64 ms from the first span; ``step`` int32;
    ``lane``, ``stage``, ``depth``, ``op`` the smallest unsigned type that
    holds them (``dtypes`` names each). ``order`` maps each row back to the
    layout's span. ipywidgets sends every ``memoryview`` of a synced dict as
    a binary buffer, and the browser reads it as a typed array without a copy.

    Example:
        >>> t = Trace.from_records(events=[
        ...     dict(lane="a", stage="map", t_start_ns=2 * 10**6, t_end_ns=3 * 10**6),
        ...     dict(lane="a", stage="map", t_start_ns=0, t_end_ns=10**6)])
        >>> cols = span_columns(timeline_layout(t))
        >>> np.frombuffer(cols["start"], dtype=cols["dtypes"]["start"]).tolist(), cols["order"].tolist()
        ([0.0, 2.0], [1, 0])
    """
    depth = np.minimum(lay.depth, 255).astype(np.uint8)
    order = np.argsort(lay.start_ms, kind="stable")  # timsort: fast on spans already in time order per lane
    order = order[np.argsort(depth[order], kind="stable")]  # radix sort of the small depth codes
    parts = {
        "start": (lay.start_ms, "<f8"),
        "end": (lay.end_ms, "<f8"),
        "lane": (lay.lane, _small_int(len(lay.lanes))),
        "stage": (lay.stage_code, _small_int(len(lay.stage_names))),
        "step": (lay.step, "<i4"),
        "depth": (depth, "<u1"),
        "op": (lay.op_code, _small_int(len(lay.op_names))),
    }
    cols: dict[str, Any] = {"n": len(lay), "order": order, "dtypes": {}}
    for name, (values, dtype) in parts.items():
        cols[name] = np.ascontiguousarray(np.asarray(values)[order], dtype=dtype).data.cast("B")
        cols["dtypes"][name] = np.dtype(dtype).name
    return cols


def timeline_spec(trace: Trace, layout: TimelineLayout | None = None, *, columns: bool = True) -> dict[str, Any]:
    """The plain-JSON dict the widget draws (lanes, stages, colours, steps; span columns as lists).

    Example:
        >>> t = Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=10**6)])
        >>> spec = timeline_spec(t)
        >>> spec["lanes"], spec["stages"][spec["stage"][0]], spec["end"]
        (['w0 host'], 'transfer', [1.0])
    """
    lay = layout or timeline_layout(trace)
    colors = [STAGE_COLORS.get(s, OTHER_COLOR) for s in lay.stage_names]
    out = {
        "lanes": list(lay.lanes),
        "lane_worker": [int(w) for w in lay.lane_worker],
        "lane_profiler": [bool(p) for p in lay.lane_profiler],
        "stages": list(lay.stage_names),
        "colors": colors,
        "ops": [str(o) for o in lay.op_names],
        "t_min": float(lay.start_ms.min()) if len(lay) else 0.0,
        "t_max": float(lay.end_ms.max()) if len(lay) else 1.0,
        "t0_unix_ns": int(lay.t0_ns),
        "step_starts": {str(k): float(v) for k, v in list(lay.step_starts_ms.items())[:MAX_STEPS_SYNCED]},
        "step_elements": _step_elements(trace, lay),
        "steps_not_synced": max(len(lay.step_starts_ms) - MAX_STEPS_SYNCED, 0),
        "summary_above": SUMMARY_ABOVE,
        "idle_busy_fraction": IDLE_BUSY_FRACTION,
    }
    if columns:  # plain lists (for tests and other consumers); the widget sends binary buffers instead
        out.update(lane=lay.lane.astype(int).tolist(), start=lay.start_ms.tolist(), end=lay.end_ms.tolist(),
                   stage=lay.stage_code.astype(int).tolist(), step=lay.step.astype(int).tolist(),
                   depth=lay.depth.astype(int).tolist(), op=lay.op_code.astype(int).tolist())
    return out


def _step_elements(trace: Trace, lay: TimelineLayout) -> dict[str, str]:
    """``"worker:step"`` -> the source ids that step delivered (what the hover shows)."""
    el = trace.elements
    if not len(el):
        return {}
    wanted = pd.unique(lay.step[lay.step >= 0])[:MAX_STEPS_SYNCED]
    e = el[el["step"].isin(wanted)].sort_values(["worker", "step", "replica", "position"], kind="stable")
    return {f"{int(w)}:{int(s)}": _ids_label(grp["source_id"].astype(int).tolist())
            for (w, s), grp in e.groupby(["worker", "step"], sort=False)}


class Timeline(anywidget.AnyWidget):
    """A zoomable canvas timeline of a trace's spans. Build it with :func:`timeline`.

    Synced traits: ``spec`` (plain JSON, see :func:`timeline_spec`),
    ``columns`` (binary span columns, see :func:`span_columns`), ``view``
    (``[t0, t1]`` visible range in ms from the first span; ``[]`` =
    everything), ``step`` (the highlighted step, -1 for none) and
    ``show_idle_lanes`` (draw lanes that carry nothing in view).
    """

    _esm = _HERE / "timeline_widget.js"
    _css = _HERE / "timeline_widget.css"
    spec = traitlets.Dict().tag(sync=True)
    columns = traitlets.Dict().tag(sync=True)
    view = traitlets.List(traitlets.Float(), default_value=[]).tag(sync=True)
    step = traitlets.Int(-1).tag(sync=True)
    show_idle_lanes = traitlets.Bool(False).tag(sync=True)

    def __init__(self, trace: Trace, **kwargs: Any) -> None:
        self._trace = trace
        self._layout = timeline_layout(trace)
        cols = span_columns(self._layout)
        del cols["order"]  # the browser needs no way back to the layout's rows
        super().__init__(spec=timeline_spec(trace, self._layout, columns=False), columns=cols, **kwargs)

    # -- queries (also what tests check) -------------------------------------
    @property
    def visible_range(self) -> tuple[float, float]:
        """The visible time range in ms from the first span."""
        v = list(self.view)
        if len(v) == 2 and v[1] > v[0]:
            return float(v[0]), float(v[1])
        return float(self.spec["t_min"]), float(self.spec["t_max"])

    def visible_spans(self) -> int:
        """How many spans overlap the visible range."""
        lo, hi = self.visible_range
        lay = self._layout
        return int(((lay.end_ms >= lo) & (lay.start_ms <= hi)).sum())

    def hidden_lanes(self) -> list[str]:
        """The lanes left out of the current view: idle there (see ``idle_lanes``), unless ``show_idle_lanes``."""
        if self.show_idle_lanes:
            return []
        lay = self._layout
        hide = idle_lanes(lay, *self.visible_range)
        return [] if hide.all() else [n for n, h in zip(lay.lanes, hide, strict=True) if h]

    @property
    def summarised(self) -> bool:
        """Whether the view is drawn as a per-pixel summary (more than ``SUMMARY_ABOVE`` spans in view)."""
        return self.visible_spans() > SUMMARY_ABOVE

    def zoom(self, factor: float, *, center_ms: float | None = None) -> None:
        """Zoom by ``factor`` (< 1 zooms in) around ``center_ms`` (default: the middle).

        Example:
            >>> t = Trace.from_records(events=[dict(lane="a", stage="consume", t_end_ns=10**7)])
            >>> tl = Timeline(t); tl.zoom(0.5); tl.visible_range
            (2.5, 7.5)
        """
        if not factor > 0:
            raise ValueError(f"zoom factor must be > 0 (0.5 zooms in 2x, 2 zooms out); got {factor!r}.")
        lo, hi = self.visible_range
        c = (lo + hi) / 2 if center_ms is None else float(center_ms)
        self.view = [c - (c - lo) * factor, c + (hi - c) * factor]

    def show_step(self, step: int) -> None:
        """Highlight ``step`` and zoom to its spans (with a little context)."""
        lay = self._layout
        m = lay.step == int(step)
        if not m.any():
            raise ValueError(f"no spans are tied to step {step}; steps with spans: "
                             f"{sorted(set(lay.step[lay.step >= 0].tolist()))[:20]}...")
        lo, hi = float(lay.start_ms[m].min()), float(lay.end_ms[m].max())
        pad = (hi - lo) * 0.15 or 1.0
        self.step = int(step)
        self.view = [lo - pad, hi + pad]

    def link_explorer(self, explorer: Any) -> None:
        """Highlight the step chosen in a step explorer (``trace.show()``).

        The link runs in the browser (``jslink``) and in Python, so it works
        live in JupyterLab and when the explorer's step is set from code.
        """
        widgets = require("ipywidgets", pip="ipywidgets", conda="ipywidgets")
        slider = getattr(explorer, "slider", None)
        if slider is None:
            raise TypeError(f"link_explorer takes a vizdist explorer (trace.show()); got {type(explorer).__name__}.")
        self._explorer_link = widgets.jslink((slider, "value"), (self, "step"))  # live, in the browser
        self._explorer_dlink = traitlets.dlink((slider, "value"), (self, "step"))  # from Python code

    # -- static fallback -------------------------------------------------------
    def to_png(self, *, dpi: int = 80) -> bytes:
        """The static timeline (what GitHub and nbval show) as PNG bytes."""
        import io

        lo, hi = self.visible_range
        fig = plot_timeline(self._layout, highlight_step=self.step if self.step >= 0 else None,
                            time_range_ms=(lo, hi) if list(self.view) else None,
                            show_idle_lanes=self.show_idle_lanes, title=self._summary())
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()

    def _summary(self) -> str:
        """One line on the run; computed once (a display asks twice: the PNG's title and text/plain)."""
        text = getattr(self, "_summary_text", None)
        if text is None:
            steps = np.unique(self._layout.step[self._layout.step >= 0])
            workers = sorted(set(self._layout.lane_worker))
            text = self._summary_text = (f"vizdist timeline: {len(steps)} steps, {len(workers)} worker(s); "
                                         "lanes grouped by worker")
        return text

    def __repr__(self) -> str:
        return "<" + self._summary() + "; live (zoom, pan, hover) in JupyterLab>"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        data: Any = super()._repr_mimebundle_(**kwargs)  # (data, metadata), a data dict or None
        meta: dict[str, Any] = {}
        if isinstance(data, tuple):
            data, meta = data
        data = dict(data or {})
        data["text/plain"] = repr(self)
        data["image/png"] = base64.b64encode(self.to_png()).decode("ascii")
        return (data, meta) if meta else data


def timeline(trace: Trace, *, explorer: Any = None, step: int | None = None,
             show_idle_lanes: bool = False) -> Timeline:
    """Open the interactive timeline of a trace recorded with ``timing=True``.

    Args:
        trace: the trace (its ``events`` table holds the spans).
        explorer: a step explorer (``trace.show()``) whose step slider
            highlights that step's spans here.
        step: a step to highlight and zoom to at the start.
        show_idle_lanes: also draw lanes that carry nothing in view (hidden by default).

    Returns:
        The :class:`Timeline` widget (display it as a cell's last value).

    Raises:
        TypeError: ``trace`` is not a :class:`~vizdist.trace.Trace`.
        ValueError: the trace has no timed spans.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=10**6)])
        >>> timeline(t, step=0).step
        0
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"timeline takes a vizdist.Trace; got {type(trace).__name__}.")
    tl = Timeline(trace, show_idle_lanes=bool(show_idle_lanes))
    if explorer is not None:
        tl.link_explorer(explorer)
    if step is not None:
        tl.show_step(step)
    return tl
