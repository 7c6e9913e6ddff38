"""Timing analysis of a trace's ``events`` table: how input production overlapped the steps.

Plain pandas/numpy over :class:`~vizdist.trace.Trace` data (no TensorFlow,
no renderer); ``trace.plot.timeline()`` and ``trace.show("timeline")`` draw the
same spans. A trace carries these statistics as methods, ``trace.timing.overlap_summary()`` and
so on (:class:`vizdist.views.TimingAccessor`); the functions here take the trace first.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(events=[
    ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=2_000_000),
    ...     dict(lane="w0 host", stage="consume", step=0, t_start_ns=2_000_000, t_end_ns=3_000_000)])
    >>> overlap_summary(t)["bound"]
    'input'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from vizdist.trace import Trace

__all__ = ["PRODUCER_STAGES", "empty_buffer_steps", "map_threads", "most_at_once", "overlap_summary",
           "prefetch_buffers", "tf_data_iterators"]


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted ones."""
    if len(starts) == 0:
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    return s[new], np.maximum.reduceat(e, np.nonzero(new)[0])


def _clip_from(a: tuple[np.ndarray, np.ndarray], t: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals cut to what lies at or after ``t``."""
    starts, ends = a
    keep = ends > t
    return np.maximum(starts[keep], t), ends[keep]


def _intersection_ns(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    (as_, ae), (bs, be) = a, b
    total, i, j = 0, 0, 0
    while i < len(as_) and j < len(bs):
        lo, hi = max(as_[i], bs[j]), min(ae[i], be[j])
        if hi > lo:
            total += int(hi - lo)
        if ae[i] < be[j]:
            i += 1
        else:
            j += 1
    return total


PRODUCER_STAGES = ("produce", "map", "batch")


def overlap_summary(trace: Trace) -> dict[str, Any]:
    """Measured overlap of input production with the user's step, for one trace.

    * ``wait_ms``: median time a step waited in ``next()`` for its batch (host
      ``transfer`` spans);
    * ``step_ms``: median time of the user's step (host ``consume`` spans);
    * ``producer_busy_ms``: time the tf.data pipeline was busy producing
      (union of profiler ``produce``/``map``/``batch`` spans);
    * ``warmup_ms``: the part of it before the first step began (filling the
      buffers: no step runs yet, so it cannot overlap one);
    * ``overlap``: the fraction of the production time *after* the first step
      began that ran while a step was running — 0 means production and
      consumption take turns, near 1 means the pipeline works ahead while the
      step runs (prefetch at work). The warm-up is left out because a fast
      producer spends a large, load-dependent share of its time there.
    * ``bound``: ``"input"`` when steps wait longer for data than half their
      own time, else ``"step"``;
    * ``buffer_fill``: the median of ``buffered / buffer_limit`` over every
      profiler span on the lane ``"... tf.data (caller)"`` (the first thread
      that called into tf.data; other caller threads are left out) that
      carries both stats (``buffered >= 0``, ``buffer_limit > 0``): one value
      per such span, not one per step, pooled over every buffer that lane
      shows (for a ``tf.distribute`` run, the per-replica ``Root::Prefetch``:
      one span per replica per step, plus a few tied to no step, all counted;
      for a plain loop, the outermost ``prefetch``). NaN when there is none
      (no prefetch on that thread, or no profiler spans). Higher means the consumer found more batches
      waiting; how high for a given run depends on the machine's load.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=4),
        ...     dict(lane="w0 host", stage="consume", step=0, t_start_ns=4, t_end_ns=10),
        ...     dict(lane="w0 t", stage="map", step=0, t_start_ns=0, t_end_ns=2),
        ...     dict(lane="w0 t", stage="map", step=1, t_start_ns=4, t_end_ns=8)])
        >>> s = overlap_summary(t)
        >>> s["overlap"], s["warmup_ms"] * 1e6
        (1.0, 2.0)
    """
    ev = trace.events
    host = ev[~ev["lane"].str.contains("replica")] if len(ev) else ev
    tr = host[host["stage"] == "transfer"]
    co = host[(host["stage"] == "consume")]
    if "origin" in ev.columns:
        tr = tr[tr["origin"] != "xplane"]
        co = co[co["origin"] != "xplane"]
        prod = ev[(ev["origin"] == "xplane") & ev["stage"].isin(PRODUCER_STAGES)]
    else:
        prod = ev[ev["stage"].isin(PRODUCER_STAGES)]
    pu = _union(prod["t_start_ns"].to_numpy(np.int64), prod["t_end_ns"].to_numpy(np.int64))
    cu = _union(co["t_start_ns"].to_numpy(np.int64), co["t_end_ns"].to_numpy(np.int64))
    busy = int((pu[1] - pu[0]).sum()) if len(pu[0]) else 0
    steady = _clip_from(pu, int(cu[0][0])) if len(cu[0]) else pu
    warmup = busy - (int((steady[1] - steady[0]).sum()) if len(steady[0]) else 0)
    both = _intersection_ns(steady, cu)
    wait = float(np.median((tr["t_end_ns"] - tr["t_start_ns"]).to_numpy())) / 1e6 if len(tr) else float("nan")
    step = float(np.median((co["t_end_ns"] - co["t_start_ns"]).to_numpy())) / 1e6 if len(co) else float("nan")
    fill = float("nan")
    if "buffered" in ev.columns and "buffer_limit" in ev.columns:
        # the buffer nearest the consumer: profiler samples on the calling thread
        b = ev[(ev["buffered"] >= 0) & (ev["buffer_limit"] > 0) & ev["lane"].str.endswith("(caller)")]
        if len(b):
            fill = float(np.median(b["buffered"].to_numpy() / b["buffer_limit"].to_numpy()))
    return {
        "wait_ms": wait,
        "step_ms": step,
        "producer_busy_ms": busy / 1e6,
        "warmup_ms": warmup / 1e6,
        "overlap": (both / (busy - warmup)) if busy > warmup else 0.0,
        "bound": "input" if wait > 0.5 * step else "step",
        "buffer_fill": fill,
    }


# --- small questions notebook 05 asks of a trace's events (the pandas behind its cells) ---

def _spans(spans: Any, lane: str | None) -> tuple[list[int], list[int]]:
    """(starts, ends) of a Trace's events, an events-like table or (start, end) pairs; ``lane``: a filter."""
    if hasattr(spans, "events"):
        spans = spans.events
    if hasattr(spans, "columns"):
        if lane is not None:
            spans = spans[spans["lane"].astype(str).str.contains(lane, regex=False)]
        return [int(t) for t in spans["t_start_ns"]], [int(t) for t in spans["t_end_ns"]]
    pairs = list(spans)
    return [int(s) for s, _ in pairs], [int(e) for _, e in pairs]


def most_at_once(spans: Any, *, lane: str | None = None) -> int:
    """The most spans that were running at the same moment.

    ``spans``: a :class:`~vizdist.trace.Trace` (its ``events``), a table with ``t_start_ns`` and
    ``t_end_ns`` columns, or ``(start, end)`` pairs. ``lane`` keeps only events whose lane contains
    that text (``"replica"``: the replicas' step functions). A span that ends when another starts
    does not overlap it.

    Example:
        >>> most_at_once([(0, 10), (5, 15), (10, 20)])
        2
    """
    starts, ends = _spans(spans, lane)
    edges = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends], key=lambda e: (e[0], e[1]))
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def tf_data_iterators(trace: Trace) -> list[str]:
    """The tf.data iterators the profiler saw, by path (``Root`` is the one your loop calls).

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[dict(
        ...     lane="w0 t", stage="map", step=0, t_start_ns=0, t_end_ns=1, op="Iterator::Root::Map")])
        >>> tf_data_iterators(t)
        ['Root::Map']
    """
    ev = trace.events
    ops = ev["op"].dropna().astype(str) if "op" in ev.columns else []
    return sorted({op.removeprefix("Iterator::") for op in ops if op.startswith("Iterator::")})


def map_threads(trace: Trace) -> list[str]:
    """Where the ``map`` spans ran: ``"the caller's thread"`` (the one that called ``next()``) and/or
    ``"tf.data threads"``.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 tf.data (caller)", stage="map", step=0, t_start_ns=0, t_end_ns=1)])
        >>> map_threads(t)
        ["the caller's thread"]
    """
    lanes = trace.events.loc[trace.events["stage"] == "map", "lane"].astype(str)
    return sorted({"the caller's thread" if lane.endswith("(caller)") else "tf.data threads" for lane in lanes})


def _buffer_spans(trace: Trace) -> Any:
    ev = trace.events
    if "op" not in ev.columns:  # a trace without the profiler's columns has no buffers to name
        ev = ev.assign(op="")
    if "buffered" not in ev.columns or "buffer_limit" not in ev.columns:
        return ev.iloc[0:0].assign(buffered=[], buffer_limit=[])
    return ev[(ev["buffered"] >= 0) & (ev["buffer_limit"] > 0)]


def prefetch_buffers(trace: Trace) -> Any:
    """Each prefetch buffer the profiler saw: its iterator path, where its spans ran, its limit and fill.

    One row per (``buffer``, ``lane``): ``buffer`` is the iterator path (``Root::Prefetch``, ...), ``lane``
    ``"caller lane"`` (the thread that called ``next()``) or ``"tf.data thread"``; ``limit`` and
    ``max_buffered`` are the largest ``buffer_limit`` and ``buffered`` the profiler reported there.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[dict(
        ...     lane="w0 tf.data (caller)", stage="prefetch", step=0, t_start_ns=0, t_end_ns=1,
        ...     op="Iterator::Root::Prefetch", buffered=1, buffer_limit=2)])
        >>> prefetch_buffers(t)["limit"].tolist()
        [2]
    """
    b = _buffer_spans(trace)
    where = b["lane"].astype(str).str.endswith("(caller)").map({True: "caller lane", False: "tf.data thread"})
    return (b.assign(buffer=b["op"].astype(str).str.replace("Iterator::Root", "Root", regex=False), lane=where)
             .groupby(["buffer", "lane"])
             .agg(limit=("buffer_limit", "max"), max_buffered=("buffered", "max")))


def empty_buffer_steps(trace: Trace) -> dict[str, int]:
    """At how many steps a replica found the buffer on the caller lane empty when it asked for data.

    The buffer the caller's thread reads from (in a ``tf.distribute`` run, the per-replica buffer);
    for each step, the fewest elements the profiler reported in it across that step's spans there.
    Returns ``{"limit": its limit, "steps": steps seen, "empty": steps where that was 0}``.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[dict(
        ...     lane="w0 tf.data (caller)", stage="prefetch", step=s, t_start_ns=s, t_end_ns=s + 1,
        ...     op="Iterator::Root::Prefetch", buffered=s % 2, buffer_limit=1) for s in range(4)])
        >>> empty_buffer_steps(t)
        {'limit': 1, 'steps': 4, 'empty': 2}
    """
    b = _buffer_spans(trace)
    front = b[b["lane"].astype(str).str.endswith("(caller)")]
    asks = front[front["step"] >= 0].groupby("step")["buffered"].min()
    limit = int(front["buffer_limit"].max()) if len(front) else 0
    return {"limit": limit, "steps": len(asks), "empty": int((asks == 0).sum())}
