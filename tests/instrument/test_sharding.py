"""compare_shard_policies on real 2-worker MultiWorkerMirroredStrategy clusters.

Every expectation comes from plain TensorFlow run in the test: the ``plain``
fixture iterates the same file pipelines under each policy in a real
2-worker cluster with no vizdist recording (only TF), and FILE's split is
also checked against TF's documented rule (``AutoShardPolicy.FILE``: each
worker reads whole files, file ``i`` going to worker ``i % num_workers``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from vizdist.diagnose import diagnose
from vizdist.instrument.experiments.sharding import (
    ShardComparison,
    _unrunnable,
    compare_shard_policies,
    write_text_files,
)
from vizdist.trace import Trace

pytestmark = pytest.mark.slow
RUN = dict(workers=2, global_batch_size=4, progress=False, timeout=120.0)


@pytest.fixture(autouse=True)
def _devices_first(devices):
    """TensorFlow fixes its devices when it starts, and this module's first tests start it in this process (run
    first in a process, its last tests then found 1 device): let the suite's 4 logical CPUs come first."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_text_files(tmp_path_factory.mktemp("four"), n_files=4, lines_per_file=4)


@pytest.fixture(scope="module")
def tagged(files: list[str]) -> ShardComparison:
    import vizdist

    return vizdist.compare_shard_policies(files, **RUN)  # the public one: its result displays


def _plain_tf_policies(ctx, files: list[str], policies: list[str], reader: str) -> dict[str, Any]:
    """What plain TF delivers on this worker under each policy (no vizdist recording at all)."""
    import tensorflow as tf

    strategy = ctx.multi_worker_strategy()
    out: dict[str, Any] = {}
    for policy in policies:
        ds = (tf.data.TextLineDataset(files) if reader == "text" else tf.data.TFRecordDataset(files)).batch(4)
        opts = tf.data.Options()
        opts.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
        try:
            out[policy] = [[[v.decode() for v in t.numpy().tolist()] for t in strategy.experimental_local_results(b)]
                           for b in strategy.experimental_distribute_dataset(ds.with_options(opts))]
        except Exception as exc:  # the error TF raises is part of what TF does
            out[policy] = {"error": type(exc).__name__}
    return out


def _run_plain(files: list[str], policies: list[str], reader: str = "text") -> dict[int, dict[str, Any]]:
    """worker -> policy -> per step, per local replica, the values plain TF delivered (or its error)."""
    from vizdist.instrument.processes.cluster import LocalCluster

    with LocalCluster(workers=2, timeout=120.0, collective_timeout=15.0, progress=False) as cluster:
        t = cluster.run(_plain_tf_policies, files, policies, reader)
    return {int(task.split("-")[1]): v for task, v in t.meta["results"].items()}


@pytest.fixture(scope="module")
def plain(files: list[str]) -> dict[int, dict[str, Any]]:
    return _run_plain(files, ["AUTO", "FILE", "DATA", "HINT", "OFF"])


def _plain_values(plain: dict[int, dict[str, Any]], policy: str) -> dict[int, list[str]]:
    """worker -> values in step order (one replica per worker on CPU)."""
    return {w: [v for step in plain[w][policy] for rep in step for v in rep] for w in sorted(plain)}


def _file_lines(files: list[str], workers: int = 2) -> dict[int, list[int]]:
    """TF's documented FILE rule, read from the files themselves: worker w reads files w, w + workers, ..."""
    return {w: [int(x) for f in files[w::workers] for x in Path(f).read_text().split()] for w in range(workers)}


def _ints(values: list[str]) -> list[int]:
    return [int(v) for v in values]


def test_write_text_files_lines_name_file_and_line(files: list[str]) -> None:
    assert [Path(f).name for f in files] == [f"part-{i}.txt" for i in range(4)]
    assert Path(files[2]).read_text().split() == ["8", "9", "10", "11"]


def test_vizdist_records_exactly_what_plain_tf_delivered(tagged: ShardComparison, plain: dict) -> None:
    for policy in ("AUTO", "FILE", "DATA", "HINT", "OFF"):
        assert tagged.worker_values(policy) == _plain_values(plain, policy), policy
        assert policy not in tagged.errors  # plain TF ran every policy without an error
        assert all(not isinstance(plain[w][policy], dict) for w in plain)


def test_content_mode_records_the_same_as_plain_tf(files: list[str], plain: dict) -> None:
    raw = compare_shard_policies(files, tag=False, capture_tf_log=False, policies=["FILE", "DATA", "OFF"], **RUN)
    for policy in ("FILE", "DATA", "OFF"):
        assert raw.worker_values(policy) == _plain_values(plain, policy), policy


def test_file_gives_each_worker_whole_files(tagged: ShardComparison, files: list[str], plain: dict) -> None:
    expected = _file_lines(files)  # TF's documented FILE rule, from the files' own lines
    assert {w: _ints(v) for w, v in _plain_values(plain, "FILE").items()} == expected
    assert {w: _ints(v) for w, v in tagged.worker_values("FILE").items()} == expected
    s = tagged.summary().set_index(["policy", "worker"])
    names = [Path(f).name for f in files]
    assert s.loc[("FILE", 0), "files"] == names[0::2] and s.loc[("FILE", 1), "files"] == names[1::2]
    assert _plain_values(plain, "AUTO") == _plain_values(plain, "FILE")  # AUTO found the files: FILE
    assert s.loc[("AUTO", 0), "files"] == names[0::2]
    e = tagged.traces["FILE"].elements
    lines_per_file = len(Path(files[0]).read_text().split())
    assert set(e[e["worker"] == 1]["source_line"]) == set(range(lines_per_file))
    assert diagnose(tagged.traces["FILE"]).query("code.str.startswith('worker') or code == 'file-shard-fallback'").empty


def test_data_split_per_step_and_replica_is_plain_tfs(tagged: ShardComparison, plain: dict) -> None:
    t = tagged.split("DATA")  # step x replica (= worker: one replica per worker on CPU)
    for w in plain:
        assert [_ints(t.loc[s, w]) for s in t.index] == [[int(v) for v in step[0]] for step in plain[w]["DATA"]]
    s = tagged.summary().set_index(["policy", "worker"])
    assert s.loc[("DATA", 0), "files"] == sorted(s.loc[("DATA", 0), "files"]) and len(s.loc[("DATA", 0), "files"]) == 4
    assert s.loc[("DATA", 0), "shared"] == 0 and s.loc[("DATA", 0), "coverage"] == 1.0


def test_partial_is_not_marked_where_every_global_batch_is_full(tagged: ShardComparison, plain: dict) -> None:
    """16 lines in global batches of 4: plain TF fills every step, and no batch may be marked partial.
    (Where a global batch is short: test_distribution's multi-worker partial test.)"""
    for policy in ("DATA", "OFF"):
        steps = len(plain[0][policy])
        totals = [sum(len(rep) for w in plain for rep in plain[w][policy][s]) for s in range(steps)]
        assert steps and set(totals) == {4}, (policy, totals)
        b = tagged.traces[policy].batches
        for row in b.itertuples():
            assert row.partial == (row.n_elements > 0 and totals[row.step] < 4), (policy, row.step, row.worker)


def test_off_gives_both_workers_everything_and_diagnose_flags_it(tagged: ShardComparison, files: list[str],
                                                                 plain: dict) -> None:
    everything = sorted(int(x) for f in files for x in Path(f).read_text().split())
    got = _plain_values(plain, "OFF")
    assert sorted(_ints(got[0])) == sorted(_ints(got[1])) == everything  # plain TF: no sharding at all
    f = diagnose(tagged.traces["OFF"]).query("code == 'worker-duplicates'")
    assert len(f) == 1 and f.iloc[0]["workers"] == [0, 1] and f"{len(everything)} of {len(everything)}" in f.iloc[0]["message"]


def test_hint_without_shard_hint_reads_everything(tagged: ShardComparison) -> None:
    got = tagged.worker_values("HINT")
    assert sorted(_ints(got[0])) == list(range(16)) == sorted(_ints(got[1]))
    assert "HINT only shards where" in diagnose(tagged.traces["HINT"]).query("code == 'worker-duplicates'").iloc[0]["message"]


def test_summary_status_is_ok_only_where_no_other_worker_read_the_same_elements(tagged: ShardComparison,
                                                                                 plain: dict) -> None:
    """OFF and HINT give both workers every element (in plain TF): their status must say so, not "ok"."""
    s = tagged.summary().set_index(["policy", "worker"])
    for policy in ("AUTO", "FILE", "DATA", "HINT", "OFF"):
        values = {w: set(v) for w, v in _plain_values(plain, policy).items()}  # lines are unique numbers
        for w, mine in values.items():
            shared = mine & set().union(*(v for o, v in values.items() if o != w))
            status = s.loc[(policy, w), "status"]
            if shared:
                assert status == f"duplicates: {len(shared)} of its {len(mine)} element(s) also read by worker {1 - w}"
            else:
                assert status == "ok", (policy, w, status)
    assert {p for p in ("OFF", "HINT") if s.loc[(p, 0), "status"] != "ok"} == {"OFF", "HINT"}


def test_comparison_renders_escaped_html_and_a_figure(tagged: ShardComparison) -> None:
    html = tagged._repr_html_()
    assert html.count("<th>worker") == 2 and "part-0.txt, part-2.txt" in html
    import matplotlib.pyplot as plt

    fig = tagged.plot()
    assert len(fig.axes) == 5
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["AUTO", "FILE", "DATA", "HINT", "OFF"]
    # worker 1's row under FILE: filled cells exactly at elements 4-7 and 12-15 (files 1 and 3)
    file_ax = fig.axes[1]
    labels = sorted(int(t.get_position()[0]) for t in file_ax.texts if t.get_position()[1] == 1.5)
    assert labels == [4, 5, 6, 7, 12, 13, 14, 15]
    plt.close(fig)


def _enumerated(files: list[str]):  # type: ignore[no-untyped-def]
    import tensorflow as tf

    return tf.data.TextLineDataset(files).enumerate().map(lambda i, line: line)


def test_enumerate_after_files_makes_auto_fall_back_to_data(files: list[str]) -> None:
    cmp = compare_shard_policies(files, dataset_fn=_enumerated, tag=False, policies=["AUTO", "FILE"], **RUN)
    s = cmp.summary().set_index(["policy", "worker"])
    assert s.loc[("AUTO", 0), "files"] == [f"part-{i}.txt" for i in range(4)]
    assert any("will apply DATA sharding policy" in ln for ln in cmp.logs["AUTO"])
    f = diagnose(cmp.traces["AUTO"]).query("code == 'file-shard-fallback'").iloc[0]
    assert f["workers"] == [0, 1] and "TensorFlow's log says" in f["message"]
    # FILE refuses outright on both workers (no hang): the error is shown per worker
    assert set(cmp.errors["FILE"]) == {"worker-0", "worker-1"}
    assert all("unshardable source dataset" in v for v in cmp.errors["FILE"].values())
    assert diagnose(cmp.traces["FILE"]).query("code == 'file-shard-unshardable'").iloc[0]["workers"] == [0, 1]


def test_file_with_fewer_files_than_workers_is_explained_not_run(tmp_path: Path, monkeypatch) -> None:
    import vizdist.instrument.processes.cluster as cluster

    def no_cluster(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a cluster was started for a policy checked up front")

    monkeypatch.setattr(cluster, "LocalCluster", no_cluster)  # checked up front: no cluster starts
    one = write_text_files(tmp_path, n_files=1, lines_per_file=8)
    cmp = compare_shard_policies(one, policies=["FILE"], **RUN)
    assert "FILE" not in cmp.traces and "1 file(s) for 2 workers" in cmp.notes["FILE"]
    assert cmp.summary()["status"].str.startswith("not run").all()


def _plain_tf_one_policy(ctx, files: list[str], policy: str) -> str:
    """Plain TF reading ``files`` under one policy on this worker, no vizdist recording: "ok" or its error."""
    import tensorflow as tf

    strategy = ctx.multi_worker_strategy()
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
    try:
        for _ in strategy.experimental_distribute_dataset(tf.data.TextLineDataset(files).batch(4).with_options(opts)):
            pass
    except Exception as exc:  # the error TF raises is part of what TF does
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def test_auto_with_fewer_files_than_workers_fails_in_plain_tf_like_file_so_it_is_explained_not_run(
        tmp_path: Path, monkeypatch) -> None:
    """AUTO shards a pipeline with a reader by FILE and falls back to DATA only on NotFound (auto_shard.cc,
    ApplyAutoShard); too few files is an InvalidArgument from the shard op, so plain TF fails as under FILE."""
    import vizdist.instrument.processes.cluster as cluster

    one = write_text_files(tmp_path, n_files=1, lines_per_file=8)
    with cluster.LocalCluster(workers=2, timeout=120.0, collective_timeout=8.0, progress=False) as c:
        plain = c.run(_plain_tf_one_policy, one, "AUTO").meta["results"]
    assert "Could not apply FILE based sharding" in plain["worker-0"], plain
    assert plain["worker-1"] != "ok", plain  # it sees its data end and fails in the collective

    def no_cluster(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a cluster was started for a policy checked up front")

    monkeypatch.setattr(cluster, "LocalCluster", no_cluster)
    cmp = compare_shard_policies(one, policies=["AUTO", "FILE"], **RUN)
    assert not cmp.traces and set(cmp.notes) == {"AUTO", "FILE"}
    assert "falls back to DATA only when FILE sharding finds no file reader" in cmp.notes["AUTO"]
    assert all("Use at least as many files as workers, or DATA sharding." in n for n in cmp.notes.values())
    # a dataset_fn of your own may hold no reader, and then AUTO shards by DATA and works: it is run
    assert "AUTO" not in _unrunnable(["AUTO", "FILE"], one, 2, reads_files=False)


def test_file_with_one_file_run_anyway_fails_bounded_with_real_errors(tmp_path: Path) -> None:
    one = write_text_files(tmp_path, n_files=1, lines_per_file=8)
    t0 = time.monotonic()
    cmp = compare_shard_policies(one, policies=["FILE"], run_unshardable=True, collective_timeout=8, **RUN)
    assert time.monotonic() - t0 < 90
    errs = cmp.errors["FILE"]
    assert "Could not apply FILE based sharding" in " ".join(errs.values())
    assert len(errs) == 2  # the other worker does not hang: it fails too, in its collective
    # TF's shard op (require_non_empty, added by auto-shard; shard_dataset_op.cc) raises on a worker that
    # takes its file's name and finds too few left for the others; worker 1, past the last file, sees its data end
    assert sorted(w for w, e in errs.items() if "Could not apply FILE based sharding" in e) == ["worker-0"]
    codes = diagnose(cmp.traces["FILE"])
    assert codes.query("code == 'worker-starved'").iloc[0]["workers"] == [1]


def test_auto_with_one_file_run_anyway_fails_like_file_and_the_finding_names_auto(tmp_path: Path) -> None:
    """AUTO over a file reader applies FILE (auto_shard.cc falls back to DATA only on NotFound), so TF's own
    FILE error is what worker 0 raises; the worker-starved finding then names AUTO, not only FILE."""
    one = write_text_files(tmp_path, n_files=1, lines_per_file=8)
    cmp = compare_shard_policies(one, policies=["AUTO"], run_unshardable=True, collective_timeout=8, **RUN)
    errs = cmp.errors["AUTO"]
    assert sorted(w for w, e in errs.items() if "Could not apply FILE based sharding" in e) == ["worker-0"]
    assert len(errs) == 2  # worker 1 sees its data end and fails in the collective
    starved = diagnose(cmp.traces["AUTO"]).query("code == 'worker-starved'")
    assert len(starved) == 1 and starved.iloc[0]["workers"] == [1]
    assert starved.iloc[0]["message"].startswith("AUTO sharding applied FILE")


def test_bad_input_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown auto-shard policies"):
        compare_shard_policies([], policies=["FILES"])
    with pytest.raises(FileNotFoundError, match="input files not found"):
        compare_shard_policies([str(tmp_path / "missing.txt")])


def test_tfrecord_files_shard_like_text_files(tmp_path: Path) -> None:
    import tensorflow as tf

    from vizdist.instrument.experiments.sharding import write_tfrecord_files

    recs = write_tfrecord_files(tmp_path, n_files=4, records_per_file=4)
    assert [r.numpy() for r in tf.data.TFRecordDataset(recs[1:2])] == [b"4", b"5", b"6", b"7"]
    cmp = compare_shard_policies(recs, dataset_fn=tf.data.TFRecordDataset, policies=["FILE", "DATA"],
                                 capture_tf_log=False, **RUN)
    plain = _run_plain(recs, ["FILE", "DATA"], reader="tfrecord")
    for policy in ("FILE", "DATA"):
        assert cmp.worker_values(policy) == _plain_values(plain, policy), policy
    s = cmp.summary().set_index(["policy", "worker"])
    assert s.loc[("FILE", 1), "files"] == [Path(f).name for f in recs[1::2]]
    assert s.loc[("DATA", 0), "coverage"] == 1.0  # 16 records counted in the files
    e = cmp.traces["FILE"].elements
    assert set(e["source_line"]) == set(range(4))  # record index inside its file, from the tags


def test_the_default_files_go_with_the_comparison_or_its_failure(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """compare_shard_policies() writes its own files when given none; they never outlive it (nor its result)."""
    import gc
    import tempfile

    from vizdist.errors import TracingError
    from vizdist.instrument.experiments import sharding

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def fail(*args: Any, **kwargs: Any) -> Trace:
        raise TracingError("a worker died")

    monkeypatch.setattr(sharding, "_run_group", fail)  # fails where a real cluster can, after the files exist
    with pytest.raises(TracingError, match="a worker died"):
        compare_shard_policies(**RUN)
    assert list(tmp_path.iterdir()) == []
    seen: list[Path] = []

    def compare(files: list[str], **kw: Any) -> ShardComparison:
        seen.append(Path(files[0]).parent)
        return ShardComparison({}, files=files, workers=2, global_batch_size=4)

    monkeypatch.setattr(sharding, "_compare", compare)
    cmp = compare_shard_policies(**RUN)
    assert seen[0].parent == tmp_path and seen[0].is_dir()
    del cmp
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_data_sharding_gives_a_worker_only_empty_pieces_when_the_global_batch_is_short(tmp_path: Path) -> None:
    """auto_shard.cc (ShardByData, RewriteRebatchV2ToV1) and input_lib.py (_make_rebatch_fn): DATA swaps in the
    legacy rebatch, which cuts each global batch into one piece per replica of all the workers (ceil(n / replicas)
    elements each, in replica order), and each worker keeps its own replicas' pieces. One line in a global batch
    of 4 over 2 workers: plain TF runs the step on both, and one of them gets an empty piece."""
    one = write_text_files(tmp_path, n_files=1, lines_per_file=1)
    plain = _run_plain(one, ["DATA"])
    values = _plain_values(plain, "DATA")
    empty = [w for w in sorted(values) if not values[w]]
    assert empty and len(empty) < len(values)  # plain TF: some worker got the line, some got nothing
    assert len({len(plain[w]["DATA"]) for w in plain}) == 1  # every worker ran every step
    cmp = compare_shard_policies(one, policies=["DATA"], **RUN)
    assert cmp.worker_values("DATA") == values
    starved = diagnose(cmp.traces["DATA"]).query("code == 'worker-starved'")
    assert len(starved) == 1 and starved.iloc[0]["workers"] == empty
    assert starved.iloc[0]["severity"] == "warning"  # they ran every step: nothing stalls, nothing failed
    assert "legacy rebatch cuts every global batch into one piece per replica" in starved.iloc[0]["message"]


def test_file_sharding_with_too_few_files_raises_before_any_line_is_read(tf, tmp_path: Path) -> None:
    """shard_dataset_op.cc (GetNextInternal): the shard FILE sharding adds (require_non_empty) takes the first
    file name, checks with Skip that the other shards have a file, and raises before returning the name: the
    worker that has the file reads none of its lines. Plain TF, worker 0 of 2, in this process."""
    from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset

    one = write_text_files(tmp_path, n_files=1, lines_per_file=8)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
    ds = _AutoShardDataset(tf.data.TextLineDataset(one).with_options(options), num_workers=2, index=0, num_replicas=1)
    lines = []
    with pytest.raises(tf.errors.InvalidArgumentError, match="Could not apply FILE based sharding"):
        for line in ds:
            lines.append(line)
    assert lines == []


def _shard_inputs(ds) -> list[str]:
    """The op of each ShardDataset's input in a dataset's graph (where auto-sharding put its shard)."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef.FromString(ds._as_serialized_graph().numpy())
    ops = {n.name: n.op for n in graph.node}
    return [ops[n.input[0].split(":")[0]] for n in graph.node if n.op == "ShardDataset"]


@pytest.mark.parametrize("source", ["one file", "range"])
def test_auto_chooses_when_tf_rewrites_the_pipeline_and_too_few_files_fail_only_when_read(
        tf, tmp_path: Path, source: str) -> None:
    """auto_shard.cc (ApplyAutoShard): AUTO tries the FILE rewrite and applies DATA only when that rewrite fails
    with NotFound (no reader, an unshardable source). The rewrite does not count files: with one file for 2
    workers it succeeds (the shard goes over the file names: FILE), and the error comes later, when the shard
    op runs (shard_dataset_op.cc, require_non_empty), where no fallback is possible. With range, the rewrite
    finds no reader and DATA puts the shard at the end, after the batch. Plain TF, worker 0 of 2."""
    from tensorflow.python.data.experimental.ops.distribute import _AutoShardDataset

    if source == "one file":
        ds = tf.data.TextLineDataset(write_text_files(tmp_path, n_files=1, lines_per_file=8)).batch(2)
    else:
        ds = tf.data.Dataset.range(8).batch(2)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.AUTO
    sharded = _AutoShardDataset(ds.with_options(options), num_workers=2, index=0, num_replicas=2)  # rewritten here
    if source == "one file":
        assert _shard_inputs(sharded) == ["TensorSliceDataset"]  # FILE: the shard is over the file names
        with pytest.raises(tf.errors.InvalidArgumentError, match="Could not apply FILE based sharding"):
            next(iter(sharded))
    else:
        assert _shard_inputs(sharded) == ["BatchDatasetV2"]  # DATA: the shard is over the batches
        assert next(iter(sharded)).numpy().tolist() == [0, 1]
