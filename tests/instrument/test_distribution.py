"""trace_distribution and watch on real strategies over 4 logical CPUs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import vizdist
from vizdist.errors import TracingError


def _plain_steps(tf, strategy, ds, n=None):
    """Per step, per replica: the values plain TF delivers (no vizdist), first ``n`` steps."""
    out = []
    for x in strategy.experimental_distribute_dataset(ds):
        if n is not None and len(out) >= n:
            break
        out.append([np.atleast_1d(v.numpy()).tolist() for v in strategy.experimental_local_results(x)])
    return out


def _plain_devices(strategy, ds):
    """The device of each replica's first batch, as plain TF places it."""
    first = next(iter(strategy.experimental_distribute_dataset(ds)))
    return [v.device for v in strategy.experimental_local_results(first)]


@pytest.mark.smoke
def test_range10_batch4_over_4_replicas_last_two_empty(tf, mirrored):
    ds = tf.data.Dataset.range(10).batch(4)
    plain = _plain_steps(tf, mirrored, ds)
    t = vizdist.trace_distribution(mirrored, ds)
    assert t.steps == list(range(len(plain)))
    assert [t.split().loc[s].tolist() for s in t.steps] == plain
    last = len(plain) - 1
    empties = [r for r, v in enumerate(plain[last]) if not v]
    assert empties  # the case this test is about: plain TF leaves some replicas empty at the last step
    b = t.batches.set_index(["step", "replica"])
    assert all(b.loc[(last, r), "empty"] for r in empties)
    short = [sum(map(len, step)) < 4 for step in plain]  # plain TF's global batch short of 4
    assert [bool(b.loc[(s, 0), "partial"]) for s in t.steps] == short and short[last]
    devs = t.batches[t.batches.step == 0].sort_values("replica")["device"].tolist()
    assert devs == _plain_devices(mirrored, ds)
    f = vizdist.diagnose(t)
    empty = f[f.code == "empty-replica"]
    assert len(empty) == 1 and empty.iloc[0]["step"] == last and empty.iloc[0]["replicas"] == empties
    assert f"replicas {', '.join(map(str, empties))} got an empty batch" in empty.iloc[0]["message"]
    assert "drop_remainder=True" in empty.iloc[0]["message"]
    assert t.meta["global_batch_size"] == 4 and t.meta["num_replicas"] == 4


@pytest.mark.parametrize("iteration", ["for", "get_next", "get_next_as_optional"])
@pytest.mark.smoke
def test_every_iteration_style_matches_raw_tf(tf, mirrored, iteration):
    ds = tf.data.Dataset.range(100).batch(2)
    t = vizdist.trace_distribution(mirrored, ds, iteration=iteration)
    raw = _plain_steps(tf, mirrored, ds)
    assert [t.split().loc[s].tolist() for s in t.steps] == raw
    assert t.meta["iteration"] == iteration


def test_steps_stops_early_and_infinite_needs_steps(tf, mirrored):
    ds = tf.data.Dataset.range(8).batch(4).repeat()
    with pytest.raises(ValueError, match=r"infinite.*steps=N"):
        vizdist.trace_distribution(mirrored, ds)
    t = vizdist.trace_distribution(mirrored, ds, steps=3)
    assert t.steps == [0, 1, 2] and t.meta["stopped"] == "steps"
    assert [t.split().loc[s].tolist() for s in t.steps] == _plain_steps(tf, mirrored, ds, 3)


def test_step_fn_sees_untagged_values_and_results_are_recorded(tf, mirrored):
    ds = tf.data.Dataset.range(8).map(lambda x: x * 10).batch(4)
    t = vizdist.trace_distribution(mirrored, ds, step_fn=lambda x: tf.reduce_sum(x))
    res = t.batches.sort_values(["step", "replica"])["result"].map(json.loads).tolist()
    plain = _plain_steps(tf, mirrored, ds)  # the step saw these values: sums of x * 10
    assert res == [sum(v) for step in plain for v in step]
    # the ids are the source elements before the map: the values / 10
    assert [t.split().loc[s].tolist() for s in t.steps] == [[[x // 10 for x in v] for v in step] for step in plain]


@pytest.mark.smoke
def test_dataset_fn_records_input_contexts_and_per_worker_split(tf, mirrored):
    def fn(ctx):
        return tf.data.Dataset.range(16).batch(ctx.get_per_replica_batch_size(8))

    contexts = []

    def plain_fn(ctx):
        contexts.append(ctx)
        return fn(ctx)

    plain = [[v.numpy().tolist() for v in mirrored.experimental_local_results(x)]
             for x in mirrored.distribute_datasets_from_function(plain_fn)]
    t = vizdist.trace_distribution(mirrored, dataset_fn=fn)
    assert t.meta["input_contexts"] == [
        {"num_input_pipelines": c.num_input_pipelines, "input_pipeline_id": c.input_pipeline_id,
         "num_replicas_in_sync": c.num_replicas_in_sync} for c in contexts]
    assert [t.split().loc[s].tolist() for s in t.steps] == plain
    assert t.meta["global_batch_size"] == 8 and t.meta["per_replica_batch_size"] == 2
    assert vizdist.diagnose(t).empty


def test_per_replica_dataset_fn_ignoring_context_is_flagged(tf):
    # A strategy of its own: in TF 2.21, after a PER_REPLICA run, the same MirroredStrategy
    # auto-shards later file datasets across its replicas (seen in test_text_files_*).
    mirrored = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(4)])
    opts = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_fetch_to_device=False)
    t = vizdist.trace_distribution(mirrored, dataset_fn=lambda ctx: tf.data.Dataset.range(8).batch(2),
                                   options=opts)
    assert len(t.meta["input_contexts"]) == 4
    plain = [[v.numpy().tolist() for v in mirrored.experimental_local_results(x)] for x in
             mirrored.distribute_datasets_from_function(lambda ctx: tf.data.Dataset.range(8).batch(2), opts)]
    assert [t.split().loc[s].tolist() for s in t.steps] == plain
    assert plain[0] == [plain[0][0]] * 4  # plain TF: every replica got the same batch
    f = vizdist.diagnose(t)
    dup = f[f.code == "duplicate-elements"].iloc[0]
    assert dup["severity"] == "error" and "ignores its InputContext" in dup["message"]
    assert "shard(ctx.num_input_pipelines, ctx.input_pipeline_id)" in dup["message"]

    def sharded(ctx):
        return tf.data.Dataset.range(8).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(2)

    t2 = vizdist.trace_distribution(mirrored, dataset_fn=sharded, options=opts)
    assert "duplicate-elements" not in set(vizdist.diagnose(t2).code)
    assert sorted(t2.elements.source_id.tolist()) == list(range(8))


@pytest.mark.parametrize("per_replica", [1, 2])
def test_from_function_with_drop_remainder_names_the_elements_tf_never_handed_out(tf, mirrored, per_replica):
    def fn(ctx):  # sharded by its context, as TF's guide does (one input pipeline here: shard(1, 0))
        ds = tf.data.Dataset.range(10).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(per_replica, drop_remainder=True)

    plain = {int(v) for x in mirrored.distribute_datasets_from_function(fn)
             for t in mirrored.experimental_local_results(x) for v in t.numpy()}
    missing = sorted(set(range(10)) - plain)
    # the one pipeline's own batches, taken by the 4 replicas in turn: static shapes turn TF's partial-batch
    # handling off (input_lib.py, _enable_get_next_as_optional), so only steps that feed every replica come
    batches = [b.tolist() for b in fn(tf.distribute.InputContext(num_replicas_in_sync=4)).as_numpy_iterator()]
    full = len(batches) // 4 * 4
    assert missing and missing == sorted(v for b in batches[full:] for v in b)
    t = vizdist.trace_distribution(mirrored, dataset_fn=fn)
    row = vizdist.diagnose(t).query("code == 'missing-elements'").iloc[0]
    assert f"never arrived ({', '.join(map(str, missing))})" in row["message"]
    assert "some replica would get no batch" in row["message"]


def test_per_replica_pipelines_are_judged_together_for_missing_elements(tf):
    mirrored = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(4)])  # see the PER_REPLICA test above
    opts = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_fetch_to_device=False)

    def fn(ctx):  # each replica reads its own shard; batches of 2 drop a shard's odd last element
        ds = tf.data.Dataset.range(10).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(8), drop_remainder=True)

    plain = {int(v) for x in mirrored.distribute_datasets_from_function(fn, opts)
             for t in mirrored.experimental_local_results(x) for v in t.numpy()}
    missing = sorted(set(range(10)) - plain)
    # each replica's own pipeline drops its short last batch; every replica has its full batches here
    shards = [[b.tolist() for b in fn(tf.distribute.InputContext(4, i, 4)).as_numpy_iterator()] for i in range(4)]
    assert len({len(bs) for bs in shards}) == 1
    assert missing and missing == sorted(set(range(10)) - {v for bs in shards for b in bs for v in b})
    t = vizdist.trace_distribution(mirrored, dataset_fn=fn, options=opts)
    row = vizdist.diagnose(t).query("code == 'missing-elements'").iloc[0]
    assert f"never arrived ({', '.join(map(str, missing))})" in row["message"]


def _plain_rebatch_op(strategy, ds):
    """The rebatch op in plain TF's distributed dataset graph (after its auto-shard rewrite)."""
    from tensorflow.core.framework import graph_pb2

    cloned = strategy.experimental_distribute_dataset(ds)._cloned_datasets[0]
    ops = {n.op for n in graph_pb2.GraphDef.FromString(cloned._as_serialized_graph().numpy()).node}
    return [op for op in ("RebatchDatasetV2", "RebatchDataset") if op in ops]


@pytest.mark.parametrize("source", ["range", "text"])
def test_meta_names_the_rebatch_tf_cut_the_batches_with(tf, mirrored, tmp_path, source):
    if source == "range":
        ds = tf.data.Dataset.range(10).batch(6)
    else:
        (tmp_path / "a.txt").write_text("".join(f"{i}\n" for i in range(10)))
        ds = tf.data.TextLineDataset([str(tmp_path / "a.txt")]).batch(6)
    plain = _plain_steps(tf, mirrored, ds)
    t = vizdist.trace_distribution(mirrored, ds)
    assert [t.meta["rebatch"]] == _plain_rebatch_op(mirrored, ds)
    # the rule each op follows (auto_shard.cc; batch_sizes_for_worker's docstring) gives plain TF's split
    def rule(n, r=4, global_batch=6):
        if t.meta["rebatch"] == "RebatchDataset":  # every batch into pieces of ceil(n / r), in replica order
            shares = [-(-n // r)] * r
        else:  # a full global batch's shares, differing by at most one
            shares = [global_batch // r + (i < global_batch % r) for i in range(r)]
        return [max(0, min(share, n - sum(shares[:i]))) for i, share in enumerate(shares)]

    assert [[len(v) for v in step] for step in plain] == [rule(sum(map(len, step))) for step in plain]
    partial = vizdist.diagnose(t).query("code == 'partial-batch'").iloc[0]["message"]
    assert ("legacy rebatch" in partial) == (t.meta["rebatch"] == "RebatchDataset")


def test_distribute_datasets_from_function_has_no_rebatch(tf, mirrored):
    t = vizdist.trace_distribution(mirrored, dataset_fn=lambda ctx: tf.data.Dataset.range(8).batch(2))
    assert t.meta["rebatch"] == ""


@pytest.mark.parametrize("kind", ["default", "one_device", "central_storage"])
def test_other_single_process_strategies(tf, kind):
    strategy = {
        "default": lambda: None,
        "one_device": lambda: tf.distribute.OneDeviceStrategy("/cpu:2"),
        "central_storage": lambda: tf.distribute.experimental.CentralStorageStrategy(
            compute_devices=["/cpu:0", "/cpu:1"], parameter_device="/cpu:0"),
    }[kind]()
    ds = tf.data.Dataset.range(6).batch(2)
    t = vizdist.trace_distribution(strategy, ds)
    plain = _plain_steps(tf, strategy or tf.distribute.get_strategy(), ds)
    assert [t.split().loc[s].tolist() for s in t.steps] == plain
    if kind == "one_device":
        assert set(t.elements.device) == set(_plain_devices(strategy, ds))


def test_text_files_carry_file_and_line(tf, mirrored, tmp_path):
    files = []
    for i in range(2):
        p = tmp_path / f"part-{i}.txt"
        p.write_text("".join(f"f{i}l{j}\n" for j in range(4)))
        files.append(str(p))
    ds = tf.data.TextLineDataset(files).batch(4)
    plain = [line.decode() for step in _plain_steps(tf, mirrored, ds) for v in step for line in v]
    t = vizdist.trace_distribution(mirrored, ds)
    e = t.elements.sort_values(["step", "replica", "position"])
    # each line says where it was written ("f<file>l<line>"): the trace's file and line for the
    # element at each place must be those of the line plain TF delivered there
    written = [(files[int(x[1:x.index("l")])], int(x[x.index("l") + 1:])) for x in plain]
    assert list(zip(e.source_file, e.source_line, strict=True)) == written


@pytest.mark.filterwarnings("ignore:vizdist.watch is deprecated:DeprecationWarning")
def test_watch_records_an_existing_loop_without_changing_it(tf, mirrored):
    plain = _plain_steps(tf, mirrored, tf.data.Dataset.range(6).batch(4))
    dist = mirrored.experimental_distribute_dataset(tf.data.Dataset.range(6).batch(4))
    seen = []
    w = vizdist.watch(dist)
    for x in w:
        seen.append([v.numpy().tolist() for v in mirrored.experimental_local_results(x)])
    assert seen == plain
    t = w.trace
    assert [t.split().loc[s].tolist() for s in t.steps] == plain
    assert t.meta["provenance"] == "fingerprint"
    assert "empty-replica" in set(vizdist.diagnose(t).code)


def test_strings_are_supported(tf, mirrored):
    words = ["a", "b", "c", "d"]
    ds = tf.data.Dataset.from_tensor_slices(words).batch(4)
    plain = _plain_steps(tf, mirrored, ds)
    t = vizdist.trace_distribution(mirrored, ds, step_fn=lambda x: x)
    # ids are from_tensor_slices indexes: each replica's ids point at the strings plain TF gave it
    assert [[[words[i].encode() for i in ids] for ids in t.split().loc[s]] for s in t.steps] == plain
    results = t.batches.sort_values(["step", "replica"])["result"].map(json.loads).tolist()
    assert results == [[w.decode() for w in v] for step in plain for v in step]


def test_ragged_elements_match_plain_tf(tf, mirrored):
    rows = [[1], [2, 3], [4, 5, 6], [7]]
    ds = tf.data.Dataset.from_tensor_slices(tf.ragged.constant(rows)).batch(4)
    plain = [[v.to_list() for v in mirrored.experimental_local_results(x)]
             for x in mirrored.experimental_distribute_dataset(ds)]
    t = vizdist.trace_distribution(mirrored, ds)
    # ids are from_tensor_slices indexes: each replica's rows are the source rows at its ids
    assert [[[rows[i] for i in t.ids(step=s, replica=r)] for r in range(4)] for s in t.steps] == plain


class TestBadInput:
    def test_not_a_strategy(self, tf):
        with pytest.raises(TypeError, match=r"tf.distribute.Strategy"):
            vizdist.trace_distribution("mirrored", tf.data.Dataset.range(4).batch(2))

    def test_not_a_dataset(self, mirrored):
        with pytest.raises(TypeError, match=r"must be a tf.data.Dataset; got list"):
            vizdist.trace_distribution(mirrored, [1, 2, 3])

    def test_already_distributed(self, tf, mirrored):
        dist = mirrored.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(4))
        with pytest.raises(TypeError, match=r"already distributed.*vizdist.watch"):
            vizdist.trace_distribution(mirrored, dist)

    def test_unbatched_over_several_replicas(self, tf, mirrored):
        with pytest.raises(ValueError, match=r"not batched.*dataset.batch\(8\)"):
            vizdist.trace_distribution(mirrored, tf.data.Dataset.range(10))

    @pytest.mark.parametrize("steps", [0, -1, 1.5, True])
    def test_bad_steps(self, tf, mirrored, steps):
        with pytest.raises(ValueError, match="steps must be"):
            vizdist.trace_distribution(mirrored, tf.data.Dataset.range(4).batch(4), steps=steps)

    @pytest.mark.parametrize("max_steps", [0, -1, 1.5, True, None])
    def test_bad_max_steps(self, tf, mirrored, max_steps):
        with pytest.raises(ValueError, match="max_steps must be"):
            vizdist.trace_distribution(mirrored, tf.data.Dataset.range(4).batch(4), max_steps=max_steps)

    @pytest.mark.parametrize("timeout", [0, -1, "5", True, float("nan")])  # nan: issue 36 item 9
    def test_bad_timeout(self, tf, mirrored, timeout):
        with pytest.raises(ValueError, match="timeout must be"):
            vizdist.trace_distribution(mirrored, tf.data.Dataset.range(4).batch(4), timeout=timeout)

    def test_both_or_neither_dataset(self, tf, mirrored):
        with pytest.raises(ValueError, match="exactly one"):
            vizdist.trace_distribution(mirrored)
        with pytest.raises(ValueError, match="exactly one"):
            vizdist.trace_distribution(mirrored, tf.data.Dataset.range(2), dataset_fn=lambda c: None)

    def test_bad_iteration(self, tf, mirrored):
        with pytest.raises(ValueError, match="iteration must be one of"):
            vizdist.trace_distribution(mirrored, tf.data.Dataset.range(4).batch(4), iteration="while")

    def test_dataset_fn_returning_junk(self, mirrored):
        with pytest.raises(TypeError, match=r"dataset_fn's return value must be a tf.data.Dataset"):
            vizdist.trace_distribution(mirrored, dataset_fn=lambda ctx: [1, 2])


# -- errors keep the truth (issue 9) -------------------------------------------------
class _StepBroke(Exception):
    """A user's own exception type."""


@pytest.mark.parametrize("exc_type", [ValueError, RuntimeError, KeyError, _StepBroke])
def test_step_fn_error_is_the_users_own_with_the_partial_trace(tf, mirrored, exc_type):
    ds = tf.data.Dataset.range(24).batch(4)
    calls = []

    def step(x):  # Python step: MirroredStrategy calls it once per replica
        calls.append(1)
        if len(calls) > 2 * mirrored.num_replicas_in_sync:
            raise exc_type("bad batch in my step")
        return x

    with pytest.raises(exc_type) as info:
        vizdist.trace_distribution(mirrored, ds, step_fn=step)
    assert "TensorFlow failed" not in str(info.value)
    partial = info.value.partial_trace
    assert partial.meta["stopped"] == "error" and partial.steps == [0, 1]
    assert [partial.split().loc[s].tolist() for s in partial.steps] == _plain_steps(tf, mirrored, ds, 2)
    assert any("partial_trace" in note for note in getattr(info.value, "__notes__", []))


@pytest.mark.parametrize("check", ["assert", "numerics"])
def test_a_failed_tf_check_in_a_tf_function_step_keeps_tfs_whole_message(tf, mirrored, check):
    ds = tf.data.Dataset.range(16).map(lambda x: tf.cast(x, tf.float32)).batch(4)

    @tf.function
    def step(x):
        if check == "assert":
            tf.debugging.assert_less(x, 9.0, message="value from the data is too big")
            return x
        return tf.debugging.check_numerics(tf.math.log(x - 8.0), message="log of a negative value")

    def plain_error():
        for x in mirrored.experimental_distribute_dataset(ds):
            mirrored.experimental_local_results(mirrored.run(step, args=(x,)))

    with pytest.raises(tf.errors.OpError) as plain:
        plain_error()
    with pytest.raises(type(plain.value)) as info:
        vizdist.trace_distribution(mirrored, ds, step_fn=step)
    key = "value from the data is too big" if check == "assert" else "log of a negative value"
    assert key in str(plain.value) and key in str(info.value)
    assert str(plain.value).splitlines()[0] == "Graph execution error:"  # what used to be all that survived
    assert info.value.partial_trace.meta["stopped"] == "error"


def test_a_blocking_pipeline_returns_at_the_timeout_with_a_finding(tf, mirrored):
    import threading

    release = threading.Event()

    def gen():
        yield from range(8)
        release.wait(60)  # blocks like a source that never sends more (released at the end of the test)

    blocking = tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec([], tf.int64)).batch(4)
    try:
        t = vizdist.trace_distribution(mirrored, blocking, timeout=4)
    finally:
        release.set()
    # returned at the timeout, not when the source gave up (that would end the data: "end_of_data")
    assert t.meta["stopped"] == "timeout" and t.meta["timeout_s"] == 4.0
    full = tf.data.Dataset.from_generator(lambda: iter(range(8)), output_signature=tf.TensorSpec([], tf.int64))
    assert [t.split().loc[s].tolist() for s in t.steps] == _plain_steps(tf, mirrored, full.batch(4))
    f = vizdist.diagnose(t)
    assert "timed-out" in f["code"].tolist()
    assert "2 steps recorded" in f[f.code == "timed-out"].iloc[0]["message"]


@pytest.mark.parametrize("build", [lambda tf: tf.data.Dataset.range(0).batch(4),
                                   lambda tf: tf.data.Dataset.range(10).filter(lambda x: x > 100).batch(4)])
def test_empty_dataset_gives_a_finding_not_a_silent_empty_trace(tf, mirrored, build):
    ds = build(tf)
    assert _plain_steps(tf, mirrored, ds) == []  # plain TF: no step at all
    t = vizdist.trace_distribution(mirrored, ds)
    assert t.steps == [] and t.meta["steps_run"] == 0
    f = vizdist.diagnose(t)
    assert f["code"].tolist() == ["empty-dataset"]


def test_data_of_known_length_runs_past_max_steps_to_its_end(tf, mirrored):
    ds = tf.data.Dataset.range(40).batch(4)
    assert int(ds.cardinality()) == 10  # TF knows where it ends
    t = vizdist.trace_distribution(mirrored, ds, max_steps=3)
    assert [t.split().loc[s].tolist() for s in t.steps] == _plain_steps(tf, mirrored, ds)
    assert t.meta["stopped"] == "end_of_data"


def test_max_steps_still_stops_data_of_unknown_length(tf, mirrored):
    ds = tf.data.Dataset.range(40).filter(lambda x: x >= 0).batch(4)
    assert int(ds.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    with pytest.raises(TracingError, match="max_steps=3") as info:
        vizdist.trace_distribution(mirrored, ds, max_steps=3)
    t = info.value.partial_trace
    assert [t.split().loc[s].tolist() for s in t.steps] == _plain_steps(tf, mirrored, ds, 3)


@pytest.mark.parametrize("api", ["dataset", "dataset_fn"])
def test_meta_specs_are_what_plain_tf_reports(tf, mirrored, api):
    """The tag rides inside the distributed element; meta shows the user's specs, as TF gives them."""
    ds = tf.data.Dataset.range(8).map(lambda x: (x * 2, tf.strings.as_string(x))).batch(4)
    if api == "dataset":
        plain = mirrored.experimental_distribute_dataset(ds)
        t = vizdist.trace_distribution(mirrored, ds)
    else:
        plain = mirrored.distribute_datasets_from_function(lambda ctx: ds)
        t = vizdist.trace_distribution(mirrored, dataset_fn=lambda ctx: ds)
    assert t.meta["distributed_element_spec"] == str(plain.element_spec)
    assert t.meta["element_spec"] == str(ds.element_spec)


@pytest.mark.parametrize("make", [
    lambda tf, f: tf.data.Dataset.range(100).batch(8),  # no static size: None
    lambda tf, f: tf.data.Dataset.range(100).batch(8, drop_remainder=True),  # 8 over 4: (2,)
    lambda tf, f: tf.data.Dataset.range(100).batch(6, drop_remainder=True),  # 6 does not split evenly: None
    lambda tf, f: tf.data.TextLineDataset([f]).batch(4, drop_remainder=True).map(tf.strings.strip),  # (1,)
])
def test_the_distributed_element_spec_knows_the_per_replica_size_only_of_a_static_batch_that_splits_evenly(
        tf, mirrored, tmp_path, make):
    """Plain TF: each replica's spec has the batch dimension n / replicas when the dataset's element spec
    has a static batch size n that the replicas divide, else None (data/experimental/ops/distribute.py,
    _LegacyRebatchDataset's recalculate_batch_size; rebatch_op.py, _compute_static_batch_dim). So
    "None" is no rule of its own: drop_remainder=True and an even split give the size."""
    (tmp_path / "a.txt").write_text("".join(f"{i}\n" for i in range(100)))
    ds = make(tf, str(tmp_path / "a.txt"))
    n, r = ds.element_spec.shape[0], mirrored.num_replicas_in_sync
    want = n // r if n is not None and n % r == 0 else None
    spec = mirrored.experimental_distribute_dataset(ds).element_spec
    assert [s.shape.as_list() for s in spec._value_specs] == [[want]] * r


def test_meta_strategy_is_the_public_name(tf, mirrored):
    t = vizdist.trace_distribution(mirrored, tf.data.Dataset.range(4).batch(4))
    assert getattr(tf.distribute, t.meta["strategy"]) is type(mirrored)


# -- real multi-worker runs (issue 8) ------------------------------------------------
def _partial_work(ctx):  # runs in each worker of a LocalCluster
    import tensorflow as tf

    strategy = ctx.multi_worker_strategy()
    ds = tf.data.Dataset.range(10).batch(4)
    plain = [[int(np.size(v.numpy())) for v in strategy.experimental_local_results(x)]
             for x in strategy.experimental_distribute_dataset(ds)]
    t = vizdist.trace_distribution(strategy, ds, progress=False)
    public = [n for n in dir(tf.distribute) if getattr(tf.distribute, n) is type(strategy)]
    return vizdist.Trace(elements=t.elements, batches=t.batches, meta=dict(t.meta, plain=plain, public=public))


@pytest.mark.slow
def test_multi_worker_partial_is_marked_only_where_the_global_batch_is_short():
    from vizdist.instrument.processes.cluster import LocalCluster

    with LocalCluster(workers=2, timeout=120.0, progress=False) as cluster:
        t = cluster.run(_partial_work)
    shards = {s["worker"]: s for s in t.meta["shards"]}
    # plain TF on each worker: elements per step and local replica; the global batch is their sum
    totals = [sum(sum(shards[w]["plain"][s]) for w in shards) for s in range(len(shards[0]["plain"]))]
    assert min(totals) < 4 <= max(totals)  # range(10).batch(4): full steps and a short one
    for b in t.batches.itertuples():
        assert b.partial == (b.n_elements > 0 and totals[b.step] < 4), (b.step, b.worker)
    assert shards[0]["strategy"] in shards[0]["public"]  # the name users write: MultiWorkerMirroredStrategy


_CHIEF_SCRIPT = """
import json, os, sys
import tensorflow as tf
from tensorflow.python.distribute import multi_worker_util
import vizdist
from vizdist.instrument.processes.cluster import record_worker_shard

shards, plain_dir = sys.argv[1], sys.argv[2]
opts = tf.distribute.experimental.CommunicationOptions(timeout_seconds=60)
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)
ds = tf.data.Dataset.range(16).batch(4)
plain = [[v.numpy().tolist() for v in strategy.experimental_local_results(x)]
         for x in strategy.experimental_distribute_dataset(ds)]
record_worker_shard(vizdist.trace_distribution(strategy, ds, progress=False), shards)
cfg = json.loads(os.environ["TF_CONFIG"])
task = cfg["task"]
tf_id = multi_worker_util.id_in_cluster(cfg["cluster"], task["type"], task["index"])
with open(os.path.join(plain_dir, f"{task['type']}-{task['index']}.json"), "w") as fh:
    json.dump({"tf_id": tf_id, "plain": plain}, fh)
"""


@pytest.mark.slow
def test_a_cluster_with_a_chief_numbers_every_task_once(tmp_path):
    """A real chief + worker MultiWorkerMirroredStrategy cluster, each task writing its shard."""
    import json
    import os
    import subprocess
    import sys

    from vizdist.instrument.processes.cluster import free_ports

    script, shards, plain = tmp_path / "task.py", tmp_path / "shards", tmp_path / "plain"
    script.write_text(_CHIEF_SCRIPT)
    shards.mkdir()
    plain.mkdir()
    ports = free_ports(2)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    procs = []
    try:
        for kind in ("chief", "worker"):
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": 0}}))
            procs.append(subprocess.Popen([sys.executable, str(script), str(shards), str(plain)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outs = [p.communicate(timeout=240)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    merged = vizdist.load_trace(shards)
    for kind in ("chief", "worker"):
        ref = json.loads((plain / f"{kind}-0.json").read_text())
        task = merged.elements[merged.elements["worker"] == ref["tf_id"]]
        got = [task[task["step"] == s].sort_values("position")["source_id"].tolist() for s in sorted(set(task["step"]))]
        assert got == [step[0] for step in ref["plain"]], kind  # one replica per task
        assert set(task["replica"]) == {ref["tf_id"]}  # TF's replica id: task id x local replicas
    assert sorted(set(merged.elements["worker"])) == [0, 1]
    assert "worker-starved" not in vizdist.diagnose(merged)["code"].tolist()


@pytest.mark.parametrize("source, policy, sizes", [
    ("range", "AUTO", [2, 2, 0]),  # AUTO finds no reader (RangeDataset is unshardable): DATA, legacy rebatch
    ("range", "OFF", [2, 1, 1]),  # no auto-shard rewrite: RebatchDatasetV2 (batch_sizes_for_worker) stays
    ("text", "AUTO", [2, 1, 1]),  # a reader: FILE is applied, RebatchDatasetV2 stays
])
def test_a_global_batch_of_4_over_3_replicas_follows_the_policy_applied(tf, tmp_path, source, policy, sizes):
    """Plain TF: for a batch size TF can read, which rebatch cuts 4 over 3 replicas follows the auto-shard
    policy applied, on one worker too (the batch size TF cannot read: the next test).

    auto_shard.cc (ApplyAutoShard): AUTO tries ShardByFile and, on NotFound (an unshardable source such as
    RangeDataset), applies ShardByData, which rewrites RebatchDatasetV2 to the legacy RebatchDataset
    (RewriteRebatchV2ToV1); OFF applies nothing. The legacy op cuts pieces of ceil(4 / 3) = 2 in replica
    order (2, 2, 0); batch_sizes_for_worker (data/experimental/ops/distribute.py) gives 2, 1, 1.
    """
    three = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1", "/cpu:2"])
    if source == "range":
        ds = tf.data.Dataset.range(8).batch(4)
    else:
        (tmp_path / "a.txt").write_text("".join(f"{i}\n" for i in range(8)))
        ds = tf.data.TextLineDataset([str(tmp_path / "a.txt")]).batch(4)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
    ds = ds.with_options(opts)
    plain = _plain_steps(tf, three, ds)
    assert [[len(v) for v in step] for step in plain] == [sizes, sizes]  # at every step, not only the last
    assert _plain_rebatch_op(three, ds) == (["RebatchDataset"] if sizes[-1] == 0 else ["RebatchDatasetV2"])


@pytest.mark.parametrize("after_batch", ["nothing", "filter", "map keeping the batch", "map to 7 of each batch",
                                         "map after batch(drop_remainder=True)"])
def test_a_batch_size_tf_cannot_read_takes_the_legacy_rebatch_for_files_too(tf, mirrored, tmp_path, after_batch):
    """Plain TF (input_lib.py, _make_rebatch_fn): the legacy RebatchDataset also cuts a file pipeline, which
    FILE sharding keeps on RebatchDatasetV2, whenever distribute.compute_batch_size gives -1. That is the
    static size of the element spec if it has one (drop_remainder=True), else the ComputeBatchSize op, which
    walks back from the end through a list of size-keeping transformations (prefetch, filter, shuffle,
    repeat, ...) to the batch and gives -1 at anything else, a map included (compute_batch_size_op.cc)."""
    from tensorflow.python.data.experimental.ops import distribute

    (tmp_path / "a.txt").write_text("".join(f"{i}\n" for i in range(23)))
    lines = tf.data.TextLineDataset([str(tmp_path / "a.txt")])
    ds = {"nothing": lines.batch(10), "filter": lines.batch(10).filter(lambda b: tf.size(b) > 0),
          "map keeping the batch": lines.batch(10).map(tf.strings.strip),
          "map to 7 of each batch": lines.batch(10).map(lambda b: b[:7]),
          "map after batch(drop_remainder=True)": lines.batch(10, drop_remainder=True).map(tf.strings.strip),
          }[after_batch]
    size = int(distribute.compute_batch_size(ds))  # plain TF's own answer, as input_lib asks it
    unknown = after_batch.startswith("map") and "drop_remainder" not in after_batch
    assert (size == -1) == unknown
    op = _plain_rebatch_op(mirrored, ds)
    assert op == (["RebatchDataset"] if unknown else ["RebatchDatasetV2"])

    def rule(n, r=4):  # each op's rule (auto_shard.cc; batch_sizes_for_worker's docstring): the legacy op cuts
        # every batch into pieces of ceil(n / r) in replica order; V2 fills a full batch's shares (at most one apart)
        shares = [-(-n // r)] * r if unknown else [size // r + (i < size % r) for i in range(r)]
        return [max(0, min(share, n - sum(shares[:i]))) for i, share in enumerate(shares)]

    plain = _plain_steps(tf, mirrored, ds)
    assert [[len(v) for v in step] for step in plain] == [rule(sum(map(len, step))) for step in plain]
    assert vizdist.trace_distribution(mirrored, ds).meta["rebatch"] == op[0]


def test_enumerate_zips_a_range_with_the_dataset(tf, tmp_path):
    """Plain TF (dataset_ops.py, Dataset.enumerate): enumerate() is zip(range, dataset), so auto-sharding meets
    a RangeDataset, one of auto_shard.cc's kUnshardableSourceDatasetOps (notebook 03, section 4)."""
    from tensorflow.core.framework import graph_pb2

    (tmp_path / "a.txt").write_text("x\ny\n")
    ds = tf.data.TextLineDataset([str(tmp_path / "a.txt")]).enumerate()
    ops = {n.op for n in graph_pb2.GraphDef.FromString(ds._as_serialized_graph().numpy()).node}
    assert {"ZipDataset", "RangeDataset"} <= ops



def test_batch_zero_in_a_dataset_fn_says_what_to_do(tf, mirrored):
    """Issue 36 item 9: TF's raw {{function_node ...}} error, now with plain words beside it (TF's own
    message kept whole: BatchDatasetOp::MakeDataset refuses a batch size below 1)."""
    with pytest.raises(tf.errors.InvalidArgumentError, match="Batch size must be greater than zero"):
        tf.data.Dataset.range(8).batch(0)  # plain TF, for the message it gives
    with pytest.raises(vizdist.TracingError) as info:
        vizdist.trace_distribution(mirrored, dataset_fn=lambda ctx: tf.data.Dataset.range(8).batch(0), progress=False)
    msg = str(info.value)
    assert "Batch size must be greater than zero" in msg
    assert "In plain words: a batch() in the pipeline has a batch size of 0" in msg
    assert "get_per_replica_batch_size" in msg
