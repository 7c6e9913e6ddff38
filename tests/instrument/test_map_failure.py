"""find_map_failure: the element a map raises on, named by the same ids as the trace, against plain TF."""

from __future__ import annotations

from pathlib import Path

import vizdist
from vizdist.instrument.ids.map_failure import find_map_failure


def _checked(tf, line):
    value = tf.strings.to_number(line)
    return tf.debugging.check_numerics(1.0 / (value - 6.0), "line 6")


def test_a_text_file_element_is_named_by_file_and_line(tf, tmp_path):
    files = vizdist.write_text_files(tmp_path, n_files=3, lines_per_file=3)
    ds = tf.data.TextLineDataset(files).map(lambda line: _checked(tf, line)).batch(2)
    found = find_map_failure([ds])
    # plain TF and Python: the first line (in the pipeline's order) whose map raises
    order = [(f, i, line) for f in files for i, line in enumerate(Path(f).read_text().split())]
    plain = []
    for f, i, line in order:
        try:
            _checked(tf, tf.constant(line))
        except tf.errors.InvalidArgumentError:
            plain.append((f, i))
    assert (found["source_files"][0], found["source_lines"][0]) == plain[0]
    assert found["op_type"] == "CheckNumerics" and "line 6 : Tensor had Inf values" in found["message"]
    assert found["checked"] == [(f, i) for f, i, _ in order].index(plain[0]) + 1


def test_the_search_is_bounded_and_finds_nothing_where_plain_tf_raises_nothing(tf):
    def fn(x):
        return tf.debugging.check_numerics(1.0 / tf.cast(x - 9, tf.float32), "m")

    assert find_map_failure([tf.data.Dataset.range(16).map(fn)], limit=5) is None  # element 9 is past the first 5
    filtered = tf.data.Dataset.range(16).filter(lambda x: x != 9).map(fn)
    assert len(list(filtered)) == 15  # plain TF: the map raises on nothing
    assert find_map_failure([filtered]) is None


def test_a_filter_predicate_that_raises_is_found_too(tf, tmp_path):
    files = vizdist.write_text_files(tmp_path, n_files=2, lines_per_file=4)

    def keep(line):
        return _checked(tf, line) > 0.0

    ds = tf.data.TextLineDataset(files).map(tf.strings.strip).filter(keep).batch(2)
    found = find_map_failure([ds])
    # plain TF and Python: the first line (in the pipeline's order) on which the predicate raises
    order = [(f, i, line) for f in files for i, line in enumerate(Path(f).read_text().split())]
    plain = []
    for f, i, line in order:
        try:
            keep(tf.strings.strip(tf.constant(line)))
        except tf.errors.InvalidArgumentError:
            plain.append((f, i))
    assert (found["source_files"][0], found["source_lines"][0]) == plain[0]
    assert (found["function"], found["map_index"]) == ("filter", 0)  # the map before it raised on nothing
    assert "filter's own predicate" in found["how"] and found["op_type"] == "CheckNumerics"


def test_a_scan_function_is_called_with_its_state_carried(tf):
    def running(total, x):
        total = total + x
        return total, tf.debugging.check_numerics(1.0 / tf.cast(total - 10, tf.float32), "sum 10")

    ds = tf.data.Dataset.range(12).scan(tf.constant(0, tf.int64), running).batch(3)
    found = find_map_failure([ds])
    # plain TF: the scan raises on the element after the last one it yielded (range ids are the values)
    plain = tf.data.Dataset.range(12).scan(tf.constant(0, tf.int64), running)
    it, ok = iter(plain), 0
    try:
        for _ in it:
            ok += 1
    except tf.errors.InvalidArgumentError:
        pass
    assert ok < 12, "plain TF raised on nothing: the test's data is wrong"
    assert found["source_ids"] == [list(range(12))[ok]] and found["checked"] == ok + 1
    assert (found["function"], found["map_index"]) == ("scan", 0)
    assert "carrying its state" in found["how"] and "sum 10 : Tensor had Inf values" in found["message"]


def test_a_map_inside_a_flat_map_over_files_is_named_by_file_and_line(tf, tmp_path):
    files = vizdist.write_text_files(tmp_path, n_files=3, lines_per_file=3)
    ds = (tf.data.Dataset.from_tensor_slices(files)
          .flat_map(lambda f: tf.data.TextLineDataset(f).map(lambda line: _checked(tf, line))).batch(2))
    found = find_map_failure([ds])
    # plain TF and Python: the first line, file by file (flat_map reads them in turn), whose map raises
    plain = []
    for f in files:
        for i, line in enumerate(Path(f).read_text().split()):
            try:
                _checked(tf, tf.constant(line))
            except tf.errors.InvalidArgumentError:
                plain.append((f, i))
    assert (found["source_files"][0], found["source_lines"][0]) == plain[0]
    assert found["checked"] == files.index(plain[0][0]) + 1  # files opened, the failing one included
    assert (found["function"], found["op_type"]) == ("flat_map", "CheckNumerics")


def test_a_flat_map_output_is_named_by_its_element_and_position(tf):
    def expand(x):
        return tf.data.Dataset.range(x).map(lambda y: tf.debugging.check_numerics(
            1.0 / tf.cast(x * 10 + y - 42, tf.float32), "42"))

    found = find_map_failure([tf.data.Dataset.range(6).flat_map(expand)])
    plain = []  # plain TF: each element's dataset read to its end, in turn
    for x in range(6):
        n = 0
        try:
            for _ in expand(tf.constant(x, tf.int64)):
                n += 1
        except tf.errors.InvalidArgumentError:
            plain.append((x, n))
    assert (found["source_ids"][0], found["source_lines"][0]) == plain[0]


def _interleave_lines(tf, files, fn, **order):
    return tf.data.Dataset.from_tensor_slices(files).interleave(lambda f: tf.data.TextLineDataset(f).map(fn), **order)


def _raises_on(tf, *values):
    def fn(line):
        x = tf.strings.to_number(line)
        bad = tf.reduce_any(tf.equal(x, tf.constant(values, tf.float32)))
        return tf.debugging.check_numerics(tf.where(bad, float("inf"), x), f"raises on {values}")
    return fn


def test_an_interleave_names_the_output_tf_reached_not_the_first_in_input_order(tf, tmp_path):
    files = vizdist.write_text_files(tmp_path, n_files=3, lines_per_file=4)
    fn = _raises_on(tf, 3.0, 5.0)
    order_kw = {"cycle_length": 2, "block_length": 1}
    found = find_map_failure([_interleave_lines(tf, files, fn, **order_kw).batch(2)])
    # plain TF: its order of (file, line), read with the same interleave and a function that raises on
    # nothing, and how many outputs the raising run yields: the output after those stopped it
    order = [(f.decode(), int(i)) for f, i in tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TextLineDataset(f).enumerate().map(lambda k, _: (f, k)), **order_kw).as_numpy_iterator()]
    yielded = 0
    try:
        for _ in _interleave_lines(tf, files, fn, **order_kw):
            yielded += 1
    except tf.errors.InvalidArgumentError:
        pass
    first_in_input_order = min((files.index(f), i) for f, i in order if _plain_raises(tf, fn, f, i))
    assert (found["source_files"][0], found["source_lines"][0]) == order[yielded]
    assert (files.index(order[yielded][0]), order[yielded][1]) != first_in_input_order  # what a walk in input order names
    assert found["function"] == "interleave" and "exactly one" in found["how"]


def _plain_raises(tf, fn, f, i):
    line = Path(f).read_text().split()[i]
    return list(tf.data.Dataset.from_tensors(line).map(fn).ignore_errors().as_numpy_iterator()) == []


def test_an_interleave_names_nothing_where_two_elements_raise_at_the_point_reached(tf, tmp_path):
    files = vizdist.write_text_files(tmp_path, n_files=2, lines_per_file=4)
    fn = _raises_on(tf, 1.0, 4.0)  # TF reads 0, then 4 (raises); file 0's next line, 1, raises too
    assert find_map_failure([_interleave_lines(tf, files, fn, cycle_length=2, block_length=1)]) is None
    # in no fixed order (deterministic=False) it is not searched at all
    fn = _raises_on(tf, 5.0)
    assert find_map_failure([_interleave_lines(tf, files, fn, cycle_length=2, num_parallel_calls=2,
                                               deterministic=False)]) is None
    assert find_map_failure([_interleave_lines(tf, files, fn, cycle_length=2, num_parallel_calls=2,
                                               deterministic=True)])["source_lines"] == [1]
