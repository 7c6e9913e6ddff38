"""The helpers of ``notebooks/course.py`` for notebooks 04 and 06b read what TensorFlow did.

Each is compared with the same fact from plain TensorFlow: what a consumer of the same real tf.data service
receives, TF's sharding rules (``ShardingPolicy`` in ``data_service_ops.py``: worker *i* of *n* keeps
``shard(n, i)`` of the dataset under ``DATA``, and of its list of files under ``FILE``; ``OFF`` gives every
worker the whole dataset), the device TF calls ``add_n`` on, the collective ops in the graph TF builds. One
local service (a dispatcher and two worker processes, unisolated so that plain TF in this process can read
it) serves every service test.
"""

from __future__ import annotations

import collections
import contextlib
import io
from pathlib import Path

import pytest

import vizdist


@pytest.fixture(scope="module")
def service(tf):
    """A real tf.data service (dispatcher + 2 worker processes, fixed worker list) this process can read."""
    with vizdist.LocalDataService(workers=2, isolate=False, progress=False) as s:
        yield s


def _plain(tf, ds, service, policy):
    """Plain TF: how many times a consumer of the service gets each value, under ``policy``."""
    svc = tf.data.experimental.service
    out = ds.apply(svc.distribute(processing_mode=getattr(svc.ShardingPolicy, policy), service=service.target))
    return collections.Counter(int(v) for b in out.as_numpy_iterator() for v in ([b] if b.ndim == 0 else b))


def _shard(ds, worker):
    """TF's DATA rule: what worker ``worker`` of 2 keeps of ``ds``."""
    return [v.tolist() for v in ds.shard(2, worker).as_numpy_iterator()]


def _printed(fn, *args, **kwargs) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args, **kwargs)
    return out.getvalue().splitlines()


# -- notebook 04: the tf.data service ---------------------------------------------------------------
@pytest.mark.slow
def test_by_worker_and_the_policy_table_follow_tf_sharding(course, tf, service):
    ds = tf.data.Dataset.range(10)
    runs = {p: service.trace(ds, sharding_policy=p, progress=False) for p in ("OFF", "DATA")}
    shard = {w: _shard(ds, w) for w in (0, 1)}
    assert course.by_worker(runs["DATA"]) == shard  # each worker's shard, in the order it made it
    assert {w: sorted(ids) for w, ids in course.by_worker(runs["OFF"]).items()} == {w: list(range(10)) for w in (0, 1)}
    table = course.shards_by_policy(runs)
    for p in runs:
        assert table.loc[p, "copies of each element"] == sorted(set(_plain(tf, ds, service, p).values()))
    assert [table.loc["DATA", f"worker {w}"] for w in (0, 1)] == [shard[0], shard[1]]
    assert table.index.name == "policy" and list(table.columns) == ["copies of each element", "worker 0", "worker 1"]
    varied = course.shards_by_policy(runs, varies={"OFF"})
    assert varied.loc["OFF", "worker 1"] == "(varies by run)" and varied.loc["DATA", "worker 1"] == shard[1]


@pytest.mark.slow
def test_file_readers_are_the_workers_tf_gives_each_file(course, tf, service, tmp_path):
    files = []
    for k in range(4):
        (tmp_path / f"part-{k}.txt").write_text("".join(f"{k}-{j}\n" for j in range(3)))
        files.append(str(tmp_path / f"part-{k}.txt"))
    t = service.trace(tf.data.TextLineDataset(files), sharding_policy="FILE", progress=False)
    rule = {Path(f.decode()).name: [w] for w in (0, 1)
            for f in tf.data.Dataset.from_tensor_slices(files).shard(2, w).as_numpy_iterator()}
    assert course.file_readers(t)["workers that read it"].to_dict() == rule


@pytest.mark.slow
def test_came_from_names_the_service_worker_of_each_copy_in_your_own_pipeline(course, tf, service, mirrored):
    svc = tf.data.experimental.service
    source = tf.data.Dataset.range(8)
    ds = source.apply(svc.distribute(processing_mode=svc.ShardingPolicy.DATA, service=service.target)).batch(4)
    plain = collections.Counter(int(v) for b in ds.as_numpy_iterator() for v in b)
    came = course.came_from(vizdist.trace_distribution(mirrored, ds))
    assert came.to_dict() == {i: [w] for w in (0, 1) for i in _shard(source, w)}
    assert {i: len(ws) for i, ws in came.items()} == dict(plain)


@pytest.mark.slow
def test_check_worker_guess_reads_the_worker_tf_sharding_gives(course, tf, service):
    ds = tf.data.Dataset.range(12).batch(3)
    t = service.trace(ds, sharding_policy="DATA", progress=False)
    real = next(w for w in (0, 1) if any(7 in b for b in _shard(ds, w)))  # DATA shards the batches
    assert set(_plain(tf, ds, service, "DATA").values()) == {1}  # nothing lost, nothing twice
    said = _printed(course.check_worker_guess, t, real, element=7)
    assert said == ["service findings: []", f"done: worker {real} produces element 7"]
    said = _printed(course.check_worker_guess, t, 1 - real, element=7)
    assert said[-1] == "not yet: element 7 does not come from that worker"


def test_findings_at_keeps_one_severity(course, tf, mirrored):
    ds = tf.data.Dataset.range(10).batch(4)
    empty = [s for s, x in enumerate(mirrored.experimental_distribute_dataset(ds))
             if any(v.shape[0] == 0 for v in mirrored.experimental_local_results(x))]
    warnings = course.findings_at(vizdist.trace_distribution(mirrored, ds), "warning")
    assert warnings["step"].tolist() == empty and list(warnings.index) == list(range(len(empty)))
    assert set(warnings["severity"]) == {"warning"}


# -- notebook 06b: reductions ----------------------------------------------------------------------
def _per_replica(tf):
    r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32)
    return tf.constant([1.0, 2.0]) * r


def _all_reduce(tf, strategy):
    values = strategy.run(lambda: _per_replica(tf))
    return values, vizdist.trace_reduction(strategy, values, how="all_reduce", reduce_op="SUM")


def test_reduction_ops_put_the_sum_where_tf_adds(course, tf, devices, monkeypatch):
    from tensorflow.python.ops import math_ops

    rtod = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    hier = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
    table = course.reduction_ops({"one device": _all_reduce(tf, rtod)[1], "hierarchical": _all_reduce(tf, hier)[1]})
    seen, add_n = [], math_ops.add_n

    def spy(inputs, name=None):
        out = add_n(inputs, name=name)
        seen.append(out.device.split("device:")[-1])
        return out

    monkeypatch.setattr(math_ops, "add_n", spy)  # ReductionToOneDevice takes add_n when it is built
    plain = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    values = plain.run(lambda: _per_replica(tf))  # plain TF, eagerly: each value is on its replica's device,
    plain.run(lambda x: tf.distribute.get_replica_context().all_reduce("SUM", x), args=(values,))  # so add_n's is real
    assert seen
    assert [x for x in table["one device"] if x.startswith("AddN ")] == [f"AddN on {d}" for d in sorted(set(seen))]
    assert list(table.columns) == ["one device", "hierarchical"]
    assert not any(x.startswith("__") for col in table for x in table[col])
    assert table.notna().all().all()  # the shorter column is padded with "", not NaN


def test_collectives_are_the_ones_in_tfs_graph(course, tf, mirrored):
    from vizdist.instrument.observe.placement import short_device

    values, traced = _all_reduce(tf, mirrored)  # MirroredStrategy on CPUs: CollectiveAllReduce, RING
    got = course.collectives(traced)

    def all_reduce(v):
        return mirrored.run(lambda x: tf.distribute.get_replica_context().all_reduce("SUM", x), args=(v,))

    graph = tf.function(all_reduce).get_concrete_function(values).graph
    plain = sorted((short_device(op.device), op.type, op.get_attr("communication_hint").decode())
                   for op in graph.get_operations() if op.type.startswith("Collective"))
    assert plain and [(d, op, hint) for d, op, _, hint, _ in got] == plain
    assert {size for _, _, size, _, _ in got} == {f"group_size={mirrored.num_replicas_in_sync}"}
    # TF's AssignCollectiveType (collective_param_resolver_local.cc): on CPUs a reduce is the ring
    assert {impl for *_, impl in got} == {"RingReduce"}
