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
(:func:`distribute_dataset`, :func:`distribute_function`), the loop
(:class:`Loop`, run in a thread the caller waits on with bounded joins, so
``timeout=`` and Ctrl-C always land), reading one step into the one row
builder (:class:`StepReader` -> :class:`~vizdist.instrument.core.rows.Recorder`)
and the metadata (:func:`base_meta`, :func:`finish_meta`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.errors import TracingError
from vizdist.instrument.core import engine
from vizdist.instrument.core.rows import num_workers
from vizdist.instrument.ids import own_service as service_own
from vizdist.instrument.processes.supervisor import DEFAULT_TIMEOUT, bounded_timeout
from vizdist.instrument.run.inputs import (
    base_meta,
    check_call,
    check_count,
    check_strategy,
    distribute_dataset,
    distribute_function,
    input_meta,
    options_dict,
    wrap_tf_error,
)
from vizdist.instrument.run.observers import observers_for
from vizdist.instrument.run.reader import Loop, StepReader, progress_bar
from vizdist.instrument.tfapi import datasets as tfd
from vizdist.trace import Trace

__all__ = ["DEFAULT_MAX_STEPS", "PLACEMENT_MODES", "Watch", "finish_meta", "finished_trace", "loop_trace",
           "trace_distribution", "watch"]

#: Safety stop for data whose end TF cannot see (endless or of unknown cardinality) when ``steps`` is None.
DEFAULT_MAX_STEPS = 10_000


# ---------------------------------------------------------------------------
# checking the arguments
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# building the distributed dataset
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# reading one step into the recorder
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# the loop
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# metadata and the finished trace
# ---------------------------------------------------------------------------


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
            exc.partial_trace = partial  # type: ignore[attr-defined]  # any exception may carry the partial trace: an attribute set at run time
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
    timeout: float | None = DEFAULT_TIMEOUT,
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
        timeout: seconds to wait for the whole run (default ``DEFAULT_TIMEOUT``,
            180 s; in a task a ``LocalCluster`` started, also no later than 15 s before
            the cluster stops it); a pipeline still running (or blocked) then returns
            what was recorded, with ``meta["stopped"] == "timeout"`` and a
            ``timed-out`` finding. None waits for the data (Ctrl-C still returns
            what was recorded).
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
        from vizdist.instrument.observe.values import trace_values

        return trace_values(check_strategy(strategy), dataset)
    strategy = check_call(strategy, dataset, dataset_fn, options, step_fn, iteration, timing, timeout)
    steps = check_count(steps, "steps", none="for all")
    max_steps = check_count(max_steps, "max_steps")  # type: ignore[assignment]  # check_count returns int | None, and never None for max_steps (no none= given)
    _check_placement(placement)
    api = "experimental_distribute_dataset" if dataset is not None else "distribute_datasets_from_function"
    with engine.Run(strategy, api=api, observers=observers_for(timing=timing, placement=placement)) as run:
        meta = base_meta(strategy, api)
        meta.update(iteration=iteration, options=options_dict(options), steps_requested=steps)
        inp = (distribute_dataset(strategy, dataset, options, steps) if dataset is not None
               else distribute_function(strategy, dataset_fn, options, steps))  # type: ignore[arg-type]  # dataset_fn is not None here (check_call made sure one of the two is given)
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
    timeout = bounded_timeout(timeout)
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
        strategy = strategy or tfd.field(dist_dataset, "strategy", None) or tf.distribute.get_strategy()
        self._dist = dist_dataset
        self._strategy = check_strategy(strategy)
        self._reader = StepReader(self._strategy, info={}, tagged=False)
        self._step = 0
        self._meta = base_meta(self._strategy, "watch")
        services = service_own.services_in(tfd.field(dist_dataset, "original_dataset", None))
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
