"""The claims ledger (notebooks/CLAIMS.md) names real evidence.

Every row of its tables states what TensorFlow does and names at least one piece of evidence: a compared
notebook cell (`NN cell K`, cells counted from 0) or a test (`tests/path.py::test_name`). This checks that
each named cell exists, is a code cell with output and is compared by nbval (no ignore or skip marker),
and that each named test is defined in its file. It reads the files only: nothing runs.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from nbval.plugin import find_comment_markers

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "notebooks" / "CLAIMS.md"
CELL = re.compile(r"`(\d\d[a-z]?) cell (\d+)`")
TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _rows() -> list[tuple[str, str]]:
    """(claim id, evidence column) of every table row in the ledger."""
    rows = []
    for line in LEDGER.read_text().splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cols) < 4 or cols[0] in ("ID", "") or set(cols[0]) <= {"-"}:
            continue
        rows.append((cols[0], cols[2]))
    return rows


def _notebook(number: str) -> list[dict]:
    found = sorted((ROOT / "notebooks").glob(f"{number}_*.ipynb"))
    assert len(found) == 1, f"no single notebook numbered {number}: {found}"
    return json.loads(found[0].read_text())["cells"]


def _defined_tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_the_ledger_has_rows_and_every_row_names_evidence():
    rows = _rows()
    assert len(rows) >= 40
    bare = [cid for cid, evidence in rows if not (CELL.search(evidence) or TEST.search(evidence))]
    assert not bare, f"claims with no evidence (move them under 'Open'): {bare}"
    ids = [cid for cid, _ in rows]
    assert len(ids) == len(set(ids)), "claim ids repeat"


@pytest.mark.parametrize("cid, evidence", _rows())
def test_every_named_cell_exists_and_is_compared(cid, evidence):
    for number, index in CELL.findall(evidence):
        cells = _notebook(number)
        assert int(index) < len(cells), f"{cid}: notebook {number} has {len(cells)} cells, no cell {index}"
        cell = cells[int(index)]
        assert cell["cell_type"] == "code", f"{cid}: {number} cell {index} is {cell['cell_type']}, not code"
        assert cell.get("outputs"), f"{cid}: {number} cell {index} has no output to compare"
        markers = dict(find_comment_markers("".join(cell["source"])))
        assert markers.get("check", True) and not markers.get("skip"), (
            f"{cid}: nbval does not compare {number} cell {index}")


@pytest.mark.parametrize("cid, evidence", _rows())
def test_every_named_test_exists(cid, evidence):
    for path, name in TEST.findall(evidence):
        file = ROOT / path
        assert file.is_file(), f"{cid}: no test file {path}"
        assert name.startswith("test_") and name in _defined_tests(file), f"{cid}: {path} defines no {name}"
