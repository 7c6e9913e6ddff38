"""Write the student copy of the course (make student): no output that answers a question survives.

Usage: python .ci/student.py [OUT]   (default: student/, git-ignored)

A learner predicts before seeing: in the committed course every reveal, check and exercise answer is
already printed (it reads well on GitHub and nbval compares it). The student copy keeps each
notebook's text and code, and keeps a code cell's output only when the cell comes before the
notebook's first **Predict** prompt (the setup, and what a question is about, such as notebook 07's
symptom); every later output is cleared, so what a cell shows appears only when the learner runs it.
The widget state saved in a notebook's metadata goes too (a predict-and-reveal widget keeps the real
run in it). The model answers the notebooks link to (``solutions/``) are copied beside them, with the
helper module and images the notebooks read, so every relative link in the copy resolves; the
facilitator page is not copied.

Example:
    >>> import tempfile, pathlib                                           # doctest: +SKIP
    >>> write_student_copy(pathlib.Path("notebooks"), pathlib.Path(tempfile.mkdtemp()))  # doctest: +SKIP
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import nbformat

#: A markdown cell that asks the learner to predict: the course's bold **Predict** prompts.
PREDICT = re.compile(r"\*\*Predict\b")
#: What the notebooks read or link to beside them: copied into the student copy as they are.
BESIDE = ("course.py", "img", "solutions")


def first_prompt(nb: nbformat.NotebookNode) -> int:
    """The index of the notebook's first **Predict** prompt (its number of cells when it has none)."""
    return next((i for i, cell in enumerate(nb.cells)
                 if cell.cell_type == "markdown" and PREDICT.search(cell.source)), len(nb.cells))


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with every code cell's output cleared from its first **Predict** prompt on."""
    start = first_prompt(nb)
    for cell in nb.cells[start:]:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)  # saved widget models: a reveal's answer lives there too
    return nb


def write_student_copy(src: Path, out: Path) -> list[Path]:
    """Write every notebook of ``src`` as a student copy into ``out``, with what they read and link to."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src.glob("*.ipynb")):
        nb = student_notebook(nbformat.read(path, as_version=4))
        nbformat.write(nb, out / path.name)
        written.append(out / path.name)
    for name in BESIDE:
        if (src / name).is_dir():
            shutil.copytree(src / name, out / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif (src / name).is_file():
            shutil.copy2(src / name, out / name)
    return written


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "student"
    for p in write_student_copy(root / "notebooks", target):
        print(p)
