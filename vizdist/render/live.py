"""The live explorer: a running ``vizdist.record()`` block, followed step by step as it runs (JupyterLab).

``rec.show()`` hands :func:`show_live` the block's *feed*, a function ``feed(after, max_steps)`` that
returns the newest steps after step ``after`` (or None) and the block's status (``{"steps": int, "ended":
bool, "error": str | None}``). The steps come as a small trace, or as its rows in plain lists (one value per
batch: see :func:`_rows_layout`), which ``rec.show()`` uses: laid out without building a trace, exactly as
:func:`~vizdist.render.layout.split_layout` lays out their trace. A thread of the explorer asks the feed for
new steps every ``interval`` seconds (up to a second when a refresh costs more than :data:`MAX_CORE_SHARE` of
a core over that time; a refresh of a running ``fit`` costs about a millisecond) and, when there are some,
lays out only those (never the whole trace: it stays cheap at millions of steps), keeps the newest
``window`` of them, and shows the newest one: one card per replica with its device and the element ids it
got, the step's phase and epoch. When nothing new came, it sends nothing. The widget's
state messages go to the browser from that thread while your cell (``fit``) runs; nothing is printed,
so Keras's progress bar and your own output are as they are without it. The thread ends with the block
(one last refresh) or when the explorer is closed.

While the kernel runs your cell it cannot answer the slider (JupyterLab sends its moves to a busy
kernel), so the explorer follows the newest step on its own; once the block ended, its slider browses the
steps it holds, and ``rec.trace.show()`` explores every step.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(elements=[dict(step=0, replica=0, source_id=7, position=0)],
    ...                                batches=[dict(step=0, replica=0, n_elements=1)])
    >>> live = LiveExplorer(lambda after, n: (t if after < 0 else None, {"steps": 1, "ended": True}), start=False)
    >>> live.refresh(), live.step, "data-ended=\\"1\\"" in live.status.value
    (True, 0, True)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from html import escape
from typing import TYPE_CHECKING, Any

from vizdist._optional import require
from vizdist.render.html import cell_html
from vizdist.render.layout import element_label, short_device, split_layout, step_label
from vizdist.trace import Trace

__all__ = ["MAX_CORE_SHARE", "MAX_WAIT_S", "Feed", "LiveExplorer", "next_wait", "show_live"]

if TYPE_CHECKING:  # mypy reads the base classes from the package itself
    import ipywidgets as widgets
else:
    widgets = require("ipywidgets", pip="ipywidgets", conda="ipywidgets")

#: The share of one core the explorer's thread aims to take: after a refresh that cost ``c`` CPU seconds it
#: waits ``c / MAX_CORE_SHARE`` before the next, at least its ``interval`` and at most :data:`MAX_WAIT_S`
#: (a new step shows within about a second however loaded the machine).
MAX_CORE_SHARE = 0.01
MAX_WAIT_S = 1.0

#: ``feed(after, max_steps) -> (the newest steps after ``after`` (a trace, or rows: see :func:`_rows_layout`),
#: or None; status)``.
Feed = Callable[[int, int], "tuple[Trace | Mapping[str, Any] | None, dict[str, Any]]"]


def next_wait(cost_s: float, interval: float) -> float:
    """Seconds to wait after a refresh that cost ``cost_s`` CPU seconds (see :data:`MAX_CORE_SHARE`).

    Example:
        >>> next_wait(0.002, 0.5), next_wait(0.008, 0.5), next_wait(0.05, 0.5), next_wait(0.05, 2.0)
        (0.5, 0.8, 1.0, 2.0)
    """
    return min(max(interval, cost_s / MAX_CORE_SHARE), max(interval, MAX_WAIT_S))


class LiveExplorer(widgets.VBox):  # type: ignore[misc]  # the base class comes from a package without types (Any)
    """Follows a running block through its ``feed`` (see the module docs); ``refresh()`` reads it once."""

    def __init__(self, feed: Feed, *, interval: float = 0.5, window: int = 20, start: bool = True) -> None:
        if not interval > 0 or not window >= 1:
            raise ValueError(f"interval must be > 0 s and window >= 1 step; got {interval!r}, {window!r}.")
        self._feed, self._interval, self._window_size = feed, float(interval), int(window)
        self._steps: dict[int, tuple[str, list[dict[str, Any]]]] = {}  # step -> (its label, cell per replica)
        self._replicas: list[dict[str, Any]] = []
        self._last, self._total, self._ended = -1, 0, False
        self._status: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        #: CPU seconds its refreshes took (the thread's own time: what following the run costs the kernel).
        self.cpu_s = 0.0
        self.status = widgets.HTML(self._status_html({"steps": 0, "ended": False}))
        self.slider = widgets.IntSlider(value=0, min=0, max=0, description="step", continuous_update=True)
        self.slider.add_class("vizdist-step")
        self.label = widgets.HTML('<span data-step="-1">waiting for the first step</span>')
        self.label.add_class("vizdist-step-label")
        self.cards = widgets.HBox([], layout=widgets.Layout(flex_flow="row wrap"))
        self.slider.observe(lambda change: self._render(int(change["new"])), names="value")
        super().__init__([self.status, widgets.HBox([self.slider, self.label]), self.cards])
        self.add_class("vizdist-explorer")
        self.add_class("vizdist-live")
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._follow, daemon=True, name="vizdist-live-explorer")
            self._thread.start()

    # -- following ---------------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The step shown (-1 before the first)."""
        return int(self.slider.value) if self._steps else -1

    def refresh(self) -> bool:
        """Read the feed once: lay out the new steps, show the newest. Returns whether the block has ended."""
        t0 = time.thread_time()
        try:
            return self._refresh()
        finally:
            self.cpu_s += time.thread_time() - t0

    def _refresh(self) -> bool:
        new, status = self._feed(self._last, self._window_size)
        with self._lock:
            if new is None or not len(new.batches if isinstance(new, Trace) else new["step"]):
                if status == self._status and self._steps:  # nothing new: nothing to send
                    return self._ended
            else:
                self._take(new)
            self._status = dict(status)
            self._total, self._ended = int(status.get("steps", 0)), bool(status.get("ended"))
            self.status.value = self._status_html(status)
            if self._steps:
                newest, oldest = max(self._steps), min(self._steps)
                with self.slider.hold_sync():  # its new range and value go to the browser in one message
                    if oldest > self.slider.max:  # the new range lies past the old one: widen it first
                        self.slider.max = newest
                    self.slider.min, self.slider.max = oldest, newest
                    if self.slider.value != newest:
                        self.slider.value = newest  # renders it (the observer)
                    else:
                        self._render(newest)
        return self._ended

    def _take(self, new: Trace | Mapping[str, Any]) -> None:
        if isinstance(new, Trace):
            lay = split_layout(new)
            replicas = lay["replicas"]
            ids = [r["id"] for r in replicas]
            steps = {int(s): (label, [dict(c, replica=r) for c, r in zip(cells, ids, strict=True)])
                     for s, label, cells in zip(lay["steps"], lay["step_labels"], lay["cells"], strict=True)}
        else:
            replicas, steps = _rows_layout(new)
        known = {r["id"] for r in self._replicas}
        self._replicas += [r for r in replicas if r["id"] not in known]
        self._replicas.sort(key=lambda r: r["id"])
        self._steps.update(steps)
        for s in sorted(self._steps)[:-self._window_size]:
            del self._steps[s]
        self._last = max(self._last, *self._steps)

    def _follow(self) -> None:
        wait = self._interval
        while not self._stop.wait(wait):
            spent = self.cpu_s
            try:
                if self.refresh():
                    return
            except Exception as exc:  # shown, never raised into the kernel's thread machinery
                self.status.value = (f'<span class="vizdist-live-status" data-error="1">the live view stopped: '
                                     f'{escape(type(exc).__name__)}: {escape(str(exc)[:300])}</span>')
                return
            wait = next_wait(self.cpu_s - spent, self._interval)

    def close(self) -> None:
        """Stop following (the thread ends at its next wake) and close the widgets."""
        stop = getattr(self, "_stop", None)  # None: the constructor refused its arguments
        if stop is not None:
            stop.set()
        super().close()

    # -- drawing -----------------------------------------------------------------------------------------
    def _status_html(self, status: dict[str, Any]) -> str:
        n, ended = int(status.get("steps", 0)), bool(status.get("ended"))
        if not ended:
            text = f"recording: {n} step{'s' if n != 1 else ''} so far, following the newest"
        elif status.get("error"):
            text = f"the block ended after {n} steps, by {escape(str(status['error']))}"
        else:
            text = f"the block ended after {n} steps: rec.trace.show() explores every one"
        return (f'<span class="vizdist-live-status" data-steps="{n}" data-ended="{int(ended)}">'
                f"<b>live</b> &nbsp;{text}</span>")

    def _render(self, step: int) -> None:
        if step not in self._steps:
            return
        label, cells = self._steps[step]
        self.label.value = (f'<span data-step="{step}">step {step} of {self._total}'
                            f"{f' · {escape(label)}' if label else ''}</span>")
        by_replica = {c["replica"]: c for c in cells}
        html = []
        for rep in self._replicas:
            cell = by_replica.get(rep["id"], {"labels": [], "empty": True, "partial": False, "n": 0})
            border = "#b00" if cell["empty"] else ("#a60" if cell.get("partial") else "#999")
            html.append(
                f'<div class="vizdist-card" data-step="{step}" data-replica="{rep["id"]}" '
                f'style="border:2px solid {border};border-radius:6px;padding:6px 8px;margin:3px;'
                f'min-width:130px;font-family:monospace;font-size:12px">'
                f'<b>replica {rep["id"]}</b><br><small>{escape(rep["device"])}</small>'
                f'<br>{cell.get("n", len(cell["labels"]))} element(s)<br>{cell_html(cell)}</div>')
        if len(self.cards.children) != len(html):
            self.cards.children = [widgets.HTML() for _ in html]
        for card, text in zip(self.cards.children, html, strict=True):
            if card.value != text:
                card.value = text

    # -- static fallback ---------------------------------------------------------------------------------
    def __repr__(self) -> str:
        state = "ended" if self._ended else "recording"
        return f"live explorer of a vizdist.record() block ({state}, {self._total} steps so far)"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        data = dict(super()._repr_mimebundle_(**kwargs) or {})
        data["text/plain"] = repr(self)
        data["text/html"] = (f"<p><b>vizdist</b>: {escape(repr(self))}; it follows the run in JupyterLab. "
                             "After the block, <code>rec.trace.show()</code> explores every step.</p>")
        return data


def show_live(feed: Feed, *, interval: float = 0.5, window: int = 20, display: bool = True) -> LiveExplorer | None:
    """Display a :class:`LiveExplorer` following ``feed`` now (``display=False``: return it undisplayed).

    Displayed at once, so it appears above the output of the code after it in the cell (``fit``'s progress
    bar); returns None then, so that a cell ending in ``rec.show()`` does not display it twice.
    """
    live = LiveExplorer(feed, interval=interval, window=window)
    if not display:
        return live
    from IPython.display import display as show

    show(live)
    return None


def _rows_layout(rows: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[int, tuple[str, list[Any]]]]:
    """The replicas and steps (label, cell per replica) that :func:`~vizdist.render.layout.split_layout` makes of
    the trace of these rows, made from the rows themselves (no trace, no pandas: a refresh stays cheap).

    ``rows`` holds one value per batch under ``step``, ``replica``, ``device``, ``n_elements``, ``ids`` (the
    batch's source ids in order), optionally ``sources``, ``files``, ``lines`` (each id's source, file and
    line: labelled as the trace labels them; ``multi_source``: label ids by source even when the rows hold
    one) and, for a ``vizdist.record()`` block, ``phase``, ``epoch``,
    ``epoch_step``.

    Example:
        >>> reps, steps = _rows_layout({"step": [4, 4], "replica": [1, 0], "device": ["/device:CPU:1", "CPU:0"],
        ...                             "n_elements": [0, 2], "ids": [[], [8, 9]]})
        >>> reps, steps[4][0], [(c["replica"], c["labels"], c["empty"]) for c in steps[4][1]]
        ([{'id': 0, 'device': 'CPU:0'}, {'id': 1, 'device': 'CPU:1'}], '', [(0, ['8', '9'], False), (1, [], True)])
    """
    labelled = {"phase", "epoch", "epoch_step"} <= rows.keys()
    devices: dict[int, str] = {}
    steps: dict[int, tuple[str, dict[int, dict[str, Any]]]] = {}
    cols = [rows["step"], rows["replica"], rows["device"], rows["n_elements"], rows["ids"], _element_labels(rows)]
    for i, (s, r, device, n, ids, names) in enumerate(zip(*cols, strict=True)):
        s, r = int(s), int(r)
        devices.setdefault(r, str(device))
        if s not in steps:
            steps[s] = (step_label(rows["phase"][i], rows["epoch"][i], rows["epoch_step"][i]) if labelled else "", {})
        cell = steps[s][1].setdefault(r, _cell())
        cell["ids"] += [int(x) for x in ids]
        cell["labels"] += names
        cell.update(n=int(n), empty=int(n) == 0)
    order = sorted(devices)
    replicas = [{"id": r, "device": short_device(devices[r])} for r in order]
    return replicas, {s: (label, [dict(cells.get(r) or _cell(), replica=r) for r in order])
                      for s, (label, cells) in sorted(steps.items())}


def _element_labels(rows: Mapping[str, Any]) -> list[list[str]]:
    """Each batch's element labels, as :func:`~vizdist.render.layout.split_layout` writes them (``s1:7`` when
    the ids come from several sources, ``file:line`` for a file's line)."""
    if "sources" not in rows:
        return [[str(int(x)) for x in ids] for ids in rows["ids"]]
    multi = bool(rows.get("multi_source")) or len({int(x) for src in rows["sources"] for x in src}) > 1
    return [[element_label(int(i), int(src), str(f), int(ln), multi) for i, src, f, ln in zip(*b, strict=True)]
            for b in zip(rows["ids"], rows["sources"], rows["files"], rows["lines"], strict=True)]


def _cell() -> dict[str, Any]:
    """A (step, replica) cell before its rows are read, as :func:`~vizdist.render.layout.split_layout` starts it."""
    return {"ids": [], "labels": [], "n": 0, "empty": False, "partial": False, "result": "", "workers": []}
