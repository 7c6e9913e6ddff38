"""make student: the course with no output after a Predict prompt, and every link of the copy resolving."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


PROMPT = re.compile(r"\*\*Predict")  # the course's bold Predict prompts (NOTEBOOKS.md: predict, observe, explain)
LINK = re.compile(r"\]\(([^)\s]+)\)|\bsrc=[\"']([^\"']+)[\"']")  # markdown links and images, HTML src


def _relative_links(text: str) -> list[str]:
    """Every link in ``text`` that points into the copy: no scheme (http:, mailto:), no bare #anchor."""
    links = [a or b for a, b in LINK.findall(text)]
    return [link.split("#")[0] for link in links if not re.match(r"^[a-zA-Z][a-zA-Z+.-]*:|#", link)]


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    """The student copy as `make student` writes it: .ci/student.py run as a script."""
    out = tmp_path_factory.mktemp("student") / "student"
    run = subprocess.run([sys.executable, str(ROOT / ".ci" / "student.py"), str(out)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return out


def test_no_output_after_a_predict_prompt_survives_and_the_text_stays(student):
    committed = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(p.name for p in student.glob("*.ipynb")) == [p.name for p in committed]
    for path in committed:
        nb = json.loads(path.read_text())
        before, after = nb["cells"], json.loads((student / path.name).read_text())
        assert [c["source"] for c in after["cells"]] == [c["source"] for c in before]
        prompts = [i for i, c in enumerate(before) if c["cell_type"] == "markdown" and PROMPT.search("".join(c["source"]))]
        assert prompts, f"{path.name} asks the learner to predict nothing"
        code = [(i, c) for i, c in enumerate(after["cells"]) if c["cell_type"] == "code"]
        kept = [i for i, c in code if c["outputs"]]
        assert all(i < prompts[0] for i in kept), f"{path.name}: cells {kept} keep an output after a Predict prompt"
        assert all(c["execution_count"] is None for i, c in code if i > prompts[0])
        edits = [i for i, c in code if "# edit me" in "".join(c["source"])]
        assert edits and not [i for i in edits if i in kept], f"{path.name}: an exercise keeps its output"
        # what comes before the first question is kept as it was run: the setup (and 07's symptom)
        assert [before[i]["outputs"] for i in kept] == [after["cells"][i]["outputs"] for i in kept]
        assert kept, f"{path.name}: the setup's output is gone"
        assert "widgets" not in after["metadata"], f"{path.name}: saved widget state (a reveal's answer) survives"
    imported = {p.name for p in committed if "import course" in p.read_text()}
    assert imported and (student / "course.py").read_text() == (ROOT / "notebooks" / "course.py").read_text(), \
        f"{sorted(imported)} import course: the student copy needs notebooks/course.py beside them"


def test_every_relative_link_in_the_student_copy_resolves(student):
    checked = []
    for path in sorted(student.rglob("*.ipynb")) + sorted(student.rglob("*.md")):
        if path.suffix == ".ipynb":
            cells = json.loads(path.read_text())["cells"]
            text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        else:
            text = path.read_text()
        for link in _relative_links(text):
            checked.append(link)
            assert (path.parent / link).exists(), f"{path.relative_to(student)} links to {link}, which the copy lacks"
    assert any(link.startswith("solutions/") for link in checked)  # the model answers, linked from the exercises
    assert _relative_links("[a](https://x.org) [b](#top) [c](solutions/a.py#L3) <img src='img/a.png'>") == [
        "solutions/a.py", "img/a.png"]


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
