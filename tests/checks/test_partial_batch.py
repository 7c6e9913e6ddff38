"""partial-batch on real runs: a tf.data service run whose served dataset is batched on the service
workers, and a pipeline that batches before repeat().

What TF delivers is read from a plain iteration of the same service dataset (no vizdist), and the rule
behind it is TF's ``distribute`` docstring (tensorflow/python/data/experimental/ops/data_service_ops.py):
under parallel_epochs "the entire input dataset will be processed independently by each of the tf.data
service workers", so each worker runs the batch over its own pass and ends it with its own short batch.
"""

from __future__ import annotations

import pytest

import vizdist

N, BATCH, WORKERS = 10, 4, 2


@pytest.fixture(scope="module")
def service(tf):
    s = vizdist.LocalDataService(workers=WORKERS, isolate=False, progress=False)
    yield s
    s.close()


def test_short_batches_of_service_workers_are_not_called_the_end_of_the_data(tf, service) -> None:
    svc = tf.data.experimental.service
    ds = tf.data.Dataset.range(N).batch(BATCH).apply(svc.distribute("parallel_epochs", service.target))
    sizes = [int(b.shape[0]) for b in ds]  # plain TF: each worker's pass ends with its own short batch
    short = [s for s in sizes if s < BATCH]
    assert len(short) == WORKERS, sizes  # so at least one short batch comes before the end of the stream
    t = vizdist.trace_distribution(None, ds, progress=False)
    f = vizdist.diagnose(t)
    partial = f[f["code"] == "partial-batch"]
    assert sorted(int(m.split(" delivered ")[1].split(" of ")[0]) for m in partial["message"]) == sorted(short)
    for message in partial["message"]:
        assert "ran out" not in message and "each service worker batches only the elements" in message
        assert f"up to {WORKERS} such batches" in message and "inside the dataset sent to the service" in message


def test_batch_after_the_service_read_keeps_the_end_of_data_cause(tf, service) -> None:
    svc = tf.data.experimental.service
    ds = tf.data.Dataset.range(N).apply(svc.distribute("distributed_epoch", service.target)).batch(BATCH)
    sizes = [int(b.shape[0]) for b in ds]  # plain TF: the consumer batches; only its last batch is short
    assert sizes[-1] < BATCH and all(s == BATCH for s in sizes[:-1])
    f = vizdist.diagnose(vizdist.trace_distribution(None, ds, progress=False))
    (message,) = f[f["code"] == "partial-batch"]["message"]
    assert f"delivered {sizes[-1]} of {BATCH}" in message and "ran out" in message


def test_short_batch_mid_run_is_not_called_the_last_one(tf) -> None:
    ds = tf.data.Dataset.range(N).batch(BATCH).repeat(2)
    sizes = [int(b.shape[0]) for b in ds]  # plain TF: each repetition ends with its own short batch
    mid = [i for i, s in enumerate(sizes[:-1]) if s < BATCH]
    assert mid
    f = vizdist.diagnose(vizdist.trace_distribution(None, ds, progress=False))
    rows = f[(f["code"] == "partial-batch") & f["step"].isin(mid)]
    assert rows["step"].tolist() == mid
    assert all("last batch" not in m and "batches before repeat()" in m for m in rows["message"])
