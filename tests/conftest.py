"""Shared test set-up: quiet TF, 4 logical CPUs (the run's one temporary folder is set up by the
``conftest.py`` at the repository's root, so that a notebook run alone gets it too).

(The checks that no process is left behind are in ``instrument/test_cluster.py`` and
``instrument/test_service.py``, beside the tests that start processes.)
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import pytest

N_DEVICES = 4


def pytest_runtest_setup(item):
    """Tests marked ``gpu`` need a GPU TensorFlow can see; elsewhere they skip, saying so."""
    if item.get_closest_marker("gpu") is not None:
        import tensorflow

        if not tensorflow.config.list_physical_devices("GPU"):
            pytest.skip("needs a real GPU (TensorFlow sees none on this machine)")


@pytest.fixture(scope="session")
def devices() -> list[str]:
    """Four logical CPU devices (set once, before TF starts, for the whole test session)."""
    import vizdist

    return vizdist.virtual_devices(N_DEVICES)


@pytest.fixture(scope="session")
def tf(devices):
    import tensorflow

    return tensorflow


@pytest.fixture(scope="session")
def mirrored(tf):
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(N_DEVICES)])


@pytest.fixture(scope="module")
def course():
    """``notebooks/course.py``, the course's helpers, loaded as the notebooks import it (``import course``)."""
    path = Path(__file__).resolve().parents[1] / "notebooks" / "course.py"
    spec = importlib.util.spec_from_file_location("course", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def step(tf):
    """A small float step (``reduce_sum(x * 2.0)``) in a ``tf.function``, for tests that need any step."""
    @tf.function
    def step(x):
        return tf.reduce_sum(x * 2.0)

    return step
