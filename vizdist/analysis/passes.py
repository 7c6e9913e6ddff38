"""The passes of a ``vizdist.record()`` trace, each as a trace of its own.

A trace recorded by :func:`vizdist.record` holds every distributed dataset read inside the block
(``dataset`` column, ``meta["datasets"]``) and every pass over each, in the user's epochs (``phase``,
``epoch``, ``epoch_step`` columns, ``meta["passes"]``). Each (dataset, phase, epoch) is read as one run
the way :func:`vizdist.trace_distribution` records one, its meta the dataset's own, its steps keeping
the block's step numbers (so a finding's step and its message name the same step). :func:`passes` cuts
the trace that way, so every check reads one epoch at a time: an element seen again in the next epoch is
not a duplicate, and the last step of each epoch is the one that may be short.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(
    ...     batches=[dict(step=s, replica=0, n_elements=1, phase="train", epoch=s, epoch_step=0, dataset=0)
    ...              for s in range(2)],
    ...     meta={"api": "record", "datasets": [{"num_replicas": 1}]})
    >>> [(p["phase"], p["epoch"], p["steps"], part.steps) for p, part in passes(t)]
    [('train', 0, [0], [0]), ('train', 1, [1], [1])]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from vizdist.trace import Trace

__all__ = ["is_record", "passes"]

_PER_PASS = ("api", "datasets", "passes", "steps_run", "stopped")


def is_record(trace: Trace) -> bool:
    """True for a trace of a ``vizdist.record()`` block (rows carry ``phase`` / ``epoch`` / ``dataset``)."""
    return trace.meta.get("api") == "record" and "phase" in trace.batches.columns


def _pass_meta(trace: Trace, dataset: int) -> dict[str, Any]:
    meta = {k: v for k, v in trace.meta.items() if k not in _PER_PASS}
    datasets = trace.meta.get("datasets") or []
    if 0 <= dataset < len(datasets):
        meta.update({k: v for k, v in datasets[dataset].items() if k not in _PER_PASS})
    meta["api"] = (datasets[dataset].get("api") if 0 <= dataset < len(datasets) else None) or "record"
    return meta


def _mask(table: Any, dataset: Any, phase: str, epoch: Any) -> Any:
    if not {"dataset", "phase", "epoch"} <= set(table.columns):
        return np.zeros(len(table), dtype=bool)
    return (table["dataset"] == dataset) & (table["phase"].astype(str) == phase) & (table["epoch"] == epoch)


def _one(table: Any, mask: Any) -> Any:
    return table[mask].copy()


def passes(trace: Trace, *, phases: tuple[str, ...] | None = None) -> Iterator[tuple[dict[str, Any], Trace]]:
    """Yield ``(pass, trace of that pass)`` in run order; ``pass`` has ``dataset``, ``phase``, ``epoch`` and
    ``steps`` (the block's step numbers of its steps, in order). ``phases`` keeps only those phases."""
    b, e = trace.batches, trace.elements
    if b.empty:
        return
    keys = b[["dataset", "phase", "epoch"]].astype({"phase": str}).drop_duplicates()
    for dataset, phase, epoch in keys.itertuples(index=False):
        if phases is not None and phase not in phases:
            continue
        bm, em = _mask(b, dataset, phase, epoch), _mask(e, dataset, phase, epoch)
        steps = np.unique(b.loc[bm, "step"].to_numpy()).tolist()
        info = {"dataset": int(dataset), "phase": phase, "epoch": int(epoch), "steps": steps}
        meta = dict(_pass_meta(trace, int(dataset)), phase=phase)
        yield info, Trace(elements=_one(e, em), batches=_one(b, bm), meta=meta)
