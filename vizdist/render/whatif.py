"""What if? Knobs that re-run the real pipeline and show what changed since the last run.

A :class:`WhatIf` widget shows one control per knob (global batch size, replicas,
``drop_remainder``, ...). Moving one calls the function it was handed with every knob's value;
that function runs the real TensorFlow pipeline (it lives in ``vizdist/instrument``: this module
never imports TensorFlow) and returns a new :class:`~vizdist.trace.Trace`. The widget then redraws
the split and marks what changed since the last run, read from :func:`vizdist.diff`: cells whose
elements moved or appeared, replicas that became empty, findings that appeared or went.

Knobs that start processes (``slow=True``: workers, shard policy, processing mode) show their
progress bars under the picture while they run. Build one with ``vizdist.what_if(...)``. The knobs
(:class:`~vizdist.analysis.whatif.Knob`) and the experiment a widget shows
(:class:`~vizdist.analysis.whatif.Experiment`, built by ``vizdist/instrument/experiments/whatif.py``) live in the
analysis layer; :meth:`WhatIf.of` shows an experiment.

Where no live widget can render (GitHub, nbval), its static view shows the first run: the knobs,
the split and the findings.

Example:
    >>> from vizdist.trace import Trace
    >>> def run(*, n):
    ...     return Trace.from_records(elements=[dict(step=0, replica=r, source_id=r) for r in range(n)])
    >>> w = WhatIf(run, [Knob("n", "replicas", "int", 2, options=(1, 3))], title="toy")
    >>> w.controls["n"].value = 3
    >>> w.runs, w.trace.replicas
    (2, [0, 1, 2])
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from vizdist._clip import clip
from vizdist._optional import require
from vizdist.analysis.whatif import Experiment, Knob
from vizdist.diagnose import diagnose
from vizdist.render.explorer import split_text
from vizdist.render.html import findings_html, split_html
from vizdist.render.layout import split_layout
from vizdist.trace import Trace
from vizdist.trace_diff import TraceDiff, diff, unfinished_run

__all__ = ["Knob", "WhatIf", "changes_text", "knob_control", "marked_cells", "timing_html"]

if TYPE_CHECKING:  # mypy reads the base classes from the package itself
    import ipywidgets as widgets
else:
    widgets = require("ipywidgets", pip="ipywidgets", conda="ipywidgets")

def knob_control(knob: Knob) -> Any:
    """The ipywidget for ``knob`` (its value is the knob's value)."""
    style = {"description_width": "initial"}
    if knob.kind == "int":
        w = widgets.IntSlider(value=knob.value, min=knob.options[0], max=knob.options[1], description=knob.label,
                              continuous_update=False, style=style)
    elif knob.kind == "bool":
        w = widgets.Checkbox(value=bool(knob.value), description=knob.label, indent=False, style=style)
    else:
        w = widgets.Dropdown(options=list(knob.options), value=knob.value, description=knob.label, style=style)
    w.add_class(f"vizdist-knob-{knob.name}")
    w.add_class("vizdist-knob")
    return w


def marked_cells(d: TraceDiff) -> set[tuple[int, int]]:
    """(step, replica) cells of the *new* run that changed: an element moved in or appeared, or it emptied.

    Example:
        >>> a = Trace.from_records(elements=[dict(step=0, replica=r, source_id=r) for r in range(2)])
        >>> b = Trace.from_records(elements=[dict(step=0, replica=0, source_id=r, position=r) for r in range(2)])
        >>> sorted(marked_cells(diff(a, b)))
        [(0, 0)]
    """
    cells = {(int(s), int(r)) for s, r in zip(d.moved["step_after"], d.moved["replica_after"], strict=True)}
    cells |= {(int(s), int(r)) for s, r in zip(d.appeared["step_after"], d.appeared["replica_after"], strict=True)}
    cells |= {(int(s), int(r)) for s, r in zip(d.became_empty["step"], d.became_empty["replica"], strict=True)}
    return cells


def changes_text(d: TraceDiff, *, limit: int = 4) -> list[str]:
    """What changed since the last run, one plain sentence per kind of change.

    Example:
        >>> a = Trace.from_records(elements=[dict(step=0, replica=r, source_id=r) for r in range(2)])
        >>> b = Trace.from_records(elements=[dict(step=0, replica=0, source_id=r, position=r) for r in range(2)])
        >>> changes_text(diff(a, b))
        ['1 element moved: 1 (step 0 replica 1 → step 0 replica 0)']
    """
    out = []
    if len(d.moved):
        head = d.moved.head(limit)
        where = ", ".join(f"{i} (step {s0} replica {r0} → step {s1} replica {r1})" for i, s0, r0, s1, r1 in
                          zip(head["source_id"], head["step_before"], head["replica_before"], head["step_after"],
                              head["replica_after"], strict=True))
        out.append(f"{len(d.moved)} element{'s' if len(d.moved) > 1 else ''} moved: {where}"
                   + (" …" if len(d.moved) > limit else ""))
    for frame, what in ((d.gone, "no longer arrive"), (d.appeared, "now arrive")):
        if len(frame):
            ids = ", ".join(str(i) for i in frame["source_id"].head(limit * 2))
            out.append(f"{len(frame)} arrival(s) {what}: {ids}" + (" …" if len(frame) > limit * 2 else ""))
    for frame, what in ((d.became_empty, "became empty"), (d.no_longer_empty, "is no longer empty")):
        for s, r in list(zip(frame["step"], frame["replica"], strict=True))[:limit]:
            out.append(f"replica {r} {what} at step {s}")
        if len(frame) > limit:
            out.append(f"… and {len(frame) - limit} more (step, replica) that {what.split()[0]} {what.split(' ', 1)[1]}")
    for frame, what in ((d.findings_appeared, "appeared"), (d.findings_gone, "gone")):
        for (code, severity), n in frame.groupby(["code", "severity"], sort=False).size().items():
            out.append(f"finding {what}: {code} ({severity})" + (f" ×{n}" if n > 1 else ""))
    return out


def _waits(trace: Trace) -> dict[str, list[float]]:
    """Per step, seconds the host spent in each stage it timed (``transfer`` = waiting for ``next()``)."""
    ev = trace.events
    if not len(ev):
        return {}
    ev = ev[ev["stage"].isin(["transfer", "consume"]) & (ev["step"] >= 0)]
    secs = (ev["t_end_ns"] - ev["t_start_ns"]) / 1e9
    table = secs.groupby([ev["stage"], ev["step"]]).sum()
    return {str(stage): table[stage].sort_index().tolist() for stage in table.index.get_level_values(0).unique()}


def timing_html(trace: Trace, previous: Trace | None = None) -> str:
    """A small per-step timeline: how long each step waited for its input (and ran its step), as bars.

    Empty when the run recorded no host spans. Durations vary from run to run, so only the live view
    shows them (never the static one nbval compares).

    Example:
        >>> t = Trace.from_records(events=[dict(lane="host", stage="transfer", step=s, t_start_ns=0,
        ...                                     t_end_ns=(s + 1) * 10**6) for s in range(2)])
        >>> "waiting for input" in timing_html(t)
        True
    """
    waits = _waits(trace)
    if not waits:
        return ""
    top = max(max(v) for v in waits.values()) or 1.0
    colors = {"transfer": "#c66", "consume": "#69c"}
    names = {"transfer": "waiting for input (next())", "consume": "step"}
    rows = []
    for stage, values in waits.items():
        bars = "".join(f'<span title="step {s}: {v * 1e3:.1f} ms" style="display:inline-block;width:14px;'
                       f'margin-right:2px;vertical-align:bottom;background:{colors.get(stage, "#999")};'
                       f'height:{max(1, round(40 * v / top))}px"></span>' for s, v in enumerate(values))
        was = _waits(previous).get(stage) if previous is not None else None
        change = f" (was {sum(was):.3f} s)" if was else ""
        rows.append(f"<div><small>{escape(names.get(stage, stage))}: {sum(values):.3f} s in all{change}</small>"
                    f'<div style="height:42px">{bars}</div></div>')
    return '<div class="vizdist-whatif-timing"><b>Per step</b>' + "".join(rows) + "</div>"


class WhatIf(widgets.VBox):  # type: ignore[misc]  # the base class comes from a package without types (Any)
    """Knobs on a live run: move one, the real pipeline runs again, the changes are marked.

    Args:
        run: ``run(**knob_values) -> Trace``: runs the real pipeline with those knobs.
        knobs: the knobs, in the order shown.
        title: one line above the knobs.
        note: a line under the knobs (what the knobs really do, in words).

    Attributes:
        trace: the last run's trace; ``previous`` the one before; ``last_diff`` their
            :class:`~vizdist.trace_diff.TraceDiff`; ``runs`` how many runs so far;
            ``seconds`` how long the last knob move took, from the change to the redrawn picture.
    """

    def __init__(self, run: Callable[..., Trace], knobs: Sequence[Knob], *, title: str, note: str = "") -> None:
        if not callable(run):
            raise TypeError(f"run must be a function of the knobs returning a vizdist.Trace; got {type(run).__name__}.")
        if not knobs:
            raise ValueError("a WhatIf needs at least one knob.")
        self._run, self.knobs, self.title, self.note = run, list(knobs), title, note
        self.trace: Trace | None = None
        self.previous: Trace | None = None
        self.last_diff: TraceDiff | None = None
        self.runs, self.seconds, self.error = 0, 0.0, ""
        self._first: tuple[dict[str, Any], Trace] | None = None
        self.controls = {k.name: knob_control(k) for k in self.knobs}
        self.status = widgets.HTML()
        self.status.add_class("vizdist-whatif-status")
        self.picture = widgets.HTML()
        self.picture.add_class("vizdist-whatif-picture")
        self.progress = widgets.Output()  # progress bars of slow knobs
        notes = "".join(f"<br><small>{escape(k.label)}: {escape(k.help)}</small>" for k in self.knobs if k.help)
        header = widgets.HTML(f"<b>{escape(title)}</b>" + (f"<br><small>{escape(note)}</small>" if note else "")
                              + notes)
        box = widgets.HBox(list(self.controls.values()), layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__([header, box, self.status, self.progress, self.picture])
        self.add_class("vizdist-whatif")
        for w in self.controls.values():
            w.observe(self._on_knob, names="value")
        self.update()
        if self.trace is not None:
            self._first = (self.values, self.trace)

    @classmethod
    def of(cls, experiment: Experiment) -> WhatIf:
        """The widget showing ``experiment``; its ``cleanup`` runs when the widget goes (or building it fails)."""
        try:
            w = cls(experiment.run, experiment.knobs, title=experiment.title, note=experiment.note)
        except BaseException:
            if experiment.cleanup is not None:
                experiment.cleanup()
            raise
        if experiment.cleanup is not None:
            weakref.finalize(w, experiment.cleanup)
        return w

    @property
    def values(self) -> dict[str, Any]:
        """Every knob's current value, by name."""
        return {name: w.value for name, w in self.controls.items()}

    @property
    def changes(self) -> list[str]:
        """What the last knob move changed, in sentences (``[]`` after the first run).

        After a move TensorFlow refused, the refusal (``error``) and the last good run stay.
        """
        return changes_text(self.last_diff) if self.last_diff is not None else []

    def _on_knob(self, change: dict[str, Any]) -> None:
        self.update()

    def update(self) -> Trace | None:
        """Run the pipeline with the current knobs and redraw; on a refused combination show TF's error."""
        t0 = time.perf_counter()
        values = self.values
        slow = any(k.slow for k in self.knobs)
        self.status.value = "<small>running TensorFlow…</small>"
        try:
            if slow:
                self.progress.clear_output()
                with self.progress:
                    trace = self._run(**values)
            else:
                trace = self._run(**values)
            if not isinstance(trace, Trace):
                raise TypeError(f"the run handed to WhatIf returned {type(trace).__name__}, not a vizdist.Trace.")
        except Exception as exc:  # a refused knob combination is part of the lesson: show it, keep the picture
            self.error = f"{type(exc).__name__}: {exc}"
            self._refused("TensorFlow refused this combination", values)
            return None
        unfinished = unfinished_run(trace)
        if unfinished:  # a run cut short is not what TF does with these knobs: say so, keep the picture
            self.error = (f"{unfinished}. The picture still shows the last run that finished; move the knob "
                          "again to re-run it.")
            self._refused("This run did not finish", values)
            return None
        self.error = ""
        self.previous, self.trace = self.trace, trace
        self.last_diff = diff(self.previous, trace) if self.previous is not None else None
        self.runs += 1
        self.picture.value = self._picture_html(values)
        self.seconds = time.perf_counter() - t0
        self.status.value = (f'<small data-seconds="{self.seconds:.3f}">run {self.runs}: ran TensorFlow and '
                             f"redrew in {self.seconds:.2f} s</small>")
        return trace

    def _refused(self, what: str, values: dict[str, Any]) -> None:
        self.status.value = (f'<div style="color:#b00" data-error="1"><b>{escape(what)}</b> '
                             f"({escape(_knob_text(values, self.knobs))}):<br>{escape(clip(self.error, 4_000))}</div>")

    def _picture_html(self, values: dict[str, Any]) -> str:
        assert self.trace is not None
        lay = split_layout(self.trace, max_steps=30)
        marked = marked_cells(self.last_diff) if self.last_diff is not None else set()
        if self.last_diff is None:
            changes = "<small>first run: move a knob to see what changes.</small>"
        else:
            lines = changes_text(self.last_diff) or ["nothing moved: every element arrived where it did before"]
            changes = ("<b>Changed since the last run</b> (marked cells):<ul style='margin:2px 0'>"
                       + "".join(f"<li>{escape(x)}</li>" for x in lines) + "</ul>")
        return (f'<div data-run="{self.runs}" data-knobs="{escape(_knob_text(values, self.knobs))}">'
                f"{split_html(lay, marked=marked)}{changes}{timing_html(self.trace, self.previous)}"
                f"<b>Findings</b>{findings_html(diagnose(self.trace))}</div>")

    # -- static fallback ---------------------------------------------------------------------------
    def _static_parts(self) -> tuple[str, Trace | None]:
        if self._first is None:
            return "", None
        values, trace = self._first
        return _knob_text(values, self.knobs), trace

    def __repr__(self) -> str:
        knobs, trace = self._static_parts()
        if trace is None:
            return f"WhatIf: {self.title}\n(the first run failed: {self.error})"
        lay = split_layout(trace, max_steps=30)
        return (f"WhatIf: {self.title}\nknobs: {knobs}\n{split_text(lay, diagnose(trace))}\n"
                "(in JupyterLab, move a knob: the real pipeline runs again and the changes are marked)")

    def static_html(self) -> str:
        """The first run: its knobs, split and findings (escaped; what GitHub shows)."""
        knobs, trace = self._static_parts()
        if trace is None:
            return f"<p><b>{escape(self.title)}</b>: the first run failed: {escape(clip(self.error, 4_000))}</p>"
        return (f'<div class="vizdist-whatif-static"><p><b>{escape(self.title)}</b><br><small>knobs: '
                f"{escape(knobs)} (in JupyterLab, move a knob to re-run the real pipeline)</small></p>"
                f"{split_html(split_layout(trace, max_steps=30))}<b>Findings</b>{findings_html(diagnose(trace))}</div>")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/plain"] = repr(self)
        data["text/html"] = self.static_html()
        return data


def _knob_text(values: dict[str, Any], knobs: Sequence[Knob]) -> str:
    labels = {k.name: k.label for k in knobs}
    return " · ".join(f"{labels.get(n, n)} {v}" for n, v in values.items())

