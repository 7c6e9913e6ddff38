"""Across the passes of a ``vizdist.record()`` trace: an epoch read again (a restart), its elements trained on
twice, and elements never delivered in an epoch a run stopped in.

These read the whole trace at once (:data:`vizdist.checks.registry.BLOCK_CHECKS`), with :func:`trace.coverage()
<vizdist.analysis.coverage.coverage>`: one block around a crashed ``fit`` and the ``fit`` run again, or the
parts of a crashed script and of its resumed run loaded together (``load_trace(folder)``), whose epochs
line up because ``epoch`` is Keras's number, which a resumed ``fit`` keeps.

What Keras does (keras/src/callbacks/backup_and_restore.py, keras/src/trainers/trainer.py, Keras 3.15):
``BackupAndRestore`` saves the weights and the epoch number (every ``save_freq`` batches, or at the end of
each epoch with ``save_freq="epoch"``); a ``fit`` run again loads them in ``on_train_begin`` and starts at
the saved epoch (``model._initial_epoch``), and reads it from the data's first batch: a new ``fit`` makes a
new ``EpochIterator``, hence a new iterator (keras/src/trainers/epoch_iterator.py).

Example:
    >>> import vizdist
    >>> rows = [(0, 0, 0, [0, 1]), (1, 0, 1, [2, 3]), (2, 1, 0, [0, 1]), (3, 1, 1, [2, 3]), (4, 1, 2, [4, 5])]
    >>> t = vizdist.Trace.from_records(
    ...     batches=[dict(step=s, replica=0, n_elements=2, dataset=d, phase="train", epoch=1, epoch_step=k)
    ...              for s, d, k, _ in rows],
    ...     elements=[dict(step=s, replica=0, source_id=i, position=p, dataset=d, phase="train", epoch=1)
    ...               for s, d, _, ids in rows for p, i in enumerate(ids)],
    ...     meta={"api": "record", "datasets": [{"steps_per_pass": 3, "sources": [
    ...         {"index": 0, "kind": "range", "id_is": "value", "start": 0, "stop": 6, "step": 1}]}] * 2,
    ...           "passes": [{"dataset": 0, "phase": "train", "epoch": 1, "steps": 2, "first_step": 0},
    ...                      {"dataset": 1, "phase": "train", "epoch": 1, "steps": 3, "first_step": 2}]})
    >>> [(f.code, f.step) for f in epoch_read_again(t)]
    [('epoch-read-again', 2)]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from vizdist.analysis.coverage import coverage, data_of
from vizdist.analysis.passes import is_record
from vizdist.checks.finding import Finding
from vizdist.trace import Trace

__all__ = ["epoch_never_delivered", "epoch_read_again"]

_SHOWN = 12


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids[:_SHOWN]) + (f", ... ({len(ids) - _SHOWN} more)" if len(ids) > _SHOWN else "")


def _passes(trace: Trace, data: int, phase: str, epoch: int) -> list[dict[str, Any]]:
    """The (pass, epoch) rows of ``meta["passes"]`` of one input's ``phase`` and ``epoch``, in run order."""
    mapping, _ = data_of(trace)
    rows = [p for p in trace.meta.get("passes") or [] if isinstance(p, dict) and p.get("phase") == phase
            and p.get("epoch") == epoch and mapping.get(int(p.get("dataset", -1)), 0) == data]
    return sorted(rows, key=lambda p: int(p.get("first_step", 0)))


def _full(trace: Trace, p: dict[str, Any]) -> int | None:
    """Steps one whole pass of that pass's dataset holds (None: not known, e.g. a repeated dataset)."""
    datasets = trace.meta.get("datasets") or []
    d = int(p.get("dataset", -1))
    n = datasets[d].get("steps_per_pass") if 0 <= d < len(datasets) and isinstance(datasets[d], dict) else None
    return n if isinstance(n, int) and n > 0 else None


def _pass_words(trace: Trace, p: dict[str, Any]) -> str:
    first, n, full = int(p["first_step"]), int(p["steps"]), _full(trace, p)
    of = f" of {full}" if full else ""
    return f"dataset {p['dataset']}, steps {first}-{first + n - 1} ({n}{of} steps)"


def _ended_by(trace: Trace) -> str:
    """How the block (or a joined run) ended, if by an exception: '' when not known or not so."""
    m = trace.meta
    errors = [str(r["error"]) for r in (m.get("recording") or {}).get("runs") or [] if isinstance(r, dict)
              and r.get("error")]
    if "ended_by" in m:
        errors.insert(0, str(m["ended_by"]))
    return f" (the run ended by {errors[0]})" if errors else ""


def _groups(trace: Trace) -> Iterator[tuple[tuple[int, str, int], pd.DataFrame]]:
    if not is_record(trace) or trace.elements.empty:
        return
    cov = coverage(trace)
    for key, g in cov.groupby(["data", "phase", "epoch"], sort=False):
        if key[1] != "build":  # Keras's build read: one batch of a fresh pass, dropped
            yield (int(key[0]), str(key[1]), int(key[2])), g


def epoch_read_again(trace: Trace) -> Iterator[Finding]:
    """An epoch read by several passes (a ``fit`` run again, in the block or in a resumed run): the elements it
    delivered more than once, and why."""
    for (data, phase, epoch), g in _groups(trace):
        passes = _passes(trace, data, phase, epoch)
        twice = g[g["delivered"] > 1]
        if len(passes) < 2 or twice.empty:
            continue
        total = len(g)
        short = [p for p in passes[:-1] if _full(trace, p) and int(p["steps"]) < int(_full(trace, p) or 0)]
        how = "; ".join(_pass_words(trace, p) for p in passes)
        if short:
            first = short[0]
            cause = (f"The first stopped after {first['steps']} of its {_full(trace, first)} steps and a later pass "
                     f"read {phase} epoch {epoch} again from its first batch: a fit run again resumes at the epoch it "
                     "stopped in (keras.callbacks.BackupAndRestore restores the epoch number) and reads it from "
                     f"the data's first batch (a new fit makes a new iterator), so the {first['steps']} batches read "
                     "before the stop were read again. Whether the first reads still count in the weights depends on the weights restored: "
                     "BackupAndRestore loads those of its last save (with save_freq=\"epoch\", from the end of the "
                     "epoch before, so they were dropped; with save_freq=N, from a batch of this epoch, so those "
                     "up to that save count twice).")
        else:
            cause = (f"{phase} epoch {epoch} was read by {len(passes)} passes (fit, evaluate or your loop run again "
                     "and numbering its epochs from the same one).")
        yield Finding(
            "epoch-read-again", "warning",
            f"In {phase} epoch {epoch}, {len(twice)} of {total} source elements were delivered "
            f"{'twice' if int(twice['delivered'].max()) == 2 else 'more than once'} "
            f"({_ids(twice['source_id'].tolist())}): the epoch was read by {len(passes)} passes ({how}). {cause}",
            step=int(passes[1]["first_step"]))


def epoch_never_delivered(trace: Trace) -> Iterator[Finding]:
    """Elements of the data never delivered in an epoch whose every pass stopped early and that a run ended in,
    or that was read again (a restart) without them."""
    ended_by = _ended_by(trace)
    for (data, phase, epoch), g in _groups(trace):
        never = g[g["delivered"] == 0]
        passes = _passes(trace, data, phase, epoch)
        if never.empty or not passes:
            continue
        fulls = [_full(trace, p) for p in passes]
        if any(f is None or int(p["steps"]) >= f for p, f in zip(passes, fulls, strict=True)):
            continue  # some pass read the whole data (or its length is not known): not a stopped epoch
        if len(passes) < 2 and not ended_by:
            continue  # one pass that read part of the data on purpose: partial-read says so
        last = passes[-1]
        yield Finding(
            "epoch-never-delivered", "info",
            f"In {phase} epoch {epoch}, {len(never)} of {len(g)} source elements were never delivered "
            f"({_ids(never['source_id'].tolist())}): every pass of it stopped early (the last, "
            f"{_pass_words(trace, last)}){ended_by}, and no later pass read the epoch to its end.",
            step=int(last["first_step"]))
