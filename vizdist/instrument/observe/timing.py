"""Timing capture: timed spans for the ``events`` table of a trace.

Two real sources of *when*:

* :class:`TimingRecorder` — spans the tracing loop records around what it
  does on the host: ``transfer`` (``next()`` on the distributed iterator:
  taking a batch from the input pipeline, splitting it and copying it to the
  devices) and ``consume`` (the user's step: ``strategy.run``). One clock per
  process (``time.perf_counter_ns``), expressed on the Unix epoch through one
  anchor (``time.time_ns`` read next to ``perf_counter_ns`` when the recorder
  starts), so shards from several processes line up when traces merge.
* :func:`xplane_capture` — runs the TF profiler around the loop and parses
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
import glob
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from vizdist.instrument.run.engine import Observer
from vizdist.trace import EXTRA_COLUMNS

__all__ = [
    "STAGES",
    "TimingRecorder",
    "XPlaneCapture",
    "assign_steps",
    "attach_step_elements",
    "buffer_depth",
    "parse_xplane",
    "timing_events",
    "xplane_capture",
]

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


# ---------------------------------------------------------------------------
# XPlane (TF profiler) parsing
# ---------------------------------------------------------------------------

_SOURCES = ("Range", "TensorSlice", "FromTensor", "TextLine", "TFRecord", "FixedLengthRecord",
            "Generator", "FlatMap", "Interleave", "ParallelInterleave", "Zip", "Concatenate",
            "Repeat", "Take", "Skip", "Shard", "Enumerate", "Scan", "Window", "Options")


def _stage_of_iterator(name: str) -> str:
    """``Iterator::Root::Prefetch::ParallelMap`` -> ``map`` etc."""
    last = name.rsplit("::", 1)[-1]
    if last == "Generator" and "::Prefetch::" in name + "::":
        # the per-device prefetch threads of a multi-device iterator (tf.distribute's
        # fetch to device): they pull from the host pipeline into each replica's buffer
        return "transfer"
    if "Prefetch" in last:
        return "prefetch"
    if "MapAndBatch" in last or "Batch" in last:
        return "batch"
    if "Map" in last or "Filter" in last:
        return "map"
    return "produce"


@dataclass
class _Raw:
    """The columns of the spans read from an XPlane file, before they become a table."""

    line: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    start: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    element_id: list[int] = field(default_factory=list)
    buffered: list[int] = field(default_factory=list)
    limit: list[int] = field(default_factory=list)
    ds_name: list[str] = field(default_factory=list)

    def add(self, line: str, name: str, start: int, end: int, stats: tuple[int, int, int, str]) -> None:
        """Append one span; ``stats`` is its (element_id, buffered, buffer_limit, dataset name)."""
        self.line.append(line)
        self.name.append(name)
        self.start.append(start)
        self.end.append(end)
        self.element_id.append(stats[0])
        self.buffered.append(stats[1])
        self.limit.append(stats[2])
        self.ds_name.append(stats[3])


#: The stats of a span that carries none (no element id, no buffer, no dataset name).
_NO_STATS = (0, -1, -1, "")


def _add_device_plane(plane: Any, raw: _Raw) -> None:
    """Every event of a ``/device:GPU:N`` plane (its streams: memcpy to the device, kernels), one lane per line."""
    emeta = {k: v.name for k, v in plane.event_metadata.items()}
    device = plane.name[len("/device:"):]
    for line in plane.lines:
        lname = line.display_name or line.name or str(line.id)
        base = int(line.timestamp_ns)
        for ev in line.events:
            t0 = base + ev.offset_ps // 1000
            raw.add(f"/device:{device} {lname}", emeta.get(ev.metadata_id, "") or "kernel", t0,
                    t0 + ev.duration_ps // 1000, _NO_STATS)


def _wanted_events(emeta: dict[int, str]) -> set[int]:
    """The metadata ids of the host events kept: tf.data iterators, ``*Produce``/``*Consume``, ``FunctionRun``."""
    # "Iterator::Root" is the whole GetNext call, which the host "transfer" span already shows.
    return {k for k, n in emeta.items()
            if (n.startswith("Iterator::") and n != "Iterator::Root")
            or n.endswith("Produce") or n.endswith("Consume") or n == "FunctionRun"}


def _event_stats(ev: Any, keys: tuple[int, int, int, int], smeta: dict[int, str]) -> tuple[int, int, int, str]:
    """An event's (element_id, buffered, buffer_limit, dataset name); ``keys`` are those stats' metadata ids."""
    k_el, k_buf, k_lim, k_name = keys
    el, buf, lim, dsn = _NO_STATS
    for st in ev.stats:
        m = st.metadata_id
        if m == k_el:
            el = st.uint64_value or st.int64_value
        elif m == k_buf:
            buf = st.int64_value or st.uint64_value
        elif m == k_lim:
            lim = st.int64_value or st.uint64_value
        elif m == k_name:
            dsn = smeta.get(st.ref_value, "") if st.ref_value else st.str_value
    return el, buf, lim, dsn


def _add_host_plane(plane: Any, raw: _Raw) -> None:
    """The tf.data events of a ``/host:...`` plane (see :func:`_wanted_events`), one lane per thread."""
    smeta = {k: v.name for k, v in plane.stat_metadata.items()}
    emeta = {k: v.name for k, v in plane.event_metadata.items()}
    want = _wanted_events(emeta)
    sid = {v: k for k, v in smeta.items()}
    keys = (sid.get("element_id", -1), sid.get("buffered_elements", -1), sid.get("buffer_limit", -1),
            sid.get("name", -1))
    for line in plane.lines:
        base = int(line.timestamp_ns)
        lname = line.name or line.display_name or str(line.id)
        for ev in line.events:
            if ev.metadata_id in want:
                t0 = base + ev.offset_ps // 1000
                raw.add(lname, emeta[ev.metadata_id], t0, t0 + ev.duration_ps // 1000, _event_stats(ev, keys, smeta))


def _profile_times(plane: Any) -> dict[str, int]:
    """The ``profile_start_time``/``profile_stop_time`` stats of the ``Task Environment`` plane."""
    smeta = {k: v.name for k, v in plane.stat_metadata.items()}
    out: dict[str, int] = {}
    for s in plane.stats:
        key = smeta.get(s.metadata_id, "")
        if key in ("profile_start_time", "profile_stop_time"):
            out[key] = int(s.uint64_value or s.int64_value)
    return out


def _add_plane(plane: Any, raw: _Raw, info: dict[str, Any]) -> None:
    """Read one XPlane plane: spans of host and GPU planes into ``raw``, profile times into ``info``."""
    if plane.name == "Task Environment":
        info.update(_profile_times(plane))
    elif plane.name.startswith("/device:GPU:"):
        _add_device_plane(plane, raw)
    elif plane.name.startswith("/host:"):
        _add_host_plane(plane, raw)


def _read_xspace(path: str) -> Any:
    """The ``XSpace`` protobuf stored in ``path``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # only under instrument/

    space = xplane_pb2.XSpace()
    with open(path, "rb") as fh:
        space.ParseFromString(fh.read())
    return space


def _epoch_times(raw: _Raw, origin: int) -> tuple[np.ndarray, np.ndarray]:
    """Span start and end times in Unix-epoch ns (``origin`` is the profile start time, 0 if unknown)."""
    # XPlane files written by the profiler hold times relative to the profile start.
    start = np.asarray(raw.start, dtype=np.int64)
    if len(start) and origin and start.max() < origin // 2:
        return start + origin, np.asarray(raw.end, dtype=np.int64) + origin
    return start, np.asarray(raw.end, dtype=np.int64)


def _stage_of_event(name: str, line: str) -> str:
    """The stage of an XPlane event called ``name`` on ``line`` (GPU lines: copies and kernels)."""
    if line.startswith("/device:"):
        # GPU planes: copies to the device are "transfer", kernels (what consumes the input) "consume"
        return "transfer" if "memcpy" in name.lower() or "memset" in name.lower() else "consume"
    if name.startswith("Iterator::"):
        return _stage_of_iterator(name)
    if name == "FunctionRun":  # a user function (map/filter/...) running inside tf.data
        return "map"
    if name.startswith("Prefetch"):
        return "prefetch"
    if "Batch" in name:
        return "batch"
    return "map" if "Map" in name else "produce"


def _lane_names(lines: pd.Series, start: np.ndarray, stage: list[str], worker: int) -> dict[str, str]:
    """A friendly lane name for each XPlane line: callers, then tf.data threads in order of first use."""
    lane_names: dict[str, str] = {}
    order = pd.DataFrame({"line": lines, "t": start}).groupby("line", sort=False)["t"].min().sort_values()
    k = 0
    to_device = set(lines[[st == "transfer" for st in stage]].unique())
    d = c = 0
    for ln in order.index:
        if ln.startswith("/device:"):
            lane_names[ln] = f"w{worker} {ln[len('/device:'):]}"  # e.g. "w0 GPU:0 Stream #13(MemcpyH2D)"
        elif not ln.startswith("tf_data"):
            # a thread that called into tf.data (named after the process: python, pytest, ...)
            lane_names[ln] = f"w{worker} tf.data (caller)" if c == 0 else f"w{worker} tf.data (caller {c + 1})"
            c += 1
        elif ln in to_device:
            lane_names[ln] = f"w{worker} to-device prefetch {d}"
            d += 1
        else:
            lane_names[ln] = f"w{worker} tf.data thread {k}"
            k += 1
    return lane_names


def _spans_table(raw: _Raw, stage: list[str], start: np.ndarray, end: np.ndarray, worker: int) -> pd.DataFrame:
    """The spans as an ``events`` table plus ``element_id`` and the helper columns ``_line``, ``_ds``."""
    names = pd.Series(raw.name, dtype="str")
    lines = pd.Series(raw.line, dtype="str")
    n = len(names)
    return pd.DataFrame(
        {
            "lane": lines.map(_lane_names(lines, start, stage, worker)).astype("str"),
            "stage": pd.Series(stage, dtype="str"),
            "step": np.full(n, -1, dtype=np.int64),
            "worker": np.full(n, worker, dtype=np.int64),
            "replica": np.full(n, -1, dtype=np.int64),
            "t_start_ns": start,
            "t_end_ns": end,
            "elements": pd.Series([""] * n, dtype="str"),
            "buffered": np.asarray(raw.buffered, dtype=np.int64),
            "buffer_limit": np.asarray(raw.limit, dtype=np.int64),
            "origin": "xplane",
            "op": names,
            "element_id": np.asarray(raw.element_id, dtype=np.uint64).astype(np.int64),
            "_line": lines,
            "_ds": pd.Series(raw.ds_name, dtype="str"),
        }
    )


def parse_xplane(path: str, *, worker: int = 0) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Parse a TF profiler ``*.xplane.pb`` file into tf.data spans (and GPU device spans).

    ``/device:GPU:N`` planes (present on machines with GPUs) are kept: every
    event of their streams becomes a span on its own lane (``w0 GPU:0
    <stream>``), ``transfer`` for memory copies (``MemcpyH2D`` ...), ``consume``
    for kernels.

    Returns ``(spans, info)``. ``spans`` has the ``events`` columns plus
    ``buffered``, ``buffer_limit``, ``origin="xplane"``, ``op`` (the iterator
    path or event name) and ``element_id`` (the profiler's id linking a
    ``*Produce`` span to its ``*Consume`` span; 0 when absent). Steps are not
    known here (``step=-1``); :func:`assign_steps` ties spans to steps.

    Example:
        >>> spans, info = parse_xplane("run.xplane.pb")  # doctest: +SKIP
    """
    raw = _Raw()
    info: dict[str, Any] = {"file": os.path.basename(path)}
    for plane in _read_xspace(path).planes:
        _add_plane(plane, raw, info)
    start, end = _epoch_times(raw, info.get("profile_start_time", 0))
    stage = [_stage_of_event(n, ln) for n, ln in zip(raw.name, raw.line, strict=True)]
    df = _spans_table(raw, stage, start, end, worker)
    # A prefetch iterator span without a buffered_elements stat found its buffer empty.
    empty = (df["stage"] == "prefetch") & df["op"].str.startswith("Iterator::") & (df["buffered"] < 0)
    df.loc[empty, "buffered"] = 0
    info["n_spans"] = len(df)
    return df, info


def _caller_steps(df: pd.DataFrame, host: pd.DataFrame) -> np.ndarray:
    """Each span's step: that of the host ``transfer`` span a caller-thread span sits in, else its own (-1)."""
    step = df["step"].to_numpy().copy()
    tr = host[host["stage"] == "transfer"].sort_values("t_start_ns")
    if len(tr):
        ts, te, tstep = (tr["t_start_ns"].to_numpy(), tr["t_end_ns"].to_numpy(), tr["step"].to_numpy())
        caller = df["lane"].str.contains("(caller", regex=False).to_numpy()
        mid = (df["t_start_ns"].to_numpy() + df["t_end_ns"].to_numpy()) // 2
        idx = np.searchsorted(ts, mid, side="right") - 1
        ok = caller & (idx >= 0)
        ok[ok] &= mid[ok] <= te[idx[ok]]
        step[ok] = tstep[idx[ok]]
    return step


def _nesting(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each span's innermost enclosing span on its thread (``parent``, -1 if none) and nesting ``depth``.

    ``df`` is sorted by thread, start, and end (latest first); one pass per thread.
    """
    lines = df["_line"].to_numpy()
    starts = df["t_start_ns"].to_numpy().tolist()
    ends = df["t_end_ns"].to_numpy().tolist()
    n = len(df)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    line_start = np.r_[0, np.nonzero(lines[1:] != lines[:-1])[0] + 1]
    for a, b in itertools.pairwise([*line_start.tolist(), n]):
        stack: list[int] = []
        for i in range(a, b):
            while stack and ends[stack[-1]] <= starts[i]:
                stack.pop()
            if stack and ends[i] <= ends[stack[-1]]:
                parent[i] = stack[-1]
            depth[i] = len(stack)
            stack.append(i)
    return parent, depth


@dataclass(frozen=True)
class _Links:
    """What ties spans to each other: element ids (``*Produce`` -> ``*Consume``) and nesting (child -> parent)."""

    kind: np.ndarray  # the op without its Produce/Consume suffix
    eid: np.ndarray
    is_consume: np.ndarray
    prod_idx: np.ndarray  # the produce spans that carry an element id
    prod_keys: pd.MultiIndex  # their (kind, element_id)
    parent: np.ndarray
    depth: np.ndarray

    @classmethod
    def of(cls, df: pd.DataFrame, parent: np.ndarray, depth: np.ndarray) -> _Links:
        """The links of the spans in ``df`` (nesting from :func:`_nesting`)."""
        eid = df["element_id"].to_numpy()
        kind = df["op"].str.replace(r"(Produce|Consume)$", "", regex=True).to_numpy()
        prod_idx = np.nonzero(df["op"].str.endswith("Produce").to_numpy() & (eid != 0))[0]
        return cls(kind=kind, eid=eid, is_consume=df["op"].str.endswith("Consume").to_numpy(), prod_idx=prod_idx,
                   prod_keys=pd.MultiIndex.from_arrays([kind[prod_idx], eid[prod_idx]]), parent=parent, depth=depth)

    def from_consumers(self, step: np.ndarray) -> np.ndarray:
        """``step`` with each produce span of unknown step given the step its element was consumed at."""
        step = step.copy()
        known = np.nonzero(self.is_consume & (step >= 0) & (self.eid != 0))[0]
        if len(known) and len(self.prod_idx):
            cons = pd.Series(step[known], index=pd.MultiIndex.from_arrays([self.kind[known], self.eid[known]]))
            cons = cons[~cons.index.duplicated(keep="first")]
            got = cons.reindex(self.prod_keys).to_numpy()
            fill = (step[self.prod_idx] < 0) & ~np.isnan(got)
            step[self.prod_idx[fill]] = got[fill].astype(np.int64)
        return step

    def from_parents(self, step: np.ndarray) -> np.ndarray:
        """``step`` with each span of unknown step given its parent's, as deep as the nesting goes."""
        step = step.copy()
        has_parent = self.parent >= 0
        for _ in range(int(self.depth.max()) + 1):
            m = has_parent & (step < 0)
            m[m] &= step[self.parent[m]] >= 0
            if not m.any():
                break
            step[m] = step[self.parent[m]]
        return step


def assign_steps(spans: pd.DataFrame, host: pd.DataFrame) -> pd.DataFrame:
    """Tie XPlane spans to steps.

    1. A ``PrefetchConsume`` (or any caller-thread span) that happens inside
       the host ``transfer`` span of step ``s`` belongs to step ``s``.
    2. A ``*Produce`` span belongs to the step of the ``*Consume`` span with
       the same ``element_id`` (the element it produced was consumed then).
    3. A span nested inside a span of known step on the same thread belongs
       to that step.
    Steps 2-3 repeat until nothing changes. Spans that cannot be tied to a
    step (e.g. produced but never consumed before the run ended) keep -1.
    Also sets ``depth``, the nesting level of each span on its thread.
    """
    if spans.empty:
        return spans
    df = spans.sort_values(["_line", "t_start_ns", "t_end_ns"], ascending=[True, True, False],
                           kind="stable").reset_index(drop=True)
    step = _caller_steps(df, host)  # 1.
    parent, depth = _nesting(df)
    df["depth"] = depth
    links = _Links.of(df, parent, depth)
    for _ in range(8):
        new = links.from_parents(links.from_consumers(step))  # 2., then 3.
        if np.array_equal(new, step):
            break
        step = new
    df["step"] = step.astype(np.int64)
    return df


def buffer_depth(events: pd.DataFrame) -> pd.DataFrame:
    """Prefetch buffer depth samples: one row per ``buffered_elements`` stat.

    Columns: ``t_ns``, ``step``, ``worker``, ``op`` (which prefetch), ``buffered``,
    ``buffer_limit``.

    Example:
        >>> ev = pd.DataFrame({"t_start_ns": [5], "step": [1], "worker": [0], "op": ["P"],
        ...                    "buffered": [2], "buffer_limit": [2]})
        >>> buffer_depth(ev)[["step", "buffered"]].values.tolist()
        [[1, 2]]
    """
    if "buffered" not in events.columns:
        return pd.DataFrame(columns=["t_ns", "step", "worker", "op", "buffered", "buffer_limit"])
    e = events[events["buffered"] >= 0]
    return pd.DataFrame(
        {
            "t_ns": e["t_start_ns"].to_numpy(),
            "step": e["step"].to_numpy(),
            "worker": e["worker"].to_numpy(),
            "op": e["op"].to_numpy(),
            "buffered": e["buffered"].to_numpy(),
            "buffer_limit": e["buffer_limit"].to_numpy(),
        }
    ).reset_index(drop=True)


class XPlaneCapture:
    """The result holder of :func:`xplane_capture` (filled when the block exits).

    Attributes:
        spans: parsed tf.data spans (see :func:`parse_xplane`), steps unassigned.
        info: profile start/stop times, file name, and ``error`` when the
            profiler could not run (then ``spans`` is empty).
    """

    def __init__(self) -> None:
        self.spans: pd.DataFrame = pd.DataFrame()
        self.info: dict[str, Any] = {}
        self._stop: Callable[[], None] | None = None

    def stop(self) -> None:
        """End the profiling window now (the spans are parsed when the block exits)."""
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()

    def events(self, host: pd.DataFrame) -> pd.DataFrame:
        """Spans with steps tied through ``host`` transfer spans, ready for ``Trace.events``."""
        if self.spans.empty:
            return self.spans
        df = assign_steps(self.spans, host)
        return df.drop(columns=[c for c in ("_line", "_ds") if c in df.columns])


#: Default profiling window of ``trace_distribution(..., timing=True)``: the TF
#: profiler records every element's spans, and exporting and parsing them costs
#: about 0.3-0.5 ms per element, so long runs are profiled for their first steps
#: only (host spans cover every step).
PROFILE_STEPS = 16
PROFILE_ELEMENTS = 2048


def _start_profiler(tf: Any, logdir: str, cap: XPlaneCapture) -> bool:
    """Whether the TF profiler started, writing to ``logdir`` (if not, ``cap.info["error"]`` says why)."""
    try:
        tf.profiler.experimental.start(
            logdir, options=tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                                     device_tracer_level=0))
    except Exception as exc:  # e.g. "Another profiler session is running"
        cap.info["error"] = f"TF profiler did not start ({type(exc).__name__}: {exc}); no tf.data spans."
        return False
    return True


def _stopper(tf: Any, stopped: list[BaseException | None]) -> Callable[[], None]:
    """A function that stops the TF profiler and appends to ``stopped`` what stopping raised (or None)."""

    def stop() -> None:
        try:
            tf.profiler.experimental.stop()
            stopped.append(None)
        except Exception as exc:
            stopped.append(exc)

    return stop


def _window_hook(cap: XPlaneCapture, max_steps: int | None, max_elements: int | None) -> Callable[[int, int], None]:
    """A step hook that stops the capture once ``max_steps`` steps or ``max_elements`` elements were reported."""
    seen = [0]

    def hook(step: int, n: int) -> None:
        seen[0] += n
        if cap._stop is not None and ((max_steps and step + 1 >= max_steps)
                                      or (max_elements and seen[0] >= max_elements)):
            cap.info["profiled_steps"] = step + 1
            cap.stop()

    return hook


def _read_profile(cap: XPlaneCapture, logdir: str, worker: int, stopped: list[BaseException | None]) -> None:
    """Stop the profiler and fill ``cap`` from the newest ``*.xplane.pb`` under ``logdir`` (or its ``error``)."""
    try:
        cap.stop()
        if stopped and stopped[0] is not None:
            raise stopped[0]
        files = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True), key=os.path.getmtime)
        if files:
            cap.spans, info = parse_xplane(files[-1], worker=worker)
            cap.info.update(info)
        else:
            cap.info["error"] = f"the TF profiler wrote no .xplane.pb file under {logdir!r}."
    except Exception as exc:
        cap.info["error"] = f"reading the TF profile failed ({type(exc).__name__}: {exc})."


@contextlib.contextmanager
def xplane_capture(
    *,
    worker: int = 0,
    logdir: str | None = None,
    keep: bool = False,
    timer: TimingRecorder | None = None,
    max_steps: int | None = None,
    max_elements: int | None = None,
) -> Iterator[XPlaneCapture]:
    """Run the TF profiler around a block and parse its tf.data spans.

    The profiler is one per process: if another profile is already running
    this records nothing and says why in ``capture.info["error"]``.

    With a ``timer`` and ``max_steps`` / ``max_elements``, the profiler stops
    once the loop reported (``timer.step_done``) that many steps or elements;
    ``capture.info["profiled_steps"]`` says how many steps it covered.

    Example:
        >>> with xplane_capture() as cap:  # doctest: +SKIP
        ...     for batch in dataset: ...
        >>> cap.spans  # doctest: +SKIP
    """
    import tensorflow as tf

    cap = XPlaneCapture()
    own_dir = logdir is None
    d = tempfile.mkdtemp(prefix="vizdist-xplane-") if own_dir else str(logdir)
    started = False
    stopped: list[BaseException | None] = []
    try:
        started = _start_profiler(tf, d, cap)
        if started:
            cap._stop = _stopper(tf, stopped)
        if started and timer is not None and (max_steps or max_elements):
            timer.add_step_hook(_window_hook(cap, max_steps, max_elements))
        yield cap
    finally:
        if started:
            _read_profile(cap, d, worker, stopped)
        if own_dir and not keep:
            shutil.rmtree(d, ignore_errors=True)
        elif keep:
            cap.info["logdir"] = d


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
