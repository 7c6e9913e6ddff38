"""Packaging promises: light import, same deps in pip and conda files, README commands = CI, and a
test run that keeps its temporary files to itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_vizdist_does_not_import_tensorflow():
    code = "import sys, vizdist; vizdist.Trace(); vizdist.load_trace; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_declares_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in ("cpu", "lab", "test", "parquet"):
        wanted |= {_name(r) for r in extras[extra]}
    declared = set()
    text = (ROOT / "environment.yml").read_text().split("dependencies:", 1)[1]
    for line in text.splitlines():
        m = re.match(r"^\s*-\s+([A-Za-z0-9_.\-\[\]]+[^#]*)$", line)
        if not m or line.strip().endswith(":"):
            continue
        item = m.group(1).strip()
        if item.startswith("-e") or item in ("pip",) or item.startswith("python="):
            continue
        declared.add(_name(item))
    assert declared == wanted, (sorted(declared - wanted), sorted(wanted - declared))


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and re.search(r"^make test$", ci, re.M)
    assert re.search(r"^make$", readme, re.M), "README must give `make` (the main job) as a command"


def test_the_run_keeps_its_temporary_files_in_its_own_folder():
    """The root conftest.py points this run (and every process it starts) at one folder of its own."""
    import tempfile

    here = tempfile.gettempdir()
    assert os.path.basename(here).startswith("vizdist-tests-"), here
    assert os.environ["TMPDIR"] == here


def test_vizdist_own_deprecation_warnings_fail_a_test_and_third_parties_do_not():
    """pyproject.toml's filterwarnings: vizdist's deprecations are errors here, a third party's are silenced."""
    import warnings

    import pytest

    from vizdist.errors import VizdistDeprecationWarning

    with pytest.raises(VizdistDeprecationWarning):
        warnings.warn("vizdist.x goes in the next release: use y", VizdistDeprecationWarning, stacklevel=1)
    with pytest.raises(DeprecationWarning, match=r"vizdist\.watch is deprecated"):
        warnings.warn("vizdist.watch is deprecated: use vizdist.record()", DeprecationWarning, stacklevel=1)
    warnings.warn("somelib.f is deprecated: use g", DeprecationWarning, stacklevel=1)  # not vizdist's: no error


def test_changelog_lists_every_name_vizdist_no_longer_has():
    import vizdist

    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    missing = [name for name in vizdist._GONE if not re.search(rf"`vizdist\.{name}[`(]", changelog)]
    assert not missing, f"CHANGELOG.md does not say where these went: {missing}"
