"""Timing capture: timed spans for the ``events`` table of a trace.

Two real sources of *when*:

* :class:`TimingRecorder` — spans the tracing loop records around what it
  does on the host: ``transfer`` (``next()`` on the distributed iterator:
  taking a batch from the input pipeline, splitting it and copying it to the
  devices) and ``consume`` (the user's step: ``strategy.run``). One clock per
  process (``time.perf_counter_ns``), expressed on the Unix epoch through one
  anchor (``time.time_ns`` read next to ``perf_counter_ns`` when the recorder
  starts), so shards from several processes line up when traces merge.
* :func:`~vizdist.instrument.observe.xplane.xplane_capture` (in
  :mod:`vizdist.instrument.observe.xplane`) — runs the TF profiler around the loop and parses
  its XPlane file: every ``Iterator::...`` span of the input pipeline
  (``produce`` for sources, ``map``, ``batch``, ``prefetch``), the
  ``PrefetchProduce``/``PrefetchConsume`` pairs that share an ``element_id``
  (so each produced element is tied to the step that consumed it), and the
  ``buffered_elements``/``buffer_limit`` stats of each prefetch buffer (the
  real prefetch depth, stored in the ``buffered``/``buffer_limit`` columns).
  XPlane times are Unix-epoch nanoseconds from TensorFlow's own clock.

A slow producer shows as long ``transfer`` spans (the step waits for input)
with an empty prefetch buffer; a slow consumer shows as long ``consume``
spans, short ``transfer`` spans and a full buffer.

Example:
    >>> rec = TimingRecorder(worker=0)
    >>> with rec.span("w0 host", "consume", step=0):
    ...     pass
    >>> df = rec.to_events_df()
    >>> df[["lane", "stage", "step"]].values.tolist()
    [['w0 host', 'consume', 0]]
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from vizdist.instrument.core.engine import Observer
from vizdist.instrument.observe.xplane import PROFILE_ELEMENTS, PROFILE_STEPS, XPlaneCapture, xplane_capture
from vizdist.trace import EXTRA_COLUMNS

__all__ = ["STAGES", "TimingObserver", "TimingRecorder", "attach_step_elements", "timing_events"]

#: Stages in pipeline order (the colour order of the renderers).
STAGES = ("produce", "map", "batch", "prefetch", "transfer", "consume")

#: The extra ``events`` columns this module writes: the trace's own list (``vizdist.trace.EXTRA_COLUMNS``).
EVENT_COLUMNS = EXTRA_COLUMNS["events"]


def _clock_anchor() -> dict[str, int]:
    """Read the wall clock next to the monotonic clock, tightly bracketed."""
    best: tuple[int, int, int] | None = None
    for _ in range(5):
        a = time.perf_counter_ns()
        w = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2, w)
    assert best is not None
    return {"perf_counter_ns": best[1], "unix_ns": best[2], "uncertainty_ns": best[0]}


class TimingRecorder:
    """Records timed spans on one clock per process, for ``Trace.events``.

    Args:
        worker: the worker (process) id written on every span.
        clock: monotonic nanosecond clock (injectable for tests).
        anchor: ``{"perf_counter_ns": p, "unix_ns": u}`` mapping the clock
            to the Unix epoch; read from the machine when not given.

    Example:
        >>> rec = TimingRecorder(anchor={"perf_counter_ns": 0, "unix_ns": 1000})
        >>> rec.add("w0 host", "transfer", 5, 9, step=3, elements=[1, 2])
        >>> rec.to_events_df()[["t_start_ns", "t_end_ns", "elements"]].values.tolist()
        [[1005, 1009, '[1, 2]']]
    """

    def __init__(
        self,
        *,
        worker: int = 0,
        replica_offset: int = 0,
        clock: Callable[[], int] = time.perf_counter_ns,
        anchor: dict[str, int] | None = None,
    ) -> None:
        self.worker = int(worker)
        self.replica_offset = int(replica_offset)  # global id of this process's first replica
        self._clock = clock
        self.anchor = dict(anchor) if anchor is not None else _clock_anchor()
        self._offset = int(self.anchor["unix_ns"]) - int(self.anchor["perf_counter_ns"])
        self._lock = threading.Lock()
        self._step_hooks: list[Callable[[int, int], None]] = []
        self.notes: list[str] = []  # what was not recorded, and why (goes to meta)
        # Column lists (appending to lists is far cheaper than building rows).
        self._cols: dict[str, list[Any]] = {
            k: [] for k in ("lane", "stage", "step", "replica", "t_start_ns", "t_end_ns", "elements")
        }

    def now(self) -> int:
        """The current time on this recorder's clock (raw, not epoch-aligned)."""
        return self._clock()

    def add(
        self,
        lane: str,
        stage: str,
        t_start: int,
        t_end: int,
        *,
        step: int = -1,
        replica: int = -1,
        elements: Sequence[int] | str | None = None,
    ) -> None:
        """Add one span measured with :meth:`now` (raw clock values)."""
        if t_end < t_start:
            raise ValueError(f"span {stage!r} on {lane!r} ends ({t_end}) before it starts ({t_start}).")
        if elements is None:
            el = ""
        elif isinstance(elements, str):
            el = elements
        else:
            el = json.dumps([int(v) for v in elements])
        with self._lock:
            c = self._cols
            c["lane"].append(lane)
            c["stage"].append(stage)
            c["step"].append(int(step))
            c["replica"].append(int(replica))
            c["t_start_ns"].append(int(t_start))
            c["t_end_ns"].append(int(t_end))
            c["elements"].append(el)

    @contextlib.contextmanager
    def span(
        self,
        lane: str,
        stage: str,
        *,
        step: int = -1,
        replica: int = -1,
        elements: Sequence[int] | None = None,
    ) -> Iterator[None]:
        """Time the ``with`` body as one span (recorded also if it raises)."""
        t0 = self._clock()
        try:
            yield
        finally:
            self.add(lane, stage, t0, self._clock(), step=step, replica=replica, elements=elements)

    def __len__(self) -> int:
        return len(self._cols["lane"])

    def add_step_hook(self, hook: Callable[[int, int], None]) -> None:
        """Call ``hook(step, n_elements)`` whenever the loop reports a finished step."""
        self._step_hooks.append(hook)

    def step_done(self, step: int, n_elements: int = 0) -> None:
        """The tracing loop calls this after each step (e.g. to end a profiling window)."""
        for hook in self._step_hooks:
            hook(int(step), int(n_elements))

    def meta(self) -> dict[str, Any]:
        """What to store in ``trace.meta["timing"]``: the clock and its anchor."""
        out: dict[str, Any] = {
            "clock": "time.perf_counter_ns, shifted to the Unix epoch by one anchor per process",
            "anchor": dict(self.anchor),
            "worker": self.worker,
        }
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def to_events_df(self) -> pd.DataFrame:
        """The spans as an ``events`` table, times in epoch-aligned ns."""
        c = self._cols
        df = pd.DataFrame(
            {
                "lane": pd.Series(c["lane"], dtype="str"),
                "stage": pd.Series(c["stage"], dtype="str"),
                "step": np.asarray(c["step"], dtype=np.int64),
                "worker": np.full(len(self), self.worker, dtype=np.int64),
                "replica": np.asarray(c["replica"], dtype=np.int64),
                "t_start_ns": np.asarray(c["t_start_ns"], dtype=np.int64) + self._offset,
                "t_end_ns": np.asarray(c["t_end_ns"], dtype=np.int64) + self._offset,
                "elements": pd.Series(c["elements"], dtype="str"),
            }
        )
        df["buffered"] = np.int64(-1)
        df["buffer_limit"] = np.int64(-1)
        df["origin"] = "host"
        df["op"] = df["stage"].map({"transfer": "next(iterator)", "consume": "step"}).fillna("")
        return df


def attach_step_elements(events: pd.DataFrame, elements: pd.DataFrame) -> pd.DataFrame:
    """Fill empty ``elements`` cells of events with the source ids of their step.

    A span for step ``s`` (of worker ``w``) gets the JSON list of the source
    ids that worker delivered at step ``s``, in (replica, position) order.

    Example:
        >>> ev = pd.DataFrame({"step": [0], "worker": [0], "elements": [""]})
        >>> el = pd.DataFrame({"step": [0, 0], "worker": [0, 0], "replica": [1, 0],
        ...                    "position": [0, 0], "source_id": [7, 3]})
        >>> attach_step_elements(ev, el)["elements"].tolist()
        ['[3, 7]']
    """
    if events.empty or elements.empty:
        return events
    e = elements.sort_values(["worker", "step", "replica", "position"], kind="stable")
    ids: dict[tuple[int, int], str] = {}
    for (w, s), grp in e.groupby(["worker", "step"], sort=False):
        ids[(int(w), int(s))] = json.dumps([int(v) for v in grp["source_id"].tolist()])
    out = events.copy()
    empty = out["elements"].astype(str) == ""
    keys = zip(out.loc[empty, "worker"].tolist(), out.loc[empty, "step"].tolist(), strict=True)
    out.loc[empty, "elements"] = [ids.get((int(w), int(s)), "") for w, s in keys]
    return out


def timing_events(
    recorder: TimingRecorder,
    capture: XPlaneCapture | None = None,
    elements: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Combine host spans and profiler spans into one ``events`` table + meta.

    This is what a tracing loop calls once at the end:
    ``events, meta["timing"] = timing_events(rec, cap, trace_elements)``.

    Example:
        >>> rec = TimingRecorder(anchor={"perf_counter_ns": 0, "unix_ns": 0})
        >>> rec.add("w0 host", "consume", 1, 2, step=0)
        >>> ev, meta = timing_events(rec)
        >>> len(ev), meta["xplane"]
        (1, False)
    """
    host = recorder.to_events_df()
    meta = recorder.meta()
    parts = [host]
    meta["xplane"] = False
    if capture is not None:
        if capture.info.get("error"):
            meta["xplane_error"] = capture.info["error"]
        xs = capture.events(host)
        if len(xs):
            meta["xplane"] = True
            meta["xplane_clock"] = "TensorFlow profiler clock (Unix epoch ns)"
            for k in ("profile_start_time", "profile_stop_time", "profiled_steps"):
                if k in capture.info:
                    meta[k] = capture.info[k]
            parts.append(xs)
    events = pd.concat(parts, ignore_index=True) if len(parts) > 1 else host
    for col, (dtype, default) in EVENT_COLUMNS.items():
        if col not in events.columns:
            events[col] = default
        events[col] = events[col].fillna(default).astype(dtype)
    if "element_id" in events.columns:
        events["element_id"] = events["element_id"].fillna(0).astype("int64")
    if elements is not None:
        mask = events["origin"] == "host"
        events.loc[mask] = attach_step_elements(events.loc[mask], elements)
    events = events.sort_values(["worker", "t_start_ns"], kind="stable").reset_index(drop=True)
    return events, meta


#: Why a worker of a multi-worker run records host spans only (``meta["timing"]["xplane_error"]``).
MULTI_WORKER_PROFILER = (
    "the TF profiler is not used when this process holds only some of the replicas (several workers): in "
    "TF 2.21 stopping it while the workers' collectives run crashed a worker now and then (free(): invalid "
    "pointer in ProfilerSession stop, about 1 two-worker run in 10 here). Host spans (next(), your step) "
    "are recorded; profile one worker's input pipeline in a single-process run for tf.data's own spans."
)


class TimingObserver(Observer):
    """``timing=`` of a run: host spans on a :class:`TimingRecorder`, and TF profiler spans for the first steps.

    Args:
        timing: ``True`` (profile the first :data:`PROFILE_STEPS` steps), a number of steps to profile,
            or ``0`` (host spans only).
        note: a line for ``meta["timing"]["notes"]`` saying what the front end measures.

    Example:
        >>> TimingObserver(0).timer is None   # made when the run's first reader attaches
        True
    """

    def __init__(self, timing: bool | int = True, *, note: str = "") -> None:
        self.window = PROFILE_STEPS if timing is True else int(timing)
        self.max_elements = PROFILE_ELEMENTS if timing is True else None
        self.note = note
        self.timer: TimingRecorder | None = None
        self.capture: XPlaneCapture | None = None
        self._several_workers = False
        self._steps = [0]

    def attach(self, run: Any, reader: Any, source: Any = None) -> None:
        if self.timer is None:
            self.timer = TimingRecorder(worker=reader.worker, replica_offset=reader.replica_offset)
            if self.note:
                self.timer.notes.append(self.note)
        strategy = run.strategy
        self._several_workers = strategy is not None and len(reader.devices) < strategy.num_replicas_in_sync

    def wrap_step(self, step_fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
        if step_fn is None or self.timer is None:
            return step_fn
        if hasattr(step_fn, "get_concrete_function"):
            # a tf.function runs all replicas in one call; a Python wrapper would make
            # MirroredStrategy run it replica by replica, changing what is measured
            self.timer.notes.append("step_fn is a tf.function: no per-replica spans (only strategy.run as a whole)")
            return step_fn
        return _timed_step_fn(step_fn, self.timer, self._steps)

    def on_step(self, reader: Any, step: int, values: Any, results: Any) -> None:
        self._steps[0] = step + 1  # the step the wrapped step_fn runs next

    def loop(self, run: Any) -> contextlib.AbstractContextManager[Any]:
        if self.timer is None or self.window <= 0 or self._several_workers:
            return contextlib.nullcontext()
        return _keep_capture(self, xplane_capture(worker=self.timer.worker, timer=self.timer,
                                                  max_steps=self.window, max_elements=self.max_elements))

    def finish(self, trace: Any) -> Any:
        if self.timer is None:
            return trace
        from vizdist.trace import Trace

        events, meta = timing_events(self.timer, self.capture, trace.elements)
        if self.window > 0 and self._several_workers:
            meta["xplane_error"] = MULTI_WORKER_PROFILER
        return Trace(elements=trace.elements, batches=trace.batches, events=events, meta={**trace.meta, "timing": meta})


@contextlib.contextmanager
def _keep_capture(observer: TimingObserver, capture: Any) -> Iterator[None]:
    with capture as cap:
        observer.capture = cap
        yield


def _timed_step_fn(step_fn: Callable[..., Any], timer: TimingRecorder, step: list[int]) -> Callable[..., Any]:
    """Wrap step_fn so each replica's call is one ``consume`` span on its own lane."""
    import tensorflow as tf

    def timed(values: Any) -> Any:
        ctx = tf.distribute.get_replica_context()
        rid = tf.get_static_value(ctx.replica_id_in_sync_group) if ctx is not None else 0
        rid = int(rid) if rid is not None else 0
        replica = timer.replica_offset + rid
        t0 = timer.now()
        try:
            return step_fn(values)
        finally:
            timer.add(f"w{timer.worker} replica {replica}", "consume", t0, timer.now(), step=step[0],
                      replica=replica)

    return timed
