"""The step explorer: an ipywidgets view of who got what at each step.

In JupyterLab it is live (a step slider with Play, one card per replica with
its device and element ids, the findings for that step). Everywhere else
(GitHub, nbval, a closed kernel) its static HTML and text fallback show the
whole split and the findings.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

import pandas as pd

from vizdist._optional import require
from vizdist.render._text import short
from vizdist.render.html import cell_html, findings_html, ids_text, split_html
from vizdist.render.layout import pass_choices, split_layout
from vizdist.trace import Trace

__all__ = ["CARDS", "TEXT_REPLICAS", "Explorer", "show", "split_text"]

#: Replicas the explorer shows (one card each; its static table too) and the text view prints per step.
CARDS = 64
TEXT_REPLICAS = 16

if TYPE_CHECKING:  # mypy reads the base classes from the package itself
    import ipywidgets as widgets
else:
    widgets = require("ipywidgets", pip="ipywidgets", conda="ipywidgets")


def split_text(layout: dict[str, Any], findings: pd.DataFrame) -> str:
    """Plain-text fallback: one line per step, then a findings summary.

    Example:
        >>> lay = {"title": "T", "steps": [0], "total_steps": 1,
        ...        "replicas": [{"id": 0, "device": "CPU:0", "worker": 0}],
        ...        "cells": [[{"labels": ["1", "2"], "empty": False, "partial": False}]]}
        >>> print(split_text(lay, pd.DataFrame(columns=["severity"])))
        T
          step 0: r0 [1, 2]
        findings: none
    """
    lines = [layout["title"]]
    labels = layout.get("step_labels") or [""] * len(layout["steps"])
    for s, cells, label in zip(layout["steps"], layout["cells"], labels, strict=False):
        parts = []
        for rep, c in list(zip(layout["replicas"], cells, strict=False))[:TEXT_REPLICAS]:
            body = "empty" if c["empty"] or not c["labels"] else "[" + ids_text(c["labels"]) + "]"
            parts.append(f"r{rep['id']} {body}")
        lines.append(f"  step {s}{f' ({label})' if label else ''}: " + " | ".join(parts))
    if layout["total_steps"] > len(layout["steps"]):
        lines.append(f"  ... {layout['total_steps'] - len(layout['steps'])} more steps")
    total = layout.get("total_replicas", len(layout["replicas"]))
    if total > TEXT_REPLICAS:
        lines.append(f"  first {TEXT_REPLICAS} of {total} replicas shown ({total - TEXT_REPLICAS} more replicas "
                     "not shown)")
    if findings.empty:
        lines.append("findings: none")
    else:
        counts = findings["severity"].value_counts()
        lines.append("findings: " + ", ".join(f"{int(counts[s])} {s}" for s in ("error", "warning", "info")
                                              if s in counts))
    return "\n".join(lines)


class Explorer(widgets.VBox):  # type: ignore[misc]  # the base class comes from a package without types (Any)
    """Step through a trace: which elements each replica got, on which device.

    Build it with :func:`show`. ``explorer.step`` is the step shown; set it to
    move. The trace itself stays in Python; the widgets sync only HTML text
    and the slider's integer.
    """

    def __init__(self, trace: Trace, *, max_steps: int = 50) -> None:
        from vizdist.diagnose import diagnose

        self._trace = trace
        self._static_layout = split_layout(trace, max_steps=max_steps, max_replicas=CARDS)
        self._layout = self._static_layout  # title, replicas, totals; each step is laid out when shown
        self._findings = diagnose(trace)
        steps = trace.steps or [0]
        self._steps = steps
        self.slider = widgets.IntSlider(value=steps[0], min=steps[0], max=steps[-1], description="step",
                                        continuous_update=True)
        self.slider.add_class("vizdist-step")
        self.play = widgets.Play(value=steps[0], min=steps[0], max=steps[-1], interval=900,
                                 description="play")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.pass_pick = self._pass_picker(trace)
        self.header = widgets.HTML(self._header_html())
        self.label = widgets.HTML()
        self.label.add_class("vizdist-step-label")
        self.cards = widgets.HBox([widgets.HTML() for _ in self._layout["replicas"]],
                                  layout=widgets.Layout(flex_flow="row wrap"))
        self.findings = widgets.HTML()
        self.slider.observe(self._on_step, names="value")
        controls = [self.play, self.slider, self.label] + ([self.pass_pick] if self.pass_pick is not None else [])
        super().__init__([self.header, widgets.HBox(controls), self.cards, self.findings])
        self.add_class("vizdist-explorer")
        self._render(steps[0])

    # -- state -----------------------------------------------------------
    @property
    def step(self) -> int:
        """The step shown."""
        return int(self.slider.value)

    @step.setter
    def step(self, value: int) -> None:
        self.slider.value = int(value)

    def _pass_picker(self, trace: Trace) -> Any:
        """A record() trace: a drop-down of its phases and epochs (Keras's build read among them)."""
        choices = pass_choices(trace)
        if not choices:
            return None
        pick = widgets.Dropdown(options=[("all steps", ())] + [(name, tuple(steps)) for name, steps in choices],
                                value=(), description="show")
        pick.add_class("vizdist-pass")
        pick.observe(self._on_pass, names="value")
        return pick

    def _on_pass(self, change: dict[str, Any]) -> None:
        """Keep the slider to the steps of the phase and epoch picked (all steps for "all steps")."""
        steps = list(change["new"]) or self._steps
        for w in (self.slider, self.play):
            w.min, w.max = self._steps[0], self._steps[-1]  # widen first: the new range lies within
        self.slider.value = steps[0]
        for w in (self.slider, self.play):
            w.min, w.max = steps[0], steps[-1]

    def _header_html(self) -> str:
        m = self._trace.meta
        bits = [f"<b>{escape(self._layout['title'])}</b>"]
        prov = m.get("provenance")
        if prov:
            bits.append(f"<small>ids: {escape(short(prov))}</small>")
        return " &nbsp; ".join(bits)

    def _on_step(self, change: dict[str, Any]) -> None:
        self._render(int(change["new"]))

    def _render(self, step: int) -> None:
        lay = split_layout(self._trace, steps=[step], max_replicas=CARDS)  # this step only
        row = 0 if lay["steps"] else None
        where = lay["step_labels"][0] if lay["steps"] else ""
        self.label.value = (f'<span data-step="{step}">step {step} of {lay["total_steps"]}'
                            f" (0–{lay['total_steps'] - 1}){f' · {escape(where)}' if where else ''}</span>")
        for card, rep, i in zip(self.cards.children, lay["replicas"], range(len(lay["replicas"])), strict=False):
            cell: dict[str, Any] = lay["cells"][row][i] if row is not None else {
                "labels": [], "empty": True, "partial": False, "n": 0, "result": ""}
            border = "#b00" if cell["empty"] else ("#a60" if cell.get("partial") else "#999")
            result = (f"<br><small>step_fn → {escape(cell['result'])}</small>"
                      if cell.get("result") else "")
            if rep.get("input_device") and rep["input_device"] != rep["device"]:
                result += f"<br><small>input reported on {escape(rep['input_device'])}</small>"
            if cell.get("workers"):
                made = ", ".join(str(w) for w in cell["workers"])
                result += f"<br><small>made by service worker{'s' if len(cell['workers']) > 1 else ''} {made}</small>"
            where = escape(rep["device"]) + ("" if rep.get("worker") is None else f" · worker {rep['worker']}")
            card.value = (
                f'<div class="vizdist-card" data-step="{step}" data-replica="{rep["id"]}" '
                f'style="border:2px solid {border};border-radius:6px;padding:6px 8px;margin:3px;'
                f'min-width:130px;font-family:monospace;font-size:12px">'
                f'<b>replica {rep["id"]}</b><br><small>{where}</small>'
                f'<br>{cell.get("n", len(cell["labels"]))} element(s)<br>{cell_html(cell)}{result}</div>'
            )
        self.findings.value = findings_html(self._findings, step=step)

    # -- static fallback ---------------------------------------------------
    def static_html(self) -> str:
        """The whole split and all findings as escaped HTML (what GitHub shows)."""
        return (self._header_html() + split_html(self._static_layout, title=False) + "<b>Findings</b>"
                + findings_html(self._findings))

    def __repr__(self) -> str:
        return split_text(self._static_layout, self._findings)

    def static_png(self) -> bytes:
        """The split figure (``trace.plot.split()``) as PNG bytes."""
        import io

        from vizdist.render.figures import plot_split

        buf = io.BytesIO()
        plot_split(self._trace, max_steps=12).savefig(buf, format="png", dpi=72)
        return buf.getvalue()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        import base64

        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/plain"] = repr(self)
        data["text/html"] = self.static_html()
        data["image/png"] = base64.b64encode(self.static_png()).decode("ascii")
        return data


def show(trace: Trace, *, max_steps: int = 50) -> Explorer:
    """Open the step explorer for ``trace`` (a live widget with a static fallback).

    Args:
        trace: a recorded run.
        max_steps: steps included in the static (GitHub/nbval) view.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(
        ...     elements=[dict(step=s, replica=r, source_id=2 * s + r, position=0)
        ...               for s in range(2) for r in range(2)])
        >>> ex = show(t)
        >>> ex.step = 1
        >>> "data-step=\\"1\\"" in ex.cards.children[0].value
        True
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"show takes a vizdist.Trace; got {type(trace).__name__}.")
    return Explorer(trace, max_steps=max_steps)
