"""empty-replica under distribute_datasets_from_function, on real runs over 4 logical CPUs.

What each replica got is read from plain TF (the same dataset_fn, no vizdist); the rule behind it is
distribute_datasets_from_function's docstring (tensorflow/python/distribute/distribute_lib.py): the
dataset_fn's dataset is "already batched by per-replica batch size" and every replica "will dequeue one
batch of inputs" per step.
"""

from __future__ import annotations

import math

import vizdist


def _plain(tf, strategy, dataset_fn) -> list[list[tuple[int, ...]]]:
    """Per step, the shape of each replica's batch (of the first component) that plain TF delivered."""
    out = []
    for batch in strategy.distribute_datasets_from_function(dataset_fn):
        first = batch[0] if isinstance(batch, tuple) else batch
        out.append([tuple(t.shape) for t in strategy.experimental_local_results(first)])
    return out


def _empty_rows(strategy, dataset_fn):
    f = vizdist.diagnose(vizdist.trace_distribution(strategy, dataset_fn=dataset_fn, progress=False))
    return f[f["code"] == "empty-replica"]


def test_tutorials_double_batched_dataset_fn_is_named(tf, mirrored) -> None:
    # TensorFlow's "Distributed input" tutorial (tensorflow.org/tutorials/distribute/input), section
    # tf.distribute.Strategy.distribute_datasets_from_function: its dataset_fn batches by 16, then per replica.
    global_batch_size = 16

    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(64).batch(16)
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        dataset = dataset.batch(batch_size)
        return dataset.prefetch(2)

    plain = _plain(tf, mirrored, dataset_fn)
    got = [[math.prod(s[:2]) if s[0] else 0 for s in step] for step in plain]  # elements per replica
    rows = _empty_rows(mirrored, dataset_fn)
    assert rows["step"].tolist() == [i for i, step in enumerate(got) if 0 in step]
    for step, message in zip(rows["step"], rows["message"], strict=True):
        assert "batched twice (batch(16, drop_remainder=False), then batch(4, drop_remainder=False))" in message
        assert f"one replica got {max(got[step])} elements" in message
        assert f"only {sum(v > 0 for v in got[step])} such element(s) remained for 4 replicas" in message
        assert "get_per_replica_batch_size(global_batch_size)" in message and "elements for 4 replicas" not in message


def test_dataset_fn_batching_by_the_global_batch_asks_about_the_mix_up(tf, mirrored) -> None:
    def dataset_fn(input_context):
        return tf.data.Dataset.range(40).batch(16)  # the global batch size, where a per-replica one belongs

    got = [[s[0] for s in step] for step in _plain(tf, mirrored, dataset_fn)]
    (row,) = _empty_rows(mirrored, dataset_fn).itertuples()
    assert row.step == next(i for i, step in enumerate(got) if 0 in step)
    assert f"only {sum(v > 0 for v in got[row.step])} of its batches remained for 4 replicas" in row.message
    assert f"({sum(got[row.step])} elements)" in row.message
    assert "input_context.get_per_replica_batch_size(16) = 4" in row.message
