"""The model of a what-if experiment: its knobs and its run, without TensorFlow or a widget.

``vizdist/instrument/experiments/whatif.py`` builds an :class:`Experiment` (a function that runs the real
pipeline for given knob values, and the :class:`Knob` s it takes); ``vizdist/render/whatif.py``
shows one as a :class:`~vizdist.render.whatif.WhatIf` widget. Neither imports the other:
``vizdist/experiments.py`` joins them for ``vizdist.what_if(...)``.

Example:
    >>> Knob("n", "replicas", "int", 2, options=(1, 3)).kind
    'int'
    >>> Knob("n", "replicas", "int", 5, options=(1, 3))
    Traceback (most recent call last):
    ...
    ValueError: knob 'n': an int knob needs options=(min, max) around its value 5; got (1, 3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vizdist.trace import Trace

__all__ = ["KINDS", "Experiment", "Knob"]

KINDS = ("int", "choice", "bool")


@dataclass(frozen=True)
class Knob:
    """One knob of a what-if experiment.

    Attributes:
        name: the keyword the run function takes.
        label: what the control says.
        kind: ``"int"`` (a slider over ``options = (min, max)``), ``"choice"`` (a drop-down of
            ``options``) or ``"bool"`` (a check box).
        value: the first value.
        options: see ``kind``.
        slow: it starts processes (a cluster, a service): its progress shows while it runs.
        help: one line under the controls saying what the knob really does.
    """

    name: str
    label: str
    kind: str
    value: Any
    options: tuple[Any, ...] = ()
    slow: bool = False
    help: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"knob {self.name!r}: kind must be one of {KINDS}; got {self.kind!r}.")
        if self.kind == "int" and (len(self.options) != 2 or not self.options[0] <= self.value <= self.options[1]):
            raise ValueError(f"knob {self.name!r}: an int knob needs options=(min, max) around its value "
                             f"{self.value!r}; got {self.options!r}.")
        if self.kind == "choice" and self.value not in self.options:
            raise ValueError(f"knob {self.name!r}: its value {self.value!r} is not one of {self.options!r}.")


@dataclass(frozen=True)
class Experiment:
    """What a what-if widget shows: ``run(**knob values) -> Trace`` and its knobs, in the order shown.

    Attributes:
        run: runs the real pipeline with those knob values.
        knobs: the knobs.
        title: one line above the knobs.
        note: a line under the knobs (what the knobs really do, in words).
        cleanup: called once when whatever shows the experiment is gone (say, removes the files it
            wrote), or when showing it fails; ``None``: nothing to clean.
    """

    run: Callable[..., Trace]
    knobs: Sequence[Knob]
    title: str
    note: str = ""
    cleanup: Callable[[], None] | None = None
