"""Step through a reduction: inputs on each device, where they meet, the result on each destination.

Reads ``trace.meta["reductions"]`` (recorded with
:func:`vizdist.trace_reduction`) and ``trace.meta["loss_scaling"]``
(:func:`vizdist.trace_loss_scaling`). One layout (:func:`reduction_layout`)
feeds the text line, the HTML table, the PNG and the widget (Play steps
through the three frames).

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(meta={"reductions": [dict(
    ...     call="Strategy.reduce", reduce_op="SUM", axis=None, cross_device_ops="ReductionToOneDevice",
    ...     inputs=[dict(replica=0, device="CPU:0", value=1.0), dict(replica=1, device="CPU:1", value=2.0)],
    ...     results=[dict(replica=-1, device="CPU:0", value=3.0)], destinations=["CPU:0"], expected=3.0,
    ...     ops=[dict(stage="reduce", op_type="AddN", device="CPU:0", count=1)])]})
    >>> print(reduction_text(reduction_layout(t)))
    reduction: Strategy.reduce SUM via ReductionToOneDevice: inputs CPU:0 1.0, CPU:1 2.0 → meet on CPU:0 (AddN) → result CPU:0 3.0; TF's documented rule gives 3.0
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

import pandas as pd

from vizdist.contract import ReductionMeta
from vizdist.render._text import plain_figure, short
from vizdist.trace import Trace

__all__ = ["ReductionView", "loss_table", "reduction_layout", "reduction_text", "show_reduction"]

FRAMES = ("inputs on each device", "where they meet", "result on each destination")
_COPY_OPS = ("Identity", "IdentityN", "_Send", "_Recv")


def _device_key(d: str) -> tuple[str, int]:
    m = re.match(r"^(.*?)(\d+)$", d)
    return (m.group(1), int(m.group(2))) if m else (d, -1)


#: Inputs, results and devices a reduction view shows at most, and the ops it reads (its note says so).
MAX_DEVICES, MAX_OPS = 32, 1_000


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def reduction_layout(trace: Trace, *, index: int = 0) -> dict[str, Any]:
    """The three frames of reduction ``index``: ``cells`` maps each device to what is there."""
    if not isinstance(trace, Trace):
        raise TypeError(f"the reduction view takes a vizdist.Trace; got {type(trace).__name__}.")
    reds = trace.meta.get("reductions") or []
    if not reds:
        raise ValueError("this trace has no reductions: record one with vizdist.trace_reduction(strategy, values).")
    if not 0 <= index < len(reds):
        raise IndexError(f"index must be 0..{len(reds) - 1}; got {index}.")
    r = reds[index]
    all_inputs, all_results = r.get("inputs", []), r.get("results", [])
    inputs, results = all_inputs[:MAX_DEVICES], all_results[:MAX_DEVICES]  # the first ones, said in the note
    meet: dict[str, list[str]] = {}
    for o in r.get("ops", [])[:MAX_OPS]:
        if o.get("device") and o.get("op_type") not in _COPY_OPS and not o["op_type"].startswith("__inference"):
            meet.setdefault(o["device"], []).append(o["op_type"])
    frames = [
        {"title": FRAMES[0], "cells": _cells((i["device"], f"r{i['replica']}: {_short(i['value'])}") for i in inputs)},
        {"title": FRAMES[1], "cells": {d: ", ".join(sorted(set(ops))) for d, ops in meet.items()}},
        {"title": FRAMES[2], "cells": _cells((x["device"], _short(x["value"])) for x in results)},
    ]
    devices = sorted({d for f in frames for d in f["cells"]}, key=_device_key)
    op = r.get("reduce_op", "")
    axis = "" if r.get("axis") is None else f" axis={_short(r['axis'])}"
    title = short(f"{r.get('call', '?')} {op}{axis} via {r.get('cross_device_ops', '?')}{_collective_text(r)}", 200)
    note = short(r.get("note", ""), 500)
    shown = [f"first {len(mine)} of {len(every)} {what}" for what, mine, every in (
        ("inputs", inputs, all_inputs), ("results", results, all_results), ("devices", devices[:MAX_DEVICES], devices))
        if len(every) > len(mine)]
    if shown:
        note = "; ".join([note, *shown] if note else shown) + " shown"
    return {"title": title, "devices": devices[:MAX_DEVICES], "frames": frames, "expected": r.get("expected"),
            "note": note, "results": results, "inputs": inputs}


def _collective_text(r: ReductionMeta) -> str:
    """`` (RingReduce, communication_hint ring)`` for a reduction made of collective ops, else ``""``."""
    coll = r.get("collectives") or []
    if not coll:
        return ""
    impls = ", ".join(sorted({short(c.get("implementation") or "?", 40) for c in coll[:MAX_OPS]})[:8])
    hints = ", ".join(sorted({short(c.get("communication_hint") or "?", 40) for c in coll[:MAX_OPS]})[:8])
    workers = r.get("workers") or []
    across = f" across {len(workers)} workers" if len(workers) > 1 else ""
    return f" ({impls}, communication_hint {hints}{across})"


def _cells(pairs: Any) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    for device, text in pairs:
        out.setdefault(device or "?", []).append(text)
    return {d: "; ".join(v) for d, v in out.items()}


def reduction_text(layout: dict[str, Any]) -> str:
    """One compared line: inputs → where they meet → results, and TF's documented rule."""
    ins = ", ".join(f"{short(i['device'], 60)} {_short(i['value'])}" for i in layout["inputs"])
    meet = ", ".join(f"{d} ({v})" for d, v in sorted(layout["frames"][1]["cells"].items(),
                                                     key=lambda kv: _device_key(kv[0])))
    outs = ", ".join(f"{short(x['device'], 60)} {_short(x['value'])}" for x in layout["results"])
    return (f"reduction: {layout['title']}: inputs {ins} → meet on {meet or 'no recorded op'} → result {outs}; "
            f"TF's documented rule gives {_short(layout['expected'])}")


def reduction_html(layout: dict[str, Any], *, frame: int | None = None) -> str:
    """Frames as rows, devices as columns (``frame`` highlights one)."""
    td = "border:1px solid #ccc;padding:3px 6px;font-family:monospace;font-size:12px;vertical-align:top"
    head = "".join(f'<th style="{td}">{escape(short(d, 60))}</th>' for d in layout["devices"])
    rows = []
    for i, f in enumerate(layout["frames"]):
        bg = ";background:#fff3cd" if frame == i else ""
        cells = "".join(f'<td style="{td}{bg}">{escape(short(f["cells"].get(d, ""), 400))}</td>'
                        for d in layout["devices"])
        rows.append(f'<tr data-frame="{i}"><td style="{td}{bg}"><b>{i + 1}. {escape(f["title"])}</b></td>{cells}</tr>')
    note = f"<br><small>{escape(layout['note'])}</small>" if layout.get("note") else ""
    return (f'<div class="vizdist-reduction"><b>{escape(layout["title"])}</b><table style="border-collapse:collapse">'
            f'<tr><th style="{td}"></th>{head}</tr>{"".join(rows)}</table>'
            f"TF's documented rule gives <code>{escape(_short(layout['expected']))}</code>{note}</div>")


def plot_reduction(trace: Trace, *, index: int = 0) -> Any:
    """The three frames as three rows of device boxes (PNG fallback of the view)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    lay = reduction_layout(trace, index=index)
    devices = lay["devices"]
    fig, ax = plt.subplots(figsize=(1.5 + 2.2 * max(len(devices), 1), 3.6))
    plt.close(fig)
    colors = ("#4c78a8", "#e45756", "#54a24b")
    for row, f in enumerate(lay["frames"]):
        y = 2 - row
        ax.text(-0.1, y + 0.4, f"{row + 1}. {f['title']}", ha="right", va="center", fontsize=8)
        for c, d in enumerate(devices):
            text = f["cells"].get(d, "")
            if not text:
                continue
            ax.add_patch(FancyBboxPatch((c + 0.05, y + 0.1), 0.9, 0.6, boxstyle="round,pad=0.02",
                                        facecolor=colors[row], alpha=0.75, edgecolor="white"))
            ax.text(c + 0.5, y + 0.4, text if len(text) <= 28 else text[:25] + "...", ha="center", va="center",
                    fontsize=7, color="white", wrap=True)
    ax.set_xlim(0, max(len(devices), 1))
    ax.set_ylim(0, 3)
    ax.set_xticks([i + 0.5 for i in range(len(devices))])
    ax.set_xticklabels([short(d, 40) for d in devices], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(lay["title"], fontsize=9, pad=20)
    plain_figure(fig).tight_layout()
    return plain_figure(fig)


class ReductionView:
    """A recorded reduction: static text/HTML/PNG, and :meth:`widget` to step through it with Play.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(meta={"reductions": [dict(call="Strategy.reduce", reduce_op="SUM",
        ...     inputs=[dict(replica=0, device="CPU:0", value=1.0)], results=[dict(device="CPU:0", value=1.0)],
        ...     expected=1.0, ops=[])]})
        >>> show_reduction(t).layout["devices"]
        ['CPU:0']
    """

    def __init__(self, trace: Trace, *, index: int = 0) -> None:
        self._trace, self.index = trace, index
        self.layout = reduction_layout(trace, index=index)

    def __repr__(self) -> str:
        return reduction_text(self.layout)

    def widget(self) -> Any:
        """Play through the frames (inputs → where they meet → results)."""
        from vizdist._optional import require

        w = require("ipywidgets", pip="ipywidgets", conda="ipywidgets")
        slider = w.IntSlider(value=0, min=0, max=len(FRAMES) - 1, description="frame")
        play = w.Play(value=0, min=0, max=len(FRAMES) - 1, interval=1200)
        w.jslink((play, "value"), (slider, "value"))
        html = w.HTML(reduction_html(self.layout, frame=0))

        def render(change: dict[str, Any]) -> None:
            html.value = reduction_html(self.layout, frame=int(change["new"]))

        slider.observe(render, names="value")
        return w.VBox([w.HBox([play, slider]), html])

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        import base64
        import io

        buf = io.BytesIO()
        plot_reduction(self._trace, index=self.index).savefig(buf, format="png", dpi=72)
        return {"text/plain": repr(self), "text/html": reduction_html(self.layout),
                "image/png": base64.b64encode(buf.getvalue()).decode("ascii")}


def show_reduction(trace: Trace, *, index: int = 0) -> ReductionView:
    """The view of reduction ``index`` of ``trace`` (see :class:`ReductionView`).

    Example:
        >>> import vizdist
        >>> show_reduction(vizdist.Trace())
        Traceback (most recent call last):
        ...
        ValueError: this trace has no reductions: record one with vizdist.trace_reduction(strategy, values).
    """
    return ReductionView(trace, index=index)


def loss_table(trace: Trace) -> pd.DataFrame:
    """One row per step of ``trace_loss_scaling``: each replica's batch and contributions, both reductions.

    Columns: ``step``, ``batch sizes``, ``compute_average_loss`` (each
    replica's), ``SUM of them`` (TF's reduce), ``per-replica mean`` (each
    replica's; ``None`` for an empty batch, whose mean is NaN), ``MEAN of
    them`` (TF's reduce), ``mean over arrived elements`` (what you expect).

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(meta={"loss_scaling": [dict(step=0, n=[1, 0],
        ...     compute_average_loss=[1.0, 0.0], per_replica_mean=[2.0, None], reduced_compute_average_loss=1.0,
        ...     reduced_per_replica_mean=None, expected=2.0)]})
        >>> float(loss_table(t).iloc[0]["mean over arrived elements"])
        2.0
    """
    rows = trace.meta.get("loss_scaling")
    if rows is None:
        raise ValueError("this trace has no loss_scaling rows: record them with vizdist.trace_loss_scaling(...).")
    return pd.DataFrame([{
        "step": r["step"], "batch sizes": r["n"], "compute_average_loss": r["compute_average_loss"],
        "SUM of them": r["reduced_compute_average_loss"], "per-replica mean": r["per_replica_mean"],
        "MEAN of them": r["reduced_per_replica_mean"], "mean over arrived elements": r["expected"],
    } for r in rows])
