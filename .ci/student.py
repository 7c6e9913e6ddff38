"""Write the student copy of the course (make student): every output cleared but the setup's.

Usage: python .ci/student.py [OUT]   (default: student/, git-ignored)

A learner predicts before seeing: in the committed course every reveal, check and exercise answer is
already printed (it reads well on GitHub and nbval compares it). The student copy keeps each
notebook's text and code and clears every code cell's output except the setup cells (the first two
code cells: environment and devices, imports and strategy), so what a cell shows appears only when
the learner runs it. The solutions folder and the facilitator page are not copied.

Example:
    >>> import tempfile, pathlib                                           # doctest: +SKIP
    >>> write_student_copy(pathlib.Path("notebooks"), pathlib.Path(tempfile.mkdtemp()))  # doctest: +SKIP
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nbformat

SETUP_CELLS = 2  # code cells kept as run: the setup (environment, devices) and the imports


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with every code cell's output cleared but the first SETUP_CELLS'."""
    code = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code += 1
        if code > SETUP_CELLS:
            cell.outputs, cell.execution_count = [], None
    return nb


def write_student_copy(src: Path, out: Path) -> list[Path]:
    """Write every notebook of ``src`` (with the helper module and images they read) as a student copy into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src.glob("*.ipynb")):
        nb = student_notebook(nbformat.read(path, as_version=4))
        nbformat.write(nb, out / path.name)
        written.append(out / path.name)
    for helper in ("course.py",):  # the notebooks import it (import course)
        if (src / helper).is_file():
            shutil.copy2(src / helper, out / helper)
    if (src / "img").is_dir():
        shutil.copytree(src / "img", out / "img", dirs_exist_ok=True)
    return written


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "student"
    for p in write_student_copy(root / "notebooks", target):
        print(p)
