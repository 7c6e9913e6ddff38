"""vizdist/experiments.py joins instrument (the runs) and render (the views) above both layers."""

from __future__ import annotations

import subprocess
import sys

import pytest

import vizdist


def test_importing_it_loads_no_tensorflow():
    code = "import sys, vizdist.experiments; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_the_public_comparison_is_the_instrument_one():
    """``vizdist.compare_shard_policies`` needs no wrapper: its result (a ``ShardComparison``) draws itself."""
    from vizdist.instrument.experiments.sharding import compare_shard_policies

    assert vizdist.compare_shard_policies is compare_shard_policies


@pytest.mark.parametrize("name", ["what_if", "what_if_cluster", "what_if_service"])
def test_the_public_functions_keep_their_names_and_docs(name):
    import importlib

    inner = getattr(importlib.import_module("vizdist.instrument.experiments.whatif"), name)
    outer = getattr(vizdist, name)
    assert outer is not inner and outer.__name__ == name and outer.__doc__ == inner.__doc__
    assert outer.__wrapped__ is inner
