"""The layout of a timeline: a trace's timed spans in lanes, as plain data (no drawing).

What the static figure (:mod:`vizdist.render.timeline_figure`), the interactive widget
(:mod:`vizdist.render.timeline_widget`) and the Perfetto export (:mod:`vizdist.render.export`) all
draw from: one row ("lane") per thread of work, grouped by worker, host lanes first; every span's
lane, times, stage, step and nesting depth as arrays; the prefetch buffer samples; where each step
starts. It never touches TensorFlow or matplotlib.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(events=[
    ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=2_000_000)])
    >>> timeline_layout(t).lanes
    ['w0 host']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from vizdist.contract import recording_call

if TYPE_CHECKING:
    from vizdist.trace import Trace

__all__ = ["IDLE_BUSY_FRACTION", "MAX_DEPTH", "MAX_NAMES", "STAGES", "TimelineLayout", "idle_lanes", "lane_order",
           "timeline_layout"]

#: The stages of a span, in pipeline order (a layout's stage codes number these first, then others by name).
STAGES = ("produce", "map", "batch", "prefetch", "transfer", "consume")
#: A profiler lane whose spans cover less than this fraction of the drawn time is idle (hidden by default).
IDLE_BUSY_FRACTION = 0.01
_HOST_STAGES = ("transfer", "consume")
#: Distinct stage names, and op names, a layout keeps; the rest share one name that says how many (a view
#: colours or lists each name, and a trace file may hold a million distinct ones).
MAX_NAMES = 256
#: The deepest nesting level a layout keeps (deeper spans are drawn at this level; a view draws a level no
#: thinner than the fourth).
MAX_DEPTH = 15


@dataclass
class TimelineLayout:
    """Plain-data layout of a timeline (what the figure and the widget draw).

    Attributes:
        lanes: lane labels, top to bottom (grouped by worker, host lanes first).
        lane_worker: the worker of each lane.
        lane_profiler: whether each lane holds only TF profiler spans (a tf.data thread).
        lane: lane index of each span.
        start_ms, end_ms: span times in ms from ``t0_ns``.
        stage_code: index of each span's stage in ``stage_names`` (the
            :data:`STAGES` first, in that order, then others by name, at
            most :data:`MAX_NAMES` names: beyond, one ``"other (N stage
            names)"``); ``stage`` gives the names.
        step: step of each span (-1 when not tied to a step).
        op_code: index of what each span came from in ``op_names`` (``step``,
            ``next(iterator)``, a tf.data iterator; at most :data:`MAX_NAMES`,
            as for stages); ``op`` gives the names.
        depth: nesting level of each span on its lane (0 = outermost, at most :data:`MAX_DEPTH`).
        t0_ns: the time origin (epoch ns of the earliest span).
        buffer: prefetch depth samples: columns ``t_ms``, ``buffered``,
            ``buffer_limit``, ``op``, ``worker``, ``lane``.
        step_starts_ms: start of each step's host spans (first worker), for gridlines.

    ``elements`` (JSON list of source ids per span) is read from the trace when asked for.
    """

    lanes: list[str]
    lane_worker: list[int]
    lane_profiler: list[bool]
    lane: np.ndarray
    start_ms: np.ndarray
    end_ms: np.ndarray
    stage_code: np.ndarray
    stage_names: list[str]
    step: np.ndarray
    op_code: np.ndarray
    op_names: list[str]
    depth: np.ndarray
    t0_ns: int
    buffer: pd.DataFrame
    step_starts_ms: dict[int, float]
    _elements: pd.Series | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.lane)

    @cached_property
    def stage(self) -> np.ndarray:
        """Stage name of each span."""
        return np.asarray(self.stage_names, dtype=object)[self.stage_code]

    @cached_property
    def op(self) -> np.ndarray:
        """What each span came from (``""`` when unknown)."""
        return np.asarray(self.op_names or [""], dtype=object)[self.op_code]

    @property
    def elements(self) -> np.ndarray:
        """JSON list of source ids of each span (``""`` if none)."""
        if self._elements is None:
            return np.full(len(self), "", dtype=object)
        return self._elements.astype(str).to_numpy()


def _codes(values: pd.Series, what: str = "op") -> tuple[np.ndarray, list[str]]:
    """Category codes and names of a text column (one pass, no Python string per row), at most
    :data:`MAX_NAMES` names (the first ones; the rest share one name that says how many)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    names = [str(u) for u in np.asarray(uniques, dtype=object).tolist()]
    return _capped(np.asarray(codes, dtype=np.int64), names, what)


def _capped(codes: np.ndarray, names: list[str], what: str) -> tuple[np.ndarray, list[str]]:
    if len(names) <= MAX_NAMES:
        return codes, names
    return np.minimum(codes, MAX_NAMES), [*names[:MAX_NAMES], f"other ({len(names) - MAX_NAMES:,} {what} names)"]


def _stage_codes(values: pd.Series) -> tuple[np.ndarray, list[str]]:
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    names = [str(u) for u in np.asarray(uniques, dtype=object).tolist()]
    order = list(STAGES) + sorted(set(names) - set(STAGES))
    where = {n: i for i, n in enumerate(order)}
    lookup = np.asarray([where[n] for n in names] or [0], dtype=np.int64)
    return _capped(lookup[np.asarray(codes, dtype=np.int64)], order, "stage")


def _lanes(ev: pd.DataFrame) -> tuple[np.ndarray, list[tuple[int, str, bool]]]:
    """Lane index of each span and the lanes (worker, name, profiler-only), ordered:
    by worker, host lanes first, then by name."""
    name_code, names = pd.factorize(ev["lane"], use_na_sentinel=False)
    names = [str(u) for u in np.asarray(names, dtype=object).tolist()]
    worker_code, workers = pd.factorize(ev["worker"].to_numpy(np.int64))
    pair = worker_code.astype(np.int64) * len(names) + np.asarray(name_code, dtype=np.int64)
    pairs, key = np.unique(pair, return_inverse=True)  # only the (worker, lane) pairs present: no workers x lanes grid
    key = key.astype(np.int64)
    n_keys = len(pairs)
    rows = np.bincount(key, minlength=n_keys)
    profiler_rows: np.ndarray  # weighted counts: floats
    if "origin" in ev.columns:
        profiler_rows = np.bincount(key, weights=(ev["origin"] == "xplane").to_numpy(bool), minlength=n_keys)
    else:
        profiler_rows = np.zeros(n_keys)
    present = np.nonzero(rows)[0]
    lanes = [(int(workers[int(pairs[k]) // len(names)]), names[int(pairs[k]) % len(names)],
              bool(profiler_rows[k] == rows[k])) for k in present.tolist()]
    order = sorted(range(len(lanes)), key=lambda i: (lanes[i][0], lanes[i][2], lanes[i][1]))
    position = np.full(n_keys, -1, dtype=np.int32)
    position[present[order]] = np.arange(len(order), dtype=np.int32)
    return position[key], [lanes[i] for i in order]


def lane_order(ev: pd.DataFrame) -> list[tuple[int, str]]:
    """The (worker, lane) pairs of an events table in timeline order (also the order of exported traces)."""
    return [(w, name) for w, name, _ in _lanes(ev)[1]]


def _filter(ev: pd.DataFrame, steps: tuple[int, int] | None, workers: list[int] | None,
            stages: list[str] | None) -> pd.DataFrame:
    if workers is not None:
        ev = ev[ev["worker"].isin(list(workers))]
    if stages is not None:
        ev = ev[ev["stage"].isin(list(stages))]
    if steps is not None:
        lo, hi = steps
        in_steps = (ev["step"] >= lo) & (ev["step"] <= hi)
        tied = ev[in_steps]
        if len(tied):
            t_lo, t_hi = int(tied["t_start_ns"].min()), int(tied["t_end_ns"].max())
            ev = ev[in_steps | ((ev["step"] < 0) & (ev["t_end_ns"] >= t_lo) & (ev["t_start_ns"] <= t_hi))]
        else:
            ev = tied
    return ev


def _buffer(ev: pd.DataFrame, t0: int) -> pd.DataFrame:
    if "buffered" not in ev.columns:
        return pd.DataFrame(columns=["t_ms", "buffered", "buffer_limit", "op", "worker", "lane"])
    b = ev[ev["buffered"] >= 0].sort_values("t_start_ns")
    return pd.DataFrame({
        "t_ms": (b["t_start_ns"].to_numpy(np.int64) - t0) / 1e6,
        "buffered": b["buffered"].to_numpy(),
        "buffer_limit": b["buffer_limit"].to_numpy() if "buffer_limit" in b.columns else -1,
        "op": b["op"].astype(str).to_numpy() if "op" in b.columns else "",
        "worker": b["worker"].to_numpy(),
        "lane": b["lane"].astype(str).to_numpy(),
    })


def _step_starts(ev: pd.DataFrame, stage_code: np.ndarray, t0: int) -> dict[int, float]:
    """Start of each step's host spans (``transfer``/``consume``) on the first worker that has them."""
    host_codes = [list(STAGES).index(s) for s in _HOST_STAGES]
    step = ev["step"].to_numpy(np.int64)
    m = np.isin(stage_code, host_codes) & (step >= 0)
    if not m.any():
        return {}
    worker = ev["worker"].to_numpy(np.int64)[m]
    first = worker == worker.min()
    steps, starts = step[m][first], ev["t_start_ns"].to_numpy(np.int64)[m][first]
    hs = pd.Series(starts).groupby(steps).min()
    return {int(s): (int(t) - t0) / 1e6 for s, t in hs.items()}


def timeline_layout(
    trace: Trace,
    *,
    steps: tuple[int, int] | None = None,
    workers: list[int] | None = None,
    stages: list[str] | None = None,
) -> TimelineLayout:
    """Lay out the spans of ``trace.events`` into lanes (plain data).

    Args:
        trace: a trace recorded with timing (its ``events`` table has spans).
        steps: keep only spans of steps ``lo..hi`` (inclusive), plus untied spans inside that time.
        workers: keep only these workers.
        stages: keep only these stages.

    Raises:
        ValueError: the trace has no timed spans.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="consume", step=0, t_start_ns=10, t_end_ns=2_000_010)])
        >>> lay = timeline_layout(t)
        >>> lay.end_ms.tolist(), lay.stage.tolist()
        ([2.0], ['consume'])
    """
    ev = trace.events
    if ev.empty:
        raise ValueError(
            "this trace has no timed spans (its events table is empty). Record it with "
            f"{recording_call(trace.meta, 'timing=True')}, or load a trace that was."
        )
    ev = _filter(ev, steps, workers, stages)
    if ev.empty:
        raise ValueError("no timed spans are left after filtering by steps/workers/stages; widen the filter.")
    lane_idx, order = _lanes(ev)
    starts_ns = ev["t_start_ns"].to_numpy(np.int64)
    t0 = int(starts_ns.min())
    stage_code, stage_names = _stage_codes(ev["stage"])
    op_code, op_names = _codes(ev["op"]) if "op" in ev.columns else (np.zeros(len(ev), np.int64), [""])
    return TimelineLayout(
        lanes=[n for _, n, _ in order],
        lane_worker=[w for w, _, _ in order],
        lane_profiler=[p for _, _, p in order],
        lane=lane_idx,
        start_ms=(starts_ns - t0) / 1e6,
        end_ms=(ev["t_end_ns"].to_numpy(np.int64) - t0) / 1e6,
        stage_code=stage_code,
        stage_names=stage_names,
        step=ev["step"].to_numpy(np.int64),
        op_code=op_code,
        op_names=op_names,
        depth=np.clip(ev["depth"].to_numpy(np.int64), 0, MAX_DEPTH) if "depth" in ev.columns else np.zeros(len(ev), np.int64),
        t0_ns=t0,
        buffer=_buffer(ev, t0),
        step_starts_ms=_step_starts(ev, stage_code, t0),
        _elements=ev["elements"] if "elements" in ev.columns else None,
    )


def idle_lanes(lay: TimelineLayout, lo: float | None = None, hi: float | None = None, *,
               min_busy: float = IDLE_BUSY_FRACTION) -> np.ndarray:
    """Which lanes carry nothing between ``lo`` and ``hi`` ms (default: the whole run).

    A lane is idle there when none of its spans overlaps the range, or when
    it is a profiler lane (``lane_profiler``: a tf.data thread) whose
    outermost spans cover less than ``min_busy`` of the range. The host and
    replica lanes vizdist records itself are never idle while they hold a span.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="consume", t_start_ns=0, t_end_ns=10**9, origin="host"),
        ...     dict(lane="w0 tf.data thread 0", stage="map", t_start_ns=0, t_end_ns=10**3, origin="xplane")])
        >>> lay = timeline_layout(t)
        >>> [n for n, idle in zip(lay.lanes, idle_lanes(lay)) if idle]
        ['w0 tf.data thread 0']
    """
    lo = float(lay.start_ms.min()) if lo is None else float(lo)
    hi = float(lay.end_ms.max()) if hi is None else float(hi)
    n = len(lay.lanes)
    inside = (lay.end_ms >= lo) & (lay.start_ms <= hi)
    any_span = np.bincount(lay.lane[inside], minlength=n) > 0
    outer = inside & (lay.depth == 0)
    clipped = np.minimum(lay.end_ms[outer], hi) - np.maximum(lay.start_ms[outer], lo)
    busy = np.bincount(lay.lane[outer], weights=clipped, minlength=n)
    quiet = np.asarray(lay.lane_profiler, dtype=bool) & (busy < float(min_busy) * max(hi - lo, 0.0))
    return ~any_span | quiet


