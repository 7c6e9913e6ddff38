"""The bad element: vizdist names the source element plain TensorFlow produced the NaN/Inf from."""

from __future__ import annotations

import numpy as np
import pytest

import vizdist


def _plain_nonfinite_ids(tf, ds):
    """Source ids (range values) whose element is not finite, by iterating the plain dataset."""
    return [i for i, x in enumerate(ds.unbatch().as_numpy_iterator()) if not np.all(np.isfinite(x))]


def test_inf_from_one_source_element_is_named(tf, mirrored, step):
    ds = tf.data.Dataset.range(16).map(lambda x: 1.0 / tf.cast(x - 5, tf.float32)).batch(8)
    t = vizdist.trace_distribution(mirrored, ds, step_fn=step, placement=True)
    plain = _plain_nonfinite_ids(tf, ds)
    f = vizdist.diagnose(t)
    bad = f[f.code == "nonfinite-element"]
    assert len(bad) == len(plain) == 1
    msg = bad.iloc[0]["message"]
    assert f"source element {plain[0]} " in msg
    where = t.elements[t.elements.source_id == plain[0]].iloc[0]
    assert bad.iloc[0]["step"] == where["step"] and bad.iloc[0]["replicas"] == [where["replica"]]
    assert "RealDiv 'truediv'" in msg and "on CPU:0 (the input pipeline)" in msg


def test_nan_made_in_the_step_names_op_replica_and_device(tf, mirrored):
    @tf.function
    def step(x):
        return tf.math.log(x - 3.0)

    ds = tf.data.Dataset.range(16).map(lambda x: tf.cast(x, tf.float32)).batch(8)
    t = vizdist.trace_distribution(mirrored, ds, step_fn=step, placement=True)
    plain = [[bool(np.all(np.isfinite(v))) for v in mirrored.experimental_local_results(mirrored.run(step, args=(b,)))]
             for b in mirrored.experimental_distribute_dataset(ds)]
    f = vizdist.diagnose(t)
    got = sorted((int(r.step), r.replicas[0]) for r in f[f.code == "nonfinite-result"].itertuples())
    assert got == sorted((s, r) for s, row in enumerate(plain) for r, ok in enumerate(row) if not ok)
    assert all("Log 'Log'" in m for m in f[f.code == "nonfinite-result"]["message"])


def test_check_numerics_in_the_step_keeps_tf_message_and_names_replica(tf, mirrored):
    @tf.function
    def step(x):
        return tf.debugging.check_numerics(1.0 / (x - 6.0), "bad step")

    ds = tf.data.Dataset.range(16).map(lambda x: tf.cast(x, tf.float32)).batch(8)
    with pytest.raises(tf.errors.InvalidArgumentError) as plain:
        for b in mirrored.experimental_distribute_dataset(ds):
            mirrored.run(step, args=(b,))
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        vizdist.trace_distribution(mirrored, ds, step_fn=step, placement=True)
    f = vizdist.diagnose(err.value.partial_trace)
    row = f[f.code == "numerics-error"].iloc[0]
    assert "bad step : Tensor had Inf values" in row["message"] and "bad step" in str(plain.value)
    # plain TF: element 6 (1/(6-6)) is on the replica that got it in step 0
    first = mirrored.experimental_local_results(next(iter(mirrored.experimental_distribute_dataset(ds))))
    where = [i for i, b in enumerate(first) if 6.0 in b.numpy()]
    held = next([int(v) for v in b.numpy()] for b in first if 6.0 in b.numpy())  # range values: their own ids
    assert row["step"] == 0 and row["replicas"] == where
    assert f"replica {where[0]} (CPU:{where[0]}), whose batch held source elements {held}" in row["message"]


def test_a_failing_step_names_its_elements_where_the_values_are_the_ids(tf, mirrored):
    """range(...).batch(...) runs untagged (each value is its own id): the failed step still names them."""
    @tf.function
    def step(x):
        return tf.debugging.check_numerics(1.0 / tf.cast(x - 6, tf.float32), "bad step")

    ds = tf.data.Dataset.range(16).batch(8)
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        vizdist.trace_distribution(mirrored, ds, step_fn=step, placement=True)
    row = vizdist.diagnose(err.value.partial_trace).query("code == 'numerics-error'").iloc[0]
    first = mirrored.experimental_local_results(next(iter(mirrored.experimental_distribute_dataset(ds))))
    where = [i for i, b in enumerate(first) if 6 in b.numpy()]
    held = next(b.numpy().tolist() for b in first if 6 in b.numpy())
    assert row["step"] == 0 and row["replicas"] == where
    assert f"whose batch held source elements {held}" in row["message"]


def _plain_failing_ids(tf, source, fn):
    """Source ids whose map raises, by plain TF: each id rides beside its value; ignore_errors drops the raisers."""
    kept = {int(i) for i, _ in source.enumerate().map(lambda i, x: (i, fn(x))).ignore_errors().as_numpy_iterator()}
    return sorted(set(range(int(source.cardinality()))) - kept)


def test_check_numerics_in_the_map_names_the_element_it_raised_on(tf, mirrored, step):
    def fn(x):
        return tf.debugging.check_numerics(1.0 / tf.cast(x - 9, tf.float32), "bad map")

    ds = tf.data.Dataset.range(16).map(fn).batch(8)
    with pytest.raises(vizdist.TracingError) as err:
        vizdist.trace_distribution(mirrored, ds, step_fn=step, placement=True)
    plain = _plain_failing_ids(tf, tf.data.Dataset.range(16), fn)
    t = err.value.partial_trace
    f = vizdist.diagnose(t)
    row = f[f.code == "numerics-error"].iloc[0]
    assert row["step"] == plain[0] // 8 and "bad map : Tensor had Inf values" in row["message"]  # TF's message
    assert f"raised on source element {plain[0]} (CheckNumerics 'CheckNumerics', on CPU:0)" in row["message"]
    assert "RealDiv 'truediv'" in row["message"]
    element = t.meta["placement"]["numerics"]["failed_element"]
    assert element["source_ids"] == plain[:1] and plain[0] not in set(t.elements["source_id"])  # never arrived
    assert element["devices"] == [t.meta["placement"]["host"]]


def test_assert_in_the_second_map_of_a_dataset_fn_names_the_element(tf, mirrored, step):
    readings = [3.0, 2.0, 1.0, 0.5, -1.0, 2.0, 0.0, 3.0]

    def positive_log(x):
        with tf.control_dependencies([tf.debugging.assert_positive(x, message="reading must be > 0")]):
            return tf.math.log(x)

    def dataset_fn(ctx):
        return tf.data.Dataset.from_tensor_slices(readings).map(lambda x: x * 2.0).map(positive_log).batch(1)

    with pytest.raises(vizdist.TracingError) as err:
        vizdist.trace_distribution(mirrored, dataset_fn=dataset_fn, placement=True)
    plain = _plain_failing_ids(tf, tf.data.Dataset.from_tensor_slices(readings),
                               lambda x: positive_log(x * 2.0))
    row = vizdist.diagnose(err.value.partial_trace).query("code == 'numerics-error'").iloc[0]
    assert f"map #2 of the pipeline raised on source element {plain[0]} (Assert '" in row["message"]
    assert "reading must be > 0" in row["message"]


def test_check_numerics_in_a_filter_names_the_element_it_raised_on(tf, mirrored, step):
    def keep(x):
        return tf.debugging.check_numerics(1.0 / tf.cast(x - 5, tf.float32), "bad filter") > 0.0

    ds = tf.data.Dataset.range(12).filter(keep).batch(4)
    with pytest.raises(vizdist.TracingError) as err:
        vizdist.trace_distribution(mirrored, ds, step_fn=step, placement=True)
    plain = _plain_failing_ids(tf, tf.data.Dataset.range(12), keep)
    row = vizdist.diagnose(err.value.partial_trace).query("code == 'numerics-error'").iloc[0]
    assert f"filter #1 of the pipeline raised on source element {plain[0]} (CheckNumerics '" in row["message"]
    assert "bad filter : Tensor had Inf values" in row["message"]


def test_check_numerics_in_a_map_inside_a_flat_map_names_the_file_and_line(tf, mirrored, step, tmp_path):
    files = vizdist.write_text_files(tmp_path, n_files=3, lines_per_file=4)

    def parse(line):
        return tf.debugging.check_numerics(1.0 / (tf.strings.to_number(line) - 6.0), "line 6")

    ds = tf.data.Dataset.from_tensor_slices(files).flat_map(lambda f: tf.data.TextLineDataset(f).map(parse)).batch(4)
    with pytest.raises(vizdist.TracingError) as err:
        vizdist.trace_distribution(mirrored, ds, step_fn=step, placement=True)
    # plain TF: each file's lines (flat_map reads the files in turn), the line on which parse raises
    plain = [(f, i) for f in files for i, line in enumerate(tf.data.TextLineDataset(f).as_numpy_iterator())
             if list(tf.data.Dataset.from_tensors(line).map(parse).ignore_errors().as_numpy_iterator()) == []]
    row = vizdist.diagnose(err.value.partial_trace).query("code == 'numerics-error'").iloc[0]
    f, line = plain[0]
    assert "flat_map #1 of the pipeline raised on source element " in row["message"]
    assert f" ({f}:{line}) (CheckNumerics '" in row["message"]


def test_check_numerics_in_an_interleave_names_the_line_tf_had_reached(tf, mirrored, step, tmp_path):
    """interleave reads the files in turn: the line named is the one TF's order reached, not the first
    failing line in file order."""
    files = vizdist.write_text_files(tmp_path, n_files=3, lines_per_file=4)

    def parse(line):
        x = tf.strings.to_number(line)
        return tf.debugging.check_numerics(tf.where((x == 3.0) | (x == 5.0), float("inf"), x), "3 or 5")

    def pipeline(fn):
        return tf.data.Dataset.from_tensor_slices(files).interleave(
            lambda f: tf.data.TextLineDataset(f).enumerate().map(lambda i, line: fn(f, i, line)),
            cycle_length=2, block_length=1)

    with pytest.raises(vizdist.TracingError) as err:
        vizdist.trace_distribution(mirrored, pipeline(lambda f, i, line: parse(line)).batch(4), step_fn=step,
                                   placement=True)
    # plain TF: (file, line) in its order (a function that raises on nothing), and how many outputs it
    # yields before raising: the next one in that order stopped the run
    order = list(pipeline(lambda f, i, line: (f, i)).as_numpy_iterator())
    yielded = 0
    try:
        for _ in pipeline(lambda f, i, line: parse(line)):
            yielded += 1
    except tf.errors.InvalidArgumentError:
        pass
    file, line = order[yielded][0].decode(), int(order[yielded][1])
    row = vizdist.diagnose(err.value.partial_trace).query("code == 'numerics-error'").iloc[0]
    assert "interleave #1 of the pipeline raised on source element " in row["message"]
    assert f" ({file}:{line}) (CheckNumerics '" in row["message"]


def test_loss_scaling_warns_only_on_steps_where_fewer_elements_arrived(tf, mirrored):
    ds = tf.data.Dataset.range(10).map(lambda x: tf.cast(x, tf.float32)).batch(4)
    t = vizdist.trace_loss_scaling(mirrored, ds, global_batch_size=4)
    plain = [sum(len(v) for v in mirrored.experimental_local_results(b))
             for b in mirrored.experimental_distribute_dataset(ds)]
    f = vizdist.diagnose(t)
    assert f[f.code == "loss-scaling"]["step"].tolist() == [s for s, n in enumerate(plain) if n < 4]


def test_filtering_out_readings_that_are_not_positive_before_the_log_leaves_only_finite_values(tf):
    """Notebook 07 cell 15's fix: filter(lambda r: r > 0) before map(tf.math.log) drops the readings whose
    log is -inf (0.0) or NaN (a negative), and keeps every other."""
    readings = [2.0, 0.0, 3.0, -1.0, 0.5]
    plain = list(tf.data.Dataset.from_tensor_slices(readings).map(tf.math.log).as_numpy_iterator())
    fixed = list(tf.data.Dataset.from_tensor_slices(readings).filter(lambda r: r > 0).map(tf.math.log)
                 .as_numpy_iterator())
    assert not np.isfinite(plain).all()
    assert np.isfinite(fixed).all() and len(fixed) == sum(r > 0 for r in readings)
