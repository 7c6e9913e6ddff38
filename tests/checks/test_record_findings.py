"""Findings about a ``vizdist.record()`` block speak the user's terms (issue: findings in the wrong terms).

Each expectation comes from plain TF or Keras run in the test: how many steps the code read (a layer or a
loop counts them), what TF's cardinality says one pass holds, which elements two input pipelines really
produce.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import vizdist

pytestmark = pytest.mark.filterwarnings("ignore::vizdist.errors.RecordingWarning")


@pytest.fixture(scope="module")
def keras(tf):
    import keras

    return keras


def _model(tf, keras, strategy):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse", jit_compile=False)
    tf.random.set_seed(None)
    return model


def _data(tf, n=40, batch=8):
    x = np.arange(n, dtype="float32").reshape(-1, 1)
    return tf.data.Dataset.from_tensor_slices((x, x)).batch(batch)


def test_evaluate_with_fewer_steps_is_a_partial_read_not_missing_data(tf, keras, mirrored):
    data = _data(tf)
    holds = int(data.cardinality())  # TF: 5 global batches in one pass
    model = _model(tf, keras, mirrored)
    with vizdist.record() as rec:
        model.evaluate(data, steps=3, verbose=0)
    read = rec.trace.batches.query("phase == 'evaluate'")["step"].nunique()
    assert read == 3 < holds
    found = vizdist.diagnose(rec.trace)
    assert "missing-elements" not in set(found["code"])
    partial = found[found["code"] == "partial-read"]
    assert len(partial) == 1 and f"read {read} of the {holds} steps" in partial["message"].iloc[0]


def test_a_loop_that_stops_early_is_a_partial_read(tf, mirrored):
    data = tf.data.Dataset.range(16).batch(4)
    with vizdist.record() as rec:
        for k, _ in enumerate(mirrored.experimental_distribute_dataset(data)):
            if k == 1:
                break
    found = vizdist.diagnose(rec.trace)
    assert "missing-elements" not in set(found["code"]) and "partial-read" in set(found["code"])


def test_missing_elements_still_reported_for_a_whole_pass(tf, mirrored):
    """drop_remainder=True over 10 elements in batches of 4: plain TF never delivers the last 2."""
    data = tf.data.Dataset.range(10).batch(4, drop_remainder=True)
    delivered = sorted(int(v) for b in data for v in b.numpy())
    with vizdist.record() as rec:
        for _ in mirrored.experimental_distribute_dataset(data):
            pass
    missing = vizdist.diagnose(rec.trace).query("code == 'missing-elements'")
    assert len(missing) == 1
    assert f"{10 - len(delivered)} source elements of 10 never arrived" in missing["message"].iloc[0]


def test_a_findings_step_is_the_step_its_message_names(tf, keras, mirrored):
    """22 rows in batches of 8 over 4 replicas: each epoch's last batch splits 2, 2, 2, 0 in plain TF."""
    model = _model(tf, keras, mirrored)
    x = np.arange(22, dtype="float32").reshape(-1, 1)
    with vizdist.record() as rec:
        model.fit(tf.data.Dataset.from_tensor_slices((x, x)).batch(8), epochs=2, verbose=0)
    found = vizdist.diagnose(rec.trace)
    stepped = found[found["step"] >= 0]
    assert len(stepped)
    for row in stepped.itertuples():
        named = {int(s) for s in re.findall(r"[Ss]tep (\d+)", row.message)}
        assert named == {row.step}, row.message
    assert set(rec.trace.batches.query("step in @stepped.step")["epoch_step"]) == {2}  # the epoch's 3rd step


def test_overlap_from_a_shuffle_before_shard_names_the_shuffle(tf):
    """Each input pipeline shuffles with its own seed, then shards: plain TF's pipelines overlap."""
    def dataset_fn(ctx):
        return tf.data.Dataset.range(16).shuffle(16).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(1)

    tf.random.set_seed(3)  # each pipeline's shuffle gets its own op seed from the global one
    try:
        plain = [{int(v) for b in dataset_fn(tf.distribute.InputContext(4, i, 4)) for v in b.numpy()}
                 for i in range(4)]
        assert sum(len(p) for p in plain) > len(set().union(*plain))  # plain TF: the shards overlap
        options = tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
        # A strategy of its own: in TF 2.21 a PER_REPLICA run leaves a MirroredStrategy with one input pipeline
        # per replica for good (mirrored_strategy.py, _input_workers_with_options assigns _input_workers_devices),
        # and a later experimental_distribute_dataset on the session's shared strategy then delivers elements twice.
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(4)])
        with vizdist.record() as rec:
            for _ in strategy.distribute_datasets_from_function(dataset_fn, options):
                pass
    finally:
        tf.random.set_seed(None)
    dup = vizdist.diagnose(rec.trace).query("code == 'duplicate-elements'")
    assert len(dup) == 1
    message = dup["message"].iloc[0]
    assert "shuffles before shard()" in message and "add ds = ds.shard" not in message


def test_placement_and_timing_errors_name_record(tf, mirrored):
    with vizdist.record() as rec:
        for _ in mirrored.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(4)):
            pass
    with pytest.raises(ValueError, match=re.escape("vizdist.record(placement=True)")):
        rec.trace.plot.placement()
    with pytest.raises(ValueError, match=re.escape("vizdist.record(timing=True)")):
        rec.trace.plot.timeline()
