"""Where every op ran: TensorFlow's own debugger, read into plain rows.

:class:`PlacementRecorder` turns on TF's debugger dumps
(``tf.debugging.experimental.enable_dump_debug_info``) around a run, then
reads them back with TF's ``DebugDataReader``: every op executed inside a
graph (a ``map`` function, the user's step, the copies a ``MultiDeviceIterator``
makes to each device) with the device it ran on, and every eager op (building
the input pipeline, the iterator's ``get_next``, a ``strategy.reduce``). No
log text is parsed. With ``CURT_HEALTH`` (the default) TF also reports, for
each output tensor, whether it held a NaN or an Inf.

The rows are aggregated (one row per op and device, with a count and the
first/last step it ran in) and stored in ``trace.meta["placement"]`` (see
:class:`vizdist.contract.PlacementMeta`). Nothing of this runs unless asked
(``trace_distribution(..., placement=True)``).

Example:
    >>> stage_of("graph", "RealDiv", ["Dataset_map_lambda"], step_names=("step",))
    'pipeline'
    >>> stage_of("graph", "Mul", ["step"], step_names=("step",))
    'step'
    >>> stage_of("graph", "ReadVariableOp", ["step"], step_names=("step",))
    'variable'
"""

from __future__ import annotations

import bisect
import contextlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from vizdist.instrument.core.engine import Observer
from vizdist.instrument.observe.stages import (
    NOISE,
    PIPELINE,
    STAGES,
    copies,
    device_key,
    short_device,
    stage_of,
)
from vizdist.instrument.tfapi import runtime

# What an op was for (stage_of, STAGES, copies, short_device) lives in stages.py; importable from here too.
__all__ = ["MODES", "STAGES", "OpRun", "PlacementObserver", "PlacementRecorder", "explain_placement_error",
           "fresh_function_caches", "quiet_tf_logger", "short_device", "stage_of"]

MODES = ("NO_TENSOR", "CURT_HEALTH", "FULL_HEALTH")


@dataclass
class OpRun:
    """One execution of one op, as TF's debugger reported it."""

    kind: str  # "graph" or "eager"
    op_type: str
    op_name: str
    graphs: tuple[str, ...]
    device: str
    wall_time: float
    nonfinite: bool | None  # None: the mode did not check


class PlacementRecorder:
    """Record where every op of a run executed (a context manager).

    Args:
        meta: when given, the trace meta dict to fill in on exit
            (``meta["placement"]``).
        mode: the debugger's ``tensor_debug_mode``: ``"NO_TENSOR"`` (devices
            only, cheapest), ``"CURT_HEALTH"`` (also: did a tensor hold a
            NaN/Inf) or ``"FULL_HEALTH"``.
        step_names: names of the user's step functions (their graphs are the
            ``step`` stage).

    Example:
        >>> import vizdist; vizdist.virtual_devices(4)  # doctest: +SKIP
        >>> import tensorflow as tf                     # doctest: +SKIP
        >>> with PlacementRecorder() as rec:            # doctest: +SKIP
        ...     tf.constant(1.0) + 1.0
        >>> rec.placement()["ops"][0]["op_type"]        # doctest: +SKIP
        'AddV2'
    """

    def __init__(self, meta: dict[str, Any] | None = None, *, mode: str = "CURT_HEALTH",
                 step_names: Iterable[str] = ()) -> None:
        if mode not in MODES:
            raise ValueError(f"placement mode must be one of {MODES}; got {mode!r}.")
        self.meta, self.mode = meta, mode
        self.step_names = tuple(step_names)
        self.runs: list[OpRun] = []
        self.step_marks: list[float] = []
        self.batch_devices: dict[int, str] = {}
        self.bad_rows: list[dict[str, Any]] = []
        self.bad_results: list[dict[str, Any]] = []
        self.reduce_windows: list[tuple[float, float]] = []
        self.own_windows: list[tuple[float, float]] = []  # vizdist's own bookkeeping ops: not in the rows
        self.notes: list[str] = []
        self.error: str | None = None
        self._dir: str | None = None
        self._callback: Any = None
        self.last_element: tuple[int, Any] | None = None
        self.fetched = 0
        self.failed_step: dict[str, Any] | None = None
        self._reader: Any = None
        self.cost_s: dict[str, float] = {}
        self.inputs: tuple[Any, Any, list[dict[str, int]]] | None = None
        self.failed_element: dict[str, Any] | None = None

    # -- life cycle --------------------------------------------------------
    def __enter__(self) -> PlacementRecorder:
        import tensorflow as tf

        self._dir = tempfile.mkdtemp(prefix="vizdist-placement-")
        self._t0 = time.time()
        try:
            tf.debugging.experimental.enable_dump_debug_info(
                self._dir, tensor_debug_mode=self.mode, circular_buffer_size=-1)
            # TF keeps the debugger's callback per thread (a threading.local): keep it for other threads
            self._callback = runtime.dumping_callback()
        except ValueError as exc:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise RuntimeError(
                f"vizdist could not turn on TF's debugger dumps for placement=True ({exc}). Another "
                "enable_dump_debug_info(...) is active: call tf.debugging.experimental.disable_dump_debug_info() "
                "first, or trace without placement=True.") from None
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        import tensorflow as tf

        tf.debugging.experimental.disable_dump_debug_info()
        t1 = time.time()
        try:
            self._read()
        finally:
            shutil.rmtree(self._dir or "", ignore_errors=True)
        self.cost_s = {"run": round(t1 - self._t0, 6), "read": round(time.time() - t1, 6)}
        if exc is not None:
            self.error = _whole_message(exc)
            self.failed_step = failed = self._failed_step()
            if not failed.get("arrived"):
                self.failed_element = self._map_failure(exc)
        if self.meta is not None:
            self.meta["placement"] = self.placement()
        partial = getattr(exc, "partial_trace", None)
        if partial is not None:
            from vizdist.contract import validate_meta

            partial.meta = validate_meta({**partial.meta, "placement": self.placement()})

    def _read(self) -> None:
        with runtime.debug_data_reader(self._dir) as reader:
            reader.update()
            self.runs = list(_eager_runs(reader)) + list(_graph_runs(reader, self.mode))
        self.runs.sort(key=lambda r: r.wall_time)

    # -- hooks used by trace_distribution ----------------------------------
    def follow(self, step_reader: Any) -> None:
        """Follow the steps ``step_reader`` records (see :meth:`on_step`)."""
        self._reader = step_reader

    def on_step(self, reader: Any, step: int, values: Any, results: list[Any] | None) -> None:
        """One step ``reader`` recorded: its end time, its batches' devices, NaN/Inf rows."""
        self._reader = reader
        self.step_marks.append(time.time())
        self._check_step(step, getattr(reader, "strategy", None), values, results,
                         getattr(reader, "replica_offset", 0))

    def in_loop_thread(self, dist: Any) -> Any:
        """``dist``, made to turn the debugger on in whichever thread iterates it.

        TF keeps op callbacks (the debugger's hook) per thread; vizdist's loop
        runs in its own thread, so the callback is added there when iteration
        starts.
        """
        return _InstrumentedIterable(dist, self._callback, self)

    def _check_step(self, step: int, strategy: Any, values: Any, results: list[Any] | None, offset: int) -> None:
        from vizdist.instrument.observe.numerics import nonfinite_results, nonfinite_rows

        if strategy is None:
            return
        rows, devices = nonfinite_rows(strategy, values)
        for r, dev in enumerate(devices):
            self.batch_devices.setdefault(r, dev)
        self.bad_rows += [dict(step=step, **{**row, "replica": row["replica"] + offset}) for row in rows]
        self.bad_results += [dict(step=step, replica=r + offset) for r in nonfinite_results(results)]

    def _failed_step(self) -> dict[str, Any]:
        """The step that raised: its number and, when its batch had arrived, each replica's source ids."""
        from vizdist.instrument.observe.numerics import failed_step_inputs

        step = len(self.step_marks)
        out: dict[str, Any] = {"step": step, "arrived": False, "replicas": []}
        if self.last_element is not None and self.last_element[0] == step and self._reader is not None:
            out["arrived"] = True
            out["replicas"] = failed_step_inputs(self._reader, self.last_element[1])
        self.last_element = None
        return out

    def watch_input(self, dataset: Any, dataset_fn: Any, contexts: list[dict[str, int]] | None) -> None:
        """Keep the user's pipeline (or ``dataset_fn`` and its ``InputContext`` s) to find a failing function later."""
        self.inputs = (dataset, dataset_fn, list(contexts or []))

    def _map_failure(self, exc: BaseException) -> dict[str, Any] | None:
        """The element a function of the input pipeline raised on, when the run failed there (see ``map_failure``)."""
        import tensorflow as tf

        from vizdist.instrument.ids.map_failure import find_map_failure, node_of

        cause = exc.__cause__ if exc.__cause__ is not None else exc
        if self.inputs is None or not isinstance(cause, tf.errors.InvalidArgumentError):
            return None  # check_numerics and tf.debugging.assert_* raise InvalidArgumentError
        dataset, dataset_fn, contexts = self.inputs
        try:
            datasets = [dataset] if dataset is not None else [
                dataset_fn(tf.distribute.InputContext(**c)) for c in contexts]
            with quiet_tf_logger():  # AutoGraph's notes about the user's lambdas, already shown by the run
                found = find_map_failure(datasets, node=node_of(str(cause)))
        except Exception as err:  # the run's own error is what the user needs; say why this part is missing
            self.notes.append(f"vizdist could not re-run the input pipeline to find the element its map raised on "
                              f"({type(err).__name__}: {err})")
            return None
        if found is not None:
            found["devices"] = sorted({o["device"] for o in self.ops() if o["op_name"] == found["op_name"]
                                       and o["stage"] == "pipeline" and o["device"]}, key=device_key)
        return found

    def reduce_window(self) -> Any:
        """A context marking the ops run inside it as the ``reduce`` stage."""
        return _window(self.reduce_windows)

    def own_window(self) -> Any:
        """A context marking the ops run inside it as vizdist's own (reading TF's graph): left out of the rows."""
        return _window(self.own_windows)

    # -- results -----------------------------------------------------------
    def step_of(self, wall_time: float) -> int:
        """The step whose work ran at ``wall_time`` (-1 before the first / after the last)."""
        i = bisect.bisect_left(self.step_marks, wall_time)
        return i if i < len(self.step_marks) else -1

    def _in_reduce(self, t: float) -> bool:
        return any(a <= t <= b for a, b in self.reduce_windows)

    def _own(self, t: float) -> bool:
        return any(a <= t <= b for a, b in self.own_windows)

    def ops(self) -> list[dict[str, Any]]:
        """One row per (stage, op, graph, device): how often it ran, in which steps, NaN/Inf outputs."""
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        host = self.host_device()
        for run in self.runs:
            if self._own(run.wall_time):
                continue
            stage = stage_of(run.kind, run.op_type, run.graphs, step_names=self.step_names,
                             in_reduce=self._in_reduce(run.wall_time))
            if stage in ("pipeline", "iterator") and run.device and run.device != host:
                stage = "transfer"  # the device side of the input copy: per-device buffer and iterator
            if (run.op_type in NOISE and stage not in ("transfer", "reduce")) or run.op_type in ("Const", "Placeholder"):
                continue
            graph = run.graphs[-1] if run.graphs else ""
            key = (stage, run.kind, run.op_type, run.op_name, graph, run.device)
            step = self.step_of(run.wall_time) if stage in ("step", "variable", "transfer") else -1
            row = rows.get(key)
            if row is None:
                rows[key] = row = dict(stage=stage, kind=run.kind, op_type=run.op_type, op_name=run.op_name,
                                       graph=graph, device=run.device, count=0, first_step=step, last_step=step,
                                       nonfinite=0)
            row["count"] += 1
            row["first_step"] = min(row["first_step"], step) if row["first_step"] >= 0 else step
            row["last_step"] = max(row["last_step"], step)
            row["nonfinite"] += int(bool(run.nonfinite))
        order = {s: i for i, s in enumerate(STAGES)}
        return sorted(rows.values(), key=lambda r: (order[r["stage"]], r["graph"], r["op_type"], r["device"]))

    def host_device(self) -> str:
        """The device of the input pipeline's host iterator (where batches are produced)."""
        for run in self.runs:
            if run.op_type.startswith(("AnonymousMultiDeviceIterator", "MultiDeviceIteratorInit")) and run.device:
                return run.device
        devices = [r.device for r in self.runs if r.device and PIPELINE.search(r.op_type)]
        return max(set(devices), key=devices.count) if devices else "CPU:0"

    def first_nonfinite(self) -> dict[str, Any] | None:
        """The earliest op execution whose output held a NaN or Inf (CURT/FULL_HEALTH only)."""
        for run in self.runs:
            if run.nonfinite and run.op_type not in NOISE:
                stage = stage_of(run.kind, run.op_type, run.graphs, step_names=self.step_names)
                return dict(op_type=run.op_type, op_name=run.op_name, graph=run.graphs[-1] if run.graphs else "",
                            device=run.device, stage=stage, kind=run.kind,
                            step=self.step_of(run.wall_time) if stage == "step" else -1)
        return None

    def placement(self) -> dict[str, Any]:
        """The ``meta["placement"]`` dict (see :class:`vizdist.contract.PlacementMeta`)."""
        ops = self.ops()
        notes = list(self.notes)
        if self.mode != "NO_TENSOR":
            notes.append(f"with {self.mode} TF's debugger traces the execution (where it ran, its NaN/Inf health) "
                         "only of graph ops whose outputs are floating point (ops inside functions that make "
                         "integers, strings or bools are not listed; eager ops all are); record with "
                         "placement='NO_TENSOR' to list every op, without the NaN/Inf check")
        out: dict[str, Any] = {
            "mode": self.mode, "source": "tf.debugging.experimental.enable_dump_debug_info + DebugDataReader",
            "ops": ops, "copies": copies(ops, self.batch_devices, host=self.host_device()), "host": self.host_device(),
            "devices": sorted({o["device"] for o in ops if o["device"]}, key=device_key),
            "batch_devices": [self.batch_devices[r] for r in sorted(self.batch_devices)],
            "step_names": list(self.step_names), "steps_marked": len(self.step_marks),
            "notes": notes, "cost_s": dict(self.cost_s),
        }
        if self.mode != "NO_TENSOR":
            out["numerics"] = {"bad_rows": self.bad_rows, "bad_results": self.bad_results,
                               "first_nonfinite_op": self.first_nonfinite(), "error": self.error,
                               "failed_step": self.failed_step, "failed_element": self.failed_element}
        elif self.error:
            out["numerics"] = {"bad_rows": [], "bad_results": [], "first_nonfinite_op": None, "error": self.error,
                               "failed_step": self.failed_step, "failed_element": self.failed_element}
        return out


class _WatchedIterator:
    """Delegates to a distributed iterator and keeps the last element it handed out (for a failed step)."""

    def __init__(self, it: Any, owner: PlacementRecorder) -> None:
        self._it, self._owner = it, owner

    def __iter__(self) -> _WatchedIterator:
        return self

    def _keep(self, element: Any) -> Any:
        self._owner.last_element = (self._owner.fetched, element)
        self._owner.fetched += 1
        return element

    def __next__(self) -> Any:
        return self._keep(next(self._it))

    def get_next(self) -> Any:
        return self._keep(self._it.get_next())

    def get_next_as_optional(self) -> Any:
        opt = self._it.get_next_as_optional()
        return _WatchedOptional(opt, self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._it, name)


class _WatchedOptional:
    def __init__(self, opt: Any, it: _WatchedIterator) -> None:
        self._opt, self._it = opt, it

    def has_value(self) -> Any:
        return self._opt.has_value()

    def get_value(self) -> Any:
        return self._it._keep(self._opt.get_value())


class _InstrumentedIterable:
    """Delegates to a distributed dataset; ``iter()`` first adds TF's dumping callback to this thread."""

    def __init__(self, dist: Any, callback: Any, owner: PlacementRecorder | None = None) -> None:
        self._dist, self._callback, self._owner = dist, callback, owner

    def __iter__(self) -> Any:
        callback = self._callback
        if callback is not None and callback not in runtime.op_callbacks():
            runtime.add_op_callback(callback)
        it = iter(self._dist)
        return _WatchedIterator(it, self._owner) if self._owner is not None else it

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dist, name)


def _whole_message(exc: BaseException) -> str:
    """TF's whole error text (the cause's, when vizdist wrapped it)."""
    inner = exc.__cause__ if exc.__cause__ is not None else exc
    return f"{type(inner).__name__}: {str(inner).strip()}"


def _eager_runs(reader: Any) -> Iterable[OpRun]:
    for ex in reader.executions(digest=False):
        ids = ex.output_tensor_device_ids or ()
        device = short_device(reader.device_name_by_id(ids[0])) if ids else ""
        values = ex.debug_tensor_values or []
        bad = None
        if ex.tensor_debug_mode in (2, 3) and values:  # CURT_HEALTH, FULL_HEALTH (debug_event_pb2)
            bad = any(_value_bad(v, ex.tensor_debug_mode) for v in values if v)
        yield OpRun("eager", ex.op_type, "", (), device, float(ex.wall_time), bad)


def _graph_names(reader: Any, ids: Sequence[str], cache: dict[str, str]) -> tuple[str, ...]:
    names = []
    for gid in ids:
        if gid not in cache:
            g = reader.graph_by_id(gid)
            cache[gid] = (g.name or "") if g is not None else ""
        names.append(cache[gid])
    return tuple(names)


def _graph_runs(reader: Any, mode: str) -> Iterable[OpRun]:
    cache: dict[str, str] = {}
    check = mode != "NO_TENSOR"
    for t in reader.graph_execution_traces(digest=False):
        bad = _value_bad(t.debug_tensor_value, t.tensor_debug_mode) if check and t.debug_tensor_value else None
        yield OpRun("graph", t.op_type, t.op_name, _graph_names(reader, t.graph_ids or (), cache),
                    short_device(t.device_name), float(t.wall_time), bad)


def _value_bad(value: Sequence[float], debug_mode: int) -> bool:
    """Does a CURT_HEALTH ([id, any_inf_nan]) or FULL_HEALTH ([..., -inf, +inf, nan, ...]) value flag a NaN/Inf?"""
    if debug_mode == 2:
        return bool(value[1]) if len(value) > 1 else False
    if debug_mode == 3:
        return any(value[i] for i in (5, 6, 7) if i < len(value))
    return False


def _step_names(step_fn: Any) -> tuple[str, ...]:
    """Graph names the step's ops run in: a tf.function's graph carries its Python function's name."""
    fn = getattr(step_fn, "python_function", step_fn)
    name = getattr(fn, "__name__", "")
    return (name,) if name and name != "<lambda>" else (("<lambda>",) if name else ())


def _fresh_copy(step_fn: Any) -> Any:
    """A new ``tf.function`` over the same Python function, traced under the debugger and then dropped.

    TF instruments a function when it traces it; running that instrumented
    function again after ``disable_dump_debug_info()`` crashes the process
    (seen in TF 2.21). Tracing a copy keeps the user's own function clean and
    also makes sure a function traced before the run shows its ops.
    """
    if step_fn is None or not hasattr(step_fn, "python_function"):
        return step_fn
    import tensorflow as tf

    copy = tf.function(step_fn.python_function, input_signature=step_fn.input_signature,
                       jit_compile=runtime.jit_compile(step_fn))
    return copy


@contextlib.contextmanager
def fresh_function_caches(strategy: Any) -> Iterator[None]:
    """Hide the tf.functions a strategy caches (``Strategy.reduce(..., axis=)``'s helpers) for a while.

    What TF traces under the debugger must not run again after it is off
    (TF crashes); with empty caches the strategy traces new helpers for the
    recorded run, which are dropped afterwards, and the originals come back.
    """
    with runtime.empty_strategy_caches(strategy):
        yield


@contextlib.contextmanager
def quiet_tf_logger() -> Iterator[None]:
    """TF's Python warnings off for a while (retracing notices about the fresh copies vizdist traces)."""
    import tensorflow as tf

    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _window(windows: list[tuple[float, float]]) -> Iterator[None]:
    """Append the wall-clock window of the ``with`` block to ``windows``."""
    t0 = time.time()
    try:
        yield
    finally:
        windows.append((t0, time.time()))


class PlacementObserver(Observer):
    """``placement=`` of a run: a :class:`PlacementRecorder` on for the whole run.

    It starts before the pipeline is tagged and distributed, so the functions TF traces for it
    (``map`` functions, the iterator's copy functions) are instrumented too; the user's
    ``tf.function`` step is traced afresh under the debugger (:func:`_fresh_copy`). Its rows land in
    ``trace.meta["placement"]``, also on the ``partial_trace`` of an error.

    Example:
        >>> PlacementObserver("NO_TENSOR").recorder.mode
        'NO_TENSOR'
    """

    def __init__(self, mode: str = "CURT_HEALTH", *, quiet: bool = True) -> None:
        self.recorder = PlacementRecorder(mode=mode)
        self.quiet = quiet  # TF's retracing notices about the fresh copies, off while the run lasts
        self._stack = contextlib.ExitStack()

    def start(self, run: Any) -> None:
        self._stack.enter_context(self.recorder)
        if run.strategy is not None:
            self._stack.enter_context(fresh_function_caches(run.strategy))
        if self.quiet:
            self._stack.enter_context(quiet_tf_logger())

    def attach(self, run: Any, reader: Any, source: Any = None) -> None:
        self.recorder.follow(reader)
        if source is not None:  # the user's pipeline: to name the element a function of it raised on
            self.recorder.watch_input(*source)

    def wrap_input(self, dist: Any) -> Any:
        return self.recorder.in_loop_thread(dist)

    def wrap_step(self, step_fn: Any) -> Any:
        self.recorder.step_names = _step_names(step_fn)
        return _fresh_copy(step_fn)

    def on_step(self, reader: Any, step: int, values: Any, results: Any) -> None:
        self.recorder.on_step(reader, step, values, results)

    def own_work(self) -> Any:
        return self.recorder.own_window()

    def close(self, exc: BaseException | None) -> None:
        self._stack.__exit__(type(exc) if exc is not None else None, exc, exc.__traceback__ if exc else None)

    def finish(self, trace: Any) -> Any:
        from vizdist.contract import validate_meta

        trace.meta = validate_meta({**trace.meta, "placement": self.recorder.placement()})
        return trace


_EXPLAIN = (
    (re.compile(r"GeneratorDatasetOp::Dataset does not support serialization|DatasetToGraph", re.S),
     "The input pipeline ends in a stage that lives on a device (prefetch_to_device / copy_to_device "
     "build a GeneratorDataset there). {strategy} must rewrite the pipeline before it runs it (serialize "
     "its graph to shard and rebatch it per replica), and that device stage cannot be serialized, so TF "
     "refuses. Remove prefetch_to_device / copy_to_device: the strategy already copies every replica's "
     "batch to its device itself (InputOptions(experimental_fetch_to_device=True), the default, with "
     "experimental_per_replica_buffer_size batches prefetched per device)."),
    # TF's BatchDatasetOp::MakeDataset (batch_dataset_op.cc) refuses batch_size <= 0 with this message.
    (re.compile(r"Batch size must be greater than zero"),
     "a batch() in the pipeline has a batch size of 0 (or less), which TF refuses as it builds the dataset. A "
     "per-replica size computed by dividing the global batch by the replicas is 0 when the global batch is "
     "smaller than the number of replicas: in a dataset_fn, batch by ctx.get_per_replica_batch_size(global_batch) "
     "with a global batch of at least the replicas {strategy} has, or batch by 1 or more."),
)


def explain_placement_error(exc: BaseException, strategy: str = "the strategy") -> str | None:
    """Plain words for TF errors about where the data lives (None when not one of them).

    Example:
        >>> explain_placement_error(ValueError("GeneratorDatasetOp::Dataset does not support serialization"),
        ...                         "MirroredStrategy")[:49]
        'The input pipeline ends in a stage that lives on '
    """
    text = str(exc)
    for pattern, words in _EXPLAIN:
        if pattern.search(text):
            return words.format(strategy=strategy)
    return None
