"""The TF1 Strategy API (tf.compat.v1.distribute) traced beside its TF2 replacement, against plain TF.

Every expectation comes from plain TensorFlow run here: TF1's own ``make_dataset_iterator`` /
``make_input_fn_iterator`` / ``experimental_run`` (eagerly, and in graph mode in a ``Session``) and
TF2's ``experimental_distribute_dataset`` / ``distribute_datasets_from_function``. The pipelines
yield their own ids (``range`` values), so what a replica got *is* which elements it got.

``tf.compat.v1.disable_eager_execution()`` is process-wide, so the graph-mode half runs once, in one
child process (:func:`vizdist.run_in_graph_mode`), and returns plain data the tests compare.
"""

from __future__ import annotations

import json
import sys

import pytest

import vizdist
from vizdist.errors import TracingError

tf = pytest.importorskip("tensorflow")

DEVICES = ["/cpu:0", "/cpu:1"]
#: Global-batch pipelines whose values are their ids: an uneven last step, a last step where one
#: replica gets an empty batch (range(7).batch(3)), ids through a filter and a seeded shuffle.
PIPELINES = {
    "range10_batch4": lambda: tf.data.Dataset.range(10).batch(4),
    "range7_batch3": lambda: tf.data.Dataset.range(7).batch(3),
    "filter_shuffle": lambda: tf.data.Dataset.range(16).filter(lambda x: x % 3 > 0).shuffle(6, seed=1).batch(4),
}


@pytest.fixture(autouse=True)
def _no_global_seed():
    """A seeded shuffle here is compared with a fresh child process, which has no global seed."""
    tf.random.set_seed(None)


def input_fn(ctx):
    """A TF1 input_fn / TF2 dataset_fn: shard by input pipeline, batch per replica."""
    ds = tf.data.Dataset.range(12).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.batch(ctx.get_per_replica_batch_size(4))


def sum_step(x):
    """A step whose result says what it saw: 100 * rows + sum."""
    return tf.size(x, out_type=tf.int64) * 100 + tf.reduce_sum(x)


# ---------------------------------------------------------------------------
# plain TensorFlow (no vizdist), eagerly or in a Session, whichever mode this process is in
# ---------------------------------------------------------------------------
def _to_list(v):
    """Plain Python (text as str) of a fetched or eager value."""
    v = v.tolist() if hasattr(v, "tolist") else v.numpy().tolist()
    return [x.decode() if isinstance(x, bytes) else x for x in v] if isinstance(v, list) else v


def plain_tf1(strategy, *, dataset=None, fn=None, step_fn=None):
    """Each step's per-replica values (and step results) from TF1's own iterator, and the InputContexts."""
    contexts = []

    def recorded_fn(ctx):
        contexts.append({"num_input_pipelines": ctx.num_input_pipelines, "input_pipeline_id": ctx.input_pipeline_id,
                         "num_replicas_in_sync": ctx.num_replicas_in_sync})
        return fn(ctx)

    it = strategy.make_dataset_iterator(dataset) if dataset is not None else strategy.make_input_fn_iterator(
        recorded_fn)
    local = strategy.experimental_local_results

    def one_step():
        if step_fn is None:
            return list(local(it.get_next())), []
        seen, out = strategy.experimental_run(lambda x: (x, step_fn(x)), it)
        return list(local(seen)), list(local(out))

    steps = []
    if tf.executing_eagerly():
        while True:
            try:
                values, results = one_step()
            except tf.errors.OutOfRangeError:
                break
            steps.append(([_to_list(v) for v in values], [_to_list(r) for r in results]))
    else:
        fetches = one_step()
        with tf.compat.v1.Session() as sess:
            sess.run(it.initializer)
            while True:
                try:
                    values, results = sess.run(fetches)
                except tf.errors.OutOfRangeError:
                    break
                steps.append(([_to_list(v) for v in values], [_to_list(r) for r in results]))
    return {"split": [s[0] for s in steps], "results": [s[1] for s in steps], "contexts": contexts}


def plain_tf2(strategy, *, dataset=None, fn=None):
    dist = (strategy.experimental_distribute_dataset(dataset) if dataset is not None
            else strategy.distribute_datasets_from_function(fn))
    return [[_to_list(t) for t in strategy.experimental_local_results(x)] for x in dist]


def traced(trace) -> dict:
    """A trace as plain data: per step, per replica, the source ids (and results and devices)."""
    e, b = trace.elements, trace.batches
    n, steps = int(trace.meta["num_replicas"]), int(trace.meta["steps_run"])
    split = [[e[(e.step == s) & (e.replica == r)].sort_values("position")["source_id"].tolist() for r in range(n)]
             for s in range(steps)]
    rows = b.sort_values(["step", "replica"])
    results = [[json.loads(x) for x in rows[rows.step == s]["result"]] if (rows["result"] != "").all() else []
               for s in range(steps)]
    devices = rows[rows.step == 0]["device"].astype(str).tolist()
    keys = ("api", "execution", "iteration", "input_contexts", "provenance")
    return {"split": split, "results": results, "devices": devices, "meta": {k: trace.meta.get(k) for k in keys},
            "findings": vizdist.diagnose(trace)["code"].tolist()}


# ---------------------------------------------------------------------------
# the graph-mode half: one child process
# ---------------------------------------------------------------------------
def graph_mode_report(folder: str) -> dict:
    """Runs in the child (graph mode): plain TF1 in a Session beside trace_tf1, per case."""
    s = tf.compat.v1.distribute.MirroredStrategy(DEVICES)
    out = {}
    for name, make in PIPELINES.items():
        out[name] = {"plain": plain_tf1(s, dataset=make(), step_fn=sum_step),
                     "traced": traced(vizdist.trace_tf1(s, make(), step_fn=sum_step, progress=False))}
    out["input_fn"] = {"plain": plain_tf1(s, fn=input_fn, step_fn=lambda x: x),
                       "traced": traced(vizdist.trace_tf1(s, input_fn=input_fn, step_fn=lambda x: x))}
    files = [f"{folder}/a.txt", f"{folder}/b.txt"]
    t = vizdist.trace_tf1(s, tf.data.TextLineDataset(files).batch(3), progress=False)
    out["files"] = {"plain": plain_tf1(s, dataset=tf.data.TextLineDataset(files).batch(3)),
                    "traced": traced(t), "rows": t.elements[["source_file", "source_line"]].values.tolist()}
    v2 = tf.distribute.MirroredStrategy(DEVICES)
    try:
        iter(v2.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2)))
    except RuntimeError as exc:
        out["tf_v2_iter_error"] = str(exc)
    try:
        vizdist.trace_distribution(v2, tf.data.Dataset.range(4).batch(2), progress=False)
    except TracingError as exc:
        out["trace_distribution_error"] = str(exc)
    out["devices_listed"] = [d.name for d in tf.compat.v1.Session().list_devices()]
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two text files whose line i of file f reads f"{f}{i}"."""
    folder = tmp_path_factory.mktemp("tf1-files")
    (folder / "a.txt").write_text("a0\na1\na2\n")
    (folder / "b.txt").write_text("b0\nb1\nb2\nb3\nb4\n")
    return folder


@pytest.fixture(scope="module")
def graph(files, devices):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the child needs no tests package
    try:
        return vizdist.run_in_graph_mode(graph_mode_report, str(files), devices=4, timeout=300)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def v1(devices):
    return tf.compat.v1.distribute.MirroredStrategy(DEVICES)


@pytest.fixture(scope="module")
def v2(devices):
    return tf.distribute.MirroredStrategy(DEVICES)


# ---------------------------------------------------------------------------
# eagerly, in this process
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", PIPELINES)
def test_make_dataset_iterator_is_traced_as_tf1_gives_it_and_as_tf2_replaces_it(name, v1, v2) -> None:
    plain = plain_tf1(v1, dataset=PIPELINES[name](), step_fn=sum_step)
    got = traced(vizdist.trace_tf1(v1, PIPELINES[name](), step_fn=sum_step, progress=False))
    assert got["split"] == plain["split"]
    assert got["results"] == plain["results"]  # step_fn saw exactly the untraced batch
    assert got["split"] == plain_tf2(v2, dataset=PIPELINES[name]())  # the TF2 replacement splits alike
    assert got["meta"]["api"] == "make_dataset_iterator" and got["meta"]["execution"] == "eager"
    assert got["meta"]["iteration"] == "experimental_run"
    assert got["devices"] == [t.device for t in v1.experimental_local_results(
        v1.make_dataset_iterator(PIPELINES[name]()).get_next())]


def test_make_input_fn_iterator_records_the_input_context_tf1_passes(v1, v2) -> None:
    plain = plain_tf1(v1, fn=input_fn)
    got = traced(vizdist.trace_tf1(v1, input_fn=input_fn, progress=False))
    assert got["split"] == plain["split"] == plain_tf2(v2, fn=input_fn)
    assert got["meta"]["input_contexts"] == plain["contexts"]
    assert got["meta"]["api"] == "make_input_fn_iterator" and got["meta"]["iteration"] == "get_next"


def test_step_fn_gets_the_batch_without_the_tag(v1) -> None:
    seen = []

    def step(x):
        seen.append(x.numpy().tolist())  # eagerly experimental_run calls it replica by replica
        return x

    t = vizdist.trace_tf1(v1, tf.data.Dataset.range(6).batch(4), step_fn=step, progress=False)
    plain = plain_tf1(v1, dataset=tf.data.Dataset.range(6).batch(4))
    assert seen == [v for step_values in plain["split"] for v in step_values]
    assert traced(t)["results"] == plain["split"]


def test_v1_strategy_in_trace_distribution_splits_as_its_tf2_replacement(v1, v2) -> None:
    ds = PIPELINES["range7_batch3"]
    assert traced(vizdist.trace_distribution(v1, ds(), progress=False))["split"] == plain_tf2(v2, dataset=ds())


def test_removed_tf1_methods_are_the_ones_this_tf_lacks(v1) -> None:
    from vizdist.instrument.run.legacy import REMOVED_TF1_METHODS, TF1_METHODS

    assert [m for m in TF1_METHODS if not hasattr(v1, m)] == list(REMOVED_TF1_METHODS)
    assert hasattr(v1.extended, "update")  # what the message for `update` points to


def test_asking_for_a_removed_method_says_what_to_use(v1) -> None:
    import numpy as np

    with pytest.raises(TypeError, match=r"no longer have experimental_make_numpy_iterator.*from_tensor_slices"):
        vizdist.trace_tf1(v1, np.arange(8))
    with v1.scope():
        var = tf.Variable(0.0)

    def step(x):
        return v1.update(var, lambda v: v + 1.0)

    with pytest.raises(AttributeError) as info:
        vizdist.trace_tf1(v1, tf.data.Dataset.range(4).batch(2), step_fn=step, progress=False)
    assert "strategy.extended.update" in "".join(getattr(info.value, "__notes__", []))
    assert info.value.partial_trace.meta["steps_run"] == 0


def test_a_tf2_strategy_still_has_the_tf1_iterators_and_is_traced_too(v2) -> None:
    """TF 2.21's StrategyBase keeps make_dataset_iterator & co. (deprecated): TF2 strategies run them."""
    plain = plain_tf1(v2, dataset=PIPELINES["range7_batch3"](), step_fn=sum_step)
    got = traced(vizdist.trace_tf1(v2, PIPELINES["range7_batch3"](), step_fn=sum_step, progress=False))
    assert got["split"] == plain["split"] and got["results"] == plain["results"]


def test_wrong_arguments_are_clear_errors(v1) -> None:
    ds = tf.data.Dataset.range(4).batch(2)
    with pytest.raises(TypeError, match=r"strategy must be a tf\.compat\.v1\.distribute\.Strategy"):
        vizdist.trace_tf1("MirroredStrategy", ds)
    with pytest.raises(ValueError, match="exactly one of dataset"):
        vizdist.trace_tf1(v1)
    with pytest.raises(ValueError, match="session= is for graph mode"):
        vizdist.trace_tf1(v1, ds, session=object())


@pytest.mark.slow
def test_run_in_graph_mode_reports_the_childs_error() -> None:
    def fails():
        raise ValueError("raised in the child on purpose")

    with pytest.raises(TracingError, match="ValueError in the graph-mode child: raised in the child on purpose") as info:
        vizdist.run_in_graph_mode(fails, devices=1, timeout=120)
    # issue 36 item 5's sibling: the child's log and error report are kept where the error says, without the pickle
    import re
    import shutil
    from pathlib import Path

    where = re.search(r"are in (\S+) \(kept for you", str(info.value))
    assert where, str(info.value)
    job = Path(where[1])
    try:
        kept = sorted(p.name for p in job.iterdir())
        assert "error-graph.json" in kept and "log-graph.txt" in kept and "job.pkl" not in kept, kept
    finally:
        shutil.rmtree(job, ignore_errors=True)


# ---------------------------------------------------------------------------
# graph mode (TF1 Session), in one child process
# ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", PIPELINES)
def test_graph_mode_traces_what_a_session_gives(graph, name) -> None:
    case = graph[name]
    assert case["traced"]["split"] == case["plain"]["split"]
    assert case["traced"]["results"] == case["plain"]["results"]
    assert case["traced"]["meta"]["execution"] == "graph"
    assert set(case["traced"]["devices"]) <= set(graph["devices_listed"])


def _text_lines(files):
    return tf.data.TextLineDataset([str(files / "a.txt"), str(files / "b.txt")]).batch(3)


@pytest.mark.slow
@pytest.mark.parametrize("name", [*PIPELINES, "files"])
def test_a_session_ends_where_eager_hands_a_replica_an_empty_batch_only_on_the_v2_rebatch(graph, name, v1, files):
    """Eagerly TF1 (like TF2) gives a replica that has nothing left an empty batch. In a Session, where TF 2.21
    turns experimental_enable_get_next_as_optional on only when executing eagerly (mirrored_strategy.py,
    "Enable last partial batch support in graph mode"), RebatchDatasetV2 (files) ends the iterator there
    instead; range sources go through the legacy rebatch (AUTO applies DATA: auto_shard.cc), which cuts the
    short batch itself, so the Session gives every step eager TF gives, an empty slice included."""
    eager = plain_tf1(v1, dataset=_text_lines(files) if name == "files" else PIPELINES[name]())["split"]
    in_session = graph[name]["plain"]["split"]
    if name == "files":  # TF rebatches the last 2 lines [b3, b4] whole to replica 0: replica 1 has nothing
        assert eager[-1] == [["b3", "b4"], []] and in_session == eager[:-1]
    else:
        assert in_session == eager


@pytest.mark.slow
def test_graph_mode_input_fn_and_experimental_run(graph) -> None:
    case = graph["input_fn"]
    assert case["traced"]["split"] == case["plain"]["split"]
    assert case["traced"]["results"] == case["plain"]["split"]  # step_fn = identity saw the untagged batch
    assert case["traced"]["meta"]["input_contexts"] == case["plain"]["contexts"]


@pytest.mark.slow
def test_graph_mode_files_keep_their_names_and_lines(graph, files) -> None:
    case = graph["files"]
    lines = [x for step in case["plain"]["split"] for replica in step for x in replica]
    expected = [[str(files / f"{line[0]}.txt"), int(line[1:])] for line in lines]
    assert case["rows"] == expected


@pytest.mark.slow
def test_graph_mode_v2_strategy_is_a_clear_error_because_tf_cannot_iterate_it(graph) -> None:
    assert "only supported inside of tf.function or when eager execution is enabled" in graph["tf_v2_iter_error"]
    assert graph["trace_distribution_error"].startswith("trace_distribution reads each replica's batch eagerly")
    assert "vizdist.trace_tf1" in graph["trace_distribution_error"]


@pytest.mark.parametrize("timeout", [0, -1, float("nan")])
def test_trace_tf1_refuses_a_timeout_that_is_not_a_positive_number(mirrored, timeout) -> None:
    """Issue 36 item 9: timeout=nan was accepted (nan <= 0 is false)."""
    with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
        vizdist.trace_tf1(mirrored, tf.data.Dataset.range(8).batch(4), timeout=timeout)
