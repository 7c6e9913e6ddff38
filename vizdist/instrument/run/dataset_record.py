"""One distributed dataset of a ``vizdist.record()`` block, and the phase a pass of it belongs to.

A :class:`DatasetRecord` is made for each dataset distributed inside the block: it is the
:class:`~vizdist.instrument.run.recorded_input.StepSink` its recorded dataset reports to, eagerly or from inside a
``tf.function`` (a ``tf.py_function`` per step), and holds that dataset's rows. It calls back the block it belongs
to (:class:`RecordingSide`: :class:`vizdist.instrument.run.user_run.Recording`) to number steps and passes.
:func:`phase_now` reads which phase (:data:`PHASES`) a pass started here belongs to from the Python stack (Keras's
trainer methods). Importable from :mod:`vizdist.instrument.run.user_run` too.

Example:
    >>> phase_now()   # not inside Keras's fit / evaluate / predict
    'loop'
"""

from __future__ import annotations

import itertools
import sys
import threading
from types import FrameType
from typing import Any, Protocol

import pandas as pd
import tensorflow as tf

from vizdist.instrument.run.reader import StepReader
from vizdist.instrument.tfapi import keras as tf_keras

__all__ = ["PHASES", "DatasetRecord", "RecordingSide", "phase_now"]


class RecordingSide(Protocol):
    """What a :class:`DatasetRecord` reads and calls of the block it belongs to (``user_run.Recording``)."""

    datasets: list[DatasetRecord]
    step_lock: threading.RLock
    active: bool

    @property
    def timer(self) -> Any: ...

    def new_pass(self, sink: DatasetRecord, phase: str) -> None: ...

    def begin_step(self, sink: DatasetRecord) -> int: ...

    def step_done(self, n_elements: int) -> None: ...


#: Where a pass can start.
PHASES = ("train", "validation", "evaluate", "predict", "build", "loop")


#: Numbers each DatasetRecord (its ``key``), across blocks.
_keys = itertools.count()


def _keras_frame(code: Any) -> str | None:
    return code.co_name if tf_keras.is_trainer_frame(code.co_name, code.co_filename) else None


def phase_now() -> str:
    """The phase a pass started here belongs to, read from the Python stack (Keras's trainer methods)."""
    names = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        hit = _keras_frame(frame.f_code)
        if hit:
            names.append(hit)
        frame = frame.f_back
    if not names:
        return "loop"
    inner = names[0]
    if inner == tf_keras.BUILD_METHOD:  # Keras reads one batch of a fresh pass to build the model, and drops it
        return "build"
    if inner == "evaluate":
        return "validation" if "fit" in names[1:] else "evaluate"
    return "train" if inner == "fit" else "predict"


class DatasetRecord:
    """One distributed dataset made inside the block: its reader and what vizdist learnt building it.

    The :class:`~vizdist.instrument.run.recorded_input.StepSink` its recorded dataset reports to.
    """

    def __init__(self, recording: RecordingSide, strategy: Any, info: dict[str, Any], meta: dict[str, Any], *,
                 tagged: bool, ids_in_values: bool, source: Any = None) -> None:
        self.recording, self.strategy, self.info, self.meta = recording, strategy, info, meta
        self.source = source  # the user's dataset (or dataset_fn): a loop's passes over it count as its epochs
        self.key = next(_keys)
        self.index = len(recording.datasets)
        self.tagged, self.ids_in_values = tagged, ids_in_values
        self.reader = StepReader(strategy, info=info, tagged=tagged, ids_in_values=ids_in_values)
        self.lock = recording.step_lock  # one lock for the block: a snapshot or a part holds whole steps
        self._read_t0: int | None = None  # timing: when the current read began
        self._last: tuple[int, int] | None = None  # timing: (step, when its read ended) of the last step

    # -- the StepSink protocol ------------------------------------------------
    def split(self, element: Any) -> tuple[Any, Any]:
        """``(tags, values)`` of one distributed element: :meth:`StepReader.split`."""
        return self.reader.split(element)

    def phase_now(self) -> str:
        """The phase a pass started now belongs to (:func:`phase_now`)."""
        return phase_now()

    def new_pass(self, phase: str) -> None:
        """A pass of ``phase`` starts (``iter()`` of the recorded dataset)."""
        self.recording.new_pass(self, phase)
        self._last = None

    def before_read(self) -> None:
        """With timing: note when a read starts (now, or each time the graph being built runs)."""
        timer = self.recording.timer
        if timer is None:
            return
        if tf.executing_eagerly():
            self._read_t0 = timer.now()
            return

        def mark() -> int:
            self._read_t0 = timer.now()
            return 0

        tf.py_function(mark, [], tf.int32, name="vizdist_read_starts")

    def _spans(self, step: int) -> None:
        """With timing: this step's read (``transfer``) and the previous step's time between reads (``consume``)."""
        timer = self.recording.timer
        if timer is None or self._read_t0 is None:
            return
        end, lane = timer.now(), f"w{self.reader.worker} host"
        timer.add(lane, "transfer", self._read_t0, end, step=step)
        if self._last is not None and self._last[1] <= self._read_t0:
            timer.add(lane, "consume", self._last[1], self._read_t0, step=self._last[0])
        self._last, self._read_t0 = (step, end), None

    def eager_step(self, tags: Any, values: Any) -> None:
        """Report an eager step: what each replica got."""
        if not self.recording.active:
            return
        with self.lock:
            step = self.recording.begin_step(self)
            self._spans(step)
            self.recording.step_done(self.reader.record_step(step, tags, values))

    def graph_step(self, tags: Any, values: Any) -> None:
        """Report from inside a ``tf.function``: a ``tf.py_function`` that runs each time the step runs."""
        firsts, per_replica = self.reader.per_replica(tags, values)
        devices = [f.device or "" for f in firsts]
        dtype = firsts[0].dtype.name if firsts and hasattr(firsts[0], "dtype") else ""
        shapes = [tf.shape(f, out_type=tf.int64) if isinstance(f, tf.Tensor) else tf.zeros([0], tf.int64)
                  for f in firsts]
        n = len(per_replica[0]) if per_replica else 0
        flat = [x for r, parts in enumerate(per_replica) for x in [*parts, shapes[r]]]

        def report(*arrays: Any) -> int:
            self._add_graph_step(arrays, n, devices, dtype)
            return 0

        tf.py_function(report, flat, tf.int32, name="vizdist_record_step")

    def _add_graph_step(self, arrays: Any, n: int, devices: list[str], dtype: str) -> None:
        if not self.recording.active:
            return
        reader = self.reader
        with self.lock:
            step = self.recording.begin_step(self)
            self._spans(step)
            total = 0
            for r in range(len(devices)):
                parts = [a.numpy() for a in arrays[r * (n + 1):(r + 1) * (n + 1)]]
                device = reader.devices[r] if not devices[r] and r < len(reader.devices) else devices[r]
                total += reader.add_replica(step, r, parts[:-1], device=device,
                                            shape=str(tuple(int(d) for d in parts[-1])), dtype=dtype)
            self.recording.step_done(total)

    # -- tables -----------------------------------------------------------------
    def tables(self, *, drain: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
        """This dataset's rows so far (``drain``: and forget them, they go into a part on disk)."""
        rec = self.reader.rec
        if not self.meta.get("global_batch_size"):
            totals = rec.step_totals()
            self.meta["global_batch_size"] = int(totals.max()) if len(totals) else None
        batch = self.meta["global_batch_size"]
        return rec.drain(global_batch_size=batch) if drain else rec.tables(global_batch_size=batch)
