"""The small questions notebook 05 asks of a trace's events (vizdist.analysis.timeline helpers)."""

from __future__ import annotations

from vizdist.analysis.timeline import (
    empty_buffer_steps,
    map_threads,
    most_at_once,
    prefetch_buffers,
    tf_data_iterators,
)
from vizdist.trace import Trace


def _trace() -> Trace:
    ev = [
        dict(lane="w0 replica 0", stage="consume", step=0, t_start_ns=0, t_end_ns=10),
        dict(lane="w0 replica 1", stage="consume", step=0, t_start_ns=10, t_end_ns=20),
        dict(lane="w0 tf.data (caller)", stage="map", step=0, t_start_ns=0, t_end_ns=4, op="Iterator::Root::Map"),
        dict(lane="w0 tf.data thread 0", stage="map", step=1, t_start_ns=2, t_end_ns=6, op="FunctionRun"),
    ]
    for s, buffered in enumerate([0, 1, 0]):  # the per-replica buffer, as the caller saw it
        ev.append(dict(lane="w0 tf.data (caller)", stage="prefetch", step=s, t_start_ns=30 + s, t_end_ns=31 + s,
                       op="Iterator::Root::Prefetch", buffered=buffered, buffer_limit=1))
    ev.append(dict(lane="w0 tf.data thread 1", stage="prefetch", step=-1, t_start_ns=40, t_end_ns=41,
                   op="Iterator::Root::Prefetch::Rebatch::Prefetch", buffered=3, buffer_limit=3))
    return Trace.from_records(events=ev)


def test_most_at_once_counts_overlap_not_touching_spans():
    t = _trace()
    assert most_at_once(t, lane="replica") == 1  # replica 1 starts as replica 0 ends
    assert most_at_once(t.events[t.events["stage"] == "map"]) == 2
    assert most_at_once([]) == 0


def test_iterators_and_map_threads():
    t = _trace()
    assert tf_data_iterators(t) == ["Root::Map", "Root::Prefetch", "Root::Prefetch::Rebatch::Prefetch"]
    assert map_threads(t) == ["tf.data threads", "the caller's thread"]


def test_prefetch_buffers_tell_the_lanes_apart():
    table = prefetch_buffers(_trace())
    assert table.to_dict("index") == {
        ("Root::Prefetch", "caller lane"): {"limit": 1, "max_buffered": 1},
        ("Root::Prefetch::Rebatch::Prefetch", "tf.data thread"): {"limit": 3, "max_buffered": 3}}


def test_empty_buffer_steps_reads_the_caller_lane_per_step():
    assert empty_buffer_steps(_trace()) == {"limit": 1, "steps": 3, "empty": 2}
    assert empty_buffer_steps(Trace.from_records(events=[])) == {"limit": 0, "steps": 0, "empty": 0}
