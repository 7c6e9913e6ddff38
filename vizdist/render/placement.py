"""The placement view: which device ran each op of the run, and what was copied where.

Reads ``trace.meta["placement"]`` (recorded with
``trace_distribution(..., placement=True)``). One layout
(:func:`placement_layout`) feeds every output: the text line, the HTML table,
the PNG figure (:func:`plot_placement`) and the live widget
(:func:`show_placement`: a step slider with Play that can follow the step
explorer).

Columns are devices; rows are the run's stages (input pipeline, iterator,
transfer to the devices, variables, the step, reductions, other host ops),
one row per op type; a cell holds how many times that op ran on that device
(red: one of its outputs held a NaN or an Inf). Copies between devices are
arrows above the columns.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(meta={"placement": {"ops": [
    ...     dict(stage="pipeline", op_type="RealDiv", graph="Dataset_map_f", device="CPU:0", count=8),
    ...     dict(stage="step", op_type="Mul", graph="step", device="CPU:1", count=2, first_step=0, last_step=1)],
    ...     "copies": [dict(src="CPU:0", dst="CPU:1", via="input batch", count=2)]}})
    >>> print(placement_text(placement_layout(t)))
    placement: 2 devices (CPU:0, CPU:1); 2 op rows: pipeline 1, step 1; copies: CPU:0→CPU:1 ×2 (input batch)
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from vizdist._clip import clip
from vizdist.contract import PlacementMeta, PlacementOp, recording_call
from vizdist.render._text import MAX_WIDTH_IN, MIN_TEXT_PT, TITLE_PT, plain_figure, short, text_inches
from vizdist.trace import Trace

__all__ = ["PlacementView", "placement_layout", "placement_text", "plot_placement", "show_placement"]

STAGES = ("pipeline", "iterator", "transfer", "variable", "step", "reduce", "host")
STAGE_TITLES = {
    "pipeline": "input pipeline", "iterator": "host iterator", "transfer": "copy to device",
    "variable": "variables", "step": "your step", "reduce": "reduction", "host": "other host ops",
}
STAGE_COLORS = {
    "pipeline": "#4c78a8", "iterator": "#72b7b2", "transfer": "#f58518", "variable": "#b279a2",
    "step": "#54a24b", "reduce": "#e45756", "host": "#9d9d9d",
}


#: What the placement view shows at most (the first ones; its notes say how many there are).
MAX_DEVICES, MAX_OP_ROWS, MAX_COPIES, MAX_STEPS = 32, 100, 100, 100_000


def _placement(trace: Trace) -> PlacementMeta:
    if not isinstance(trace, Trace):
        raise TypeError(f"the placement view takes a vizdist.Trace; got {type(trace).__name__}.")
    p = trace.meta.get("placement")
    if not p:
        raise ValueError(f"this trace has no placement record: record it with "
                         f"{recording_call(trace.meta, 'placement=True')}.")
    return p


def _device_key(d: str) -> tuple[str, int]:
    m = re.match(r"^(.*?)(\d+)$", d)
    return (m.group(1), int(m.group(2))) if m else (d, -1)


def _graph_label(graph: str) -> str:
    if graph.startswith("Dataset_"):
        return "in a dataset function"
    return f"in {graph}" if graph else "eager"


def _ran_in(op: PlacementOp, step: int | None) -> bool:
    if step is None:
        return True
    first, last = int(op.get("first_step", -1)), int(op.get("last_step", -1))
    return first < 0 or first <= step <= last


def placement_layout(trace: Trace, *, step: int | None = None, stages: tuple[str, ...] = STAGES) -> dict[str, Any]:
    """Devices, rows (stage, label, count per device) and copies; ``step`` keeps what ran in that step.

    Ops recorded without a step (the pipeline, host ops) are kept for every step.
    """
    p = _placement(trace)
    ops = [o for o in p.get("ops", []) if o.get("stage") in stages and _ran_in(o, step) and o.get("device")]
    devices = sorted({o["device"] for o in ops if o.get("device")} | {c["src"] for c in p.get("copies", [])}
                     | {c["dst"] for c in p.get("copies", [])}, key=_device_key)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for o in ops:
        label = short(f"{o['op_type']} ({_graph_label(o.get('graph', ''))})")
        row = rows.setdefault((o["stage"], label), {"stage": o["stage"], "label": label, "cells": {},
                                                    "nonfinite": {}, "steps": set()})
        dev = o.get("device") or "?"
        row["cells"][dev] = row["cells"].get(dev, 0) + int(o.get("count", 0))
        row["nonfinite"][dev] = row["nonfinite"].get(dev, 0) + int(o.get("nonfinite", 0))
        if int(o.get("first_step", -1)) >= 0:
            row["steps"].update({int(o["first_step"]), int(o["last_step"])})
    order = {s: i for i, s in enumerate(STAGES)}
    out_rows = sorted(rows.values(), key=lambda r: (order.get(r["stage"], 99), r["label"]))
    copies = list(p.get("copies", []))
    notes = [clip(n, 500) for n in list(p.get("notes", []))[:20]]
    for what, items, cap in (("devices", devices, MAX_DEVICES), ("op rows", out_rows, MAX_OP_ROWS),
                             ("copies", copies, MAX_COPIES)):
        if len(items) > cap:  # a view shows the first ones, and says how many there are
            notes.append(f"first {cap} of {len(items):,} {what} shown")
            del items[cap:]
    for r in out_rows:
        r["steps"] = sorted(r["steps"])
    m = trace.meta
    title = f"{short(m.get('strategy', '?'))}: where each op ran" + (f" (step {step})" if step is not None else "")
    marked = min(int(p.get("steps_marked", 0)), MAX_STEPS)
    return {"title": title, "devices": devices, "rows": out_rows, "copies": copies, "step": step,
            "steps": list(range(marked)), "mode": p.get("mode", ""), "host": p.get("host", ""), "notes": notes}


def placement_text(layout: dict[str, Any]) -> str:
    """One compared line saying what the view drew."""
    counts: dict[str, int] = {}
    for r in layout["rows"]:
        counts[r["stage"]] = counts.get(r["stage"], 0) + 1
    stages = ", ".join(f"{s} {counts[s]}" for s in STAGES if s in counts)
    copies = ", ".join(f"{short(c['src'])}→{short(c['dst'])} ×{c['count']} ({short(str(c.get('via', '')).split(':')[0])})"
                       for c in layout["copies"]) or "none"
    bad = sum(1 for r in layout["rows"] if any(r["nonfinite"].values()))
    text = (f"placement: {len(layout['devices'])} devices ({', '.join(short(d) for d in layout['devices'])}); "
            f"{len(layout['rows'])} op rows: {stages}; copies: {copies}")
    cut = [n for n in layout.get("notes", []) if n.startswith("first ")]
    if cut:
        text += f" ({'; '.join(cut)})"
    if layout.get("step") is not None:
        text = f"step {layout['step']} " + text
    return text + (f"; {bad} rows with NaN/Inf outputs" if bad else "")


def placement_html(layout: dict[str, Any]) -> str:
    """The layout as an escaped HTML table (devices as columns, stages as row groups)."""
    td = "border:1px solid #ccc;padding:2px 6px;font-family:monospace;font-size:12px"
    head = "".join(f'<th style="{td}">{escape(short(d))}{" (host)" if d == layout["host"] else ""}</th>'
                   for d in layout["devices"])
    body = []
    for r in layout["rows"]:
        color = STAGE_COLORS.get(r["stage"], "#999")
        cells = []
        for d in layout["devices"]:
            n, bad = r["cells"].get(d, 0), r["nonfinite"].get(d, 0)
            style = td + (";background:#fdd;color:#b00;font-weight:bold" if bad else "")
            text = (f"{n}" + (f" ({bad} NaN/Inf)" if bad else "")) if n else ""
            cells.append(f'<td style="{style}" data-device="{escape(d)}">{escape(text)}</td>')
        body.append(f'<tr><td style="{td};border-left:6px solid {color}">{escape(STAGE_TITLES.get(r["stage"], r["stage"]))}'
                    f'</td><td style="{td}">{escape(r["label"])}</td>{"".join(cells)}</tr>')
    copies = "".join(f"<li>{escape(short(c['src']))} → {escape(short(c['dst']))} ×{int(c['count'])}: "
                     f"{escape(short(c['via']))}</li>" for c in layout["copies"])
    copies += "".join(f"<li><i>{escape(n)}</i></li>" for n in layout["notes"] if n.startswith("first "))
    return (f'<div class="vizdist-placement"><b>{escape(layout["title"])}</b>'
            f'<table style="border-collapse:collapse"><tr><th style="{td}">stage</th><th style="{td}">op</th>'
            f"{head}</tr>{''.join(body)}</table><b>copies between devices</b><ul>{copies or '<li>none</li>'}</ul>"
            "</div>")


ROW_IN = 0.3  # one op row, in inches
ARC_RAD = -0.35  # curvature of the copy arrows


def _row_label(r: dict[str, Any]) -> str:
    return short(f"{STAGE_TITLES.get(r['stage'], r['stage'])}: {r['label']}", 60)


def _cell_text(n: int, bad: int, *, narrow: bool) -> str:
    return f"{n}" if narrow or not bad else f"{n} NaN/Inf"


def _sizes(labels: list[str], ticks: list[str], rows: list[dict[str, Any]], copies: list[int]) -> dict[str, Any]:
    """Inches: the label column, one device column, the arrow band, the tick labels; from the texts drawn."""
    label_in = max([text_inches(t)[0] for t in labels] or [1.0]) + 0.2
    tick_in = max([text_inches(t)[0] for t in ticks] or [0.5]) + 0.15
    cell_in = max([text_inches(_cell_text(n, r["nonfinite"].get(d, 0), narrow=False), bold=True)[0]
                   for r in rows for d, n in r["cells"].items()] or [0.3]) + 0.15
    n_d = max(len(ticks), 1)
    col_in = max(0.7, tick_in, cell_in)
    room = MAX_WIDTH_IN - label_in - 0.45
    if n_d * col_in > room:  # many devices: narrower columns, upright tick labels, bare counts
        col_in = max(room / n_d, 0.3)
    rotate = tick_in > col_in
    ticks_in = (tick_in if rotate else max(text_inches(t)[1] for t in ticks or ["x"])) + 0.1
    band_in = 0.25 + abs(ARC_RAD) / 2 * max(copies or [0]) * col_in  # the highest arc's peak
    return {"label": label_in, "col": col_in, "rotate": rotate, "narrow": cell_in > col_in, "band": band_in,
            "ticks": ticks_in, "width": min(label_in + n_d * col_in + 0.45, MAX_WIDTH_IN)}


def plot_placement(trace: Trace, *, step: int | None = None, max_rows: int = 40, ax: Any = None) -> Any:
    """Draw devices × ops (grouped by stage) with the copies as arrows above the columns.

    The figure is as wide as its labels and columns need (at most a notebook's width) and one row
    taller per op; every text is at least ``MIN_TEXT_PT`` points.

    Args:
        trace: a trace recorded with ``placement=True``.
        step: show only what ran in this step (plus step-less pipeline/host ops).
        max_rows: draw at most this many op rows (the title says how many exist).
        ax: draw into this Axes instead of a new figure.

    Returns:
        The matplotlib ``Figure``.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(meta={"placement": {"ops": [
        ...     dict(stage="step", op_type="Mul", graph="step", device="CPU:1", count=2)], "copies": []}})
        >>> len(plot_placement(t).axes)
        1
    """
    import matplotlib.pyplot as plt

    lay = placement_layout(trace, step=step)
    rows, devices = lay["rows"][:max_rows], lay["devices"]
    n_r, n_d = max(len(rows), 1), max(len(devices), 1)
    col = {d: i for i, d in enumerate(devices)}
    ticks = [short(d, 40) + ("\n(host)" if d == lay["host"] else "") for d in devices]
    spans = [abs(col[c["src"]] - col[c["dst"]]) for c in lay["copies"] if c["src"] in col and c["dst"] in col]
    size = _sizes([_row_label(r) for r in rows], ticks, rows, spans)
    more = "" if len(lay["rows"]) <= max_rows else f" (first {max_rows} of {len(lay['rows'])} rows)"
    title = _wrapped(lay["title"] + more, size["width"]) + "\narrows: copies between devices"
    own = ax is None
    if own:
        height = text_inches(title, TITLE_PT)[1] + size["ticks"] + size["band"] + n_r * ROW_IN + 0.6
        fig, ax = plt.subplots(figsize=(size["width"], height))
        plt.close(fig)
    else:
        fig = ax.figure
    _draw_rows(ax, rows, col, n_r, narrow=size["narrow"])
    _draw_copies(ax, lay["copies"], col, n_r)
    ax.set_xlim(0, n_d)
    ax.set_ylim(0, n_r + size["band"] / ROW_IN)
    ax.set_xticks([i + 0.5 for i in range(len(devices))])
    ax.set_xticklabels(ticks, fontsize=MIN_TEXT_PT, rotation=90 if size["rotate"] else 0)
    ax.xaxis.tick_top()
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(title, fontsize=TITLE_PT, loc="left")  # above the tick labels
    plain_figure(fig).tight_layout(pad=0.8)  # room for text a little wider at a lower dpi
    if own:  # from the label column's left edge: a title wider than the cells stays in the figure
        # the renderer tight_layout measured with (public get_window_extent() may reuse an older one);
        # Figure._get_renderer is not in matplotlib's stubs
        renderer = fig._get_renderer()  # type: ignore[attr-defined]
        left = min([t.get_window_extent(renderer).x0 for t in ax.texts] or [ax.bbox.x0])
        ax.set_title(title, fontsize=TITLE_PT, loc="left", x=ax.transAxes.inverted().transform((left, 0))[0])
    return plain_figure(fig)


def _wrapped(text: str, width_in: float) -> str:
    """``text`` in lines no wider than ``width_in`` inches at the title's size."""
    import textwrap

    chars = max(int(len(text) * (width_in - 0.3) / max(text_inches(text, TITLE_PT)[0], 0.01)), 20)
    return "\n".join(textwrap.wrap(text, chars)) or text


def _draw_copies(ax: Any, copies: list[dict[str, Any]], col: dict[str, int], n_r: int) -> None:
    """The copies between devices: arrows over the columns (drawn whole, never cut by the axes)."""
    from matplotlib.patches import FancyArrowPatch

    for c in copies:
        if c["src"] in col and c["dst"] in col:
            x0, x1 = col[c["src"]] + 0.5, col[c["dst"]] + 0.5
            ax.add_patch(FancyArrowPatch((x0, n_r + 0.15), (x1, n_r + 0.15), connectionstyle=f"arc3,rad={ARC_RAD}",
                                         arrowstyle="-|>", mutation_scale=10, color="#f58518", linewidth=1.2,
                                         clip_on=False))


def _draw_rows(ax: Any, rows: list[dict[str, Any]], col: dict[str, int], n_r: int, *, narrow: bool = False) -> None:
    """One row of cells per op (coloured by stage, red edge where an output held a NaN/Inf)."""
    from matplotlib.patches import Rectangle

    for y, r in enumerate(rows):
        yy = n_r - 1 - y
        color = STAGE_COLORS.get(r["stage"], "#999")
        for d, n in r["cells"].items():
            if d not in col or not n:
                continue
            bad = r["nonfinite"].get(d, 0)
            ax.add_patch(Rectangle((col[d] + 0.05, yy + 0.08), 0.9, 0.84, facecolor=color, alpha=0.75,
                                   edgecolor="#b00" if bad else "white", linewidth=2.5 if bad else 1))
            ax.text(col[d] + 0.5, yy + 0.5, _cell_text(n, bad, narrow=narrow), ha="center", va="center",
                    fontsize=MIN_TEXT_PT, color="white", fontweight="bold" if bad else "normal")
        ax.text(-0.08, yy + 0.5, _row_label(r), ha="right", va="center", fontsize=MIN_TEXT_PT, color=color)


def _png(fig: Any) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72)
    return buf.getvalue()


def _widgets() -> Any:
    from vizdist._optional import require

    return require("ipywidgets", pip="ipywidgets", conda="ipywidgets")


class PlacementView:
    """The placement of one trace: static text/HTML/PNG, and :meth:`widget` for a live step slider.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(meta={"placement": {"ops": [
        ...     dict(stage="step", op_type="Mul", graph="step", device="CPU:1", count=2)], "copies": []}})
        >>> repr(show_placement(t))
        'placement: 1 devices (CPU:1); 1 op rows: step 1; copies: none'
    """

    def __init__(self, trace: Trace, *, step: int | None = None) -> None:
        self._trace = trace
        self.layout = placement_layout(trace, step=step)

    def __repr__(self) -> str:
        return placement_text(self.layout)

    def static_html(self) -> str:
        """The table as escaped HTML (what GitHub and nbval see)."""
        return placement_html(self.layout)

    def widget(self, *, explorer: Any = None) -> Any:
        """A live view: step slider with Play (linked to ``explorer``'s slider when given)."""
        w = _widgets()
        steps = self.layout["steps"] or [0]
        slider = w.IntSlider(value=steps[0], min=steps[0], max=steps[-1], description="step")
        play = w.Play(value=steps[0], min=steps[0], max=steps[-1], interval=900)
        w.jslink((play, "value"), (slider, "value"))
        if explorer is not None:
            w.jslink((explorer.slider, "value"), (slider, "value"))
        html = w.HTML(placement_html(placement_layout(self._trace, step=steps[0])))

        def render(change: dict[str, Any]) -> None:
            html.value = placement_html(placement_layout(self._trace, step=int(change["new"])))

        slider.observe(render, names="value")
        box = w.VBox([w.HBox([play, slider]), html])
        box.add_class("vizdist-placement-widget")
        return box

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        import base64

        return {"text/plain": repr(self), "text/html": self.static_html(),
                "image/png": base64.b64encode(_png(plot_placement(self._trace, step=self.layout["step"])))
                .decode("ascii")}


def show_placement(trace: Trace, *, step: int | None = None) -> PlacementView:
    """The placement view of ``trace`` (recorded with ``placement=True``); ``.widget()`` for the live one.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(meta={"placement": {"ops": [], "copies": []}})
        >>> show_placement(t).layout["rows"]
        []
    """
    return PlacementView(trace, step=step)
