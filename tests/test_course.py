"""The course's plumbing (``notebooks/course.py``) reads what plain TensorFlow says happened.

Each helper runs on a real trace and is compared with the same fact read from plain TF in the test:
the per-replica values of ``experimental_local_results``, the contexts TF passed to a ``dataset_fn``,
the elements a pipeline really yields. Its docstring examples run here too (it is not a vizdist
module, so tests/test_docstrings.py does not find it).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import math
from pathlib import Path

import numpy as np
import pytest

import vizdist

PATH = Path(__file__).resolve().parents[1] / "notebooks" / "course.py"


def _local(strategy, dataset):
    """Plain TF: per step, each replica's local value (as a numpy array) and its device."""
    return [[(v.numpy(), v.device) for v in strategy.experimental_local_results(x)]
            for x in strategy.experimental_distribute_dataset(dataset)]


def test_docstring_examples(course, monkeypatch):
    monkeypatch.syspath_prepend(str(PATH.parent))  # the examples import it as the notebooks do
    result = doctest.testmod(course, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted and result.failed == 0


def test_sizes_and_devices_are_what_each_replica_got(course, tf, mirrored):
    ds = tf.data.Dataset.range(10).batch(4)
    plain = _local(mirrored, ds)
    t = vizdist.trace_distribution(mirrored, ds)
    got = course.sizes(t)
    assert [[int(got.loc[s, r]) for r in got.columns] for s in got.index] == [[len(v) for v, _ in step] for step in plain]
    both = course.sizes_side_by_side({"a": t, "b": t})
    assert list(both.columns.levels[0]) == ["a", "b"] and both["a"].equals(got)
    first = vizdist.trace_distribution(mirrored, ds, steps=1)
    assert course.batch_devices(first).tolist() == [d.split("device:")[-1] for _, d in plain[0]]


def test_dataset_fn_calls_are_the_contexts_tf_passed(course, tf, mirrored):
    seen = []

    def dataset_fn(ctx):
        seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return tf.data.Dataset.range(8).batch(ctx.get_per_replica_batch_size(4))

    t = vizdist.trace_distribution(mirrored, dataset_fn=dataset_fn)
    calls = course.dataset_fn_calls(t)
    rows = calls[["num_input_pipelines", "input_pipeline_id", "num_replicas_in_sync"]].itertuples(index=False)
    assert [tuple(r) for r in rows] == seen


def _log_readings(tf):
    readings = [3.0, 5.0, 2.0, 7.0, 1.5, 4.0, 0.0, 2.5, 3.5, 8.0, 1.0, 6.0]
    return readings, tf.data.Dataset.from_tensor_slices(readings).map(tf.math.log).batch(4)


def test_bad_elements_and_ops_are_where_plain_tf_finds_the_inf(course, tf, mirrored):
    readings, ds = _log_readings(tf)
    plain = [(step, replica) for step, values in enumerate(_local(mirrored, ds))
             for replica, (v, _) in enumerate(values) if not np.isfinite(v).all()]
    source = [i for i, v in enumerate(readings) if not math.isfinite(math.log(v) if v > 0 else -math.inf)]
    t = vizdist.trace_distribution(mirrored, ds, step_fn=tf.function(tf.reduce_mean), placement=True)
    bad = course.bad_elements(t)
    assert list(zip(bad["step"], bad["replica"], strict=True)) == plain and bad["source_id"].tolist() == source
    assert "Log" in set(course.nonfinite_graph_ops(t)["op"])
    assert course.finding(t, "nonfinite-element")["step"] == plain[0][0]
    with pytest.raises(KeyError, match="no 'missing-elements' finding; the findings are"):
        course.finding(t, "missing-elements")
    guess = {"source": source[0], "step": plain[0][0], "replica": plain[0][1]}
    _prints(course.check_guess, t, guess, "done:")
    _prints(course.check_guess, t, {**guess, "replica": guess["replica"] + 1}, "not yet: look again at replica")


def test_failed_element_is_the_one_plain_tf_drops(course, tf, mirrored):
    readings, _ = _log_readings(tf)

    def checked(r):
        return tf.debugging.check_numerics(tf.math.log(r), "log")

    kept = [int(i) for i, _ in tf.data.Dataset.from_tensor_slices(readings).enumerate()
            .map(lambda i, r: (i, checked(r))).ignore_errors().as_numpy_iterator()]
    ds = tf.data.Dataset.from_tensor_slices(readings).map(checked).batch(4)
    with pytest.raises(vizdist.TracingError) as err:
        vizdist.trace_distribution(mirrored, ds, step_fn=tf.function(tf.reduce_mean), placement=True)
    assert course.failed_element(err.value.partial_trace)["source_ids"] == sorted(set(range(len(readings))) - set(kept))


def _prints(fn, *args):
    """What a check printed, with its last argument as the text it must start with."""
    *args, start = args
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args)
    assert out.getvalue().startswith(start), out.getvalue()


def test_times_seen_and_passes_follow_keras_fit(course, tf, mirrored):
    import keras

    x = np.arange(8, dtype="float32").reshape(-1, 1)
    train = tf.data.Dataset.from_tensor_slices((x, x)).batch(4)
    with mirrored.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    with vizdist.record() as rec:
        model.fit(train, epochs=2, verbose=0, shuffle=False)  # a dataset is not reshuffled by Keras anyway
    seen = course.times_seen(rec.trace, phase="train")
    assert seen.to_dict() == {2: len(x)}  # every example once per epoch, 2 epochs
    p = course.passes(rec.trace)
    assert p[p["phase"] == "train"]["steps"].tolist() == [len(list(train))] * 2


def test_timeline_reports_say_what_the_timing_statistics_say(course, tf):
    import time as _time

    def slow(x):
        _time.sleep(0.01)
        return x

    ds = tf.data.Dataset.range(8).map(lambda x: tf.py_function(slow, [x], tf.int64)).batch(2)
    steps = len(list(ds))  # plain TF: 4 batches
    t = vizdist.trace_distribution(None, ds, step_fn=lambda b: tf.reduce_sum(b), timing=True, progress=False)
    assert t.meta["steps_run"] == steps
    assert course.run_ms(t) >= 8 * 10  # every map call sleeps 10 ms, one after another (no num_parallel_calls)
    s = t.timing.overlap_summary()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        course.describe("run", t, map_ms=10)
    said = out.getvalue()
    assert f"run: {steps} steps" in said and ("INPUT-bound" in said) == (s["bound"] == "input")
    assert ", ".join(t.timing.map_threads()).replace(", ", " and ") in said


def test_buffer_report_reads_the_replicas_buffers(course, tf, mirrored):
    ds = tf.data.Dataset.range(16).batch(4).prefetch(2)
    t = vizdist.trace_distribution(mirrored, ds, step_fn=lambda b: tf.reduce_sum(b), timing=True, progress=False)
    buffer = t.timing.empty_buffer_steps()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        course.buffer_report("B", t)
    said = out.getvalue()
    assert f"(limit {buffer['limit']})" in said
    assert ("empty at most steps" in said) == (buffer["empty"] > buffer["steps"] / 2)
