"""Timing capture on real runs: host spans, TF profiler spans, prefetch depth, clocks."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

import vizdist
from vizdist.instrument.observe.timing import TimingRecorder, attach_step_elements, timing_events
from vizdist.instrument.observe.xplane import assign_steps, buffer_depth, xplane_capture
from vizdist.render.timeline_figure import overlap_summary

# --- the recorder alone (an injected clock: exact values) --------------------------------


def test_recorder_shifts_its_clock_to_the_epoch_by_its_anchor():
    ticks = iter([100, 250])
    rec = TimingRecorder(worker=3, clock=lambda: next(ticks), anchor={"perf_counter_ns": 0, "unix_ns": 10_000})
    with rec.span("w3 host", "consume", step=7, replica=1, elements=[4, 5]):
        pass
    df = rec.to_events_df()
    assert df[["lane", "stage", "step", "worker", "replica", "t_start_ns", "t_end_ns", "elements"]].values.tolist() == [
        ["w3 host", "consume", 7, 3, 1, 10_100, 10_250, "[4, 5]"]]
    assert rec.meta()["anchor"]["unix_ns"] == 10_000


def test_span_is_recorded_even_when_the_body_raises():
    rec = TimingRecorder()
    with pytest.raises(KeyError), rec.span("w0 host", "consume", step=0):
        raise KeyError("x")
    assert len(rec) == 1


def test_span_that_ends_before_it_starts_is_refused():
    rec = TimingRecorder()
    with pytest.raises(ValueError, match=r"ends .* before it starts"):
        rec.add("w0 host", "transfer", 10, 5)


def test_real_anchor_matches_wall_clock():
    rec = TimingRecorder()
    with rec.span("w0 host", "consume"):
        time.sleep(0.002)
    row = rec.to_events_df().iloc[0]
    now = time.time_ns()
    assert 0 <= now - row["t_end_ns"] < 5e9  # same epoch, within seconds
    assert row["t_end_ns"] - row["t_start_ns"] >= 2_000_000


def test_shards_of_two_processes_line_up_on_the_epoch_after_merge():
    # two processes: different monotonic clocks, anchors read at the same wall-clock instant
    a = TimingRecorder(worker=0, anchor={"perf_counter_ns": 5_000, "unix_ns": 1_000_000})
    b = TimingRecorder(worker=1, anchor={"perf_counter_ns": 900_000, "unix_ns": 1_000_000})
    a.add("w0 host", "consume", 5_100, 5_200, step=0)   # 100 ns after the shared instant
    b.add("w1 host", "consume", 900_100, 900_200, step=0)  # also 100 ns after it
    ta = vizdist.Trace(events=a.to_events_df(), meta={"timing": a.meta()})
    tb = vizdist.Trace(events=b.to_events_df(), meta={"timing": b.meta()})
    merged = vizdist.Trace.merge([ta, tb])
    starts = merged.events.groupby("worker")["t_start_ns"].first().tolist()
    assert starts == [1_000_100, 1_000_100]


def test_attach_step_elements_fills_only_empty_cells_in_replica_order():
    ev = pd.DataFrame({"step": [0, 0, 1], "worker": [0, 0, 0], "elements": ["", "[9]", ""]})
    el = pd.DataFrame({"step": [0, 0, 1], "worker": [0, 0, 0], "replica": [1, 0, 0], "position": [0, 0, 0],
                       "source_id": [7, 3, 5]})
    assert attach_step_elements(ev, el)["elements"].tolist() == ["[3, 7]", "[9]", "[5]"]


def test_assign_steps_follows_element_ids_and_nesting():
    # host transfer spans of steps 0 and 1; the caller's PrefetchConsume inside each;
    # PrefetchProduce on a tf.data thread (produced earlier), and a map nested inside it.
    host = pd.DataFrame({"stage": ["transfer", "transfer"], "step": [0, 1],
                         "t_start_ns": [100, 300], "t_end_ns": [150, 350]})
    spans = pd.DataFrame({
        "lane": ["w0 tf.data (caller)", "w0 tf.data (caller)", "w0 tf.data thread 0", "w0 tf.data thread 0",
                 "w0 tf.data thread 0"],
        "op": ["PrefetchConsume", "PrefetchConsume", "PrefetchProduce", "Iterator::Root::Prefetch::Map",
               "PrefetchProduce"],
        "stage": ["prefetch", "prefetch", "prefetch", "map", "prefetch"],
        "step": [-1] * 5,
        "t_start_ns": [110, 310, 20, 25, 160],
        "t_end_ns": [111, 311, 90, 80, 200],
        "element_id": [11, 22, 11, 0, 22],
        "_line": ["python", "python", "t0", "t0", "t0"],
    })
    out = assign_steps(spans, host).set_index(["op", "t_start_ns"])["step"]
    assert out[("PrefetchConsume", 110)] == 0 and out[("PrefetchConsume", 310)] == 1
    assert out[("PrefetchProduce", 20)] == 0  # produced before step 0 asked for it
    assert out[("Iterator::Root::Prefetch::Map", 25)] == 0  # nested inside that produce
    assert out[("PrefetchProduce", 160)] == 1  # produced during step 0, consumed at step 1


# --- real TensorFlow ---------------------------------------------------------------------


def _loop(tf, ds, *, step_ms):
    """A plain tf.data loop timed with the recorder and the profiler (no vizdist tracing)."""
    rec = TimingRecorder()
    with xplane_capture() as cap:
        it = iter(ds)
        step = 0
        while True:
            t0 = rec.now()
            try:
                next(it)
            except StopIteration:
                break
            rec.add("w0 host", "transfer", t0, rec.now(), step=step)
            with rec.span("w0 host", "consume", step=step):
                time.sleep(step_ms / 1000)
            step += 1
    return timing_events(rec, cap)


def _slow(tf, ms):
    def work(v):
        time.sleep(ms / 1000)
        return v

    return lambda x: tf.py_function(work, [x], tf.int64)


def test_profiler_spans_pair_produce_with_consume_and_report_buffer_depth(tf):
    ds = tf.data.Dataset.range(24).map(_slow(tf, 1)).batch(4).prefetch(2)
    # The step (60 ms) is ~15x the time to produce a batch, so the buffer is full even on a loaded machine.
    events, meta = _loop(tf, ds, step_ms=60)
    assert meta["xplane"] is True, meta
    xp = events[events["origin"] == "xplane"]
    consume = xp[xp["op"] == "PrefetchConsume"]
    produce = xp[xp["op"] == "PrefetchProduce"]
    # every batch the loop took (6) went through the prefetch buffer, with the same element id
    assert len(consume) >= 6
    assert set(consume["element_id"]) <= set(produce["element_id"])
    # each consume is tied to the step whose next() it happened in
    host = events[(events["origin"] == "host") & (events["stage"] == "transfer")].set_index("step")
    assert (consume["step"] >= 0).all(), consume
    for _, c in consume.iterrows():
        h = host.loc[c["step"]]
        assert h["t_start_ns"] <= c["t_start_ns"] <= h["t_end_ns"]
    # the produce of an element carries the step that consumed it, and happened before that
    paired = produce.merge(consume[["element_id", "step", "t_start_ns"]], on="element_id", suffixes=("", "_c"))
    assert len(paired) >= 6
    assert (paired["step"] == paired["step_c"]).all()
    assert (paired["t_start_ns"] <= paired["t_start_ns_c"]).all()
    # prefetch(2): the buffer holds at most 2, and a slow consumer finds it full
    depth = buffer_depth(events)
    ours = depth[depth["buffer_limit"] == 2]
    assert len(ours) and ours["buffered"].max() <= 2
    assert ours["buffered"].median() >= 1


def test_slow_consumer_and_slow_producer_look_different(tf):
    fast_map = tf.data.Dataset.range(24).map(_slow(tf, 0)).batch(4).prefetch(2)
    slow_map = tf.data.Dataset.range(24).map(_slow(tf, 6)).batch(4).prefetch(2)
    ev_c, _ = _loop(tf, fast_map, step_ms=20)   # slow consumer
    ev_p, _ = _loop(tf, slow_map, step_ms=1)    # slow producer (24 ms per batch)
    sc = overlap_summary(vizdist.Trace(events=ev_c))
    sp = overlap_summary(vizdist.Trace(events=ev_p))
    assert sc["bound"] == "step" and sp["bound"] == "input"
    assert sc["buffer_fill"] >= 0.5 > sp["buffer_fill"]
    assert sp["wait_ms"] > 5 * sc["wait_ms"]


def test_trace_distribution_timing_records_host_replica_and_pipeline_spans(tf, mirrored):
    ds = tf.data.Dataset.range(16).map(_slow(tf, 1)).batch(8).prefetch(1)

    def step_fn(x):
        time.sleep(0.003)
        return tf.reduce_sum(x)

    t = vizdist.trace_distribution(mirrored, ds, step_fn=step_fn, timing=True)
    ev = t.events
    host = ev[ev["lane"] == "w0 host"]
    # one transfer and one consume per step, in order, not overlapping
    assert sorted(host[host.stage == "transfer"]["step"]) == [0, 1]
    assert sorted(host[host.stage == "consume"]["step"]) == [0, 1]
    h = host.sort_values("t_start_ns")
    assert (h["t_start_ns"].to_numpy()[1:] >= h["t_end_ns"].to_numpy()[:-1]).all()
    # each replica's step_fn is a consume span on its own lane, inside the host's strategy.run
    reps = ev[ev["lane"].str.startswith("w0 replica")]
    assert sorted(reps["replica"].unique()) == [0, 1, 2, 3]
    for s in (0, 1):
        run = host[(host.stage == "consume") & (host.step == s)].iloc[0]
        r = reps[reps.step == s]
        assert len(r) == 4 and (r["t_start_ns"] >= run["t_start_ns"]).all() and (r["t_end_ns"] <= run["t_end_ns"]).all()
        assert (r["t_end_ns"] - r["t_start_ns"] >= 3_000_000).all()
    # host spans carry the step's source ids (what raw TF delivered, via the elements table)
    t0 = host[(host.step == 0) & (host.stage == "transfer")].iloc[0]
    assert json.loads(t0["elements"]) == list(range(8))
    # profiler spans from inside tf.data, and the clock is stated
    assert (ev["origin"] == "xplane").any()
    assert {"map", "batch", "prefetch"} & set(ev.loc[ev.origin == "xplane", "stage"])
    assert "perf_counter_ns" in t.meta["timing"]["clock"] and t.meta["timing"]["anchor"]["unix_ns"] > 0
    # tracing with timing changes nothing about who got what
    plain = vizdist.trace_distribution(mirrored, ds)
    assert plain.split().equals(t.split())
    # and the spans survive save/load
    assert vizdist.Trace.from_dict(t.to_dict()) == t


def test_per_replica_buffer_size_is_the_measured_buffer_limit(tf, mirrored):
    ds = tf.data.Dataset.range(32).batch(8)
    opts = tf.distribute.InputOptions(experimental_per_replica_buffer_size=3)

    def slow_step(x):
        time.sleep(0.002)
        return x

    t = vizdist.trace_distribution(mirrored, ds, options=opts, step_fn=slow_step, timing=True)
    ev = t.events
    front = ev[(ev["buffered"] >= 0) & ev["lane"].str.endswith("(caller)")]
    assert set(front["buffer_limit"]) == {3}
    assert front["buffered"].max() <= 3


def test_the_per_replica_buffer_size_also_sizes_a_host_side_buffer_per_replica(tf, mirrored, monkeypatch):
    """input_lib.py (_create_owned_multi_device_iterator) passes experimental_per_replica_buffer_size to the
    MultiDeviceIterator as both max_buffer_size (its host-side buffer per device) and prefetch_buffer_size
    (the prefetch on each device): notebook 05 cell 21."""
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    seen = []
    init = mdi.OwnedMultiDeviceIterator.__init__

    def spy(self, *args, **kwargs):
        seen.append((kwargs.get("max_buffer_size"), kwargs.get("prefetch_buffer_size")))
        init(self, *args, **kwargs)

    monkeypatch.setattr(mdi.OwnedMultiDeviceIterator, "__init__", spy)
    opts = tf.distribute.InputOptions(experimental_per_replica_buffer_size=3)
    next(iter(mirrored.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(4), opts)))
    assert seen == [(3, 3)]


def test_timing_off_records_no_events(tf, mirrored):
    t = vizdist.trace_distribution(mirrored, tf.data.Dataset.range(8).batch(4))
    assert t.events.empty and "timing" not in t.meta


def test_profiler_already_running_is_reported_not_raised(tf):
    import tempfile

    d = tempfile.mkdtemp()
    tf.profiler.experimental.start(d)
    try:
        with xplane_capture() as cap:
            list(tf.data.Dataset.range(3))
    finally:
        tf.profiler.experimental.stop()
    assert cap.spans.empty
    assert "did not start" in cap.info["error"]
    rec = TimingRecorder()
    rec.add("w0 host", "consume", 0, 1, step=0)
    ev, meta = timing_events(rec, cap)
    assert meta["xplane"] is False and "did not start" in meta["xplane_error"] and len(ev) == 1
    assert np.issubdtype(ev["buffered"].dtype, np.integer)


def test_profiling_window_bounds_the_tf_data_spans_but_not_the_host_spans(tf, mirrored):
    ds = tf.data.Dataset.range(64).batch(4)
    t = vizdist.trace_distribution(mirrored, ds, timing=3)
    ev = t.events
    assert t.meta["timing"]["profiled_steps"] == 3
    assert sorted(ev.loc[(ev.stage == "transfer") & (ev.origin == "host"), "step"]) == list(range(16))
    xp = ev[ev.origin == "xplane"]
    consumed = xp.loc[xp.op == "PrefetchConsume", "step"]
    assert len(consumed) and consumed.max() <= 3  # the profiler stopped after step 2 (plus the next get)
    host_only = vizdist.trace_distribution(mirrored, ds, timing=0)
    assert (host_only.events.origin == "host").all() and len(host_only.events) == 16
    with pytest.raises(ValueError, match="timing must be"):
        vizdist.trace_distribution(mirrored, ds, timing=-1)


def _timed_mwms_work(ctx):
    import tensorflow as tf

    import vizdist

    strategy = ctx.multi_worker_strategy()

    def step_fn(x):
        # an all-reduce: the two workers' steps must meet in time
        total = tf.distribute.get_replica_context().all_reduce("sum", tf.reduce_sum(x))
        return total

    ds = tf.data.Dataset.range(16).batch(4)
    return vizdist.trace_distribution(strategy, ds, step_fn=step_fn, timing=True, progress=False)


@pytest.mark.slow
def test_worker_processes_record_on_their_own_clocks_and_line_up_when_merged():
    from vizdist.instrument.processes.cluster import LocalCluster

    with LocalCluster(workers=2, timeout=120.0, progress=False) as cluster:
        trace = cluster.run(_timed_mwms_work)
    ev = trace.events
    anchors = [s["timing"]["anchor"] for s in trace.meta["shards"]]
    assert len(anchors) == 2 and anchors[0] != anchors[1]  # one clock and anchor per process
    # no TF profiler in a worker that holds only some replicas (it crashed TF 2.21 workers), and it says so
    assert all(not s["timing"]["xplane"] and "several workers" in s["timing"]["xplane_error"]
               for s in trace.meta["shards"])
    host = ev[(ev.origin == "host") & (ev.stage == "consume") & ev.lane.str.endswith("host")]
    assert set(host.worker) == {0, 1}
    lanes = sorted(set(ev.lane))
    assert "w0 host" in lanes and "w1 host" in lanes
    # the all-reduce makes step s of both workers overlap in (epoch-aligned) time
    for s in sorted(set(host.step)):
        a = host[(host.worker == 0) & (host.step == s)].iloc[0]
        b = host[(host.worker == 1) & (host.step == s)].iloc[0]
        assert max(a.t_start_ns, b.t_start_ns) < min(a.t_end_ns, b.t_end_ns), f"step {s} does not overlap"


def test_a_tf_function_step_is_not_wrapped(tf, mirrored):
    @tf.function
    def step(x):
        return tf.reduce_sum(x)

    t = vizdist.trace_distribution(mirrored, tf.data.Dataset.range(16).batch(8), step_fn=step, timing=0)
    ev = t.events
    assert not ev.lane.str.contains("replica").any()
    assert sorted(ev.loc[ev.stage == "consume", "step"]) == [0, 1]
    assert "tf.function" in t.meta["timing"]["notes"][0]
    # results are what TF computed (the step ran as the user's tf.function)
    assert json.loads(t.batches.sort_values(["step", "replica"]).iloc[0]["result"]) == 0 + 1


_AT_ONCE = """
import json, os, sys, threading
cores, private, wait = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])  # before TF starts: it counts these cores
os.environ.pop("TF_NUM_INTEROP_THREADS", None)
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf

calls = 4  # num_parallel_calls, and as many elements: every call is asked for at once
cond, state = threading.Condition(), {"running": 0, "most": 0}

def work(v):  # each call waits (bounded) until all 4 run at once: only the threads TF gives them decide
    with cond:
        state["running"] += 1
        state["most"] = max(state["most"], state["running"])
        cond.notify_all()
        cond.wait_for(lambda: state["most"] >= calls, timeout=wait)  # once all ran at once, none waits again
        state["running"] -= 1
    return v

options = tf.data.Options()
options.autotune.enabled = False
if private:
    options.threading.private_threadpool_size = private
ds = tf.data.Dataset.range(calls).map(lambda x: tf.py_function(work, [x], tf.int64), num_parallel_calls=calls)
assert sorted(int(v) for v in ds.with_options(options)) == list(range(calls))
print(json.dumps(state["most"]))
"""


def _most_map_calls_at_once(cores: int, private_threads: int, wait_s: float) -> int:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _AT_ONCE, str(cores), str(private_threads), str(wait_s)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return int(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cores", [1, 2])
def test_a_parallel_map_runs_one_call_per_core_unless_tf_data_has_threads_of_its_own(cores):
    """Plain TF, in a fresh process limited to ``cores`` of this machine's cores (any machine, any load):
    num_parallel_calls=4 runs at most one map call per core on TF's default threads (the inter-op pool:
    TF_NUM_INTEROP_THREADS, else port::MaxParallelism(), the cores this process may use; process_util.cc,
    DefaultNumInterOpThreads), and all 4 at once with Options().threading.private_threadpool_size=8.
    Each call waits until all 4 run (bounded): the default can never get there, so the bound is exact,
    and the private pool always does, so the wait (generous) decides nothing but a hang."""
    import os

    if len(os.sched_getaffinity(0)) < cores:
        pytest.skip(f"this process may use fewer than {cores} cores")
    assert _most_map_calls_at_once(cores, 0, 0.5) <= cores  # each call gives up waiting after 0.5 s
    assert _most_map_calls_at_once(cores, 8, 120.0) == 4


