"""GPU device planes on the timeline, and placement on real GPUs (the gpu tests skip without one)."""

from __future__ import annotations

import pytest

import vizdist
from vizdist.instrument.observe.xplane import parse_xplane


def _xspace_with_gpu_plane(tmp_path):
    """An XPlane file in TF's own protobuf format holding one GPU plane: a host-to-device copy and a kernel."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(id=1, name="/device:GPU:0")
    plane.event_metadata[1].id, plane.event_metadata[1].name = 1, "MemcpyH2D"
    plane.event_metadata[2].id, plane.event_metadata[2].name = 2, "volta_sgemm_128x64_nn"
    copy_line = plane.lines.add(id=1, display_name="Stream #13(MemcpyH2D)", timestamp_ns=1_000)
    copy_line.events.add(metadata_id=1, offset_ps=0, duration_ps=5_000_000)
    kernel_line = plane.lines.add(id=2, display_name="Stream #7(Compute)", timestamp_ns=1_000)
    kernel_line.events.add(metadata_id=2, offset_ps=6_000_000, duration_ps=2_000_000)
    path = tmp_path / "gpu.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return str(path)


def test_gpu_planes_are_kept_as_copy_and_kernel_spans(tf, tmp_path):
    spans, _ = parse_xplane(_xspace_with_gpu_plane(tmp_path), worker=0)
    rows = spans.sort_values("t_start_ns")[["lane", "stage", "op", "t_start_ns", "t_end_ns"]].values.tolist()
    assert rows == [["w0 GPU:0 Stream #13(MemcpyH2D)", "transfer", "MemcpyH2D", 1_000, 6_000],
                    ["w0 GPU:0 Stream #7(Compute)", "consume", "volta_sgemm_128x64_nn", 7_000, 9_000]]


@pytest.mark.gpu
def test_placement_on_real_gpus_matches_tensor_devices(tf):
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    strategy = tf.distribute.MirroredStrategy(gpus)

    @tf.function
    def step(x):
        return tf.reduce_sum(x * 2.0)

    ds = tf.data.Dataset.range(64).map(lambda x: tf.cast(x, tf.float32)).batch(16)
    t = vizdist.trace_distribution(strategy, ds, step_fn=step, placement=True, timing=True)
    plain = [v.device.split("device:")[-1] for v in
             strategy.experimental_local_results(next(iter(strategy.experimental_distribute_dataset(ds))))]
    assert t.meta["placement"]["batch_devices"] == plain
    assert {o["device"] for o in t.meta["placement"]["ops"] if o["stage"] == "step" and o["kind"] == "graph"} \
        >= set(plain)
    assert t.events["lane"].str.contains("GPU:").any()  # the device planes reach the timeline


@pytest.mark.gpu
def test_nccl_all_reduce_on_real_gpus_matches_plain_tf(tf):
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    strategy = tf.distribute.MirroredStrategy(gpus, cross_device_ops=tf.distribute.NcclAllReduce())
    t = vizdist.trace_reduction(strategy, lambda ctx: tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32),
                                how="all_reduce", reduce_op="SUM")
    r = t.meta["reductions"][0]
    value = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32))
    plain = strategy.run(lambda x: tf.distribute.get_replica_context().all_reduce("SUM", x), args=(value,))
    assert r["cross_device_ops"] == "NcclAllReduce"
    assert [x["value"] for x in r["results"]] == [float(v) for v in strategy.experimental_local_results(plain)]


@pytest.mark.gpu
def test_worker_processes_share_the_gpu_this_process_holds(tf):
    """TF maps a GPU's memory when it first uses it: vizdist's workers must still start and run there."""
    float(tf.reduce_sum(tf.ones([4])))  # this process now holds its GPU context, as a notebook kernel does

    def work(ctx):
        import tensorflow as wtf

        strategy = ctx.multi_worker_strategy()
        return vizdist.trace_distribution(strategy, wtf.data.Dataset.range(16).batch(4))

    with vizdist.LocalCluster(workers=2) as cluster:
        t = cluster.run(work)
    assert sorted(t.elements["worker"].unique().tolist()) == [0, 1]
    # DATA sharding of range (AUTO falls back to it): each element read by exactly one worker
    assert sorted(t.elements["source_id"].tolist()) == list(range(16))


# -- What differs on real GPUs (notebooks/WHERE_NEXT.md, "On real GPUs"; claims G-1 to G-4) ------------------
def test_mirrored_strategy_calls_no_select_cross_device_ops_and_reduces_int32_on_one_device(tf, devices, monkeypatch):
    """Runs everywhere: TF 2.21's MirroredStrategy never asks the older chooser select_cross_device_ops
    (cross_device_ops.py) for its default, and _get_cross_device_ops sends int32 values to ReductionToOneDevice."""
    from tensorflow.python.distribute import cross_device_ops as cdo

    def refuse(*args, **kwargs):
        raise AssertionError("select_cross_device_ops was called")

    monkeypatch.setattr(cdo, "select_cross_device_ops", refuse)
    s = tf.distribute.MirroredStrategy(devices)
    assert type(s.extended._cross_device_ops) is cdo.CollectiveAllReduce
    assert type(s.extended._get_cross_device_ops(tf.constant([1], tf.int32))) is cdo.ReductionToOneDevice
    assert s.extended._get_cross_device_ops(tf.constant([1.0])) is s.extended._cross_device_ops
    value = s.experimental_distribute_values_from_function(lambda c: tf.constant([1], tf.int32))
    assert s.reduce("SUM", value, axis=None).numpy().tolist() == [len(devices)]


@pytest.mark.gpu
def test_mirrored_default_cross_device_ops_over_gpus_follow_tf_source(tf):
    """TF 2.21 mirrored_strategy.py: given no cross_device_ops, MirroredStrategy builds CollectiveAllReduce
    (_make_collective_ops_with_fallbacks), not the NcclAllReduce its docstring names: NCCL when every device is
    a physical GPU, RING when there are more logical GPUs than physical ones; ReductionToOneDevice when CPUs and
    GPUs are mixed, and for int32 values (_get_cross_device_ops)."""
    from tensorflow.python.distribute import cross_device_ops as cdo

    impl = tf.distribute.experimental.CommunicationImplementation
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    physical = tf.config.list_physical_devices("GPU")
    s = tf.distribute.MirroredStrategy(gpus)
    ops = s.extended._cross_device_ops
    assert type(ops) is cdo.CollectiveAllReduce
    assert ops._options.implementation == (impl.RING if len(gpus) > len(physical) else impl.NCCL)
    assert type(s.extended._get_cross_device_ops(tf.constant([1], tf.int32))) is cdo.ReductionToOneDevice
    assert s.extended._get_cross_device_ops(tf.constant([1.0])) is ops
    mixed = tf.distribute.MirroredStrategy(["/cpu:0", gpus[0]])
    assert type(mixed.extended._cross_device_ops) is cdo.ReductionToOneDevice


@pytest.mark.gpu
def test_fetch_to_device_puts_each_batch_on_its_gpu_and_false_keeps_it_on_the_host(tf):
    """TF 2.21: with experimental_fetch_to_device (default True) the MultiDeviceIterator prefetches each
    replica's batch onto its GPU (multi_device_iterator_ops._create_device_dataset); with False,
    MirroredStrategy gives the iterator the host CPU for every replica (_input_workers_with_options)."""
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    s = tf.distribute.MirroredStrategy(gpus)
    ds = tf.data.Dataset.range(8).map(lambda x: tf.cast(x, tf.float32)).batch(2 * len(gpus))

    def first(options=None):
        batch = next(iter(s.experimental_distribute_dataset(ds, options)))
        return [tf.DeviceSpec.from_string(v.device) for v in s.experimental_local_results(batch)]

    on = first()
    assert [(d.device_type, d.device_index) for d in on] == [("GPU", i) for i in range(len(gpus))]
    off = first(tf.distribute.InputOptions(experimental_fetch_to_device=False))
    assert [(d.device_type, d.device_index) for d in off] == [("CPU", 0)] * len(gpus)


def _mwms_auto_all_reduce(ctx):
    """In each worker: MultiWorkerMirroredStrategy with its default CommunicationOptions (AUTO), one all_reduce."""
    import tensorflow as wtf

    s = wtf.distribute.MultiWorkerMirroredStrategy()
    return vizdist.trace_reduction(
        s, lambda c: wtf.constant([1.0]) * wtf.cast(c.replica_id_in_sync_group + 1, wtf.float32),
        how="all_reduce", reduce_op="SUM")


@pytest.mark.gpu
@pytest.mark.slow
def test_mwms_auto_asks_its_gpu_collectives_for_no_nccl(tf):
    """TF 2.21: MWMS's default implementation is AUTO (collective_all_reduce_strategy.py), whose ops carry
    communication_hint "auto" (cross_device_utils.py); the runtime takes NCCL only for the hint "nccl" or
    ConfigProto collective_nccl (collective_param_resolver_local.cc, AssignCollectiveType), which MWMS sets
    only for NCCL in graph mode: on GPUs AUTO still runs the ring."""
    with vizdist.LocalCluster(workers=2, timeout=240, progress=False) as cluster:
        t = cluster.run(_mwms_auto_all_reduce)
    r = t.meta["reductions"][0]
    assert r["communication"]["requested"] == "AUTO"
    coll = r["collectives"]
    assert coll and {c["communication_hint"] for c in coll} == {"auto"}
    assert all("GPU:" in c["device"] for c in coll)
    assert {c["implementation"] for c in coll} == {"RingReduce"}
