"""A recording block's passes and steps, numbered in the user's terms (:class:`Passes`).

Each ``iter()`` of a recorded dataset starts a *pass*; each read of a global batch is a *step*, numbered
in the order the block ran them (``step``, unique in the trace). A step's ``epoch`` is the user's epoch:

* ``train`` and ``validation``: the epoch Keras names (the number ``fit`` hands its callbacks'
  ``on_epoch_begin``, from ``initial_epoch`` or a resumed ``BackupAndRestore`` on), even where one pass
  spans several epochs (``steps_per_epoch`` over a repeated dataset);
* ``loop`` (the user's own loop): the pass number of *that dataset* (each dataset the user distributed
  counts its own passes, also when it is distributed anew each epoch);
* ``evaluate``, ``predict`` and ``build``: the pass number within that phase.

Only passes that deliver data are counted. ``epoch_step`` numbers the steps within one (pass, epoch).

Example:
    >>> p = Passes()
    >>> p.new_pass(0, "loop", source=("ds", 1)); [p.begin_step(0) for _ in range(2)]
    [0, 1]
    >>> p.new_pass(0, "loop", source=("ds", 1)); p.begin_step(0)
    2
    >>> [a.tolist() for a in p.labels(np.arange(3))]
    [[0, 0, 1], [0, 0, 1], [0, 1, 0]]
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from vizdist.instrument.core.rows import Column

__all__ = ["KERAS_EPOCH_PHASES", "Passes"]

#: Phases whose epoch is the one Keras names.
KERAS_EPOCH_PHASES = ("train", "validation")


class Passes:
    """The passes and steps of one block: each step's pass, epoch and place in its epoch.

    The per-step labels are numpy columns (12 bytes a step); :meth:`drop_before` forgets those of steps
    already written to disk (``record(path=...)``).
    """

    def __init__(self) -> None:
        self.passes: list[dict[str, Any]] = []  # serial -> {"dataset", "phase", "source", "steps", "epoch"}
        self.step_pass, self.step_epoch, self.step_in_epoch = Column("int32"), Column("int32"), Column("int32")
        #: The first step whose labels are still held (those before it were written out and dropped).
        self.first_kept = 0
        #: The epoch Keras's ``fit`` is in (None outside a fit), set from its callbacks.
        self.keras_epoch: int | None = None
        self._current: dict[int, int] = {}  # dataset index -> its latest pass
        self._counted: dict[Any, int] = {}  # what a counted epoch is counted over -> passes that delivered
        self._rows: dict[tuple[int, int], dict[str, Any]] = {}  # (pass, epoch) -> its row (rows())
        self._lock = threading.Lock()

    @property
    def n_steps(self) -> int:
        """Steps begun in the block so far."""
        return self.first_kept + len(self.step_pass)

    def new_pass(self, dataset: int, phase: str, *, source: Any = None) -> None:
        """A pass over ``dataset`` starts, in ``phase``; ``source`` names the user's dataset (its passes
        are counted together in a loop)."""
        with self._lock:
            self._current[dataset] = len(self.passes)
            self.passes.append({"dataset": dataset, "phase": phase, "source": source, "steps": 0, "epoch": None})

    def _count_key(self, p: dict[str, Any]) -> Any:
        return ("loop", p["source"] if p["source"] is not None else p["dataset"]) if p["phase"] == "loop" \
            else p["phase"]

    def _epoch(self, p: dict[str, Any]) -> int:
        if p["phase"] in KERAS_EPOCH_PHASES and self.keras_epoch is not None:
            return self.keras_epoch
        if p["epoch"] is None:  # the pass's first step: it counts
            key = self._count_key(p)
            counted = self._counted.get(key, 0)
            p["epoch"], self._counted[key] = counted, counted + 1
        return int(p["epoch"])

    def begin_step(self, dataset: int) -> int:
        """The block's next step number, read in the pass ``dataset`` is in."""
        with self._lock:
            serial = self._current.get(dataset)
            if serial is None:  # read without an iter() vizdist saw: a pass of its own
                serial = self._current[dataset] = len(self.passes)
                self.passes.append({"dataset": dataset, "phase": "loop", "source": None, "steps": 0, "epoch": None})
            p = self.passes[serial]
            epoch = self._epoch(p)
            step = self.n_steps
            row = self._rows.get((serial, epoch))
            if row is None:
                row = self._rows[(serial, epoch)] = {"dataset": p["dataset"], "phase": p["phase"], "epoch": epoch,
                                                     "steps": 0, "first_step": step}
            p["steps"] += 1
            self.step_pass.append(serial)
            self.step_epoch.append(epoch)
            self.step_in_epoch.append(row["steps"])
            row["steps"] += 1
            return step

    def labels(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(pass, epoch, epoch_step)`` of each of ``steps`` (block step numbers not yet dropped)."""
        with self._lock:
            at = np.asarray(steps, dtype=np.int64) - self.first_kept
            lo, hi = (int(at.min()), int(at.max()) + 1) if len(at) else (0, 0)  # read only the range asked for
            cols = [c.array(lo, hi) for c in (self.step_pass, self.step_epoch, self.step_in_epoch)]
        return cols[0][at - lo], cols[1][at - lo], cols[2][at - lo]

    def drop_before(self, step: int) -> None:
        """Forget the labels of the steps before ``step`` (written out already)."""
        with self._lock:
            n = step - self.first_kept
            for c in (self.step_pass, self.step_epoch, self.step_in_epoch):
                c.drop_before(n)
            self.first_kept = step

    def rows(self) -> list[dict[str, Any]]:
        """One row per (pass, epoch) that delivered data: ``dataset``, ``phase``, ``epoch``, ``steps``,
        ``first_step`` (the block's step number of its first step)."""
        with self._lock:
            return [dict(r) for r in self._rows.values()]
