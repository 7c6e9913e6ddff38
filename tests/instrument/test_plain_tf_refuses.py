"""What plain TF and Keras refuse under MirroredStrategy ``fit`` (TF 2.21, Keras 3.15), and the way that works.

Each case runs plain, then inside ``vizdist.record()``: both fail with the same error (vizdist neither hides
nor changes it), and the working alternative the README names runs, recorded, with ids.
"""

from __future__ import annotations

import numpy as np
import pytest

import vizdist

pytestmark = pytest.mark.filterwarnings("ignore::vizdist.errors.RecordingWarning")


def _error(fn) -> str:
    try:
        fn()
    except Exception as exc:  # what plain TF / Keras raised, as text: its first line, and XLA's reason
        lines = str(exc).strip().splitlines()
        why = ["Trying to access resource" for ln in lines if "Trying to access resource" in ln]
        return f"{type(exc).__name__}: {lines[0][:100]}" + (f" ({why[0]})" if why else "")
    return ""


def _plain_and_recorded(fn) -> tuple[str, str]:
    plain = _error(fn)
    with vizdist.record():
        recorded = _error(fn)
    return plain, recorded


def _lookup_model(tf, keras, strategy):
    with strategy.scope():
        lookup = keras.layers.StringLookup(vocabulary=["a", "b", "c"])
        inp = keras.Input((1,), dtype="string")
        out = keras.layers.Dense(1)(keras.layers.Lambda(lambda t: tf.cast(t, "float32"))(lookup(inp)))
        model = keras.Model(inp, out)
        model.compile("sgd", "mse")
    return model


def _words(tf):
    x = np.array([["a"], ["b"], ["c"], ["a"]] * 4)
    return tf.data.Dataset.from_tensor_slices((x, np.zeros((16, 1), "float32"))).batch(8)


def test_strings_into_the_model_fail_in_the_build_read(tf, keras, mirrored):
    """Keras's build read averages the first batch over the replicas (AddN), which takes no strings."""
    plain, recorded = _plain_and_recorded(lambda: _lookup_model(tf, keras, mirrored).fit(_words(tf), verbose=0))
    assert plain == recorded and "Value for attr 'T' of string is not in the list of allowed values" in plain


def test_strings_looked_up_in_the_pipeline_work(tf, keras, mirrored):
    lookup = keras.layers.StringLookup(vocabulary=["a", "b", "c"])
    with mirrored.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    ds = _words(tf).map(lambda x, y: (tf.cast(lookup(x), "float32"), y))
    with vizdist.record() as rec:
        model.fit(ds, epochs=1, verbose=0)
    assert sorted(rec.trace.elements.query("phase == 'train'")["source_id"]) == list(range(16))


def _ragged(tf):
    rt = tf.ragged.constant([[1.0], [1.0, 2.0], [3.0], [1.0, 1.0, 1.0]] * 2)
    return tf.data.Dataset.from_tensor_slices((rt, np.zeros((8, 1), "float32"))).batch(8)


def _sum_model(tf, keras, strategy):
    with strategy.scope():
        model = keras.Sequential([keras.Input((None,)),
                                  keras.layers.Lambda(lambda t: tf.reduce_sum(t, axis=1, keepdims=True))])
        model.compile("sgd", "mse")
    return model


def test_ragged_inputs_to_fit_fail(tf, keras, mirrored):
    plain, recorded = _plain_and_recorded(lambda: _sum_model(tf, keras, mirrored).fit(_ragged(tf), verbose=0))
    assert plain == recorded == "AttributeError: 'RaggedTensor' object has no attribute 'device'"


def test_ragged_made_dense_in_the_pipeline_works(tf, keras, mirrored):
    ds = _ragged(tf).map(lambda x, y: (x.to_tensor(), y))
    with vizdist.record() as rec:
        _sum_model(tf, keras, mirrored).fit(ds, epochs=1, verbose=0)
    assert sorted(rec.trace.elements.query("phase == 'train'")["source_id"]) == list(range(8))


def test_jit_compile_over_four_replicas_fails(tf, keras, mirrored):
    def fit():
        with mirrored.scope():
            model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
            model.compile("sgd", "mse", jit_compile=True)
        x = np.zeros((16, 1), "float32")
        model.fit(x, x, batch_size=8, verbose=0)

    plain, recorded = _plain_and_recorded(fit)
    assert plain == recorded and plain.startswith("InvalidArgumentError") and "Trying to access resource" in plain
    with mirrored.scope():
        default = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        default.compile("sgd", "mse")
    assert default.jit_compile is False  # Keras's "auto" under this strategy: no XLA, and fit runs
