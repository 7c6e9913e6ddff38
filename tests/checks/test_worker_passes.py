"""worker-duplicates on DATA-sharded runs with shuffle + repeat, from real single-process traces.

A 2-worker DATA-sharded run is two pipelines that differ only in the shard TensorFlow appends:
``ShardByData`` in tensorflow/core/grappler/optimizers/data/auto_shard.cc adds
``shard(num_workers, index)`` before the final prefetch/options of the pipeline and leaves every
transformation upstream (a shuffle too) as it is. Each worker's pipeline is built here the same way,
traced in this process and merged as that worker's shard; what the workers share is computed from
plain TensorFlow runs of the same pipelines.
"""

from __future__ import annotations

import pytest

import vizdist
from vizdist.trace import Trace

N, BATCH, REPEATS = 16, 4, 3


def _pipeline(tf, seed):
    return tf.data.Dataset.range(N).shuffle(N, seed=seed).repeat(REPEATS).batch(BATCH)


def _worker_view(tf, seed, worker: int):
    """Worker ``worker``'s pipeline under DATA sharding over 2 workers (auto_shard.cc, ShardByData)."""
    return _pipeline(tf, seed).shard(2, worker)


def _plain_reads(tf, seed) -> dict[int, list[tuple[int, int]]]:
    """worker -> (repetition, element) pairs plain TF delivered. The shard keeps batches w, w + 2, ...
    of the stream; an element's repetition is its position in the stream // N (repeat's rule)."""
    out = {}
    for w in range(2):
        batches = [b.numpy().tolist() for b in _worker_view(tf, seed, w)]
        out[w] = [((w + 2 * k) * BATCH + i) // N for k, b in enumerate(batches) for i in range(len(b))]
        out[w] = list(zip(out[w], [v for b in batches for v in b], strict=True))
    return out


def _two_worker_trace(tf, seed) -> Trace:
    shards = []
    for w in range(2):
        t = vizdist.trace_distribution(None, _worker_view(tf, seed, w), progress=False)
        shards.append(Trace(elements=t.elements.assign(worker=w), batches=t.batches.assign(worker=w),
                            events=t.events, meta=dict(t.meta, worker=w)))
    return Trace.merge(shards, meta={"num_workers": 2, "shard_policy": "DATA"})


def _finding(t: Trace):
    f = vizdist.diagnose(t)
    return f[f["code"] == "worker-duplicates"]


def test_seeded_shuffle_with_repeat_shares_nothing_within_a_repetition(tf) -> None:
    reads = _plain_reads(tf, seed=7)
    ids = [{v for _, v in reads[w]} for w in range(2)]
    assert ids[0] & ids[1], "across repetitions the workers do read the same elements"
    assert not set(reads[0]) & set(reads[1]), "within one repetition plain TF splits the data"
    assert _finding(_two_worker_trace(tf, seed=7)).empty


def test_unseeded_shuffle_is_named_as_the_cause(tf) -> None:
    # No global seed (an earlier test in this process may have set one, e.g. keras.utils.set_random_seed):
    # with one, TF derives the shuffle's seed from it (random_seed.get_seed), so the shuffle is seeded.
    tf.random.set_seed(None)
    reads = _plain_reads(tf, seed=None)  # every pipeline built draws its own random seed
    assert set(reads[0]) & set(reads[1]), "plain TF: two unseeded orders split by DATA overlap"
    t = _two_worker_trace(tf, seed=None)
    assert t.meta["pipeline_flags"]["shuffle_unseeded"]
    row = _finding(t).iloc[0]
    e = t.elements
    pairs = {w: set(zip(e[e.worker == w]["epoch"], e[e.worker == w]["source_id"], strict=True)) for w in (0, 1)}
    assert row["message"].startswith(f"{len(pairs[0] & pairs[1])} of {len(pairs[0] | pairs[1])} source elements")
    assert row["severity"] == "warning" and "without a seed" in row["message"]
    assert "seed=" in row["message"] and "auto-shard policy" not in row["message"]


@pytest.mark.parametrize("pass_column", ["phase", "dataset", "epoch", "repetition"])
def test_each_pass_column_separates_passes(pass_column: str) -> None:
    rows = [dict(step=p, replica=w, worker=w, source_id=0, position=0, **{pass_column: p + w})
            for w in range(2) for p in range(2)]
    t = Trace.from_records(elements=rows, meta={"num_workers": 2, "shard_policy": "DATA"})
    row = _finding(t).iloc[0]  # pass 1: both workers read element 0
    assert row["message"].startswith("1 of 3 source elements")


def test_global_seed_counts_as_seeded(tf) -> None:
    tf.random.set_seed(3)
    try:
        t = vizdist.trace_distribution(None, _pipeline(tf, None), steps=1, progress=False)
    finally:
        tf.random.set_seed(None)
    assert "shuffle_unseeded" not in t.meta["pipeline_flags"]


def test_unknown_cause_lists_candidates_at_info() -> None:
    rows = [dict(step=0, replica=w, worker=w, source_id=i, position=i) for w in range(2) for i in range(2)]
    row = _finding(Trace.from_records(elements=rows, meta={"num_workers": 2, "shard_policy": "DATA"})).iloc[0]
    assert row["severity"] == "info" and "Candidates:" in row["message"]



def _shared_rows(**meta) -> Trace:
    rows = [dict(step=0, replica=w, worker=w, source_id=i, position=i) for w in range(2) for i in range(2)]
    return Trace.from_records(elements=rows, meta={"num_workers": 2, **meta})


def test_dataset_fn_that_shards_after_an_unseeded_shuffle_names_the_shuffle() -> None:
    flags = {"shuffle": True, "shuffle_unseeded": True, "shard": True}
    ops = ["range(0, 8, 1)", "shuffle(8)", "shard(2, 0)", "batch(2, drop_remainder=False)"]
    row = _finding(_shared_rows(api="distribute_datasets_from_function", pipeline_flags=flags, pipeline=ops))
    assert "without a seed" in row.iloc[0]["message"] and "ignores" not in row.iloc[0]["message"]
    after = [ops[0], ops[2], ops[1], ops[3]]  # shard first: the shuffle cannot make the workers overlap
    row = _finding(_shared_rows(api="distribute_datasets_from_function", pipeline_flags=flags, pipeline=after))
    assert "without a seed" not in row.iloc[0]["message"] and row.iloc[0]["severity"] == "info"
    row = _finding(_shared_rows(api="distribute_datasets_from_function", pipeline_flags=dict(flags, shard=False)))
    assert "does not shard datasets made by distribute_datasets_from_function" in row.iloc[0]["message"]


def test_repetitions_the_trace_cannot_number_lower_the_finding_to_info() -> None:
    t = _shared_rows(shard_policy="OFF", provenance="ambiguous", pipeline_flags={"repeat": True},
                     provenance_note="repeat(None): the length of one pass is unknown")
    row = _finding(t).iloc[0]
    assert row["severity"] == "info" and "cannot number the repetitions" in row["message"]


# -- slow: a real 2-worker MultiWorkerMirroredStrategy run --------------------------------------
def _mwms_shuffle_repeat(ctx, shard_dir: str) -> Trace:
    """Per seed: what plain TF delivered on this worker, and vizdist's shard of the same run."""
    import os

    import tensorflow as tf

    from vizdist.instrument.processes.cluster import record_worker_shard

    strategy = ctx.multi_worker_strategy()
    plain = {}
    for name, seed in (("seeded", 7), ("unseeded", None)):
        ds = tf.data.Dataset.range(N).shuffle(N, seed=seed).repeat(2).batch(BATCH)
        plain[name] = [v for b in strategy.experimental_distribute_dataset(ds)
                       for t in strategy.experimental_local_results(b) for v in t.numpy().tolist()]
        record_worker_shard(vizdist.trace_distribution(strategy, ds, progress=False), os.path.join(shard_dir, name))
    return Trace(meta={"plain": plain})


def _within_pass(values: dict[int, list[int]], workers: int = 2) -> set[tuple[int, int]]:
    """(repetition, element) pairs both workers got. DATA sharding (AUTO falls back to it over range:
    auto_shard.cc lists RangeDataset among the unshardable sources) cuts each global batch into
    BATCH // workers pieces (one replica per worker on CPU) and worker w keeps pieces w, w + workers, ...;
    an element's repetition is its position in the stream // N (repeat's rule)."""
    piece = BATCH // workers
    got = {w: {(((w + workers * (i // piece)) * piece + i % piece) // N, v) for i, v in enumerate(vals)}
           for w, vals in values.items()}
    return got[0] & got[1]


@pytest.mark.slow
def test_real_multi_worker_shuffle_repeat(tmp_path) -> None:
    from vizdist.instrument.processes.cluster import LocalCluster
    from vizdist.trace import load_trace

    with LocalCluster(workers=2, timeout=120.0, collective_timeout=15.0, progress=False) as cluster:
        run = cluster.run(_mwms_shuffle_repeat, str(tmp_path))
    plain = {int(s["task"].rsplit("-", 1)[1]): s["plain"] for s in run.meta["shards"]}
    seeded = {w: p["seeded"] for w, p in plain.items()}
    assert set(seeded[0]) & set(seeded[1]) and not _within_pass(seeded)
    assert _finding(load_trace(tmp_path / "seeded")).empty
    assert _within_pass({w: p["unseeded"] for w, p in plain.items()})
    row = _finding(load_trace(tmp_path / "unseeded")).iloc[0]
    assert row["severity"] == "warning" and "without a seed" in row["message"]
