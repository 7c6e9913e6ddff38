"""The workshop plan in notebooks/README.md and the course table of README.md agree with ``.ci/course_times.py``.

The script counts each notebook's slot (reading, printed outputs, run time, 2 minutes per **Predict** prompt,
the exercise); the facilitator's page lays the core path out by start time, then the electives and the
homework; the repo's README marks each notebook core, elective or homework with its slot. These read the
files only: nothing runs.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| ([^|]+) \| \[[^\]]+\]\((\w+)\.ipynb\) \|.*\| (\d+) \| (\d+) s \| (\d+) min \|$")
BREAK = re.compile(r"^\| (\d+:\d\d) \| break \|[ |]*\| (\d+) min \|$")


@pytest.fixture(scope="module")
def ct() -> ModuleType:
    spec = importlib.util.spec_from_file_location("course_times", ROOT / ".ci" / "course_times.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _section(text: str, start: str, end: str) -> str:
    assert start in text and end in text, f"notebooks/README.md has no {start!r} ... {end!r}"
    return text.split(start, 1)[1].split(end, 1)[0]


def _rows(section: str) -> list[tuple[str, str, int, int, int]]:
    """(start, notebook, Predict prompts, run seconds, slot minutes) of each table row; ``break`` rows too."""
    rows = []
    for line in section.splitlines():
        if m := ROW.match(line):
            rows.append((m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5))))
        elif m := BREAK.match(line):
            rows.append((m.group(1), "break", 0, 0, int(m.group(2))))
    return rows


def test_the_core_path_fits_two_and_a_half_hours(ct):
    slots = ct.plan()
    assert ct.core_minutes(slots) <= ct.BUDGET_MIN, f"the core path takes {ct.hours(ct.core_minutes(slots))}"
    named = [*ct.CORE, *ct.ELECTIVES, *ct.EXTRA]
    assert sorted(named) == sorted(slots), "every notebook is core, elective or homework, once"


def test_the_facilitators_plan_is_what_course_times_counts(ct):
    text = (ROOT / "notebooks" / "README.md").read_text()
    slots = ct.plan()
    core = _rows(_section(text, "**Core path**", "**Electives**"))
    electives = _rows(_section(text, "**Electives**", "**Homework"))
    extra = _rows(_section(text, "**Homework", "## How each section works"))
    want_core = [*ct.CORE[:ct.CORE.index(ct.BREAK_AFTER) + 1], "break", *ct.CORE[ct.CORE.index(ct.BREAK_AFTER) + 1:]]
    assert [r[1] for r in core] == want_core
    assert [r[1] for r in electives] == list(ct.ELECTIVES)
    assert [r[1] for r in extra] == list(ct.EXTRA)
    t = 0
    for start, name, prompts, run, minutes in core:
        assert start == ct.hours(t), f"{name} starts at {start}, the slots before it add up to {ct.hours(t)}"
        if name == "break":
            assert minutes == ct.BREAK_MIN
        else:
            s = slots[name]
            assert (prompts, run, minutes) == (s.prompts, round(s.run_s), s.minutes), name
        t += minutes
    assert t == ct.core_minutes(slots)
    assert f"**Core path** ({ct.hours(t)} with the break" in text
    assert electives[0][0] == ct.hours(t)
    for _, name, prompts, run, minutes in electives + extra:
        s = slots[name]
        assert (prompts, run, minutes) == (s.prompts, round(s.run_s), s.minutes), name


def test_the_readme_course_table_marks_the_same_core_path(ct):
    text = (ROOT / "README.md").read_text()
    slots = ct.plan()
    marked = dict(re.findall(r"^\| \[(\w+)\]\(notebooks/\1\.ipynb\) \|.*\| (\w+, \d+ min) \|$", text, re.M))
    assert sorted(marked) == sorted(slots)
    for name, s in slots.items():
        where = "core" if name in ct.CORE else "elective" if name in ct.ELECTIVES else "homework"
        assert marked[name] == f"{where}, {s.minutes} min", name
    core = ", ".join(name.split("_")[0] for name in ct.CORE)
    assert f"the core path, {core}, in {ct.hours(ct.core_minutes(slots))} with a" in text


def test_the_scripts_examples_hold(ct):
    import doctest

    assert doctest.testmod(ct).failed == 0
