"""GPU device planes on the timeline, and placement on real GPUs (the gpu tests skip without one)."""

from __future__ import annotations

import pytest

import vizdist
from vizdist.instrument.observe.timing import parse_xplane


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
