"""Fixtures the Keras recording tests share (test_fidelity, test_user_run, test_stream, test_plain_tf_refuses).

None is autouse: a module asks for ``no_global_seed_after`` in its ``pytestmark``
(``pytest.mark.usefixtures("no_global_seed_after")``) and for ``keras`` by name.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def keras(tf):
    """The installed Keras (imported after ``tf``, so TensorFlow has its 4 logical CPUs first)."""
    import keras

    return keras


@pytest.fixture
def no_global_seed_after(tf):
    """A test that sets Keras's (and so TF's) global seed leaves none behind: later tests in this process must
    not inherit it."""
    yield
    tf.random.set_seed(None)
