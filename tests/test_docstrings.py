"""Every module's docstring examples run and print what they say.

Modules are discovered, not listed, so a new module's examples run without anyone adding it here.
Modules under ``vizdist.instrument`` import TensorFlow, so they get the session's 4 logical CPUs
first (TF fixes its devices when it first runs).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import vizdist

MODULES = sorted(m.name for m in pkgutil.walk_packages(vizdist.__path__, "vizdist."))


def test_every_module_is_found():
    assert "vizdist.trace" in MODULES and "vizdist.instrument.run.distribution" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, request):
    import matplotlib

    matplotlib.use("Agg")
    if name.startswith("vizdist.instrument"):
        request.getfixturevalue("devices")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed (see the output above)"
