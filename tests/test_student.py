"""make student: the course with every output cleared but the setup cells', so learners predict first."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _student_module():
    spec = importlib.util.spec_from_file_location("student", ROOT / ".ci" / "student.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_student_copy_clears_every_reveal_and_keeps_the_text(tmp_path):
    written = _student_module().write_student_copy(ROOT / "notebooks", tmp_path)
    committed = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert [p.name for p in written] == [p.name for p in committed]
    for path in committed:
        before = json.loads(path.read_text())["cells"]
        after = json.loads((tmp_path / path.name).read_text())["cells"]
        assert [c["source"] for c in after] == [c["source"] for c in before]
        code = [c for c in after if c["cell_type"] == "code"]
        assert all(not c["outputs"] for c in code[2:]), f"{path.name}: a reveal kept its output"
        assert any(c["outputs"] for c in code[:2]), f"{path.name}: the setup's output is gone"
    imported = {p.name for p in committed if "import course" in p.read_text()}
    assert imported and (tmp_path / "course.py").read_text() == (ROOT / "notebooks" / "course.py").read_text(), \
        f"{sorted(imported)} import course: the student copy needs notebooks/course.py beside them"


def test_where_next_names_real_findings_notebooks_and_claims():
    import re

    text = (ROOT / "notebooks" / "WHERE_NEXT.md").read_text()
    codes = set(re.findall(r"\| `([a-z]+(?:-[a-z]+)+)`", text))
    checks = "".join(p.read_text() for p in (ROOT / "vizdist" / "checks").glob("*.py"))
    assert codes and all(f'"{c}"' in checks for c in codes), codes
    for link in re.findall(r"\]\((\d\d[a-z]?_\w+\.ipynb)\)", text):
        assert (ROOT / "notebooks" / link).exists(), link
    ledger = (ROOT / "notebooks" / "CLAIMS.md").read_text()
    for cid in re.findall(r"\b(\d\d[a-z]?-\d+[a-z]?|F-\d+)\b", text):
        assert f"| {cid} |" in ledger, cid
