"""Shared test set-up: quiet TF, 4 logical CPUs, and one temporary folder for the whole run.

(The checks that no process is left behind are in ``instrument/test_cluster.py`` and
``instrument/test_service.py``, beside the tests that start processes.)
"""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import pytest

N_DEVICES = 4
TMP = pytest.StashKey[str]()


def pytest_runtest_setup(item):
    """Tests marked ``gpu`` need a GPU TensorFlow can see; elsewhere they skip, saying so."""
    if item.get_closest_marker("gpu") is not None:
        import tensorflow

        if not tensorflow.config.list_physical_devices("GPU"):
            pytest.skip("needs a real GPU (TensorFlow sees none on this machine)")


def pytest_sessionstart(session):
    """Everything this run, the notebooks' kernels and every child process write to a temporary folder
    (files for a pipeline to read, logs an error keeps on purpose, TF's autograph files) lands in one
    folder, removed when the run passes instead of piling up in /tmp."""
    session.config.stash[TMP] = tempfile.mkdtemp(prefix="vizdist-tests-")
    os.environ["TMPDIR"], tempfile.tempdir = session.config.stash[TMP], None


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0:
        shutil.rmtree(session.config.stash[TMP], ignore_errors=True)


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
