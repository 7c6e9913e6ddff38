"""The TF profiler's side of timing: run it around a loop and read its XPlane file into tf.data spans.

:func:`xplane_capture` runs the TF profiler around the loop and :func:`parse_xplane` reads its XPlane
file: every ``Iterator::...`` span of the input pipeline (``produce`` for sources, ``map``, ``batch``,
``prefetch``), the ``PrefetchProduce``/``PrefetchConsume`` pairs that share an ``element_id`` (so each
produced element is tied to the step that consumed it, :func:`assign_steps`), and the
``buffered_elements``/``buffer_limit`` stats of each prefetch buffer (the real prefetch depth,
:func:`buffer_depth`). XPlane times are Unix-epoch nanoseconds from TensorFlow's own clock. The host's
spans, and the one ``events`` table both become, are :mod:`vizdist.instrument.observe.timing`'s.

Example:
    >>> _stage_of_iterator("Iterator::Root::Prefetch::ParallelMapV2")
    'map'
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

__all__ = ["PROFILE_ELEMENTS", "PROFILE_STEPS", "XPlaneCapture", "assign_steps", "buffer_depth", "parse_xplane",
           "xplane_capture"]


class StepHooks(Protocol):
    """What :func:`xplane_capture` needs of a timer: to be told of each finished step
    (:class:`vizdist.instrument.observe.timing.TimingRecorder` is one)."""

    def add_step_hook(self, hook: Callable[[int, int], None]) -> None: ...


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
    timer: StepHooks | None = None,
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
