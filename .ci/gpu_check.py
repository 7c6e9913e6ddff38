"""The checks only a GPU can make, in one command: the ``gpu`` tests and notebook 06 on logical GPUs.

Usage (on a machine whose TensorFlow sees a GPU, after ``make TF=gpu``)::

    .venv/bin/python .ci/gpu_check.py [OUT_DIR]

It runs ``pytest -m gpu tests/instrument/test_gpu.py`` (the claims G-1 to G-3 of notebooks/CLAIMS.md)
and notebook 06 with its setup cell changed to ``virtual_devices(4, kind="auto")``, and writes the
test log and the executed notebook to OUT_DIR (default ``artifacts/gpu-check``). The notebook in
notebooks/ is not changed. Without a GPU it refuses (exit status 2) and runs nothing, since every
test it would run would only skip. Exit status: 0 when both passed, 1 when either failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "06_placement.ipynb"
CPU_SETUP, GPU_SETUP = "virtual_devices(4)", 'virtual_devices(4, kind="auto")'


def gpus_visible() -> list[str]:
    """The physical GPUs this process's TensorFlow sees (imported here only)."""
    import tensorflow as tf

    return [d.name for d in tf.config.list_physical_devices("GPU")]


def run_gpu_tests(out: Path) -> int:
    """``pytest -m gpu`` over the GPU test module, its log in ``out/gpu-tests.log``; pytest's exit status."""
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-ra", "-o", "addopts=",
           "tests/instrument/test_gpu.py"]
    with open(out / "gpu-tests.log", "w") as log:
        return subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=900).returncode


def gpu_notebook(nb):
    """Notebook 06 (an ``nbformat`` node) with its setup cell on logical GPUs; refuses unless the line is there once."""
    cells = [c for c in nb.cells if c.cell_type == "code" and CPU_SETUP in c.source]
    if len(cells) != 1 or cells[0].source.count(CPU_SETUP) != 1:
        raise SystemExit(f"{NOTEBOOK.name}: expected {CPU_SETUP!r} exactly once in its setup cell; "
                         "update .ci/gpu_check.py to the notebook's setup cell")
    cells[0].source = cells[0].source.replace(CPU_SETUP, GPU_SETUP)
    return nb


def run_notebook(out: Path) -> int:
    """Execute notebook 06 on logical GPUs into ``out/06_placement_gpu.ipynb``; 0 when every cell ran."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = gpu_notebook(nbformat.read(NOTEBOOK, as_version=4))
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    try:
        client.execute()
        status = 0
    except CellExecutionError as err:
        print(f"notebook 06 on GPUs failed: {str(err)[:2000]}")
        status = 1
    nbformat.write(nb, out / "06_placement_gpu.ipynb")
    return status


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else ROOT / "artifacts" / "gpu-check")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    gpus = gpus_visible()
    if not gpus:
        print("gpu_check: TensorFlow sees no GPU here, so every check would only skip; nothing was run. "
              "Run it on a machine with a GPU after `make TF=gpu`.", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    print(f"gpu_check: {len(gpus)} GPU(s): {gpus}; results in {out}")
    t0 = time.monotonic()
    tests = run_gpu_tests(out)
    print(f"gpu tests: {'passed' if tests == 0 else f'FAILED (pytest exit {tests})'} "
          f"in {time.monotonic() - t0:.0f} s; log: {out / 'gpu-tests.log'}")
    t0 = time.monotonic()
    notebook = run_notebook(out)
    print(f"notebook 06 on logical GPUs: {'ran' if notebook == 0 else 'FAILED'} "
          f"in {time.monotonic() - t0:.0f} s: {out / '06_placement_gpu.ipynb'}")
    return 0 if tests == 0 and notebook == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
