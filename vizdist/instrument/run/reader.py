"""Reading a run, step by step: the :class:`StepReader` (one step's per-replica batches into rows)
and the :class:`Loop` (iterate like a training loop, in a thread the caller waits on with bounded joins,
so ``timeout=`` and Ctrl-C always land). Used by every front end of the run engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import warnings
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.errors import release_frames
from vizdist.instrument.core.codes import decode_tags, untag
from vizdist.instrument.core.rows import Recorder, replica_devices, worker_position
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["PROGRESS_MIN_STEPS", "Loop", "StepReader", "per_replica", "progress_bar", "result_json"]

PROGRESS_MIN_STEPS = 200


_RESULT_MAX_VALUES = 64


_JOIN_S = 0.1  # how often the waiting caller wakes (timeout and Ctrl-C land within this)


_SNAPSHOT_WAIT_S = 10.0  # longest wait for the loop thread to finish recording its current step


def _to_json(value: Any) -> Any:
    if isinstance(value, tf.RaggedTensor):
        return _to_json(value.to_list()) if value.flat_values.shape.num_elements() <= _RESULT_MAX_VALUES \
            else {"ragged_shape": str(value.shape), "dtype": value.dtype.name}
    if isinstance(value, (tf.Tensor, np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.size <= _RESULT_MAX_VALUES:
            return _to_json(arr.tolist())
        return {"shape": list(arr.shape), "dtype": str(arr.dtype)}
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return repr(value)


def result_json(value: Any) -> str:
    """JSON of one replica's step result (a scalar tensor, the usual case, without the general walk)."""
    if type(value).__name__ == "EagerTensor" and tfd.shape_tuple(value) == ():
        item = value.numpy().item()
        if type(item) is int:  # json.dumps of an int is its str(); bool (an int subclass) is not
            return str(item)
        if isinstance(item, (float, bool)):
            return json.dumps(item)
    return json.dumps(_to_json(value))


def _device_of(value: Any) -> str:
    """Device of a tensor, or of a composite tensor's (ragged, sparse) components."""
    if hasattr(value, "device"):
        return str(value.device)
    for leaf in tf.nest.flatten(value, expand_composites=True):
        if hasattr(leaf, "device"):
            return str(leaf.device)
    return ""


def _fingerprint_rows(leaves: list[np.ndarray]) -> list[bytes]:
    n = leaves[0].shape[0] if leaves[0].ndim else 1
    rows = []
    for i in range(n):
        h = hashlib.blake2b(digest_size=8)
        for leaf in leaves:
            row = leaf[i] if leaf.ndim else leaf
            h.update(np.ascontiguousarray(row).tobytes() if not isinstance(row, bytes) else row)
        rows.append(h.digest())
    return rows


def _rows_array(value: Any) -> np.ndarray:
    """One array per leaf with one entry per batch row (ragged rows become object arrays)."""
    if isinstance(value, tf.RaggedTensor):
        rows = value.to_list()
        out = np.empty(len(rows), dtype=object)
        out[:] = [np.asarray(r).tobytes() for r in rows]
        return out
    return np.asarray(value.numpy())


class StepReader:
    """Reads what each local replica got at one step into a :class:`Recorder`.

    ``tagged``: each element is vizdist's tag and the value (:func:`~vizdist.instrument.core.codes.keyed`);
    otherwise ids come from the content (the values themselves for integer
    elements, else fingerprints numbered in order of first delivery).
    """

    def __init__(self, strategy: tf.distribute.Strategy, *, info: dict[str, Any], tagged: bool,
                 ids_in_values: bool = False, devices: list[str] | None = None) -> None:
        self.strategy = strategy
        self.tagged = tagged
        self.ids_in_values = ids_in_values
        self.worker, self.replica_offset = worker_position(strategy)
        self.devices = list(devices) if devices is not None else replica_devices(strategy)
        decode = (lambda t: decode_tags(t, info)) if tagged else None
        self.rec = Recorder(worker=self.worker, decode=decode)
        self._fingerprints: dict[bytes, int] = {}
        self._shapes: dict[Any, str] = {}
        self.values_as_ids = True
        #: Called before each step is recorded, ``hook(step, values, results)`` (placement's NaN/Inf checks).
        self.step_hooks: list[Callable[[int, Any, list[Any] | None], None]] = []

    def split(self, element: Any) -> tuple[Any, Any]:
        """``(tags, values)`` of one distributed element (tags None where ids come from the content)."""
        if not self.tagged:
            return None, element
        return (element, element) if self.ids_in_values else untag(element)

    def per_replica(self, tags: Any, values: Any) -> tuple[list[Any], list[list[Any]]]:
        """``(firsts, parts)`` of one step: each local replica's first value leaf, and its parts.

        A replica's parts are its tags (one tensor) where the run is tagged, else its value leaves; both
        as ``experimental_local_results`` hands them to this process's replicas. The one rule for an eager
        step (:meth:`record_step`) and a step inside a ``tf.function``
        (:meth:`vizdist.instrument.run.user_run.DatasetRecord.graph_step`).
        """
        local = self.strategy.experimental_local_results
        leaves = tf.nest.flatten(values)
        firsts = list(local(leaves[0] if leaves else tags))
        if tags is not None:
            return firsts, [[t] for t in local(tags)]
        local_leaves = [local(leaf) for leaf in leaves]
        return firsts, [[lv[r] for lv in local_leaves] for r in range(len(firsts))]

    def add_replica(self, step: int, r: int, parts: list[np.ndarray], *, device: str, shape: str, dtype: str,
                    result: str = "") -> int:
        """Record local replica ``r``'s elements of one step from its parts as arrays (see :meth:`per_replica`).

        Return how many elements it got. Tagged: the ids are decoded from the tags; else they come from the
        content (:meth:`ids_by_content`).
        """
        kw: dict[str, Any] = dict(device=device, replica_device=self.devices[r] if r < len(self.devices) else device,
                                  shape=shape, dtype=dtype, result=result)
        if self.tagged:
            return self.rec.add(step, self.replica_offset + r, tags=parts[0], **kw)
        return self.rec.add(step, self.replica_offset + r, ids=self.ids_by_content(parts), **kw)

    def record_step(self, step: int, tags: Any, values: Any, results: list[Any] | None = None) -> int:
        """Record one global step read eagerly; return the number of elements this process's replicas got."""
        for hook in self.step_hooks:
            hook(step, values, results)
        firsts, parts = self.per_replica(tags, values)
        total = 0
        for r, first in enumerate(firsts):
            total += self.add_replica(
                step, r, [_rows_array(p) for p in parts[r]], device=_device_of(first), shape=self._shape(first),
                dtype=first.dtype.name if hasattr(first, "dtype") else "",
                result=result_json(results[r]) if results is not None else "")
        return total

    def _shape(self, value: Any) -> str:
        """``str(tuple(shape))``, from TF's fast shape tuple of eager tensors, cached (a handful per run)."""
        key = tfd.shape_tuple(value)
        text = self._shapes.get(key)
        if text is None:
            text = self._shapes[key] = str(tuple(key))
        return text

    def ids_by_content(self, leaves: list[np.ndarray]) -> np.ndarray:
        first = leaves[0] if leaves else np.zeros((0,))
        if (self.values_as_ids and len(leaves) == 1 and first.ndim <= 1
                and np.issubdtype(first.dtype, np.integer)):
            return np.atleast_1d(first).astype(np.int64)
        self.values_as_ids = False
        if not leaves:
            return np.zeros(0, dtype=np.int64)
        return np.array([self._fingerprints.setdefault(fp, len(self._fingerprints))
                         for fp in _fingerprint_rows(leaves)], dtype=np.int64)

    def provenance_note(self) -> str:
        return "ids are " + ("the element values" if self.values_as_ids
                             else "content fingerprints in order of first delivery")


def _run_step(strategy: tf.distribute.Strategy, step_fn: Callable[..., Any], values: Any) -> list[Any]:
    return per_replica(strategy, strategy.run(step_fn, args=(values,)))


def per_replica(strategy: Any, out: Any) -> list[Any]:
    """What ``strategy.run`` (or TF1's ``experimental_run``) returned, as one nested value per local replica."""
    leaves = tf.nest.flatten(out)
    n = len(replica_devices(strategy))
    local = [[None] * n if leaf is None else strategy.experimental_local_results(leaf) for leaf in leaves]
    n = len(local[0]) if local else n
    return [tf.nest.pack_sequence_as(out, [lv[r] for lv in local]) if local else None for r in range(n)]


def _iterate(dist: Any, iteration: str) -> Generator[Any, None, None]:
    if iteration == "for":
        yield from dist
        return
    it = iter(dist)
    if iteration == "get_next":
        while True:
            try:
                yield it.get_next()
            except (tf.errors.OutOfRangeError, StopIteration):
                return
    else:
        while True:
            opt = it.get_next_as_optional()
            if not bool(opt.has_value()):
                return
            yield opt.get_value()


def progress_bar(total: int | None, enabled: bool | None) -> Any:
    from tqdm.auto import tqdm

    # By default a bar shows only for runs known to be long (>= 200 steps), decided up front
    # rather than by elapsed time, so a notebook's output does not depend on machine load.
    if enabled is None:
        enabled = total is not None and total >= PROGRESS_MIN_STEPS
    return tqdm(total=total, desc="vizdist: tracing steps", unit="step", disable=not enabled, leave=False)


class Loop:
    """Iterates like a training loop, in a thread the caller waits on (:meth:`run_bounded`).

    After it ends, ``stopped`` says why (``end_of_data``, ``steps``,
    ``max_steps``, ``timeout``, ``interrupted``, ``error``), ``steps_run``
    how far it got, and ``error`` / ``error_in`` (``"data"``: reading the
    distributed dataset, ``"step_fn"``: the user's step) what failed.
    With a ``timer`` each ``next()`` is a ``transfer`` span and each
    ``strategy.run`` a ``consume`` span on the host lane.
    """

    def __init__(self, strategy: tf.distribute.Strategy, reader: StepReader, *, steps: int | None,
                 cap: int | None, step_fn: Callable[..., Any] | None, iteration: str, timer: Any = None) -> None:
        self.strategy, self.reader, self.steps, self.cap = strategy, reader, steps, cap
        self.step_fn, self.iteration, self.timer = step_fn, iteration, timer
        self.steps_run = 0
        self.stopped = "end_of_data"
        self.error: BaseException | None = None
        self.error_in = ""
        self.halt = threading.Event()
        self.lock = threading.Lock()  # held while a step is recorded

    def run_bounded(self, dist: Any, *, timeout: float | None, bar: Any) -> None:
        """Run the loop in a thread; return when it ends, at ``timeout`` seconds, or on Ctrl-C."""
        thread = threading.Thread(target=self._run, args=(dist, bar), daemon=True, name="vizdist-trace-loop")
        deadline = None if timeout is None else time.monotonic() + timeout
        thread.start()
        try:
            while thread.is_alive():
                thread.join(_JOIN_S)
                if deadline is not None and time.monotonic() >= deadline and thread.is_alive():
                    self._halt("timeout")
                    return
        except KeyboardInterrupt:
            self._halt("interrupted")
            warnings.warn(f"vizdist: interrupted after {self.steps_run} steps; returning what was recorded.",
                          stacklevel=3)

    def _halt(self, why: str) -> None:
        """Stop recording: after this returns no more steps are added (the thread may stay blocked in TF)."""
        self.halt.set()
        if self.lock.acquire(timeout=_SNAPSHOT_WAIT_S):
            self.lock.release()
        self.stopped = why

    def _run(self, dist: Any, bar: Any) -> None:
        elements = _iterate(dist, self.iteration)
        try:
            self._steps(elements, bar)
        except BaseException as exc:  # handed to the caller's thread
            self.error, self.stopped = exc, "error"
        finally:
            # Destroy TF's iterator here, in this thread. Left to the garbage collector (the error's
            # traceback keeps it alive), TF's iterator was destroyed later in whatever thread ran the
            # collection, and that stalled an unrelated caller for minutes.
            with contextlib.suppress(Exception):
                elements.close()
            release_frames(self.error)

    def _next(self, elements: Iterator[Any]) -> Any:
        t0 = self.timer.now() if self.timer is not None else 0
        try:
            element = next(elements)
        except StopIteration:
            return None
        except BaseException:
            self.error_in = "data"
            raise
        if self.timer is not None:
            self.timer.add(f"w{self.reader.worker} host", "transfer", t0, self.timer.now(), step=self.steps_run)
        return element

    def _steps(self, elements: Iterator[Any], bar: Any) -> None:
        while not self.halt.is_set():
            element = self._next(elements)
            if element is None or self.halt.is_set():
                return
            step = self.steps_run
            tags, values = self.reader.split(element)
            results = self._run_step(step, values)
            with self.lock:
                if self.halt.is_set():
                    return
                n_el = self.reader.record_step(step, tags, values, results)
                self.steps_run += 1
            if self.timer is not None:
                self.timer.step_done(step, n_el)
            bar.update(1)
            if self.reached_end():
                return

    def reached_end(self) -> bool:
        """After a step: stop at ``steps`` or at the ``max_steps`` cap (``stopped`` says which)."""
        if self.steps is not None and self.steps_run >= self.steps:
            self.stopped = "steps"
        elif self.cap is not None and self.steps_run >= self.cap:
            self.stopped = "max_steps"
        else:
            return False
        return True

    def _run_step(self, step: int, values: Any) -> list[Any] | None:
        if self.step_fn is None:
            return None
        t0 = self.timer.now() if self.timer is not None else 0
        try:
            results = _run_step(self.strategy, self.step_fn, values)
        except BaseException:
            self.error_in = "step_fn"
            raise
        if self.timer is not None:
            self.timer.add(f"w{self.reader.worker} host", "consume", t0, self.timer.now(), step=step)
        return results

