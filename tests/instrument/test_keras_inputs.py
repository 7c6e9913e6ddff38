"""The Keras names vizdist.record() hooks exist in the installed Keras, and behave as the hooks assume."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from vizdist.instrument.run import keras_inputs


@pytest.mark.parametrize(("module", "path"), keras_inputs.KERAS_NAMES, ids=[p for _, p in keras_inputs.KERAS_NAMES])
def test_each_keras_name_exists(tf, module, path):
    owner = importlib.import_module(module)
    for part in path.split("."):
        owner = getattr(owner, part)
    assert callable(owner)


def test_a_generator_adapter_yields_its_peeked_batches_again_each_pass(tf):
    """keras_inputs numbers a generator's batches assuming peek_and_restore's rule: every pass starts with the
    batches Keras peeked at, then goes on with the generator."""
    from keras.src.trainers.data_adapters.generator_data_adapter import GeneratorDataAdapter

    def batches():
        k = 0
        while True:
            yield (np.full((2, 1), k, dtype="float32"),)
            k += 1

    ds = GeneratorDataAdapter(batches()).get_tf_dataset()
    firsts = [[int(b[0].numpy()[0, 0]) for b in ds.take(3)] for _ in range(2)]
    peeked = len(GeneratorDataAdapter(batches())._first_batches)
    assert firsts[0][:peeked] == firsts[1][:peeked] == list(range(peeked))
    assert firsts[1][peeked] > firsts[0][peeked]  # then the generator goes on where it was


def test_array_adapter_gathers_every_input_leaf_by_the_same_indices(tf):
    """The index array rides as one more leaf of the adapter's inputs: Keras gathers each leaf by the same
    row indices (array_data_adapter.get_tf_dataset's grab_batch), so each batch's ids are its rows."""
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

    x = np.arange(10, dtype="float32").reshape(-1, 1) * 3
    adapter = ArrayDataAdapter(x, x, batch_size=4, shuffle=True)
    adapter._inputs = {"tag": np.arange(10, dtype=np.int64), "value": adapter._inputs}
    for element in adapter.get_tf_dataset():
        assert (element["value"][0].numpy()[:, 0] == element["tag"].numpy() * 3).all()
