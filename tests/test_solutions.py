"""Every exercise's model answer passes the exercise's own check, on the real run.

Each exercise cell of the course has one line marked ``# edit me`` (the learner's starting code, which
does the wrong thing) and ends with a check whose last line is ``done: ...`` when the goal is met and
``not yet: ...`` (what is still wrong, in words) otherwise. ``notebooks/solutions/<notebook>.py`` holds
the model answer: the lines that replace the marked one. This test runs each notebook with its answer
in place and reads what the check printed; it also runs nothing else of the answer, so the check is
the judge, not the answer's text. Of the cells before the exercise it runs the setup cell and those
that define a name the exercise needs (transitively): the rest of the notebook is nbval's to run.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "notebooks" / "solutions").glob("*.py"))
MARK = "# edit me"


def _answer_lines(path: Path) -> list[str]:
    """The code lines of a solution file (its docstring and blank lines dropped)."""
    text = path.read_text()
    body = text.split('"""', 2)[2] if text.lstrip().startswith('"""') else text
    return [line for line in body.splitlines() if line.strip()]


def _with_answer(nb, answer: list[str]) -> int:
    """Put the answer in place of the marked line; return the exercise cell's index."""
    cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and MARK in c.source]
    assert len(cells) == 1, f"expected one exercise cell marked {MARK!r}, found {len(cells)}"
    cell = nb.cells[cells[0]]
    lines = cell.source.splitlines()
    at = next(i for i, line in enumerate(lines) if MARK in line)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at : at + 1] = [indent + a for a in answer]
    cell.source = "\n".join(lines)
    return cells[0]


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds, names it reads); a cell that does not parse binds and reads everything."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {"*"}, set()
    binds: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            binds.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            binds.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            binds.update((a.asname or a.name).split(".")[0] for a in node.names)
    reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return binds, reads


def _needed_cells(nb, index: int) -> list[int]:
    """The setup cell, the cells that bind what the exercise reads (walking back), and the exercise."""
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and i < index]
    need = _names(nb.cells[index].source)[1]
    keep = [index]
    for i in reversed(code[1:]):
        binds, reads = _names(nb.cells[i].source)
        if "*" in binds or binds & need:
            keep.append(i)
            need |= reads
    return sorted([*code[:1], *keep])


def test_needed_cells_follow_the_names_back():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in (
        "import os", "a = 1", "b = a + 1", "c = 5", "print(b)")])
    assert _needed_cells(nb, 4) == [0, 1, 2, 4]


def _printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def test_every_notebook_has_one_exercise_and_its_model_answer():
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    marked = {p.stem for p in notebooks if MARK in p.read_text()}
    assert marked == {p.stem for p in notebooks}, "every notebook ends with an exercise marked '# edit me'"
    assert {p.stem for p in SOLUTIONS} == marked


@pytest.mark.slow
@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_the_committed_start_is_not_done_and_the_answer_is(solution: Path):
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "notebooks" / f"{solution.stem}.ipynb"
    committed = nbformat.read(path, as_version=4)
    start = next(c for c in committed.cells if c.cell_type == "code" and MARK in c.source)
    assert "not yet" in _printed(start), "the starting code must not already meet the goal"

    nb = nbformat.read(path, as_version=4)
    index = _with_answer(nb, _answer_lines(solution))
    nb.cells = [nb.cells[i] for i in _needed_cells(nb, index)]
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0"}
    os.environ.update({k: os.environ.get(k, v) for k, v in env.items()})
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    printed = _printed(nb.cells[-1])
    verdict = printed.strip().splitlines()[-1] if printed.strip() else ""
    assert verdict.startswith("done"), f"{solution.name} does not pass its check: {printed!r}"
