"""Reductions and DistributedValues, compared with what plain TensorFlow reports for the same values."""

from __future__ import annotations

import numpy as np
import pytest

import vizdist
from vizdist.instrument.observe.placement import short_device
from vizdist.render.reduction import loss_table, reduction_layout


def _value_fn(tf):
    return lambda ctx: tf.constant([1.0, 2.0]) * tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32)


@pytest.fixture(scope="module", params=["ReductionToOneDevice", "HierarchicalCopyAllReduce"])
def strategy(request, tf, devices):
    cdo = getattr(tf.distribute, request.param)()
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(4)], cross_device_ops=cdo)


def _plain(strategy, value):
    return [(short_device(v.device), np.asarray(v).tolist()) for v in strategy.experimental_local_results(value)]


@pytest.mark.parametrize("op,axis", [("SUM", None), ("MEAN", None), ("SUM", 0), ("MEAN", 0)])
def test_strategy_reduce_matches_plain_tf(tf, strategy, op, axis):
    t = vizdist.trace_reduction(strategy, _value_fn(tf), reduce_op=op, axis=axis)
    r = t.meta["reductions"][0]
    value = strategy.experimental_distribute_values_from_function(_value_fn(tf))
    plain = strategy.reduce(op, value, axis=axis)
    assert [(i["device"], i["value"]) for i in r["inputs"]] == _plain(strategy, value)
    assert r["results"][0]["value"] == pytest.approx(np.asarray(plain).tolist())
    assert r["results"][0]["device"] == short_device(plain.device)
    assert r["expected"] == pytest.approx(r["results"][0]["value"])
    assert r["cross_device_ops"] == type(strategy.extended._cross_device_ops).__name__
    assert any(o["op_type"] == "AddN" for o in r["ops"])  # the sum itself, on a recorded device
    assert "reduction: Strategy.reduce" in repr(t.show.reduction())


@pytest.mark.parametrize("how", ["all_reduce", "all_gather", "merge_call"])
def test_replica_context_reductions_match_plain_tf(tf, strategy, how):
    t = vizdist.trace_reduction(strategy, _value_fn(tf), how=how, reduce_op="MEAN")
    r = t.meta["reductions"][0]
    value = strategy.experimental_distribute_values_from_function(_value_fn(tf))

    def fn(x):
        ctx = tf.distribute.get_replica_context()
        if how == "all_reduce":
            return ctx.all_reduce("MEAN", x)
        if how == "all_gather":
            return ctx.all_gather(x, axis=0)
        return ctx.merge_call(lambda s, y: s.extended.reduce_to("MEAN", y, destinations=y), args=(x,))

    plain = strategy.run(fn, args=(value,))
    assert [(x["device"], x["value"]) for x in r["results"]] == _plain(strategy, plain)
    for x in r["results"]:
        assert x["value"] == pytest.approx(r["expected"])
    lay = reduction_layout(t)
    assert [f["title"] for f in lay["frames"]] == ["inputs on each device", "where they meet",
                                                  "result on each destination"]
    assert lay["frames"][1]["cells"]  # the ops that combined the values, with their devices


def test_into_collects_several_reductions_and_refuses_other_traces(tf, mirrored):
    first = vizdist.trace_reduction(mirrored, [1.0, 2.0, 3.0, 4.0])
    both = vizdist.trace_reduction(mirrored, [1.0, 2.0, 3.0, 4.0], how="all_reduce", into=first)
    assert [r["call"] for r in both.meta["reductions"]] == ["Strategy.reduce", "ReplicaContext.all_reduce"]
    plain = mirrored.reduce("SUM", mirrored.experimental_distribute_values_from_function(
        lambda c: tf.constant([1.0, 2.0, 3.0, 4.0])[c.replica_id_in_sync_group]), axis=None)
    assert [r["results"][0]["value"] for r in both.meta["reductions"]] == [float(plain)] * 2
    with pytest.raises(TypeError, match="earlier trace_reduction"):
        vizdist.trace_reduction(mirrored, [1.0, 2.0, 3.0, 4.0], into=vizdist.Trace())


def test_distributed_values_in_trace_distribution_no_longer_type_error(tf, mirrored):
    value = mirrored.experimental_distribute_values_from_function(_value_fn(tf))
    t = vizdist.trace_distribution(mirrored, value)
    comps = t.meta["distributed_values"][0]["components"]
    assert [(c["device"], c["value"]) for c in comps] == _plain(mirrored, value)


def test_mirrored_variable_copies_are_on_every_replica(tf, mirrored):
    with mirrored.scope():
        v = tf.Variable([1.0, 2.0])
    comps = vizdist.trace_distribution(mirrored, v).meta["distributed_values"][0]["components"]
    assert [c["device"] for c in comps] == [short_device(x.device) for x in mirrored.experimental_local_results(v)]
    assert {c["type"] for c in comps} == {"MirroredVariable"}


def _per_replica_value(tf):
    r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32)
    return tf.constant([1.0, 2.0]) * r


def test_hierarchical_copy_adds_each_half_on_its_head_unless_the_values_came_into_the_function(tf, devices, monkeypatch):
    """Plain TF (cross_device_utils.aggregate_gradients_using_hierarchical_copy): an all-reduce adds each half of
    the replicas on its head (CPU:0, CPU:2) and then the two sums (CPU:0), placing each AddN with the device of
    the values it adds. Eagerly, and inside a tf.function for values made in that same function (as a step's
    gradients are), the values carry their replicas' devices; values passed *into* a tf.function as arguments
    carry none while TF builds that tree, so its AddNs ask for no device (the placer then puts them on CPU:0,
    as notebook 06b shows, where vizdist's record passes the values in)."""
    from tensorflow.python.ops import math_ops

    s = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
    values = s.run(lambda: _per_replica_value(tf))
    assert [v.device.split("device:")[-1] for v in s.experimental_local_results(values)] == [
        "CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    seen: list[str] = []
    add_n = math_ops.add_n

    def spy(inputs, name=None):
        out = add_n(inputs, name=name)
        seen.append(out.device.split("device:")[-1] if out.device else "")
        return out

    monkeypatch.setattr(math_ops, "add_n", spy)

    def all_reduce(x):
        return tf.distribute.get_replica_context().all_reduce("SUM", x)

    eager = s.experimental_local_results(s.run(all_reduce, args=(values,)))
    assert seen == ["CPU:0", "CPU:2", "CPU:0"] and [v.numpy().tolist() for v in eager] == [[10.0, 20.0]] * 4
    seen.clear()
    tf.function(lambda v: s.run(all_reduce, args=(v,)))(values)  # the values come in as arguments
    assert seen == ["", "", ""]
    seen.clear()
    made_inside = tf.function(lambda: s.run(all_reduce, args=(s.run(lambda: _per_replica_value(tf)),)))()
    assert seen == ["CPU:0", "CPU:2", "CPU:0"]
    assert [v.numpy().tolist() for v in s.experimental_local_results(made_inside)] == [[10.0, 20.0]] * 4


def test_mirrored_default_is_a_ring_collective_on_cpus(tf, devices):
    """Plain TF 2.21 (mirrored_strategy.py, _make_collective_ops_with_fallbacks): MirroredStrategy given no
    cross_device_ops uses CollectiveAllReduce, set to RING when every device is a CPU."""
    s = tf.distribute.MirroredStrategy(devices)
    ops = s.extended._cross_device_ops
    assert type(ops).__name__ == "CollectiveAllReduce"
    assert s.extended._communication_options.implementation == (
        tf.distribute.experimental.CommunicationImplementation.RING)


_NCCL_CONFIG = """
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context
out = {}
for impl in ("AUTO", "RING", "NCCL"):
    opts = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation[impl])
    s = tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)
    with tf.Graph().as_default():  # what MWMS puts in a Session's config in graph mode
        graph_mode = s.extended._update_config_proto(config_pb2.ConfigProto()).experimental.collective_nccl
    out[impl] = {"hint": opts.implementation.value, "eager": context.context().config.experimental.collective_nccl,
                 "graph_mode": graph_mode}
print(json.dumps(out))
"""


def test_mwms_asks_for_nccl_only_under_nccl_so_auto_runs_the_ring_on_gpus_too():
    """TF's runtime takes NCCL for a GPU group only when the op's communication_hint is "nccl" or the config
    sets collective_nccl (collective_param_resolver_local.cc, AssignCollectiveType); otherwise the ring.
    Plain TF 2.21 on this machine's CPUs (no GPU needed for these inputs to that rule): each implementation's
    hint is its own name (cross_device_utils.py: communication_hint=options.implementation.value; the ops
    carry it, see test_mwms_reductions_match_plain_tf_in_every_worker), and MWMS sets collective_nccl only
    for NCCL in graph mode, never eagerly (collective_all_reduce_strategy.py, _update_config_proto,
    configure_collective_ops). So AUTO asks for no NCCL anywhere, GPUs included. Fresh process: building
    MultiWorkerMirroredStrategy configures the process's collective ops."""
    import json
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _NCCL_CONFIG], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert {impl: g["hint"].lower() for impl, g in got.items()} == {"AUTO": "auto", "RING": "ring", "NCCL": "nccl"}
    assert {impl: g["eager"] for impl, g in got.items()} == {"AUTO": False, "RING": False, "NCCL": False}
    assert {impl: g["graph_mode"] for impl, g in got.items()} == {"AUTO": False, "RING": False, "NCCL": True}


def test_loss_scaling_full_partial_and_empty_batches(tf, mirrored):
    ds = tf.data.Dataset.range(10).map(lambda x: tf.cast(x, tf.float32)).batch(4)
    t = vizdist.trace_loss_scaling(mirrored, ds, global_batch_size=4)
    table = loss_table(t)
    plain_steps = [[np.asarray(v).tolist() for v in mirrored.experimental_local_results(b)]
                   for b in mirrored.experimental_distribute_dataset(ds)]
    assert [list(r) for r in table["batch sizes"]] == [[len(v) for v in s] for s in plain_steps]
    for row, step in zip(table.itertuples(index=False), plain_steps, strict=True):
        arrived = [x for v in step for x in v]
        assert row[6] == pytest.approx(np.mean(arrived))  # mean over arrived elements
        assert row[3] == pytest.approx(sum(arrived) / 4)  # compute_average_loss summed: divides by 4 always
    last = table.iloc[-1]
    assert last["MEAN of them"] is None or np.isnan(last["MEAN of them"])  # an empty replica's mean is NaN
    assert last["SUM of them"] != pytest.approx(last["mean over arrived elements"])  # partial step: not the mean


# -- MultiWorkerMirroredStrategy: real worker processes (slow) ------------------------------
#: CommunicationOptions implementation -> (how, reduce_op, axis, value) recorded in one cluster run each.
#: One strategy per process: TF 2.21 gives a second MultiWorkerMirroredStrategy in a process the same
#: collective group and instance keys, and the two strategies' collectives then collide.
MWMS_CASES = {"RING": [("reduce", "SUM", None, "vector"), ("all_gather", "SUM", None, "vector")],
              "AUTO": [("all_reduce", "MEAN", None, "vector"), ("reduce", "MEAN", 0, "vector"),
                       ("reduce", "MEAN", None, "scalar")]}
MWMS_IDS = [(impl, i) for impl, cases in MWMS_CASES.items() for i in range(len(cases))]


def _mwms_work(ctx, out_dir, impl, cases):
    """In each worker, one strategy: plain TF's reductions first (no vizdist), then the same ones traced."""
    import json
    from pathlib import Path

    import numpy as np
    import tensorflow as tf

    import vizdist
    from vizdist.instrument.observe.placement import short_device

    def local(v):
        return [[short_device(x.device), np.asarray(x).tolist()] for x in s.experimental_local_results(v)]

    def vector(c):
        return tf.constant([1.0, 2.0]) * tf.cast(c.replica_id_in_sync_group + 1, tf.float32)

    def scalar(c):
        return float(c.replica_id_in_sync_group)

    opts = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation[impl], timeout_seconds=30)
    s = tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)
    plain, traced = [], None
    for how, op, axis, kind in cases:
        fn = vector if kind == "vector" else scalar
        v = s.experimental_distribute_values_from_function(lambda c, fn=fn: tf.convert_to_tensor(fn(c)))
        if how == "reduce":
            r = s.reduce(op, v, axis=axis)
            results = [[short_device(r.device), np.asarray(r).tolist()]]
        else:
            def replica(x, how=how, op=op):
                c = tf.distribute.get_replica_context()
                return c.all_reduce(op, x) if how == "all_reduce" else c.all_gather(x, axis=0)

            results = local(s.run(replica, args=(v,)))
        plain.append({"inputs": local(v), "results": results, "replicas": s.num_replicas_in_sync,
                      "cross_device_ops": type(s.extended._get_cross_device_ops(v)).__name__})
        traced = vizdist.trace_reduction(s, fn, how=how, reduce_op=op, axis=axis, into=traced)
    Path(out_dir, f"plain-{impl}-{ctx.task}.json").write_text(json.dumps(plain))
    return traced


@pytest.fixture(scope="module")
def mwms(tmp_path_factory):
    """impl -> (merged trace, [plain TF in worker 0, in worker 1]); one cluster, a fresh run per impl."""
    import json

    out, runs = tmp_path_factory.mktemp("mwms-plain"), {}
    with vizdist.LocalCluster(workers=2, timeout=240, progress=False) as cluster:
        for impl, cases in MWMS_CASES.items():
            trace = cluster.run(_mwms_work, str(out), impl, cases)
            runs[impl] = trace, [json.loads((out / f"plain-{impl}-worker-{w}.json").read_text()) for w in range(2)]
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("impl,case", MWMS_IDS,
                         ids=["-".join(map(str, (impl, *MWMS_CASES[impl][i]))) for impl, i in MWMS_IDS])
def test_mwms_reductions_match_plain_tf_in_every_worker(mwms, impl, case):
    trace, plain = mwms[impl]
    how = MWMS_CASES[impl][case][0]
    r = trace.meta["reductions"][case]
    mine = [p[case] for p in plain]  # what plain TF computed in worker 0 and worker 1
    assert r["workers"] == [0, 1]
    assert [[i["device"], i["value"]] for i in r["inputs"]] == [x for p in mine for x in p["inputs"]]
    assert [[x["device"], x["value"]] for x in r["results"]] == [x for p in mine for x in p["results"]]
    for p in mine:
        for _, value in p["results"]:
            assert r["expected"] == pytest.approx(value)  # TF's documented rule over every worker's input
    assert r["cross_device_ops"] == mine[0]["cross_device_ops"]
    coll = r["collectives"]
    assert {c["communication_hint"] for c in coll} == {impl.lower()}
    assert {c["group_size"] for c in coll} == {mine[0]["replicas"]}
    assert {c["device"] for c in coll} == {d for p in mine for d, _ in p["inputs"]}
    # CPU devices: TF's AssignCollectiveType picks the ring for RING and AUTO alike
    assert {c["implementation"] for c in coll} == {"RingGather" if how == "all_gather" else "RingReduce"}
    assert r["communication"]["requested"] == impl


@pytest.mark.slow
def test_mwms_reduction_view_steps_through_both_workers(mwms):
    trace, _ = mwms["RING"]
    lay = reduction_layout(trace, index=0)
    assert lay["devices"] == ["worker:0/CPU:0", "worker:1/CPU:0"]
    meet = lay["frames"][1]["cells"]
    assert all("CollectiveReduceV2" in meet[d] for d in lay["devices"])
    assert "RingReduce" in lay["title"] and "ring" in lay["title"]
    assert len(trace.show.reduction(index=0).widget().children) == 2  # Play + slider, and the frames
