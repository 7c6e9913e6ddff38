"""The course helpers of notebooks 06, 08 and 09 (``notebooks/course.py``) read what plain TensorFlow says happened.

Each helper runs on a real trace and is compared with the same fact read from plain TF in the test:

* 06: the devices TF reports (``strategy.extended.worker_devices``, where a strategy runs each replica;
  each distributed batch's ``.device``; a variable's ``.device``; where the undistributed pipeline yields).
* 08: two small ``LocalCluster`` runs, each shared by the tests that read it (module-scoped, ``slow``).
  Each closure's step writes a file named after the worker index TF reported and the batch it got: the
  closures that really ran, as the workers saw them. A plain ``ClusterCoordinator`` in the same chief gives
  each worker's batch order and iterator values; a plain ``ShardedVariable`` the shards' devices and shapes,
  and a plain read of it after the ps is lost the error TF raises. (When a ps is lost, a closure may write its
  file and then fail on the lost ps: there the files bound the closures that finished from above.)
* 09: TF1 iterators and TF2 distributed datasets iterated by hand, and ``strategy.run``'s results.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import vizdist
from tests.instrument.test_parameter_server import _dataset_fn, _paced_dataset_fn, _plain_shards
from tests.instrument.test_placement import _dataset
from vizdist.instrument.processes.cluster import LocalCluster
from vizdist.instrument.strategies.parameter_server import record_parameter_server
from vizdist.trace import Trace


def _prints(fn, *args, start: str, **kwargs) -> None:
    """``fn(*args, **kwargs)`` printed a line starting with ``start``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args, **kwargs)
    assert out.getvalue().startswith(start), out.getvalue()


def _short(device: str) -> str:
    return device.split("device:")[-1]


# --- 06: placement ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fetch", [True, False], ids=["fetch_to_device", "batches_on_the_host"])
def test_op_devices_arrivals_and_copies_are_where_plain_tf_puts_them(course, tf, mirrored, step, fetch):
    options = tf.distribute.InputOptions(experimental_fetch_to_device=fetch)
    batches = [[_short(v.device) for v in mirrored.experimental_local_results(b)]
               for b in mirrored.experimental_distribute_dataset(_dataset(tf), options)]
    replicas = [_short(d) for d in mirrored.extended.worker_devices]  # where TF runs each replica's step
    host = _short(next(iter(_dataset(tf))).device)  # where the plain pipeline yields its elements
    elements = sum(len(b) for b in _dataset(tf))
    t = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=step, options=options, placement=True)
    assert course.arrived_on(t) == batches[0]
    ops = course.op_devices(t, "RealDiv", "Mul")
    div, mul = ops[ops["op_type"] == "RealDiv"], ops[ops["op_type"] == "Mul"]
    assert list(zip(div["stage"], div["device"], div["count"], strict=True)) == [("pipeline", host, elements)]
    assert sorted(mul["device"]) == sorted(replicas) and set(mul["count"]) == {len(batches)}
    expected = ({(host, d) for d in batches[0] if d != host} if fetch else
                {(batches[0][r], d) for r, d in enumerate(replicas) if d != batches[0][r]})
    assert {(src, dst) for src, dst, _ in course.copies(t)} == expected


def test_op_devices_read_a_central_variable_where_tf_keeps_it(course, tf, devices):
    central = tf.distribute.experimental.CentralStorageStrategy(["/cpu:1", "/cpu:2"], parameter_device="/cpu:0")
    with central.scope():
        weight = tf.Variable(1.0)

    @tf.function
    def weighted_step(x):
        return tf.reduce_sum(x) * weight

    t = vizdist.trace_distribution(central, _dataset(tf), step_fn=weighted_step, placement=True)
    ops = course.op_devices(t, "ReadVariableOp", "Mul")
    reads, mul = ops[ops["op_type"] == "ReadVariableOp"], ops[ops["op_type"] == "Mul"]
    assert list(zip(reads["stage"], reads["device"], strict=True)) == [("variable", _short(weight.device))]
    assert sorted(mul["device"]) == sorted(_short(d) for d in central.extended.worker_devices)


def test_check_placement_accepts_what_plain_tf_reports(course, tf, step):
    one = tf.distribute.OneDeviceStrategy("/cpu:2")
    no_fetch = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    batch = next(iter(one.experimental_distribute_dataset(_dataset(tf), no_fetch)))
    arrives, runs = _short(batch.device), _short(one.extended.worker_devices[0])
    t = vizdist.trace_distribution(one, _dataset(tf), step_fn=step, options=no_fetch, placement=True)
    right = {"batch arrives on": arrives, "Mul runs on": runs, "copy": (arrives, runs)}
    _prints(course.check_placement, t, right, start="done:")
    _prints(course.check_placement, t, {**right, "Mul runs on": arrives}, start="not yet: look again at Mul runs on")


# --- 08: parameter servers (two LocalCluster runs) ------------------------------------------------

def _marking_step(folder: str) -> Any:
    """A step that, on the worker, leaves a file ``<worker>-<ids joined by _>`` (TF's worker index, the batch)."""
    def step_fn(batch: Any) -> Any:
        import tensorflow as tf

        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        ids = tf.strings.reduce_join(tf.strings.as_string(batch), separator="_")
        tf.io.write_file(tf.strings.join([folder + "/", tf.strings.as_string(worker), "-", ids]), "")
        return worker

    return step_fn


def _ran(folder: Path) -> set[tuple[int, tuple[int, ...]]]:
    """(worker, batch) of every closure that ran, as the workers wrote it."""
    return {(int(w), tuple(int(i) for i in ids.split("_"))) for w, ids in (f.name.split("-") for f in folder.iterdir())}


def _plain(ctx: Any, steps: int) -> dict[str, Any]:
    """Plain TF: a coordinator's per-worker iterator (its values' types) and each closure's (worker, first id)."""
    import tensorflow as tf

    strategy = ctx.parameter_server_strategy()
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(lambda: strategy.distribute_datasets_from_function(_dataset_fn)))

    @tf.function
    def step(it: Any) -> Any:
        return tf.distribute.coordinator.experimental_get_current_worker_index(), next(it)[0]

    remotes = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
    coordinator.join()
    return {"runs": [[int(w), int(i)] for w, i in (r.fetch() for r in remotes)],
            "iterator_values": [type(v).__name__ for v in iterator._values]}  # PerWorkerValues' own list


def _healthy_then_ps_lost(ctx: Any, folder: str) -> Trace:
    """8 closures on 2 workers and 2 ps, with plain TF beside them; then ps-1 is lost after 3 of 8 more.

    Returns the second run (the launcher adds its lost task), with the first in ``meta["healthy"]``.
    """
    import tensorflow as tf

    healthy = record_parameter_server(ctx, _dataset_fn, steps=8, step_fn=_marking_step(f"{folder}/healthy"))
    healthy.meta.update(plain=_plain(ctx, 16), plain_shards=_plain_shards(ctx))
    probe_strategy = ctx.parameter_server_strategy(
        variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(2))
    with probe_strategy.scope():  # a plain sharded variable, one shard on each ps
        probe = tf.Variable(tf.zeros([8, 4]))
    lost = record_parameter_server(ctx, _dataset_fn, steps=8, step_fn=_marking_step(f"{folder}/ps_lost"),
                                   stop="ps-1", stop_after=3, partitioners={"FixedShardsPartitioner": {"num_shards": 2}})
    reads: dict[str, str] = {}

    def read() -> None:  # plain TF reads each shard back after the loss
        for shard in probe.variables:
            try:
                shard.read_value()
                reads[shard.device] = ""
            except tf.errors.OpError as exc:
                reads[shard.device] = type(exc).__name__

    reader = threading.Thread(target=read, daemon=True)  # a read that hangs shows as a shard missing here
    reader.start()
    reader.join(30)
    lost.meta.update(healthy=healthy.to_dict(), plain_reads=reads)
    return lost


def _worker_0_lost(ctx: Any, folder: str) -> Trace:
    """Notebook 08's exercise: 6 closures, worker-0 lost after 2 (each element paced, so its thread takes one)."""
    return record_parameter_server(ctx, _paced_dataset_fn, steps=6, step_fn=_marking_step(folder),
                                   stop="worker-0", stop_after=2, partitioners={"FixedShardsPartitioner": {"num_shards": 2}})


@pytest.fixture(scope="module")
def ps_runs(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("closures")
    for name in ("healthy", "ps_lost"):
        (folder / name).mkdir()
    with LocalCluster(workers=2, ps=2, timeout=180, progress=False) as cluster:
        lost = cluster.run(_healthy_then_ps_lost, str(folder))
    return {"healthy": Trace.from_dict(lost.meta["healthy"]), "ps_lost": lost, "plain_reads": lost.meta["plain_reads"],
            "ran": {name: _ran(folder / name) for name in ("healthy", "ps_lost")}}


@pytest.fixture(scope="module")
def worker_lost(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("worker_lost")
    with LocalCluster(workers=2, ps=1, timeout=180, progress=False) as cluster:
        trace = cluster.run(_worker_0_lost, str(folder))
    return {"trace": trace, "ran": _ran(folder)}


def _done(table) -> set[tuple[int, tuple[int, ...]]]:
    rows = table[table["status"] == "done"]
    return {(int(w), tuple(e)) for w, e in zip(rows["worker"], rows["elements"], strict=True)}


@pytest.mark.slow
def test_closures_are_what_the_workers_ran(course, ps_runs, worker_lost):
    for trace, ran in [(ps_runs["healthy"], ps_runs["ran"]["healthy"]), (worker_lost["trace"], worker_lost["ran"]),
                       (ps_runs["ps_lost"], ps_runs["ran"]["ps_lost"])]:
        table = course.closures(trace)
        if trace is ps_runs["ps_lost"]:  # a closure that then failed on the lost ps may have written its file too
            assert _done(table) <= ran
        else:  # worker and elements of each closure that ran, as the workers wrote them
            assert _done(table) == ran
        done = table[table["status"] == "done"]
        assert (done["fetch()"] == done["worker"]).all()  # fetch(): the worker index TF returned
        assert [w[-1] for w in done["ran on"]] == done["worker"].tolist()  # its last attempt is the one that ran
    assert course.attempt_outcomes(ps_runs["healthy"]) == Counter(done=len(ps_runs["ran"]["healthy"]))


@pytest.mark.slow
def test_worker_reads_and_iterators_are_plain_tfs(course, ps_runs):
    plain = ps_runs["healthy"].meta["plain"]
    order: dict[int, list[int]] = {}
    for w, first in plain["runs"]:  # plain TF: each worker's first ids, closure by closure
        order.setdefault(w, []).append(first)
    longest = max(order.values(), key=len)
    reads = course.worker_reads(ps_runs["healthy"])
    assert reads and all(seq == longest[: len(seq)] for seq in reads.values())
    its = course.worker_iterators(ps_runs["healthy"])
    assert its.index.tolist() == list(range(len(plain["iterator_values"])))
    assert its["type"].tolist() == plain["iterator_values"]


@pytest.mark.slow
def test_shards_are_plain_shardedvariables(course, ps_runs):
    table = course.shards(ps_runs["healthy"])
    plain = [shard for variable in ps_runs["healthy"].meta["plain_shards"] for shard in variable]
    assert [[d, s] for d, s in zip(table["device"], table["shape"], strict=True)] == [[d, s] for d, s in plain]
    assert table["bytes"].tolist() == [4 * s[0] * s[1] for _, s in plain]  # float32
    assert set(table["updates"]) == {len(ps_runs["ran"]["healthy"])}  # each closure that ran updated each shard
    assert course.shard_read_errors(ps_runs["healthy"]) == {}


@pytest.mark.slow
def test_a_lost_ps_reads_as_plain_tf_reads_it(course, ps_runs):
    trace = ps_runs["ps_lost"]
    assert course.lost_tasks(trace) == ["ps-1"]  # the task this test stopped
    failing = {int(d.split("task:")[1].split("/")[0]): {e} for d, e in ps_runs["plain_reads"].items() if e}
    assert failing == {1: {"UnavailableError"}} and course.shard_read_errors(trace) == failing
    # TF puts a closure back on another worker only when its worker failed (cluster_coordinator.py:
    # Worker._on_closure_failure after _is_worker_failure); a lost ps fails closures and join() raises
    outcomes = course.attempt_outcomes(trace)
    assert 0 < outcomes["done"] <= len(ps_runs["ran"]["ps_lost"]) and outcomes["rescheduled"] == 0
    assert course.put_back(trace).empty


@pytest.mark.slow
def test_a_lost_worker_s_closures_were_put_back_and_rerun(course, worker_lost):
    trace, ran = worker_lost["trace"], worker_lost["ran"]
    assert course.lost_tasks(trace) == ["worker-0"]  # the task this test stopped
    moved = course.put_back(trace)
    # TF puts back a closure that failed with UnavailableError when its worker is lost
    # (cluster_coordinator.py: Worker._on_closure_failure after _is_worker_failure); worker 1 re-runs it
    assert not moved.empty and set(moved["ran on"]) == {(0, 1)} and set(moved["error"]) == {"UnavailableError"}
    outcomes = course.attempt_outcomes(trace)
    assert outcomes == Counter(done=len(ran), rescheduled=len(moved))
    # the lost worker's iterator is aborted (cluster_coordinator.py: Worker._set_resources_aborted)
    assert course.worker_iterators(trace)["status"][0] == "aborted"
    # each worker reads on in its own copy (one iterator per worker: coordinator/values.py), the re-run
    # closures too: a worker's batches are its copy's first ones, none twice, none skipped, whatever the
    # lost worker was reading (plain TF: the batches of the dataset_fn every worker runs)
    done = course.closures(trace)
    done = done[done["status"] == "done"]
    copy = [tuple(int(i) for i in b) for b in _dataset_fn(None).take(len(ran) + 1).as_numpy_iterator()]
    for w in set(done["worker"]):
        mine = sorted((b for v, b in ran if v == w), key=copy.index)
        assert len(mine) == int((done["worker"] == w).sum()) and mine == copy[:len(mine)], (w, mine)


@pytest.mark.slow
def test_check_lost_worker_follows_what_the_workers_ran(course, ps_runs, worker_lost):
    ran = worker_lost["ran"]
    assert len(ran) == 6 and sum(w == 0 for w, _ in ran) <= 2  # all 6 ran; worker 0 ran at most the first 2
    _prints(course.check_lost_worker, worker_lost["trace"], worker=0, after=2, steps=6,
            start="done: worker 0 was lost after 2 closures and all 6 finished; fetch() names worker 1 for closures 2-5")
    _prints(course.check_lost_worker, ps_runs["healthy"], worker=0, after=2, steps=6,
            start="not yet: this run lost no task, not worker-0; it scheduled 8 closures, not 6")


# --- 09: TF1 and TF2 ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def v1(tf):
    return tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="module")
def v2(tf):
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def test_lines_are_the_lines_plain_tf_hands_each_replica(course, tf, v1, tmp_path):
    files = []
    for name, n in [("a", 3), ("b", 5)]:  # each line's text is its file's name and line number: a0 .. b4
        files.append(str(tmp_path / f"{name}.txt"))
        Path(files[-1]).write_text("".join(f"{name}{i}\n" for i in range(n)))
    it = v1.make_dataset_iterator(tf.data.TextLineDataset(files).batch(3))
    plain = []
    with contextlib.suppress(tf.errors.OutOfRangeError):
        while True:  # plain TF1, eagerly: each step's lines per replica
            plain.append([[s.decode() for s in v.numpy()] for v in v1.experimental_local_results(it.get_next())])
    got = course.lines(vizdist.trace_tf1(v1, tf.data.TextLineDataset(files).batch(3)))
    assert got.index.tolist() == list(range(len(plain))) and got.values.tolist() == plain


def test_results_are_what_strategy_run_returns(course, tf, v2):
    ds = tf.data.Dataset.range(16).batch(8)

    def step_fn(x):
        return tf.reduce_sum(x)

    plain = [[int(v) for v in v2.experimental_local_results(v2.run(step_fn, args=(b,)))]
             for b in v2.experimental_distribute_dataset(ds)]
    got = course.results(vizdist.trace_distribution(v2, ds, step_fn=step_fn))
    assert [[json.loads(v) for v in row] for row in got.values.tolist()] == plain


def test_side_by_side_keeps_each_table_and_marks_a_step_one_lacks(course, tf, v2):
    ds = tf.data.Dataset.range(10).batch(4)
    steps = len(list(ds))  # plain TF: 3 global batches
    full, short = vizdist.trace_distribution(v2, ds), vizdist.trace_distribution(v2, ds, steps=steps - 1)
    both = course.side_by_side({"all": full.split(), "short": short.split()}, missing="(no step)")
    assert len(both) == steps and both["all"].equals(full.split())
    assert both["short"].loc[steps - 1].tolist() == ["(no step)"] * v2.num_replicas_in_sync


def _input_fn(tf):
    def input_fn(ctx):
        ds = tf.data.Dataset.range(16).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(8))

    return input_fn


def test_check_ported_split_follows_plain_tf(course, tf, v1, v2):
    input_fn = _input_fn(tf)
    local = v2.experimental_local_results
    it = v1.make_input_fn_iterator(input_fn)
    tf1_plain = []
    with contextlib.suppress(tf.errors.OutOfRangeError):
        while True:  # plain TF1, eagerly
            tf1_plain.append([v.numpy().tolist() for v in v1.experimental_local_results(it.get_next())])
    port = [[v.numpy().tolist() for v in local(b)] for b in v2.distribute_datasets_from_function(input_fn)]
    dataset = input_fn(tf.distribute.InputContext(num_replicas_in_sync=v2.num_replicas_in_sync))
    wrong = [[v.numpy().tolist() for v in local(b)] for b in v2.experimental_distribute_dataset(dataset)]
    assert port == tf1_plain != wrong  # plain TF: one port splits as TF1 did, the other does not
    tf1 = vizdist.trace_tf1(v1, input_fn=input_fn)
    _prints(course.check_ported_split, vizdist.trace_distribution(v2, dataset_fn=input_fn), tf1, start="done:")
    _prints(course.check_ported_split, vizdist.trace_distribution(v2, dataset), tf1,
            start=f"not yet: step 0, replica 0: TF1 gives {tf1_plain[0][0]}, TF2 gives {wrong[0][0]}")
