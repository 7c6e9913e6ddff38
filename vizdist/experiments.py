"""The what-if experiments as ``vizdist`` gives them: instrument runs them, render shows them.

``vizdist/instrument`` builds what-if experiments on real TensorFlow and never imports ``vizdist/render``;
``vizdist/render`` draws them and never imports TensorFlow. This module, above both layers (like
``vizdist/__init__.py``), joins them: :func:`what_if`, :func:`what_if_cluster`, :func:`what_if_service`
show the :class:`~vizdist.analysis.whatif.Experiment` that ``vizdist.instrument.experiments.whatif``
builds as a :class:`~vizdist.render.whatif.WhatIf` widget. Each keeps the signature and docstring of the
function it wraps. (``vizdist.compare_shard_policies`` needs no joining: the
:class:`~vizdist.analysis.sharding.ShardComparison` it returns draws itself.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

# built on first use by __getattr__ below, so that importing this module imports no TensorFlow
__all__ = ["what_if", "what_if_cluster", "what_if_service"]  # noqa: F822


def _shown(name: str) -> Callable[..., Any]:
    """``vizdist.instrument.experiments.whatif.<name>``, returning its experiment as a WhatIf widget."""
    from vizdist.instrument.experiments import whatif as build

    @functools.wraps(getattr(build, name))
    def show(*args: Any, **kwargs: Any) -> Any:
        from vizdist.render.whatif import WhatIf

        return WhatIf.of(getattr(build, name)(*args, **kwargs))

    return show


def __getattr__(name: str) -> Any:
    """Build the wrappers on first use (importing this module imports no TensorFlow)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = _shown(name)
    globals()[name] = value
    return value
