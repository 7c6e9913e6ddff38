"""A run that stops on an error lets go of TF's iterator at once, not in a later garbage collection.

TF's iterator destructor waits for the iterator's threads while it holds the GIL. Left in a reference
cycle (a kept error's traceback runs through TF's iterator code, whose frames hold the iterator), the
iterator was destroyed by whichever later collection found it, and in CI that froze an unrelated test
for up to three minutes. Each test here runs the failing case, then collects with ``DEBUG_SAVEALL``: an
iterator only the cyclic collector would free is caught in ``gc.garbage`` instead of being freed.
"""

from __future__ import annotations

import gc

import pytest

import vizdist
from vizdist.errors import TracingError
from vizdist.instrument.ids.map_failure import find_map_failure


def iterators_in_cycles(run) -> list[str]:
    """Type names of the TF iterators that ``run()`` left for the cyclic garbage collector."""
    gc.collect()
    run()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return sorted(type(o).__name__ for o in gc.garbage
                      if "Iterator" in type(o).__name__ and type(o).__module__.startswith("tensorflow"))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()


def _bad_map(tf, ds):
    return ds.map(lambda x: tf.debugging.check_numerics(tf.math.log(tf.cast(x, tf.float32) - 10.0), "bad"))


def test_the_probe_sees_an_iterator_kept_in_a_cycle(tf):
    def kept_in_a_cycle():
        cycle: list = [iter(tf.data.Dataset.range(4))]
        cycle.append(cycle)

    assert iterators_in_cycles(kept_in_a_cycle) == ["OwnedIterator"]


def test_plain_tf_leaves_none_after_an_error_it_dropped(tf):
    def plain():
        with pytest.raises(tf.errors.InvalidArgumentError):
            list(_bad_map(tf, tf.data.Dataset.range(16)))

    assert iterators_in_cycles(plain) == []


def test_trace_distribution_stopped_by_a_data_error_leaves_none(tf, mirrored):
    def run():
        with pytest.raises(TracingError, match="bad : Tensor had NaN values") as info:
            vizdist.trace_distribution(mirrored, _bad_map(tf, tf.data.Dataset.range(64)).batch(8), progress=False)
        assert info.value.partial_trace.meta["stopped"] == "error"

    assert iterators_in_cycles(run) == []


def test_trace_distribution_stopped_by_a_failing_step_leaves_none(tf, mirrored):
    def step(x):
        raise ValueError("the step failed")

    def run():
        with pytest.raises(ValueError, match="the step failed"):
            vizdist.trace_distribution(mirrored, tf.data.Dataset.range(64).batch(8), step_fn=step, progress=False)

    assert iterators_in_cycles(run) == []


def test_trace_tf1_stopped_by_a_data_error_leaves_none(tf, devices):
    v1 = tf.compat.v1.distribute.MirroredStrategy(devices[:2])

    def run():
        with pytest.raises(TracingError, match="bad : Tensor had NaN values"):
            vizdist.trace_tf1(v1, _bad_map(tf, tf.data.Dataset.range(64)).batch(8), progress=False)

    assert iterators_in_cycles(run) == []


@pytest.mark.parametrize("kind", ["map", "interleave"])
def test_find_map_failure_leaves_none(tf, kind):
    if kind == "interleave":  # only element 0's dataset raises (on its first value, 0)
        ds = tf.data.Dataset.range(2).interleave(lambda x: _bad_map(tf, tf.data.Dataset.range(12).map(lambda v: v + 20 * x)),
                                                 cycle_length=2)
    else:
        ds = _bad_map(tf, tf.data.Dataset.range(16))

    def run():
        assert find_map_failure([ds], seconds=30)["op_type"] == "CheckNumerics"

    assert iterators_in_cycles(run) == []


def test_an_in_process_service_consumer_stopped_by_a_data_error_leaves_none(tf):
    from vizdist.instrument.processes.cluster import IsolationWarning

    with pytest.warns(IsolationWarning), vizdist.LocalDataService(workers=1, in_process=True) as s:
        def run():
            with pytest.raises(TracingError, match="bad : Tensor had NaN values"):
                s.trace(_bad_map(tf, tf.data.Dataset.range(64)), processing_mode="parallel_epochs", progress=False)

        left = iterators_in_cycles(run)
    assert left == []
