"""``.ci/gpu_check.py``, the one command that runs the checks only a GPU can make (notebooks/CLAIMS.md G-1..G-3)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

PATH = Path(__file__).resolve().parents[1] / ".ci" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_notebook_06_is_moved_to_logical_gpus_in_its_setup_cell_only(gpu_check):
    original = nbformat.read(gpu_check.NOTEBOOK, as_version=4)
    changed = gpu_check.gpu_notebook(nbformat.read(gpu_check.NOTEBOOK, as_version=4))
    differ = [(a.source, b.source) for a, b in zip(original.cells, changed.cells, strict=True) if a.source != b.source]
    assert len(differ) == 1
    before, after = differ[0]
    assert after == before.replace("virtual_devices(4)", 'virtual_devices(4, kind="auto")')
    assert 'virtual_devices(4, kind="auto")' in after


def test_a_notebook_without_the_setup_line_is_refused(gpu_check):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import vizdist")])
    with pytest.raises(SystemExit, match="exactly once"):
        gpu_check.gpu_notebook(nb)


def test_without_a_gpu_it_refuses_and_writes_nothing(tf, tmp_path):
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU: gpu_check would run the checks")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(PATH), str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "TensorFlow sees no GPU here" in done.stderr
    assert not out.exists()
