"""Trace a real ``tf.distribute`` input pipeline: which element went to which replica, when.

Two entry points:

* :func:`trace_distribution` runs a strategy over a dataset (or a
  ``dataset_fn``) the way a training loop does and returns a
  :class:`~vizdist.trace.Trace`. Source elements are tagged (see
  :mod:`vizdist.instrument.ids.tagging`) and the tag is stripped before values
  reach ``step_fn``, so the step sees exactly what an untraced run sees.
* :func:`watch` wraps a distributed dataset you already iterate in your own
  loop; it records what each replica got (by content, since the dataset was
  built without tags).

The parts of :func:`trace_distribution`, one job each: checking the
arguments (``_check_*``), building the distributed dataset
(:func:`_distribute_dataset`, :func:`_distribute_function`), the loop
(:class:`Loop`, run in a thread the caller waits on with bounded joins, so
``timeout=`` and Ctrl-C always land), reading one step into the one row
builder (:class:`StepReader` -> :class:`~vizdist.instrument.run.rows.Recorder`)
and the metadata (:func:`base_meta`, :func:`finish_meta`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from vizdist.errors import TracingError, release_frames
from vizdist.instrument.ids.tagging import (
    Untaggable,
    cardinality,
    decode_tags,
    keyed,
    tag_dataset,
    tensor_value,
    untag,
    values_are_ids,
)
from vizdist.instrument.run import engine
from vizdist.instrument.run.observers import observers_for
from vizdist.instrument.run.rows import Recorder, num_workers, replica_devices, strategy_name, worker_position
from vizdist.instrument.service import own as service_own
from vizdist.instrument.service import registry as service_registry
from vizdist.trace import Trace

__all__ = ["DEFAULT_MAX_STEPS", "ITERATIONS", "Input", "Loop", "StepReader", "TaggingFn", "Watch", "base_meta",
           "check_count", "finish_meta", "input_meta", "options_dict", "progress_bar", "result_json", "tag_global",
           "trace_distribution", "watch", "wrap_tf_error"]

ITERATIONS = ("for", "get_next", "get_next_as_optional")
#: Safety stop for data whose end TF cannot see (endless or of unknown cardinality) when ``steps`` is None.
DEFAULT_MAX_STEPS = 10_000
PROGRESS_MIN_STEPS = 200
_RESULT_MAX_VALUES = 64
_JOIN_S = 0.1  # how often the waiting caller wakes (timeout and Ctrl-C land within this)
_SNAPSHOT_WAIT_S = 10.0  # longest wait for the loop thread to finish recording its current step


# ---------------------------------------------------------------------------
# checking the arguments
# ---------------------------------------------------------------------------
def _check_strategy(strategy: Any) -> tf.distribute.Strategy:
    if strategy is None:
        return tf.distribute.get_strategy()
    if not isinstance(strategy, (tf.distribute.Strategy, tf.compat.v1.distribute.Strategy)):
        raise TypeError(
            f"strategy must be a tf.distribute.Strategy (e.g. tf.distribute.MirroredStrategy()); "
            f"got {type(strategy).__name__}. Pass None to use the default strategy."
        )
    if not tf.executing_eagerly():  # TF1 graph mode (disable_eager_execution) is process-wide
        raise TracingError(
            "trace_distribution reads each replica's batch eagerly, but eager execution is off "
            "(tf.compat.v1.disable_eager_execution() was called in this process), and in graph mode "
            "TensorFlow itself iterates a distributed dataset only inside a tf.function. To trace a "
            "Session program, use vizdist.trace_tf1(strategy, dataset) (or input_fn=...): TF1's "
            "make_dataset_iterator / make_input_fn_iterator, run in a Session; or trace in a process that "
            "keeps eager execution on."
        )
    return strategy


def _check_dataset(dataset: Any, what: str = "dataset") -> tf.data.Dataset:
    if isinstance(dataset, tf.data.Dataset):
        return dataset
    kind = type(dataset).__name__
    if "Distributed" in kind:
        raise TypeError(
            f"{what} is already distributed ({kind}). Pass the tf.data.Dataset you built (vizdist "
            "distributes it itself), or wrap your distributed dataset with vizdist.watch(...) instead."
        )
    raise TypeError(
        f"{what} must be a tf.data.Dataset; got {kind}. Build one with e.g. "
        "tf.data.Dataset.range(10).batch(4) or tf.data.Dataset.from_tensor_slices(...)."
    )


def check_count(value: Any, name: str, *, none: str = "") -> int | None:
    """A whole number of steps >= 1 (None allowed when ``none`` says what it means)."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        also = f" (or None {none})" if none else ""
        raise ValueError(f"{name} must be a whole number of steps, 1 or more{also}; got {value!r}.")
    return int(value)


def _check_finite(ds: tf.data.Dataset, steps: int | None) -> None:
    if steps is None and cardinality(ds) == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            "the dataset is infinite (it ends in .repeat() with no count, or similar) and steps=None, so "
            "tracing would never end. Pass steps=N to record the first N steps."
        )


def _check_call(strategy: Any, dataset: Any, dataset_fn: Any, options: Any, step_fn: Any, iteration: Any,
                timing: Any, timeout: Any) -> tf.distribute.Strategy:
    """Check the arguments that need no TF work; return the strategy."""
    strategy = _check_strategy(strategy)
    if iteration not in ITERATIONS:
        raise ValueError(f"iteration must be one of {ITERATIONS}; got {iteration!r}.")
    if (dataset is None) == (dataset_fn is None):
        raise ValueError(
            "give exactly one of dataset (for experimental_distribute_dataset) or dataset_fn= (for "
            "distribute_datasets_from_function)."
        )
    if dataset_fn is not None and not callable(dataset_fn):
        raise TypeError(f"dataset_fn must be callable (InputContext -> Dataset); got {type(dataset_fn).__name__}.")
    if step_fn is not None and not callable(step_fn):
        raise TypeError(f"step_fn must be callable; got {type(step_fn).__name__}.")
    if options is not None and not isinstance(options, tf.distribute.InputOptions):
        raise TypeError(f"options must be tf.distribute.InputOptions; got {type(options).__name__}.")
    if not isinstance(timing, bool) and (not isinstance(timing, (int, np.integer)) or timing < 0):
        raise ValueError(f"timing must be True/False or a number of steps to profile (0 or more); got {timing!r}.")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ValueError(f"timeout must be a number of seconds above 0 (or None to wait for the data); got {timeout!r}.")
    return strategy


# ---------------------------------------------------------------------------
# building the distributed dataset
# ---------------------------------------------------------------------------
@dataclass
class Input:
    """The distributed dataset and what vizdist learnt building it."""

    dist: Any
    info: dict[str, Any]
    tagged: bool
    known_steps: int | None  # steps TF knows the data has (None: endless or unknown)
    meta: dict[str, Any] = field(default_factory=dict)
    ids_in_values: bool = False  # tagged, but each value is its own tag: the user's dataset runs as built


def wrap_tf_error(exc: BaseException, strategy: tf.distribute.Strategy, what: str) -> TracingError:
    """A TF error while building or reading the distributed dataset, with TF's whole message."""
    from vizdist.instrument.observe.placement import explain_placement_error

    msg = str(exc).strip() or type(exc).__name__
    hint = explain_placement_error(exc, strategy_name(strategy))
    return TracingError(
        f"TensorFlow failed while {what} over {strategy.num_replicas_in_sync} replicas "
        f"({strategy_name(strategy)}): {type(exc).__name__}: {msg}" + (f"\n\nIn plain words: {hint}" if hint else "")
    )


def _is_unbatched(tagged_ds: tf.data.Dataset) -> bool:
    return tagged_ds.element_spec[0].shape.rank == 0


def _cardinality(ds: Any) -> int | None:
    try:
        n = cardinality(ds)
    except Exception:
        return None
    return n if n >= 0 else None


def tag_global(strategy: Any, dataset: Any, steps: int | None, *, ids_in_values: bool = False,
               endless_ok: bool = False) -> tuple[tf.data.Dataset, Input]:
    """The dataset to distribute (tagged, or as built when it cannot be tagged) and what vizdist learnt.

    ``ids_in_values``: where every value is its own tag (:func:`values_are_ids`), distribute the
    user's dataset as built and read the tags from the values (the caller's loop must know).
    """
    dataset = _check_dataset(dataset)
    if not endless_ok:  # vizdist.record follows the user's own loop, which knows when to stop
        _check_finite(dataset, steps)
    meta: dict[str, Any] = {}
    try:
        tagged = tag_dataset(dataset)
    except Untaggable as exc:
        tagged, meta["provenance_note"] = None, str(exc)
    if tagged is not None and strategy.num_replicas_in_sync > 1 and _is_unbatched(tagged.dataset):
        raise ValueError(
            f"the dataset is not batched, but {strategy_name(strategy)} splits each element across "
            f"{strategy.num_replicas_in_sync} replicas along its first (batch) dimension. Batch it with "
            f"the global batch size first, e.g. dataset.batch({strategy.num_replicas_in_sync * 2})."
        )
    info = tagged.info if tagged is not None else {"provenance": "fingerprint",
                                                    "services": service_own.services_in(dataset)}
    ds = keyed(tagged.dataset) if tagged is not None else dataset
    in_values = ids_in_values and tagged is not None and values_are_ids(dataset, tagged.info)
    if in_values:
        ds = dataset
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # graph mode: TF warns that options are read the legacy way
        meta["shard_policy"] = dataset.options().experimental_distribute.auto_shard_policy.name
    meta.update(global_batch_size=info.get("global_batch_size"), input_contexts=[],
                element_spec=str(dataset.element_spec))
    return ds, Input(None, info, tagged is not None, _cardinality(ds), meta, ids_in_values=in_values)


def _distribute_dataset(strategy: tf.distribute.Strategy, dataset: Any, options: Any, steps: int | None) -> Input:
    """``experimental_distribute_dataset`` over the tagged dataset (content ids when it cannot be tagged)."""
    ds, inp = tag_global(strategy, dataset, steps, ids_in_values=True)
    try:
        inp.dist = strategy.experimental_distribute_dataset(ds, options)
    except (ValueError, TypeError, IndexError, tf.errors.OpError) as exc:
        raise wrap_tf_error(exc, strategy, "distributing the dataset") from exc
    return inp


class TaggingFn:
    """Wraps a ``dataset_fn`` (TF1: ``input_fn``): records each ``InputContext`` and tags each pipeline."""

    def __init__(self, dataset_fn: Callable[..., Any], steps: int | None, name: str = "dataset_fn", *,
                 endless_ok: bool = False) -> None:
        self.dataset_fn, self.steps, self.name, self.endless_ok = dataset_fn, steps, name, endless_ok
        self.contexts: list[dict[str, Any]] = []
        self.infos: list[dict[str, Any]] = []
        self.specs: list[Any] = []
        self.cards: list[int | None] = []

    def __call__(self, ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        self.contexts.append({"num_input_pipelines": int(ctx.num_input_pipelines),
                              "input_pipeline_id": int(ctx.input_pipeline_id),
                              "num_replicas_in_sync": int(ctx.num_replicas_in_sync)})
        ds = _check_dataset(self.dataset_fn(ctx), f"{self.name}'s return value")
        if not self.endless_ok:
            _check_finite(ds, self.steps)
        self.specs.append(ds.element_spec)
        self.cards.append(_cardinality(ds))
        try:
            t = tag_dataset(ds)
        except Untaggable as exc:
            raise TracingError(
                f"vizdist cannot tag the pipeline {self.name} builds ({exc}). Pass a dataset instead, or "
                "trace your loop with vizdist.watch(...)."
            ) from None
        self.infos.append(t.info)
        return keyed(t.dataset)

    def summary(self, strategy: Any) -> tuple[dict[str, Any], dict[str, Any], int | None]:
        """(tag info, meta, steps TF knows the data has) once every pipeline was built."""
        info = dict(self.infos[0]) if self.infos else {"provenance": "tagged"}  # every pipeline's sources are alike
        per_pipeline = info.get("global_batch_size")
        meta = {"per_replica_batch_size": per_pipeline, "input_contexts": self.contexts,
                "pipelines": [i.get("pipeline") for i in self.infos],
                "element_spec": str(self.specs[0] if self.specs else None),
                "global_batch_size": per_pipeline * strategy.num_replicas_in_sync if per_pipeline else None}
        cards = self.cards
        known = min(cards) if cards and all(c is not None for c in cards) else None  # type: ignore[type-var]
        return info, meta, known


def _distribute_function(strategy: tf.distribute.Strategy, dataset_fn: Callable[..., Any], options: Any,
                         steps: int | None) -> Input:
    """``distribute_datasets_from_function`` with every pipeline tagged and its InputContext recorded."""
    traced_fn = TaggingFn(dataset_fn, steps)
    try:
        with service_registry.one_run():  # pipelines that share a tf.data service job share it traced
            dist = strategy.distribute_datasets_from_function(traced_fn, options)
    except tf.errors.OpError as exc:
        raise wrap_tf_error(exc, strategy, "distributing the dataset") from exc
    info, meta, known = traced_fn.summary(strategy)
    return Input(dist, info, True, known, meta)


# ---------------------------------------------------------------------------
# reading one step into the recorder
# ---------------------------------------------------------------------------
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
    if type(value).__name__ == "EagerTensor" and value._shape_tuple() == ():
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

    ``tagged``: each element is vizdist's tag and the value (:func:`~vizdist.instrument.ids.tagging.keyed`);
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

    def record_step(self, step: int, tags: Any, values: Any, results: list[Any] | None = None) -> int:
        """Record one global step; return the number of elements this process's replicas got."""
        for hook in self.step_hooks:
            hook(step, values, results)
        local = self.strategy.experimental_local_results
        leaves = tf.nest.flatten(values)
        firsts = local(leaves[0]) if leaves else local(tags)
        local_tags = local(tags) if tags is not None else None
        local_values = [local(leaf) for leaf in leaves] if local_tags is None else None
        total = 0
        for r, first in enumerate(firsts):
            device = _device_of(first)
            kw: dict[str, Any] = dict(
                device=device, replica_device=self.devices[r] if r < len(self.devices) else device,
                shape=self._shape(first), dtype=first.dtype.name if hasattr(first, "dtype") else "",
                result=result_json(results[r]) if results is not None else "")
            if local_tags is not None:
                total += self.rec.add(step, self.replica_offset + r, tags=local_tags[r].numpy(), **kw)
            else:
                ids = self.ids_by_content([_rows_array(lv[r]) for lv in local_values or []])
                total += self.rec.add(step, self.replica_offset + r, ids=ids, **kw)
        return total

    def _shape(self, value: Any) -> str:
        """``str(tuple(shape))``, from TF's fast shape tuple of eager tensors, cached (a handful per run)."""
        fast = getattr(value, "_shape_tuple", None)
        key = fast() if fast is not None else tuple(value.shape) if hasattr(value, "shape") else ()
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


# ---------------------------------------------------------------------------
# the loop
# ---------------------------------------------------------------------------
def _run_step(strategy: tf.distribute.Strategy, step_fn: Callable[..., Any], values: Any) -> list[Any]:
    return per_replica(strategy, strategy.run(step_fn, args=(values,)))


def per_replica(strategy: Any, out: Any) -> list[Any]:
    """What ``strategy.run`` (or TF1's ``experimental_run``) returned, as one nested value per local replica."""
    leaves = tf.nest.flatten(out)
    n = len(replica_devices(strategy))
    local = [[None] * n if leaf is None else strategy.experimental_local_results(leaf) for leaf in leaves]
    n = len(local[0]) if local else n
    return [tf.nest.pack_sequence_as(out, [lv[r] for lv in local]) if local else None for r in range(n)]


def _iterate(dist: Any, iteration: str) -> Iterator[Any]:
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


# ---------------------------------------------------------------------------
# metadata and the finished trace
# ---------------------------------------------------------------------------
def options_dict(options: tf.distribute.InputOptions | None) -> dict[str, Any]:
    if options is None:
        return {}
    out: dict[str, Any] = {}
    for key in ("experimental_fetch_to_device", "experimental_place_dataset_on_device",
                "experimental_per_replica_buffer_size", "experimental_replication_mode"):
        v = getattr(options, key, None)
        out[key] = getattr(v, "name", v)
    return out


def base_meta(strategy: tf.distribute.Strategy, api: str) -> dict[str, Any]:
    return {
        "kind": "distribution",
        "strategy": strategy_name(strategy),
        "num_replicas": int(strategy.num_replicas_in_sync),
        "devices": replica_devices(strategy),
        "api": api,
        "tf_version": tf.__version__,
        "host": platform.node(),
        "gpus": len(tf.config.list_physical_devices("GPU")),
        "num_workers": num_workers(strategy),
    }


def input_meta(inp: Input, dist: Any) -> dict[str, Any]:
    info = inp.info
    meta = dict(inp.meta)
    meta.update(
        provenance=info.get("provenance", "tagged"), pipeline=info.get("pipeline", []),
        **({"provenance_note": "; ".join(info["provenance_notes"])} if info.get("provenance_notes") else {}),
        sources=info.get("sources", []),
        **({"services": info["services"]} if info.get("services") else {}),
        pipeline_flags={k: info.get(k) for k in (
            "drop_remainder", "filter", "repeat", "take", "skip", "shard", "shuffle", "unbatch", "opaque")}
        | ({"shuffle_unseeded": True} if info.get("shuffle_unseeded") else {}))
    try:
        spec = dist.element_spec
        meta["distributed_element_spec"] = str(untag(spec)[1] if inp.tagged and not inp.ids_in_values else spec)
    except Exception:  # some strategies only know it after iteration starts
        meta["distributed_element_spec"] = ""
    meta["rebatch"] = rebatch_op(dist)
    return meta


#: TF's two ways to cut a global batch for the replicas (tf.data ops, as named in the dataset graph).
REBATCH_OPS = ("RebatchDatasetV2", "RebatchDataset")


def rebatch_op(dist: Any) -> str:
    """The op TF cuts each global batch with, read from the distributed dataset's graph after TF's
    auto-shard rewrite (sharding by DATA swaps ``RebatchDatasetV2`` for the legacy ``RebatchDataset``,
    ``auto_shard.cc``); ``""`` where TF rebatches nothing (one replica, ``distribute_datasets_from_function``)
    or the graph cannot be read (about 1 ms: one serialization of the first worker's dataset).

    Example:
        >>> import tensorflow as tf                                          # doctest: +SKIP
        >>> s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])          # doctest: +SKIP
        >>> rebatch_op(s.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(4)))  # doctest: +SKIP
        'RebatchDataset'
    """
    run = engine.current()
    try:
        with run.own_work() if run is not None else contextlib.nullcontext():
            dataset = dist._cloned_datasets[0]
            policy = tf.data.experimental.ExternalStatePolicy.IGNORE
            graph = graph_pb2.GraphDef.FromString(
                tensor_value(dataset._as_serialized_graph(external_state_policy=policy)))
    except Exception:
        return ""
    ops = {node.op for node in graph.node}
    return next((op for op in REBATCH_OPS if op in ops), "")


def _global_step_totals(strategy: tf.distribute.Strategy, reader: StepReader, n_steps: int) -> np.ndarray | None:
    """Elements per step over all workers: one all-reduce of each worker's per-step counts.

    Every worker of a ``MultiWorkerMirroredStrategy`` runs the same steps (TF
    ends iteration on all workers together), so the vectors line up. None
    when there is one worker or the reduction fails.
    """
    if num_workers(strategy) <= 1 or not n_steps:
        return None
    local = np.zeros(n_steps, dtype=np.int64)
    mine = reader.rec.step_totals()[:n_steps]
    local[: len(mine)] = mine
    first = reader.replica_offset

    def value_fn(ctx: tf.distribute.ValueContext) -> tf.Tensor:
        return tf.constant(local if ctx.replica_id_in_sync_group == first else np.zeros_like(local))

    try:
        per_replica = strategy.experimental_distribute_values_from_function(value_fn)
        return np.asarray(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy())
    except Exception as exc:  # fall back to this worker's share, and say so
        warnings.warn(f"vizdist: could not sum step sizes over workers ({type(exc).__name__}); "
                      "partial flags use this worker's share of the global batch.", stacklevel=3)
        return None


def _partial_rule(strategy: tf.distribute.Strategy, reader: StepReader, loop: Loop,
                  global_batch: int | None) -> tuple[int | None, np.ndarray | None]:
    """(batch size, per-step totals) to mark ``partial`` with: global when all workers can be summed."""
    if not global_batch or num_workers(strategy) <= 1:
        return global_batch, None
    if loop.stopped in ("end_of_data", "steps", "max_steps"):
        totals = _global_step_totals(strategy, reader, loop.steps_run)
        if totals is not None:
            return global_batch, totals
    # this worker's share of the global batch (exact for even shares; a failed run cannot sum over workers)
    return global_batch * len(reader.devices) // int(strategy.num_replicas_in_sync), None


def finish_meta(meta: dict[str, Any], reader: StepReader, loop: Loop, timeout: float | None) -> dict[str, Any]:
    meta = dict(meta)
    if not reader.tagged:
        meta["provenance_note"] = (meta.get("provenance_note", "") + "; " + reader.provenance_note()).lstrip("; ")
    meta.update(stopped=loop.stopped, steps_run=loop.steps_run, worker=reader.worker)
    if timeout is not None:
        meta["timeout_s"] = float(timeout)
    if not meta.get("global_batch_size") and loop.steps_run:
        totals = reader.rec.step_totals()
        meta["global_batch_size"] = int(totals.max()) if len(totals) else None
    return meta


def _trace(strategy: tf.distribute.Strategy, reader: StepReader, loop: Loop, meta: dict[str, Any],
           events: Any = None) -> Trace:
    batch, totals = _partial_rule(strategy, reader, loop, meta.get("global_batch_size"))
    elements, batches = reader.rec.tables(global_batch_size=batch, totals=totals, release=True)
    return Trace(elements=elements, batches=batches, events=events, meta=meta)


def _raise_failure(loop: Loop, strategy: tf.distribute.Strategy, partial: Trace) -> None:
    """Re-raise what stopped the loop, with the partial trace attached.

    The user's own step error is raised as itself (any type, TF's message
    whole), with a note; a failure reading the data is a TracingError.
    """
    exc = loop.error
    assert exc is not None
    if isinstance(exc, TracingError) or loop.error_in != "data":
        with contextlib.suppress(AttributeError, TypeError):
            exc.partial_trace = partial  # type: ignore[attr-defined]
        if loop.error_in == "step_fn" and hasattr(exc, "add_note"):
            exc.add_note(f"vizdist: raised by step_fn at step {loop.steps_run}; the {loop.steps_run} steps "
                         "recorded before it are in this exception's .partial_trace")
        raise exc
    err = wrap_tf_error(exc, strategy, "reading the distributed dataset")
    err.partial_trace = partial
    raise err from exc


def trace_distribution(
    strategy: tf.distribute.Strategy | None = None,
    dataset: tf.data.Dataset | None = None,
    *,
    dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset] | None = None,
    options: tf.distribute.InputOptions | None = None,
    steps: int | None = None,
    step_fn: Callable[[Any], Any] | None = None,
    iteration: str = "for",
    max_steps: int = DEFAULT_MAX_STEPS,
    progress: bool | None = None,
    timing: bool | int = False,
    timeout: float | None = None,
    placement: bool | str = False,
) -> Trace:
    """Run a real strategy over a real dataset and record where every element went.

    Give either ``dataset`` (distributed with
    ``strategy.experimental_distribute_dataset(dataset, options)``) or
    ``dataset_fn`` (distributed with
    ``strategy.distribute_datasets_from_function(dataset_fn, options)``; the
    ``InputContext`` of every call is recorded in ``meta["input_contexts"]``).

    Args:
        strategy: any single-process strategy (default, ``OneDeviceStrategy``,
            ``MirroredStrategy``, ``CentralStorageStrategy``) or, inside a
            worker process, ``MultiWorkerMirroredStrategy``. ``None`` means
            the default strategy.
        dataset: the ``tf.data.Dataset`` as you built it, batched with the
            *global* batch size.
        dataset_fn: instead of ``dataset``, a function of ``InputContext``
            returning one pipeline's dataset (batched per replica).
        options: ``tf.distribute.InputOptions`` passed through to TF.
        steps: stop after this many steps (needed for endless datasets).
        step_fn: optional ``fn(per_replica_batch)`` run with
            ``strategy.run`` each step, on the untagged batch; each replica's
            result is stored in ``trace.batches["result"]`` (JSON). If it
            raises, its own exception is raised (any type, message whole)
            with the steps recorded so far in ``exc.partial_trace``.
        iteration: how to iterate: ``"for"`` (``for x in dist``),
            ``"get_next"`` or ``"get_next_as_optional"``.
        max_steps: safety stop, used only when ``steps`` is None and TF
            cannot tell where the data ends (endless or unknown cardinality);
            data of known finite length always runs to its end.
        progress: show a progress bar (None: only for runs known to take 200 steps or more).
        timing: also record *when*: host spans (``transfer`` = ``next()`` on
            the distributed iterator, ``consume`` = ``strategy.run`` and each
            replica's ``step_fn``) and, through the TF profiler, the tf.data
            spans and prefetch buffer depth (see
            :mod:`vizdist.instrument.observe.timing`). Spans go to ``trace.events``.
            The profiler covers the first 16 steps (at most 2048 elements);
            pass a number instead of ``True`` to profile that many steps
            (``0``: host spans only).
        timeout: seconds to wait for the whole run; a pipeline still running
            (or blocked) then returns what was recorded, with
            ``meta["stopped"] == "timeout"`` and a ``timed-out`` finding.
            None waits for the data (Ctrl-C still returns what was recorded).
        placement: also record where every op ran (input pipeline, copies to
            the devices, variables, the step, reductions) and NaN/Inf in what
            each replica got, with TF's debugger; stored in
            ``meta["placement"]`` (see :mod:`vizdist.instrument.observe.placement`).
            ``True`` means ``"CURT_HEALTH"``; ``"NO_TENSOR"`` is cheaper.

    Returns:
        A :class:`~vizdist.trace.Trace`.

    Raises:
        TypeError: ``strategy`` or ``dataset`` is of the wrong kind.
        ValueError: bad ``steps``/``max_steps``/``iteration``/``timeout``, an
            endless dataset without ``steps``, or an unbatched dataset over
            several replicas.
        TracingError: TensorFlow failed while distributing or reading the data
            (TF's whole message; ``.partial_trace`` holds what was recorded),
            or ``max_steps`` was reached.

    Example:
        >>> import vizdist                                           # doctest: +SKIP
        >>> vizdist.virtual_devices(4)                               # doctest: +SKIP
        >>> import tensorflow as tf                                  # doctest: +SKIP
        >>> t = vizdist.trace_distribution(tf.distribute.MirroredStrategy(),
        ...                                tf.data.Dataset.range(10).batch(4))  # doctest: +SKIP
        >>> t.ids(step=2, replica=3)                                 # doctest: +SKIP
        []
    """
    if isinstance(dataset, tf.distribute.DistributedValues):  # e.g. experimental_distribute_values_from_function
        from vizdist.instrument.strategies.values import trace_values

        return trace_values(_check_strategy(strategy), dataset)
    strategy = _check_call(strategy, dataset, dataset_fn, options, step_fn, iteration, timing, timeout)
    steps = check_count(steps, "steps", none="for all")
    max_steps = check_count(max_steps, "max_steps")  # type: ignore[assignment]
    _check_placement(placement)
    api = "experimental_distribute_dataset" if dataset is not None else "distribute_datasets_from_function"
    with engine.Run(strategy, api=api, observers=observers_for(timing=timing, placement=placement)) as run:
        meta = base_meta(strategy, api)
        meta.update(iteration=iteration, options=options_dict(options), steps_requested=steps)
        inp = (_distribute_dataset(strategy, dataset, options, steps) if dataset is not None
               else _distribute_function(strategy, dataset_fn, options, steps))  # type: ignore[arg-type]
        meta.update(input_meta(inp, inp.dist))
        reader = run.attach(StepReader(strategy, info=inp.info, tagged=inp.tagged, ids_in_values=inp.ids_in_values),
                            source=(dataset, dataset_fn, meta.get("input_contexts")))
        cap = max_steps if steps is None and inp.known_steps is None else None
        loop = Loop(strategy, reader, steps=steps, cap=cap, step_fn=run.wrap_step(step_fn), iteration=iteration,
                    timer=run.timer)
        trace = loop_trace(run, loop, run.wrap_input(inp.dist), meta, total=steps if steps is not None
                            else inp.known_steps, progress=progress, timeout=timeout)
    return run.finish(trace)


def _check_placement(placement: Any) -> None:
    if placement not in (False, True, *PLACEMENT_MODES):
        raise ValueError(f"placement must be False, True or a TF debug mode {PLACEMENT_MODES}; got {placement!r}.")


#: TF debugger modes ``placement=`` accepts (``tf.debugging.experimental.enable_dump_debug_info``).
PLACEMENT_MODES = ("NO_TENSOR", "CURT_HEALTH", "FULL_HEALTH")


def loop_trace(run: engine.Run, loop: Loop, dist: Any, meta: dict[str, Any], *, total: int | None,
                progress: bool | None, timeout: float | None) -> Trace:
    """Run the loop (inside every observer's loop context) and build the trace, or raise with it."""
    bar = progress_bar(total, progress)
    try:
        with run.loop():
            loop.run_bounded(dist, timeout=timeout, bar=bar)
    finally:
        bar.close()
    meta = finish_meta(meta, loop.reader, loop, timeout)
    return finished_trace(loop.strategy, loop.reader, loop, meta, cap=loop.cap)


def finished_trace(strategy: Any, reader: StepReader, loop: Loop, meta: dict[str, Any], *, cap: int | None,
                   events: Any = None) -> Trace:
    """The trace of a finished loop; raises what stopped it (with the partial trace) if it did not end well."""
    trace = _trace(strategy, reader, loop, meta, events)
    if loop.error is not None:
        _raise_failure(loop, strategy, trace)
    if loop.stopped == "max_steps":
        raise TracingError(
            f"stopped after max_steps={cap} steps and the data has not ended (TensorFlow cannot tell how long it "
            "is: endless or of unknown cardinality). Pass steps=N to record N steps, or raise max_steps.",
            partial_trace=trace)
    return trace


class Watch:
    """Iterate a distributed dataset as usual while vizdist records each step.

    Created by :func:`watch`. Iterating yields exactly the elements of the
    wrapped dataset; ``.trace`` is the :class:`~vizdist.trace.Trace` of the
    steps iterated so far. Ids come from the content (the values themselves
    for integer elements, else fingerprints), since the dataset was built
    without tags.
    """

    def __init__(self, dist_dataset: Any, strategy: tf.distribute.Strategy | None) -> None:
        strategy = strategy or getattr(dist_dataset, "_strategy", None) or tf.distribute.get_strategy()
        self._dist = dist_dataset
        self._strategy = _check_strategy(strategy)
        self._reader = StepReader(self._strategy, info={}, tagged=False)
        self._step = 0
        self._meta = base_meta(self._strategy, "watch")
        services = service_own.services_in(getattr(dist_dataset, "_original_dataset", None))
        if services:  # ids are values here: the service's copies are explained, not told apart
            self._meta["services"] = [dict(s, worker_attribution="unknown: watch reads values, not tags",
                                           note="ids are the element values (watch)") for s in services]

    def __iter__(self) -> Iterator[Any]:
        for element in self._dist:
            self._reader.record_step(self._step, None, element)
            self._step += 1
            yield element

    @property
    def trace(self) -> Trace:
        """What was recorded so far."""
        meta = dict(self._meta)
        meta.update(provenance="fingerprint", steps_run=self._step, worker=self._reader.worker,
                    provenance_note=self._reader.provenance_note())
        totals = self._reader.rec.step_totals()
        meta["global_batch_size"] = int(totals.max()) if len(totals) else None
        elements, batches = self._reader.rec.tables(global_batch_size=meta["global_batch_size"])
        return Trace(elements=elements, batches=batches, meta=meta)


def watch(dist_dataset: Any, *, strategy: tf.distribute.Strategy | None = None) -> Watch:
    """Record an existing training loop without restructuring it (deprecated: use :func:`vizdist.record`).

    ``watch`` labels elements by their content (fingerprints numbered in order of first delivery), has
    no ``get_next`` and cannot be read inside a ``tf.function``; ``with vizdist.record() as rec:``
    around the code that distributes and reads the dataset records exact ids, eagerly or in a graph.

    Example:
        >>> dist = strategy.experimental_distribute_dataset(ds)     # doctest: +SKIP
        >>> w = vizdist.watch(dist)                                 # doctest: +SKIP
        >>> for batch in w:                                         # doctest: +SKIP
        ...     strategy.run(train_step, args=(batch,))
        >>> vizdist.diagnose(w.trace)                               # doctest: +SKIP
    """
    warnings.warn(
        "vizdist.watch is deprecated: put `with vizdist.record() as rec:` around the code that distributes and "
        "reads the dataset (exact ids, any loop, Keras fit), then use rec.trace.", DeprecationWarning, stacklevel=2)
    if isinstance(dist_dataset, tf.data.Dataset) and strategy is not None and strategy.num_replicas_in_sync > 1:
        raise TypeError(
            "watch() takes the *distributed* dataset you iterate "
            "(strategy.experimental_distribute_dataset(ds)); got a plain tf.data.Dataset. "
            "Distribute it first, or use vizdist.trace_distribution(strategy, ds)."
        )
    if not hasattr(dist_dataset, "__iter__"):
        raise TypeError(f"watch() takes an iterable distributed dataset; got {type(dist_dataset).__name__}.")
    return Watch(dist_dataset, strategy)
