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
    >>> p.step_epoch, p.step_in_epoch
    ([0, 0, 1], [0, 1, 0])
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["KERAS_EPOCH_PHASES", "Passes"]

#: Phases whose epoch is the one Keras names.
KERAS_EPOCH_PHASES = ("train", "validation")


class Passes:
    """The passes and steps of one block: each step's pass, epoch and place in its epoch."""

    def __init__(self) -> None:
        self.passes: list[dict[str, Any]] = []  # serial -> {"dataset", "phase", "source", "steps", "epoch"}
        self.step_pass: list[int] = []
        self.step_epoch: list[int] = []
        self.step_in_epoch: list[int] = []
        #: The epoch Keras's ``fit`` is in (None outside a fit), set from its callbacks.
        self.keras_epoch: int | None = None
        self._current: dict[int, int] = {}  # dataset index -> its latest pass
        self._counted: dict[Any, int] = {}  # what a counted epoch is counted over -> passes that delivered
        self._in_epoch: dict[tuple[int, int], int] = {}  # (pass, epoch) -> steps so far
        self._lock = threading.Lock()

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
            p["epoch"] = self._counted.get(key, 0)
            self._counted[key] = p["epoch"] + 1
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
            n = self._in_epoch.get((serial, epoch), 0)
            self._in_epoch[(serial, epoch)] = n + 1
            p["steps"] += 1
            self.step_pass.append(serial)
            self.step_epoch.append(epoch)
            self.step_in_epoch.append(n)
            return len(self.step_pass) - 1

    def rows(self) -> list[dict[str, Any]]:
        """One row per (pass, epoch) that delivered data: ``dataset``, ``phase``, ``epoch``, ``steps``,
        ``first_step`` (the block's step number of its first step)."""
        out: dict[tuple[int, int], dict[str, Any]] = {}
        for step, (serial, epoch) in enumerate(zip(self.step_pass, self.step_epoch, strict=True)):
            row = out.get((serial, epoch))
            if row is None:
                p = self.passes[serial]
                row = out[(serial, epoch)] = {"dataset": p["dataset"], "phase": p["phase"], "epoch": epoch,
                                              "steps": 0, "first_step": step}
            row["steps"] += 1
        return list(out.values())
