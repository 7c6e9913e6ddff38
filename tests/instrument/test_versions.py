"""The TensorFlow versions vizdist supports: the check, what it says, and the files that declare the range.

The range and the versions CI runs are declared once, in :mod:`vizdist.instrument.core.versions`; pyproject's
extras, environment.yml, the Makefile's smoke virtualenvs and the README's table must say the same.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

from vizdist.instrument.core.versions import (
    CI_TESTED,
    NEWEST,
    OLDEST,
    UntestedTensorFlowWarning,
    check_tensorflow,
    supported_range,
)

ROOT = Path(__file__).resolve().parents[2]


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@pytest.mark.smoke
def test_the_installed_tensorflow_is_supported_and_passes_silently(tf):
    assert OLDEST <= _minor(tf.__version__) <= NEWEST, tf.__version__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_tensorflow(tf.__version__)


@pytest.mark.parametrize("version", ["2.14.1", "2.0.0", "1.15.5", "2.14.0rc1"])
def test_an_older_tensorflow_is_refused_with_what_to_install(version):
    with pytest.raises(ImportError) as info:
        check_tensorflow(version)
    message = str(info.value)
    assert f"TensorFlow {version}" in message and "does not support" in message
    assert "pip install" in message and '"tensorflow-cpu==2.16.2"' in message and "one pip call" in message


@pytest.mark.parametrize("version", ["2.15.0", "2.15.1", "2.16.2", "2.19.0rc0", "2.21.0", "2.21.9"])
def test_every_supported_version_passes_silently(version):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_tensorflow(version)


@pytest.mark.parametrize("version", ["2.22.0", "2.22.0-dev20260301", "3.0.0"])
def test_a_newer_tensorflow_warns_naming_the_versions_ci_tested(version):
    with pytest.warns(UntestedTensorFlowWarning) as caught:
        check_tensorflow(version)
    message = str(caught[0].message)
    assert f"TensorFlow {version} is newer than any vizdist was tested with" in message
    assert all(v in message for v in CI_TESTED)


def test_an_unreadable_version_warns():
    with pytest.warns(UntestedTensorFlowWarning, match="cannot read TensorFlow's version 'nightly'"):
        check_tensorflow("nightly")


def test_vizdist_checks_before_it_imports_anything_that_runs_tensorflow():
    """Through the package, in a fresh process: refused at ``vizdist.record`` (nothing of vizdist's TF code
    imported), then, on a newer TF, one warning that names the user's line, and no second one."""
    code = (
        "import sys, warnings, tensorflow as tf, vizdist\n"
        "tf.__version__ = '2.14.1'\n"
        "try:\n"
        "    vizdist.record\n"
        "except ImportError as e:\n"
        "    print('refused:', str(e).splitlines()[0])\n"
        "print('imported:', sorted(m for m in sys.modules if m.startswith('vizdist.instrument.run')))\n"
        "tf.__version__ = '2.22.0'\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    vizdist.trace_distribution\n"
        "    vizdist.virtual_devices\n"
        "print('warned:', [(x.category.__name__, x.filename, x.lineno) for x in w])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("refused: vizdist records TensorFlow 2.15 to 2.21; this process has TensorFlow 2.14.1,")
    assert lines[1] == "imported: []"
    assert lines[2] == "warned: [('UntestedTensorFlowWarning', '<string>', 11)]"


def _fresh(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True)
    return out.stdout.splitlines()


@pytest.mark.smoke
def test_the_version_read_without_importing_tensorflow_is_the_one_it_reports():
    """Before TensorFlow is imported, the check reads pip's metadata: the same version TF then reports."""
    lines = _fresh("import sys\n"
                   "from vizdist.instrument.core.versions import installed_tensorflow_version\n"
                   "before = installed_tensorflow_version()\n"
                   "print('tensorflow' in sys.modules)\n"
                   "import tensorflow as tf\n"
                   "print(before == tf.__version__, before)\n")
    assert lines[0] == "False" and lines[1].startswith("True "), lines


def test_servers_that_need_no_tensorflow_are_checked_without_importing_it():
    """``vizdist.LocalCluster`` imports no TensorFlow (tests/instrument/test_isolation.py relies on it): its
    check reads pip's metadata, here made to say 2.14.1, and refuses without importing TensorFlow."""
    lines = _fresh("import sys, importlib.metadata as m, vizdist\n"
                   "real = m.version\n"
                   "m.version = lambda name: '2.14.1' if 'tensorflow' in name.replace('-', '_') else real(name)\n"
                   "try:\n"
                   "    vizdist.LocalCluster\n"
                   "except ImportError as e:\n"
                   "    print('refused:', str(e).splitlines()[0])\n"
                   "m.version = real\n"
                   "vizdist.LocalCluster\n"
                   "print('tensorflow imported:', 'tensorflow' in sys.modules)\n")
    assert lines[0].startswith("refused: vizdist records TensorFlow 2.15 to 2.21; this process has TensorFlow 2.14.1,")
    assert lines[1] == "tensorflow imported: False"


def test_pyproject_and_environment_yml_declare_the_supported_range():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["cpu"] == [f"tensorflow-cpu{supported_range()}"]
    assert extras["gpu"] == [f"tensorflow[and-cuda]{supported_range()}"]
    conda = (ROOT / "environment.yml").read_text()
    assert re.findall(r"^\s*- (tensorflow\S*)", conda, re.M) == [f"tensorflow-cpu{supported_range()}"]


def test_the_makefile_smoke_virtualenvs_are_the_versions_ci_tested():
    makefile = (ROOT / "Makefile").read_text()
    old = re.search(r"^OLD_TF\s*\?=\s*(.*)$", makefile, re.M)
    assert old is not None, "the Makefile names no OLD_TF"
    assert sorted(old.group(1).split()) == sorted(v for v, what in CI_TESTED.items() if what == "smoke")
    assert re.search(r"^test:.*$(?:\n\t.*)*\n\t.*\bsmoke\b", makefile, re.M), "make test does not run the smoke suite"


def test_the_readme_table_names_every_version_ci_tested():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| TensorFlow (\S+) \|", readme, re.M)
    assert sorted(rows) == sorted(v if v.count(".") == 2 else f"{v}.x" for v in CI_TESTED)


def test_the_smoke_marker_is_declared():
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("smoke:") for m in markers)

