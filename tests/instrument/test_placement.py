"""placement=True: where every op ran, compared with what plain TensorFlow reports for the same run."""

from __future__ import annotations

import re

import pytest

import vizdist
from vizdist.instrument.observe.placement import short_device


def _ops(trace, stage=None, op_type=None):
    return [o for o in trace.meta["placement"]["ops"]
            if (stage is None or o["stage"] == stage) and (op_type is None or o["op_type"] == op_type)]


def _plain_batch_devices(strategy, ds, options=None):
    """Each replica's batch device per step, as TF reports it (no vizdist)."""
    return [[short_device(v.device) for v in strategy.experimental_local_results(b)]
            for b in strategy.experimental_distribute_dataset(ds, options)]


def _dataset(tf):
    return tf.data.Dataset.range(16).map(lambda x: tf.cast(x, tf.float32) / 2.0).batch(8)


def test_zero_cost_when_not_asked(tf, mirrored):
    t = vizdist.trace_distribution(mirrored, _dataset(tf))
    assert "placement" not in t.meta


def test_mirrored_default_fetches_to_each_device(tf, mirrored, step):
    t = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=step, placement=True)
    p = t.meta["placement"]
    plain = _plain_batch_devices(mirrored, _dataset(tf))
    assert p["batch_devices"] == plain[0]
    replica_devices = [short_device(d) for d in mirrored.extended.worker_devices]
    # the step's own ops ran once per step on every replica device
    for op in ("Mul", "Sum"):
        rows = _ops(t, "step", op)
        assert sorted(r["device"] for r in rows) == sorted(replica_devices)
        assert all(r["count"] == len(plain) and (r["first_step"], r["last_step"]) == (0, len(plain) - 1)
                   for r in rows)
    # the map function ran on the host, once per element, where plain TF's dataset yields its values
    host = short_device(next(iter(_dataset(tf))).device)
    div = _ops(t, "pipeline", "RealDiv")
    assert [(r["device"], r["count"], r["graph"].startswith("Dataset_map")) for r in div] == [(host, 16, True)]
    assert p["host"] == host
    copied = sorted(c["dst"] for c in p["copies"] if c["src"] == host)
    assert copied == sorted(d for d in plain[0] if d != host)
    assert all(c["count"] == len(plain) for c in p["copies"])


def test_fetch_to_device_false_leaves_batches_on_the_host(tf, mirrored, step):
    opts = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    t = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=step, options=opts, placement=True)
    p = t.meta["placement"]
    plain = _plain_batch_devices(mirrored, _dataset(tf), opts)
    assert p["batch_devices"] == plain[0]
    assert not _ops(t, "transfer")
    replica_devices = [short_device(d) for d in mirrored.extended.worker_devices]
    assert sorted(r["device"] for r in _ops(t, "step", "Mul")) == sorted(replica_devices)
    # the copy happens when the step runs: from the batch's device to each other replica's device
    assert sorted((c["src"], c["dst"]) for c in p["copies"]) == sorted(
        (plain[0][r], d) for r, d in enumerate(replica_devices) if d != plain[0][r])


def test_place_dataset_on_device(tf, mirrored, step):
    opts = tf.distribute.InputOptions(experimental_place_dataset_on_device=True, experimental_fetch_to_device=False)
    t = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=step, options=opts, placement=True)
    assert t.meta["placement"]["batch_devices"] == _plain_batch_devices(mirrored, _dataset(tf), opts)[0]


def test_one_device_strategy_runs_everything_on_its_device(tf, step):
    s = tf.distribute.OneDeviceStrategy("/cpu:1")
    t = vizdist.trace_distribution(s, _dataset(tf), step_fn=step, placement=True)
    p = t.meta["placement"]
    assert p["batch_devices"] == _plain_batch_devices(s, _dataset(tf))[0] == ["CPU:1"]
    assert {r["device"] for r in _ops(t, "step") if r["kind"] == "graph"} == {"CPU:1"}
    assert [(c["src"], c["dst"]) for c in p["copies"]] == [(p["host"], "CPU:1")]


def test_central_storage_keeps_variables_on_the_parameter_device(tf):
    s = tf.distribute.experimental.CentralStorageStrategy(["/cpu:1", "/cpu:2"], parameter_device="/cpu:0")
    with s.scope():
        v = tf.Variable(1.0)

    @tf.function
    def vstep(x):
        return tf.reduce_sum(x) * v

    t = vizdist.trace_distribution(s, _dataset(tf), step_fn=vstep, placement=True)
    reads = _ops(t, "variable", "ReadVariableOp")
    var_device = short_device(v.device)  # what TF says about the variable
    assert {r["device"] for r in reads} == {var_device}
    computed = {r["device"] for r in _ops(t, "step", "Mul")}
    assert computed == {short_device(d) for d in s.extended.worker_devices}
    assert {(c["src"], c["dst"]) for c in t.meta["placement"]["copies"] if "variable" in c["via"]} == {
        (var_device, d) for d in computed}


def test_device_scopes_in_the_step_are_where_tf_placed_them(tf, mirrored):
    @tf.function
    def scoped(x):
        with tf.device("/cpu:3"):
            y = x * 3.0
        with tf.device(tf.DeviceSpec(device_type="CPU", device_index=2)):
            z = y + 1.0
        return tf.reduce_sum(z)

    t = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=scoped, placement=True)
    graph = scoped.get_concrete_function(tf.TensorSpec([None], tf.float32)).graph
    requested = {op.type: short_device(op.device) for op in graph.get_operations() if op.type in ("Mul", "AddV2")}
    assert requested == {"Mul": "CPU:3", "AddV2": "CPU:2"}
    for op_type, device in requested.items():
        assert {r["device"] for r in _ops(t, "step", op_type)} == {device}


_DEVICE_STAGE_CHECK = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import vizdist
vizdist.virtual_devices(4)
import tensorflow as tf
from vizdist.errors import TracingError
mirrored = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(4)])
make = lambda: tf.data.Dataset.range(16).map(lambda x: tf.cast(x, tf.float32) / 2.0).batch(8).apply(
    getattr(tf.data.experimental, sys.argv[1])("/cpu:1"))
try:
    for _ in mirrored.experimental_distribute_dataset(make()):
        pass
    plain = None
except Exception as exc:
    plain = str(exc)
try:
    vizdist.trace_distribution(mirrored, make(), placement=True)
    ours = None
except TracingError as exc:
    ours = str(exc)
print(json.dumps({"plain": plain, "ours": ours}))
sys.stdout.flush()
os._exit(0)  # TF 2.21 can deadlock destroying these refused iterators at exit; the answer is already out
"""


@pytest.mark.parametrize("transform", ["prefetch_to_device", "copy_to_device"])
def test_device_stages_under_mirrored_are_explained(transform):
    # In its own process, bounded: in a long test session TF 2.21 has been seen to deadlock while
    # destroying the iterator it refused (a futex wait in ~UnboundedThreadPool), which would hang the suite.
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _DEVICE_STAGE_CHECK, transform], capture_output=True,
                         text=True, timeout=240)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["plain"], "plain TF refuses this under MirroredStrategy"
    text = result["ours"]
    assert text and result["plain"].strip().splitlines()[0] in text  # TF's own message is kept
    assert "prefetch_to_device" in text and "experimental_fetch_to_device=True" in text


def test_placement_round_trips_through_a_saved_trace(tf, mirrored, step, tmp_path):
    t = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=step, placement="NO_TENSOR")
    assert t.meta["placement"]["mode"] == "NO_TENSOR" and "numerics" not in t.meta["placement"]
    assert vizdist.load_trace(t.save(tmp_path / "p.json")) == t


@pytest.mark.parametrize("iteration", ["get_next", "get_next_as_optional"])
def test_every_iteration_style_records_the_same_devices(tf, mirrored, step, iteration):
    t = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=step, iteration=iteration, placement=True)
    it = iter(mirrored.experimental_distribute_dataset(_dataset(tf)))
    first = it.get_next() if iteration == "get_next" else it.get_next_as_optional().get_value()
    plain = [short_device(v.device) for v in mirrored.experimental_local_results(first)]
    assert t.meta["placement"]["batch_devices"] == plain  # the optional's value reports CPU:0 for every replica
    replicas = [short_device(d) for d in mirrored.extended.worker_devices]
    assert sorted(r["device"] for r in _ops(t, "step", "Mul")) == sorted(replicas)
    assert t.split().values.tolist() == vizdist.trace_distribution(mirrored, _dataset(tf)).split().values.tolist()


def test_dataset_fn_pipelines_are_recorded_per_replica(tf, mirrored, step):
    def dataset_fn(ctx):
        return tf.data.Dataset.range(16).map(lambda x: tf.cast(x, tf.float32) / 2.0).batch(2)

    t = vizdist.trace_distribution(mirrored, dataset_fn=dataset_fn, step_fn=step, placement=True)
    dist = mirrored.distribute_datasets_from_function(dataset_fn)
    plain = [short_device(v.device) for v in mirrored.experimental_local_results(next(iter(dist)))]
    assert t.meta["placement"]["batch_devices"] == plain
    assert {r["device"] for r in _ops(t, "pipeline", "RealDiv")} == {t.meta["placement"]["host"]}


def test_health_modes_say_they_skip_non_float_graph_ops(tf, mirrored):
    @tf.function
    def int_step(x):
        return tf.reduce_sum(tf.cast(x, tf.int64) * 3)  # Mul on int64: no float output

    curt = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=int_step, placement=True)
    every = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=int_step, placement="NO_TENSOR")
    assert not _ops(curt, "step", "Mul") and len(_ops(every, "step", "Mul")) == 4
    assert any("only of graph ops whose outputs are floating point" in n for n in curt.meta["placement"]["notes"])
    assert not every.meta["placement"]["notes"]
    assert "placement-note" in vizdist.diagnose(curt)["code"].tolist()


def test_vizdist_reading_tfs_graph_adds_no_op_row(tf, mirrored, step, monkeypatch):
    """meta["rebatch"] is read by serializing TF's dataset graph (an op): that op is vizdist's, not the run's."""
    from vizdist.instrument.run import inputs

    def rows(t):  # (each run traces its own copy of the step: __inference_step_<n>)
        return sorted(tuple(re.sub(r"_\d+$", "", o[k]) for k in ("stage", "op_type", "graph", "device"))
                      for o in t.meta["placement"]["ops"])

    read = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=step, placement="NO_TENSOR")
    assert read.meta["rebatch"]  # the graph was read (under the debugger)
    monkeypatch.setattr(inputs, "rebatch_op", lambda dist: "")
    unread = vizdist.trace_distribution(mirrored, _dataset(tf), step_fn=step, placement="NO_TENSOR")
    assert rows(read) == rows(unread)
