"""ParameterServerStrategy on real LocalClusters: closures, RemoteValues, lost workers and ps, variable shards.

Three cluster runs, each shared by the tests that read it (module-scoped fixtures):

* ``ps_run`` (2 workers, 2 ps): vizdist's trace and, in the same coordinator
  process, plain TF: a plain ``ClusterCoordinator`` over the same dataset, and
  the same three partitioners in a plain ``ParameterServerStrategy``.
* ``worker_lost`` (2 workers, 1 ps): worker-1 is killed after 3 closures; the
  chief then keeps running past the launcher's old give-up grace.
* ``ps_lost`` (1 worker, 2 ps): ps-1 is killed after 3 closures.

Expected values come from TF in the run: ``experimental_get_current_worker_index()``
and the batch, returned by the step function and read with ``RemoteValue.fetch()``;
``ShardedVariable.variables``' devices and shapes; plain TF's per-worker iteration.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from pathlib import Path
from typing import Any

import pytest

import vizdist
from vizdist.instrument.processes.cluster import LocalCluster, WorkerContext
from vizdist.instrument.strategies.parameter_server import (
    PARTITIONERS,
    PartitionerSwitch,
    record_parameter_server,
    trace_parameter_server,
)
from vizdist.trace import Trace

STEPS = 8


def _dataset_fn(input_context: Any) -> Any:
    import tensorflow as tf

    return tf.data.Dataset.range(16).batch(2).repeat()


def _step_fn(batch: Any) -> Any:
    import tensorflow as tf

    return {"worker": tf.distribute.coordinator.experimental_get_current_worker_index(), "batch": batch}


def _plain_iteration(ctx: Any, steps: int) -> dict[str, Any]:
    """Plain TF: a coordinator schedules ``steps`` functions returning (worker index, batch)."""
    import tensorflow as tf

    strategy = ctx.parameter_server_strategy()
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    contexts = []

    def dataset_fn(ic: Any) -> Any:
        contexts.append({"num_input_pipelines": ic.num_input_pipelines, "input_pipeline_id": ic.input_pipeline_id,
                         "num_replicas_in_sync": ic.num_replicas_in_sync})
        return _dataset_fn(ic)

    per_worker = coordinator.create_per_worker_dataset(lambda: strategy.distribute_datasets_from_function(dataset_fn))
    iterator = iter(per_worker)

    @tf.function
    def step(it: Any) -> Any:
        return tf.distribute.coordinator.experimental_get_current_worker_index(), next(it)

    remotes = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
    coordinator.join()
    runs = [(int(w), b.tolist()) for w, b in (r.fetch() for r in remotes)]
    return {"runs": runs, "contexts": contexts, "remote_value": type(remotes[0]).__name__,
            "iterators": len(iterator._values), "iterator_type": type(iterator).__name__}


def _plain_shards(ctx: Any) -> list[list[tuple[str, list[int]]]]:
    """Plain TF: the PARTITIONERS' variables, made in order in one strategy; each shard's device and shape."""
    import tensorflow as tf

    current: list[Any] = []
    strategy = ctx.parameter_server_strategy(variable_partitioner=lambda shape, dtype: current[-1](shape, dtype))
    out = []
    with strategy.scope():
        for name, spec in PARTITIONERS.items():
            current.append(getattr(tf.distribute.experimental.partitioners, name)(**spec))
            v = tf.Variable(tf.zeros([8, 4]), name=name)
            out.append([(str(s.device), s.shape.as_list()) for s in getattr(v, "variables", [v])])
    return out


def _paced_dataset_fn(input_context: Any) -> Any:
    """``_dataset_fn``'s elements, each taking 0.1 s on the worker (TF's own test op), nothing prefetched ahead.

    The lost-worker run needs TF's coordinator thread for the killed worker to take one of the closures
    scheduled after the kill (and fail it). With instant closures that is a race against the live
    worker's thread, which on a loaded machine can run all of them first; paced, each takes 0.2 s.
    """
    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import testing

    options = tf.data.Options()
    options.autotune.enabled = False  # no prefetch(AUTOTUNE) injected: the worker cannot run far ahead
    return tf.data.Dataset.range(16).apply(testing.sleep(100_000)).batch(2).repeat().with_options(options)


def _stuck_dataset_fn(input_context: Any) -> Any:
    """Each element takes 1000 s on the worker (TF's own test op): closures never finish."""
    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import testing

    return tf.data.Dataset.range(4).apply(testing.sleep(10**9)).batch(2).repeat()


def _record_and_plain(ctx: Any) -> Trace:
    trace = record_parameter_server(ctx, _dataset_fn, steps=STEPS, step_fn=_step_fn)
    meta = {**trace.meta, "plain": _plain_iteration(ctx, 2 * STEPS), "plain_shards": _plain_shards(ctx)}
    # last: closures that never end; vizdist stops waiting after timeout= (the process then exits)
    stuck = trace_parameter_server(ctx.parameter_server_strategy(), _stuck_dataset_fn, steps=3, timeout=2.0)
    meta["stuck"] = {"meta": stuck.meta, "elements": len(stuck.elements)}
    return Trace(elements=trace.elements, batches=trace.batches, events=trace.events, meta=meta)


def _lose(ctx: Any, task: str, linger: float, dataset_fn: Any = _dataset_fn) -> Trace:
    trace = record_parameter_server(ctx, dataset_fn, steps=STEPS, step_fn=_step_fn, stop=task, stop_after=3,
                                    partitioners={"FixedShardsPartitioner": {"num_shards": 2}})
    time.sleep(linger)  # the launcher must wait for the coordinator, however long, after a worker is lost
    return trace


def _marking_step(folder: str) -> Any:
    """A step function that, on the worker, leaves a file named ``<worker>-<first element>`` once the
    closure's update of the variables on the ps has succeeded (TF runs a function's stateful ops in
    order), and returns the same two numbers: the ground truth of which closures really ran."""
    def step_fn(batch: Any) -> Any:
        import tensorflow as tf

        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        name = tf.strings.join([folder + "/", tf.strings.as_string(worker), "-", tf.strings.as_string(batch[0])])
        tf.io.write_file(name, "")
        return {"worker": worker, "first": batch[0]}

    return step_fn


def _lose_ps_while_scheduling(ctx: Any, folder: str) -> Trace:
    """Kill ps-0 after 4 closures and let TF see it before the next ``schedule()``, which then raises."""
    import threading

    import tensorflow as tf

    strategy = ctx.parameter_server_strategy()
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        v = tf.Variable(0.0)

    @tf.function
    def touch() -> Any:  # a closure of the caller's own that needs the lost ps
        return v.assign_add(1.0)

    def lose_ps() -> dict[str, Any]:
        note = ctx.stop_task("ps-0")
        probe = coordinator.schedule(touch)
        def fetch() -> None:
            with contextlib.suppress(Exception):
                probe.fetch()

        waiter = threading.Thread(target=fetch, daemon=True)
        waiter.start()
        waiter.join(max(10.0, ctx.time_left() - 30))  # its failure is TF's first error: schedule() raises it
        return {**note, "probe": type(probe._error).__name__ if getattr(probe, "_error", None) else "no error"}

    return trace_parameter_server(
        strategy, lambda ic: tf.data.Dataset.range(10**6).batch(2), steps=12, step_fn=_marking_step(folder),
        coordinator=coordinator, variables={"v": v}, pause_after=4, on_pause=lose_ps,
        timeout=max(10.0, ctx.time_left() - 20))


@pytest.fixture(scope="module")
def ps_run() -> Trace:
    with LocalCluster(workers=2, ps=2, timeout=180, progress=False) as cluster:
        return cluster.run(_record_and_plain)


@pytest.fixture(scope="module")
def worker_lost() -> Trace:
    # collective_timeout=0.5: before the fix, the launcher gave up 5.5 s after a task died, with no trace.
    with LocalCluster(workers=2, ps=1, timeout=180, collective_timeout=0.5, progress=False) as cluster:
        return cluster.run(_lose, "worker-1", 6.0, _paced_dataset_fn)


@pytest.fixture(scope="module")
def ps_lost() -> Trace:
    with LocalCluster(workers=1, ps=2, timeout=180, progress=False) as cluster:
        return cluster.run(_lose, "ps-1", 0.0)


def test_fixed_shards_partitioner_makes_at_most_as_many_shards_as_rows(tf) -> None:
    """Plain TF (sharded_variable.py, FixedShardsPartitioner: min(num_shards, the rows along axis 0)): "always
    num_shards" holds only for a variable with at least that many rows; notebook 08's 8 x 4 variable has 8."""
    fixed = tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_shards=2)
    assert fixed(tf.TensorShape([8, 4]), tf.float32) == [2, 1]
    assert fixed(tf.TensorShape([1, 4]), tf.float32) == [1, 1]


def test_partitioner_switch_delegates_to_the_active_partitioner() -> None:
    switch = PartitionerSwitch()
    assert switch([8, 4], None) == [1, 1]
    with switch.use(lambda shape, dtype: [4, 1]):
        assert switch([8, 4], None) == [4, 1]
    assert switch([8, 4], None) == [1, 1]


def test_stop_task_refuses_its_own_task_unknown_names_and_a_missing_launcher() -> None:
    ctx = WorkerContext("chief", 0, num_workers=2, num_ps=1)
    for bad in ("chief-0", "evaluator-0", "worker", "../worker-1"):
        with pytest.raises(ValueError, match="stop_task takes another task"):
            ctx.stop_task(bad)
    with pytest.raises(RuntimeError, match="inside a LocalCluster run"):
        ctx.stop_task("worker-1")


@pytest.mark.parametrize(("lose", "after", "match"), [
    ("chief-0", 1, "stop must name a worker or ps task"), ("worker-1", 8, "stop_after must be an int from 0 to"),
    ("ps-0", True, "stop_after must be"), ("ps-0", -1, "stop_after must be")])
def test_record_parameter_server_refuses_a_loss_it_cannot_stage(lose: str, after: Any, match: str) -> None:
    ctx = WorkerContext("chief", 0, num_workers=2, num_ps=1)
    with pytest.raises(ValueError, match=match):
        record_parameter_server(ctx, _dataset_fn, steps=STEPS, stop=lose, stop_after=after)


def _closure_steps(trace: Trace) -> dict[int, list[int]]:
    e = trace.elements.sort_values(["step", "position"])
    return {int(s): g["source_id"].tolist() for s, g in e.groupby("step")}


def _check_closures_match_fetch(trace: Trace) -> None:
    """Each finished closure: the worker and elements vizdist recorded are what the function itself returned."""
    got = _closure_steps(trace)
    for c in trace.meta["closures"]:
        if c["status"] != "done":
            continue
        i, result = c["closure"], c["result"]  # what RemoteValue.fetch() gave back: (worker index, batch) from TF
        assert c["worker"] == result["worker"] == trace.meta["step_workers"][i]
        assert got[i] == result["batch"], i  # range values are the source ids
        assert c["attempts"][-1]["worker"] == result["worker"] and c["attempts"][-1]["outcome"] == "done"


@pytest.mark.slow
def test_each_closure_records_its_worker_elements_and_remote_value(ps_run: Trace) -> None:
    m = ps_run.meta
    assert m["kind"] == "parameter_server" and m["stopped"] == "done" and m["provenance"] == "tagged"
    assert [c["status"] for c in m["closures"]] == ["done"] * STEPS
    _check_closures_match_fetch(ps_run)
    assert all(len(c["attempts"]) == 1 for c in m["closures"])  # nothing lost: one attempt each
    ev = ps_run.events
    assert sorted(ev["step"]) == list(range(STEPS)) and set(ev["outcome"]) == {"done"}
    assert (ev["t_end_ns"] >= ev["t_start_ns"]).all()


@pytest.mark.slow
def test_per_worker_iteration_and_values_are_plain_tfs(ps_run: Trace) -> None:
    m, plain = ps_run.meta, ps_run.meta["plain"]
    # dataset_fn: called as plain TF calls it (once, in the coordinator, with the same InputContext)
    assert m["input_contexts"] == plain["contexts"]
    # each worker reads its own copy: the sequence of batches a worker gets is plain TF's sequence
    plain_seqs: dict[int, list[Any]] = {}
    for w, b in plain["runs"]:
        plain_seqs.setdefault(w, []).append(b)
    longest = max(plain_seqs.values(), key=len)
    assert all(seq == longest[: len(seq)] for seq in plain_seqs.values())
    got = _closure_steps(ps_run)
    for w in set(m["step_workers"]):
        mine = [got[i] for i, x in enumerate(m["step_workers"]) if x == w]
        assert mine == longest[: len(mine)], w
    # PerWorkerValues: one iterator RemoteValue per worker, as plain TF's; schedule() returns plain TF's type
    values = m["per_worker_values"]["values"]
    assert len(values) == plain["iterators"] == m["num_workers"]
    assert {v["type"] for v in values} == {"RemoteValueImpl"}
    # TF builds each worker's iterator asynchronously: ready on every worker that ran a closure
    assert all(values[w]["status"] == "ready" for w in set(m["step_workers"]))
    assert m["per_worker_values"]["iterator"] == plain["iterator_type"]
    assert m["remote_values"]["schedule() returns"] == plain["remote_value"]
    # which workers ran closures is TF's run-time choice; either way the finding must match what happened
    dup = vizdist.diagnose(ps_run).query("code == 'worker-duplicates'")
    assert (len(set(m["step_workers"])) == 2) == (not dup.empty)


@pytest.mark.slow
def test_variable_shards_are_plain_tfs_and_drawn(ps_run: Trace) -> None:
    shards = ps_run.meta["variables"]
    for name, plain in zip(PARTITIONERS, ps_run.meta["plain_shards"], strict=True):
        rows = [r for r in shards if r["variable"] == name]
        assert [[r["device"], r["shape"]] for r in rows] == plain, name  # JSON made the tuples lists
        assert [r["bytes"] for r in rows] == [4 * s[0] * s[1] for _, s in plain]
        assert all(r["updates"] == STEPS for r in rows)  # every closure updated every shard once
    fig = ps_run.plot.variable_shards()
    text = repr(fig)
    for name, plain in zip(PARTITIONERS, ps_run.meta["plain_shards"], strict=True):
        cells = " ".join(f"{shape}@ps{int(dev.split('task:')[1].split('/')[0])}" for dev, shape in plain)
        assert f"{len(plain)} shard(s) {cells}" in text, (name, text)
    per_ps: dict[int, int] = {}
    for plain in ps_run.meta["plain_shards"]:
        for dev, shape in plain:
            t = int(dev.split("task:")[1].split("/")[0])
            per_ps[t] = per_ps.get(t, 0) + 4 * shape[0] * shape[1]
    assert text.endswith("bytes per ps: " + ", ".join(f"ps{t} {b}" for t, b in sorted(per_ps.items())) + ">")


@pytest.mark.slow
def test_a_lost_worker_s_closure_reruns_on_the_other_and_the_trace_names_it(worker_lost: Trace) -> None:
    m = worker_lost.meta
    assert [t["task"] for t in m["lost_tasks"]] == ["worker-1"]
    assert m["interventions"][0]["stopped_task"] == "worker-1" and m["interventions"][0]["after_closures"] == 3
    # TF re-ran everything: all closures finished, and every completed step is in the trace
    assert m["stopped"] == "done" and [c["status"] for c in m["closures"]] == ["done"] * STEPS
    assert sorted(worker_lost.elements["step"].unique()) == list(range(STEPS))
    _check_closures_match_fetch(worker_lost)
    moved = [c for c in m["closures"] if any(a["outcome"] == "rescheduled" for a in c["attempts"])]
    assert moved, "TF should have put back the closure worker 1 took after it was killed"
    for c in moved:
        assert [a["worker"] for a in c["attempts"]] == [1, 0] and c["result"]["worker"] == 0
        assert c["attempts"][0]["error"].startswith("UnavailableError")
    assert all(c["result"]["worker"] == 0 for c in m["closures"][3:])  # after the loss, TF used worker 0 only
    assert [v["status"] for v in m["per_worker_values"]["values"]] == ["ready", "aborted"]  # TF's RemoteValues
    assert {r["updates"] for r in m["variables"]} == {STEPS}  # each finished closure updated once
    found = vizdist.diagnose(worker_lost).query("code == 'ps-worker-lost'")
    assert found["workers"].tolist() == [[1]]
    assert f"({', '.join(str(c['closure']) for c in moved)}) and re-ran them on worker(s) 0" in found["message"].iloc[0]


@pytest.mark.slow
def test_a_lost_ps_fails_the_closures_and_the_trace_keeps_what_finished(ps_lost: Trace) -> None:
    m = ps_lost.meta
    assert [t["task"] for t in m["lost_tasks"]] == ["ps-1"]
    assert m["stopped"] == "error" and m["partial"] is True
    assert m["errors"][0].startswith("UnavailableError") and "/job:ps/replica:0/task:1" in m["errors"][0]
    statuses = [c["status"] for c in m["closures"]]
    assert statuses[:3] == ["done"] * 3 and set(statuses[3:]) <= {"failed", "cancelled"} and "failed" in statuses
    assert not any(a["outcome"] == "rescheduled" for c in m["closures"] for a in c["attempts"])
    # cluster_coordinator.py (_record_and_ignore_transient_ps_failure): the K-th report naming a ps is a failure
    k = int(os.environ.get("TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES", 3))
    assert sum(a["outcome"] == "retried" for c in m["closures"] for a in c["attempts"]) <= k - 1
    assert sorted(ps_lost.elements["step"].unique()) == [0, 1, 2]
    _check_closures_match_fetch(ps_lost)
    lost = [r for r in m["variables"] if r["task"] == 1]
    assert lost and all(r["updates"] == -1 and r["read_error"].startswith("UnavailableError") for r in lost)
    assert all(r["updates"] >= 3 for r in m["variables"] if r["task"] == 0)
    found = vizdist.diagnose(ps_lost).query("code == 'ps-ps-lost'")
    assert found["severity"].tolist() == ["error"] and "ps 1 was lost" in found["message"].iloc[0]
    fig = ps_lost.plot.closures()
    # schedule() may raise the lost ps's error before all STEPS are scheduled: those were never closures
    assert repr(fig).endswith("lost: ps-1>") and f"{m['steps_scheduled']} closure(s)" in repr(fig)
    assert m["steps_scheduled"] == len(m["closures"]) and m["steps_requested"] == STEPS


@pytest.mark.slow
def test_closures_that_never_finish_end_in_a_partial_trace_after_the_timeout(ps_run: Trace) -> None:
    stuck = ps_run.meta["stuck"]
    m = stuck["meta"]
    assert m["stopped"] == "timeout" and m["partial"] is True and m["timeout_s"] == 2.0
    assert [c["status"] for c in m["closures"]] == ["pending"] * 3 and stuck["elements"] == 0
    assert {a["outcome"] for c in m["closures"] for a in c["attempts"]} <= {"running"}
    assert "timed-out" in vizdist.diagnose(Trace(meta=m))["code"].tolist()


def test_the_old_spelling_of_stop_is_gone() -> None:
    """``lose=``/``lose_after=`` went in 0.2.0 (CHANGELOG.md): ``stop=``/``stop_after=`` are the one spelling."""
    params = inspect.signature(record_parameter_server).parameters
    assert "lose" not in params and "lose_after" not in params
    assert params["stop"].annotation == "str | None" and params["stop_after"].annotation == "int | None"
    with pytest.raises(ValueError, match="stop must name a worker or ps task"):
        record_parameter_server(WorkerContext("chief", 0, num_workers=2, num_ps=1), _dataset_fn, steps=STEPS,
                                stop="chief-0")


@pytest.mark.slow
def test_a_ps_killed_while_closures_are_scheduled_keeps_every_closure_that_ran(tmp_path: Path) -> None:
    """``schedule()`` raising a lost ps's error must not lose the closures that had finished.

    Ground truth: each closure that really ran on a worker left a file named after its worker and
    first element (written after its update on the ps); the trace must hold exactly those closures.
    """
    marks = tmp_path / "ran"
    marks.mkdir()
    with LocalCluster(workers=1, ps=1, timeout=180, progress=False) as cluster:
        trace = cluster.run(_lose_ps_while_scheduling, str(marks))
    m = trace.meta
    ran = {tuple(int(x) for x in f.name.split("-")) for f in marks.iterdir()}
    assert ran, "no closure ran before the ps was killed"
    done = [c for c in m["closures"] if c["status"] == "done"]
    assert {(c["result"]["worker"], c["result"]["first"]) for c in done} == ran
    assert m["steps_run"] == len(ran) and sorted(trace.elements["step"].unique()) == [c["closure"] for c in done]
    assert m["stopped"] == "error" and m["partial"] is True and m["interventions"][0]["probe"] != "no error"
    assert m["steps_scheduled"] < m["steps_requested"] == 12, "schedule() did not raise: nothing was tested"
    assert [t["task"] for t in m["lost_tasks"]] == ["ps-0"]
