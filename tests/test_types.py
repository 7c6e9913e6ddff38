"""The whole package type-checks under ``mypy`` (pyproject.toml's settings), the trace, its contract and the run
engine under ``mypy --strict``; every ``# type: ignore`` says why."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: checked strictly (pyproject.toml's [tool.mypy] holds the rest of the settings).
#: The run engine is here too; the modules they import are read for their types, but their own errors
#: (TF ships no stubs) are not reported here: ``--follow-imports=silent``.
STRICT = ["vizdist/contract.py", "vizdist/_metavalues.py", "vizdist/_jsontypes.py", "vizdist/trace.py",
          "vizdist/_tables.py", "vizdist/_head.py", "vizdist/_tracefiles.py", "vizdist/views.py", "vizdist/accessor.py",
          "vizdist/instrument/core/engine.py", "vizdist/instrument/run/observers.py"]


def test_mypy_whole_package_passes():
    """Every module of vizdist, with the project's settings: TensorFlow and the dependencies without types are Any,
    ``trace.meta`` is a :class:`vizdist.contract.TraceMeta`. About 6 s on 2 cores from an empty ``.mypy_cache``."""
    out = subprocess.run([sys.executable, "-m", "mypy", "vizdist"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict_passes():
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", *STRICT], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "vizdist").rglob("*.py")))
def test_every_type_ignore_names_its_code_and_says_why(path):
    """``# type: ignore[code]`` with the reason in a comment on the line itself or the line above."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    bad = []
    for i, line in enumerate(lines):
        if "type: ignore" not in line:
            continue
        coded = re.search(r"# type: ignore\[[a-z-]+(, [a-z-]+)*\]", line)
        said = re.search(r"# type: ignore\[[^\]]*\]\s+#\s*\S", line) or lines[i - 1].strip().startswith("#")
        if not (coded and said):
            bad.append(f"{path}:{i + 1}: {line.strip()}")
    assert not bad, "each # type: ignore names its error code and says why (same line or a comment above):\n" + \
        "\n".join(bad)


def test_mypy_sees_every_parameter_of_a_view(tmp_path):
    """The views are declared methods: a misspelt option, a misspelt view and a wrong type are type errors."""
    probe = tmp_path / "probe.py"
    probe.write_text("from vizdist.trace import Trace\n\nt = Trace()\nt.plot.split(max_step=3)\nt.plot.splitt()\n"
                     "t.timing.most_at_once(lane=1)\nt.show.timeline(step='3')\nt.plot.split(max_steps=3)\n")
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", str(probe)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    errors = [line.split(": error: ")[1] for line in out.stdout.splitlines() if ": error: " in line]
    assert errors == ['Unexpected keyword argument "max_step" for "split" of "PlotAccessor"; did you mean '
                      '"max_steps"?  [call-arg]',
                      '"PlotAccessor" has no attribute "splitt"; maybe "split"?  [attr-defined]',
                      'Argument "lane" to "most_at_once" of "TimingAccessor" has incompatible type "int"; expected '
                      '"str | None"  [arg-type]',
                      'Argument "step" to "timeline" of "ShowAccessor" has incompatible type "str"; expected '
                      '"int | None"  [arg-type]'], out.stdout
