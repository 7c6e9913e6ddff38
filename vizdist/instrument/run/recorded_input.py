"""TF's own distributed dataset and iterator, taught to strip vizdist's tag and report each step.

:func:`vizdist.record` distributes a *tagged* copy of the user's dataset (each element
``{"tag": ..., "value": ...}``, :func:`~vizdist.instrument.core.codes.keyed`) with TF's own
``experimental_distribute_dataset`` / ``distribute_datasets_from_function``, then turns the
``DistributedDataset`` TF returned into an instance of a subclass (:func:`recorded`; the subclasses
are made in :mod:`vizdist.instrument.tfapi.input_lib`). Nothing about how TF reads, shards, rebatches
or prefetches changes: the subclass only overrides what the user's code sees:

* ``get_next`` / ``get_next_as_optional`` (and so ``next()``, ``for`` and ``reduce``) call
  TF's own, hand the step's tags to a :class:`StepSink`, and return the *value* part: exactly what
  the untagged dataset would have given;
* ``element_spec`` is the value part of TF's spec;
* ``_type_spec`` is a spec subclass whose ``_from_components`` rebuilds the subclass, so the
  iterator (or dataset) passed into a ``tf.function`` (Keras's ``train_function``, a hand-written
  ``@tf.function`` loop) strips and reports there too: in a graph the report is a
  ``tf.py_function`` that runs each time the step runs, in the order the graph reads the data.

Each recorded dataset gets its own subclasses (:func:`classes`), so specs of two recordings never
compare equal, and a ``tf.function`` traced for one is never reused for another.

``vizdist/instrument/run/user_run.py`` holds the sink (the recording).
"""

from __future__ import annotations

from typing import Any, Protocol

import tensorflow as tf

from vizdist.instrument.core.codes import untag
from vizdist.instrument.tfapi import input_lib

__all__ = ["TF_DISTRIBUTED_DATASETS", "StepSink", "classes", "recorded"]

#: TF's distributed datasets, which a recording turns into its own subclasses.
TF_DISTRIBUTED_DATASETS = input_lib.DISTRIBUTED_DATASETS


class StepSink(Protocol):
    """Where a recorded dataset reports (see :class:`vizdist.instrument.run.user_run.DatasetRecord`)."""

    key: int
    tagged: bool
    ids_in_values: bool

    def split(self, element: Any) -> tuple[Any, Any]:
        """(tags, values) of one distributed element (tags None: ids come from the content)."""
    def phase_now(self) -> str: ...
    def before_read(self) -> None: ...
    def new_pass(self, phase: str) -> None: ...
    def eager_step(self, tags: Any, values: Any) -> None: ...
    def graph_step(self, tags: Any, values: Any) -> None: ...


def _user_spec(sink: StepSink, spec: Any) -> Any:
    return spec if not sink.tagged or sink.ids_in_values else untag(spec)[1]


def _strip(sink: StepSink, element: Any) -> Any:
    tags, values = sink.split(element)
    if tf.executing_eagerly():
        sink.eager_step(tags, values)
    else:
        sink.graph_step(tags, values)
    return values


def _pass_marker(sink: StepSink) -> None:
    """A new pass begins: now (eager), or each time the graph being built runs (a ``tf.function``)."""
    phase = sink.phase_now()  # where the pass starts in Python (a graph: where it was traced)
    if tf.executing_eagerly():
        sink.new_pass(phase)
        return

    def mark() -> int:
        sink.new_pass(phase)
        return 0

    tf.py_function(mark, [], tf.int32, name="vizdist_new_pass")


class _SinkHooks:
    """The :class:`~vizdist.instrument.tfapi.input_lib.Hooks` of one sink: strip, report, mark passes."""

    def __init__(self, sink: StepSink) -> None:
        self.sink, self.key = sink, sink.key
        self.made: dict[str, type] | None = None

    def strip(self, element: Any) -> Any:
        return _strip(self.sink, element)

    def user_spec(self, spec: Any) -> Any:
        return _user_spec(self.sink, spec)

    def new_pass(self) -> None:
        _pass_marker(self.sink)

    def before_read(self) -> None:
        self.sink.before_read()


def _hooks(sink: StepSink) -> _SinkHooks:
    """The hooks of ``sink``, kept on it: its subclasses live as long as it does, and no longer."""
    hooks: _SinkHooks | None = getattr(sink, "_vizdist_hooks", None)
    if hooks is None:
        hooks = _SinkHooks(sink)
        sink._vizdist_hooks = hooks  # type: ignore[attr-defined]  # the hooks of a recorded dataset live on its sink (set here, read here)
    return hooks


def classes(sink: StepSink) -> dict[str, type]:
    """The subclasses bound to ``sink``: ``iterator``, ``dataset``, ``function`` and their ``*_spec``."""
    return input_lib.classes(_hooks(sink))


def plain(source: Any, values: Any, sink: StepSink) -> Any:
    """The dataset to hand the user where TF's strategy returns the dataset itself (the default strategy).

    ``values`` is a real dataset of the user's values (what the user's code may transform further);
    iterating it reads ``source`` (the tagged data) and strips the tags, reporting each element.
    """
    return input_lib.plain(source, values, _hooks(sink))


def recorded(dist: Any, sink: StepSink) -> Any:
    """Turn TF's distributed dataset ``dist`` (over the tagged data) into the recorded subclass, in place.

    Example:
        >>> dist = strategy.experimental_distribute_dataset(keyed(tag_dataset(ds).dataset))  # doctest: +SKIP
        >>> for values in recorded(dist, sink): ...                                        # doctest: +SKIP
    """
    return input_lib.recorded(dist, _hooks(sink))
