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


def test_the_public_comparison_registers_its_views_explicitly():
    """``vizdist.compare_shard_policies`` registers ShardComparison's views before it runs (no import side effect)."""
    from vizdist.analysis.sharding import VIEWS

    saved = dict(VIEWS)
    VIEWS.clear()
    try:
        import vizdist.render.sharding  # importing the renderer alone registers nothing

        assert VIEWS == {}
        with pytest.raises(ValueError, match="unknown auto-shard policies"):
            vizdist.compare_shard_policies([], policies=["FILES"])
        assert set(VIEWS) == {"plot", "html"}
    finally:
        VIEWS.clear()
        VIEWS.update(saved)


@pytest.mark.parametrize("name", ["what_if", "what_if_cluster", "what_if_service", "compare_shard_policies"])
def test_the_public_functions_keep_their_names_and_docs(name):
    import importlib

    where = "sharding" if name == "compare_shard_policies" else "whatif"
    inner = getattr(importlib.import_module(f"vizdist.instrument.{where}"), name)
    outer = getattr(vizdist, name)
    assert outer is not inner and outer.__name__ == name and outer.__doc__ == inner.__doc__
    assert outer.__wrapped__ is inner
