"""Where a shuffle keeps its order sequence, shown on plain TF (what vizdist.record relies on).

A dataset object with ``shuffle(..., reshuffle_each_iteration=True)`` gives a new order on every read; a
rebuilt copy of it (same seeds) starts the sequence over; a copy built on the dataset's own seed generator
(``random_state.shared_shuffle``) goes on with the one sequence, read in turns with the original.
"""

from __future__ import annotations

import pytest

from vizdist.instrument.ids import random_state


def _order(ds) -> list[int]:
    return [int(v) for v in ds.as_numpy_iterator()]


def _shuffled(tf, reshuffle=True):
    return tf.data.Dataset.range(8).shuffle(8, seed=5, reshuffle_each_iteration=reshuffle)


def test_a_dataset_reshuffles_and_a_rebuilt_copy_starts_over(tf):
    ds = _shuffled(tf)
    sequence = [_order(ds) for _ in range(3)]
    assert len({tuple(o) for o in sequence}) == 3  # a new order on each read of the one object
    assert _order(_shuffled(tf)) == sequence[0]  # a rebuilt copy: plain TF's first order again


def test_a_copy_on_the_users_seed_generator_goes_on_with_the_sequence(tf):
    sequence = [_order(ds) for ds in [_shuffled(tf)] for _ in range(4)]
    user = _shuffled(tf)
    copy = random_state.shared_shuffle(tf.data.Dataset.range(8), user)
    assert [_order(d) for d in (user, copy, copy, user)] == sequence


def test_the_graph_holds_the_seed_generator_handle(tf):
    assert random_state.seed_generator(_shuffled(tf)) is not None
    assert random_state.seed_generator(tf.data.Dataset.range(3)) is None  # not a shuffle


@pytest.mark.parametrize("reshuffle", [True, False])
def test_reshuffles_names_the_random_state_a_copy_cannot_share(tf, reshuffle):
    assert random_state.reshuffles(_shuffled(tf, reshuffle).cache()) is reshuffle
    assert random_state.reshuffles(tf.data.Dataset.range(4).map(lambda x: x + tf.random.uniform([], 0, 9, tf.int64)))
