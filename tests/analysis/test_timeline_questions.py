"""The small questions notebook 05 asks of a trace's events: ``trace.timing`` (vizdist.analysis.timeline)."""

from __future__ import annotations

import pydoc
import subprocess
import sys
from pathlib import Path

import pytest

import vizdist
from vizdist.analysis.timeline import most_at_once
from vizdist.trace import Trace
from vizdist.views import TimingAccessor


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
    assert t.timing.most_at_once(lane="replica") == 1  # replica 1 starts as replica 0 ends
    assert t.timing.most_at_once(lane="tf.data") == 2  # the two map spans
    # the function itself also takes a table or (start, end) pairs
    assert most_at_once(t.events[t.events["stage"] == "map"]) == 2
    assert most_at_once([(0, 10), (5, 15), (10, 20)]) == 2
    assert most_at_once([]) == 0


def test_iterators_and_map_threads():
    t = _trace()
    assert t.timing.tf_data_iterators() == ["Root::Map", "Root::Prefetch", "Root::Prefetch::Rebatch::Prefetch"]
    assert t.timing.map_threads() == ["tf.data threads", "the caller's thread"]


def test_prefetch_buffers_tell_the_lanes_apart():
    table = _trace().timing.prefetch_buffers()
    assert table.to_dict("index") == {
        ("Root::Prefetch", "caller lane"): {"limit": 1, "max_buffered": 1},
        ("Root::Prefetch::Rebatch::Prefetch", "tf.data thread"): {"limit": 3, "max_buffered": 3}}


def test_empty_buffer_steps_reads_the_caller_lane_per_step():
    assert _trace().timing.empty_buffer_steps() == {"limit": 1, "steps": 3, "empty": 2}
    assert Trace.from_records(events=[]).timing.empty_buffer_steps() == {"limit": 0, "steps": 0, "empty": 0}


STATISTICS = ["empty_buffer_steps", "map_threads", "most_at_once", "overlap_summary", "prefetch_buffers",
              "tf_data_iterators"]


def test_the_accessor_lists_its_statistics_for_help_and_tab_completion():
    t = _trace()
    assert isinstance(t.timing, TimingAccessor)
    assert dir(t.timing) == STATISTICS
    text = pydoc.render_doc(t.timing, renderer=pydoc.plaintext)
    assert all(f"{name}(self" in text for name in STATISTICS)
    assert all(getattr(TimingAccessor, name).__doc__ for name in STATISTICS)


def test_import_vizdist_imports_no_timing_statistics():
    """``trace.timing`` is a class of vizdist.views whose methods import the statistics when called."""
    code = ("import sys, vizdist; t = vizdist.Trace(); t.timing; before = 'vizdist.analysis.timeline' in sys.modules\n"
            "t.timing.map_threads(); print(before, 'vizdist.analysis.timeline' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         cwd=Path(__file__).resolve().parents[2])  # this checkout's vizdist, from any folder
    assert out.stdout.split() == ["False", "True"]


def test_top_level_timing_statistics_are_gone_and_say_where_they_went():
    """``vizdist.most_at_once(trace)`` and the rest went in 0.2.0 (CHANGELOG.md): asking for one says what to write."""
    for name in STATISTICS:
        with pytest.raises(AttributeError, match=rf"vizdist.{name} is gone .*: use trace.timing.{name}\("):
            getattr(vizdist, name)
        assert name not in vizdist.__all__
    assert most_at_once([(0, 2), (1, 3)]) == 2  # the function of (start, end) pairs, where it lives
