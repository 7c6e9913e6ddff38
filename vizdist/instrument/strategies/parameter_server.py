"""Trace ``ParameterServerStrategy`` runs: closures, workers, elements, RemoteValues, lost tasks, variable shards.

Runs in the *coordinator* (the chief of a
:class:`~vizdist.instrument.processes.cluster.LocalCluster` with ``ps > 0``, or the
coordinator of your own cluster). :func:`trace_parameter_server` builds a
per-worker dataset with ``ClusterCoordinator.create_per_worker_dataset``,
schedules ``steps`` functions (TF calls each a *closure*), waits for them with
a deadline, and records:

* which worker ran each closure on which elements (read inside the function
  with ``tf.distribute.coordinator.experimental_get_current_worker_index()``;
  elements carry vizdist's source tags, so provenance is exact);
* what each closure's ``RemoteValue`` gave back (``fetch()``), or the error it holds;
* every *attempt* of every closure (``meta["closures"][i]["attempts"]`` and
  the ``events`` table): a closure whose worker was lost is put back by TF
  and runs again on another worker, so it has two attempts;
* the per-worker iterators (``PerWorkerValues``: one ``RemoteValue`` per worker).

:func:`variable_shards` lists how partitioned variables were split over the
parameter-server tasks; :func:`record_parameter_server` does both in one
call, for use as a ``LocalCluster.run`` callable, and can stop a worker or
a ps part-way through (``stop="worker-1"``) to show what TF does then.

Attempts are read from the coordinator's worker threads (TF's
``ClusterCoordinator`` internals, checked on TF 2.21; :mod:`.closures` runs and
records the closures); where a TF version lacks them, ``meta["attempts_recorded"]``
is false and only final results are kept.

Example:
    >>> import vizdist
    >>> from vizdist.instrument.strategies.parameter_server import record_parameter_server
    >>> def dataset_fn(input_context):                       # runs in the coordinator
    ...     import tensorflow as tf
    ...     return tf.data.Dataset.range(16).batch(2).repeat()
    >>> with vizdist.LocalCluster(workers=2, ps=1) as cluster:  # doctest: +SKIP
    ...     trace = cluster.run(record_parameter_server, dataset_fn, steps=6)
    >>> trace.meta["variables"]                                 # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from vizdist.errors import TracingError
from vizdist.instrument.core.rows import strategy_name
from vizdist.instrument.processes.supervisor import DEFAULT_TIMEOUT, bounded_timeout
from vizdist.instrument.strategies.closures import (
    ClosureObserver,
    error_text,
    make_step,
    per_worker_values,
    record_closures,
    run_closures,
    tagging_dataset_fn,
)
from vizdist.instrument.tfapi import runtime
from vizdist.trace import Trace

__all__ = [
    "PARTITIONERS",
    "PartitionerSwitch",
    "record_parameter_server",
    "trace_parameter_server",
    "variable_shards",
]

#: Default partitioner specs shown by :func:`record_parameter_server`.
PARTITIONERS: dict[str, dict[str, Any]] = {
    "FixedShardsPartitioner": {"num_shards": 2},
    "MinSizePartitioner": {"min_shard_bytes": 128, "max_shards": 4},
    "MaxSizePartitioner": {"max_shard_bytes": 32},
}


def _make_partitioner(name: str, spec: Mapping[str, Any] | Any) -> Any:
    import tensorflow as tf

    if not isinstance(spec, Mapping):
        return spec  # already a partitioner object
    cls = getattr(tf.distribute.experimental.partitioners, name, None)
    if cls is None:
        raise ValueError(
            f"unknown partitioner {name!r}; use FixedShardsPartitioner, MinSizePartitioner or "
            "MaxSizePartitioner (tf.distribute.experimental.partitioners), or pass a partitioner object."
        )
    return cls(**spec)


class PartitionerSwitch:
    """A ``variable_partitioner`` that delegates to whichever partitioner is active.

    ``ParameterServerStrategy`` takes one partitioner for all variables; this
    lets one strategy create variables under several real TF partitioners.

    Example:
        >>> switch = PartitionerSwitch()
        >>> with switch.use(lambda shape, dtype: [2, 1]):
        ...     switch([4, 2], None)
        [2, 1]
        >>> switch([4, 2], None)
        [1, 1]
    """

    def __init__(self) -> None:
        self._local = threading.local()

    @contextlib.contextmanager
    def use(self, partitioner: Any) -> Iterator[None]:
        """Make ``partitioner`` the active one inside the ``with`` block."""
        prev = getattr(self._local, "p", None)
        self._local.p = partitioner
        try:
            yield
        finally:
            self._local.p = prev

    def __call__(self, shape: Any, dtype: Any) -> list[int]:
        p = getattr(self._local, "p", None)
        if p is None:
            return [1] * len(shape)
        return list(p(shape, dtype))


def _task_of(device: str) -> tuple[str, int]:
    m = re.search(r"/job:(\w+)(?:/replica:\d+)?/task:(\d+)", device or "")
    return (m.group(1), int(m.group(2))) if m else ("", -1)


def variable_shards(variables: Mapping[str, Any], *, partitioners: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per variable shard: variable, partitioner, shard, shape, rows, bytes, device, ps task.

    Reads TensorFlow's own answer: a ``ShardedVariable``'s ``.variables`` (in
    order) with each shard's ``device`` and ``shape``; a plain variable is one shard.

    Args:
        variables: name -> variable (a ``ShardedVariable`` or a plain one).
        partitioners: name -> label of the partitioner used (for display).

    Example:
        >>> import tensorflow as tf                                     # doctest: +SKIP
        >>> variable_shards({"w": tf.Variable(tf.zeros([2, 2]))})[0]["shards"]  # doctest: +SKIP
        1
    """
    rows = []
    for name, var in variables.items():
        shards = list(getattr(var, "variables", [var]))
        offset = 0
        for i, s in enumerate(shards):
            shape = [int(d) for d in s.shape]
            job, task = _task_of(str(s.device))
            rows.append(dict(
                variable=name, partitioner=(partitioners or {}).get(name, ""), shard=i, shards=len(shards),
                shape=shape, rows=f"{offset}:{offset + (shape[0] if shape else 1)}",
                bytes=int(s.dtype.size) * int(max(1, _prod(shape))), device=str(s.device),
                job=job, task=task,
            ))
            offset += shape[0] if shape else 1
    return rows


def _prod(xs: Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _check_args(strategy: Any, steps: Any, timeout: Any) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1; got {steps!r}.")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be a positive number of seconds; got {timeout!r}. A parameter-server "
                         "run has no end of data (TF advises repeated datasets), so it always needs a bound.")
    if "ParameterServer" not in type(strategy).__name__:
        raise TypeError(
            f"trace_parameter_server needs a ParameterServerStrategy; got {type(strategy).__name__}. "
            "For MultiWorkerMirroredStrategy use vizdist.trace_distribution in every worker."
        )


def trace_parameter_server(
    strategy: Any,
    dataset_fn: Callable[[Any], Any],
    *,
    steps: int = 8,
    step_fn: Callable[[Any], Any] | None = None,
    coordinator: Any = None,
    variables: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    pause_after: int | None = None,
    on_pause: Callable[[], Mapping[str, Any] | None] | None = None,
) -> Trace:
    """Schedule ``steps`` closures on a ParameterServerStrategy and record who ran what.

    Args:
        strategy: a ``tf.distribute.ParameterServerStrategy`` (in the coordinator).
        dataset_fn: ``input_context -> tf.data.Dataset`` of batches, given to
            ``strategy.distribute_datasets_from_function`` inside
            ``coordinator.create_per_worker_dataset``. Make it infinite
            (``repeat()``) or give at least ``steps`` batches per worker.
        steps: number of closures (step functions) to schedule.
        step_fn: optional ``batch -> tensor`` run by ``strategy.run`` in each
            closure; what ``fetch()`` returns for it goes into ``batches.result``
            and ``meta["closures"][i]["result"]``.
        coordinator: an existing ``ClusterCoordinator`` (one is made if None).
        variables: name -> variable (made in ``strategy.scope()``): each
            closure adds 1 to every element (a stand-in for an optimizer
            update: real reads and writes on the ps tasks that hold them);
            ``meta["variables"]`` lists their shards (:func:`variable_shards`)
            with ``updates``, how often each shard was updated (read back
            after the run; -1 and ``read_error`` when it could not be read).
        timeout: seconds to wait for the closures (default ``DEFAULT_TIMEOUT``,
            180 s; in a task a ``LocalCluster`` started, also no later than 15 s
            before the cluster stops it). Past it, vizdist stops waiting and
            returns what finished (``meta["stopped"] == "timeout"``,
            ``meta["partial"]``); TF's own wait (``join``) is left in a thread.
        pause_after: schedule this many closures, wait for them, call
            ``on_pause()`` (to stop a task, say), then schedule the rest; a
            mapping it returns is kept in ``meta["interventions"]``.
        on_pause: see ``pause_after``.

    A closure that fails (a lost ps, say) does not lose the others: TF raises its error from the
    next ``schedule()`` or ``join()``; vizdist then stops scheduling, waits (bounded) for the
    closures in flight and returns every closure scheduled so far (``meta["stopped"] == "error"``,
    ``meta["errors"]``, ``steps_scheduled`` < ``steps_requested`` when ``schedule()`` raised).

    Returns:
        A trace: one ``elements`` row per element a closure consumed (``step``
        is the schedule order, ``worker`` the worker whose run counted,
        ``replica`` 0), one ``batches`` row per finished closure, one
        ``events`` row (stage ``closure``, column ``outcome``) per attempt;
        ``meta["closures"]`` holds each closure's status, result, error and
        attempts, ``meta["step_workers"]`` its worker (-1: none).

    Example:
        >>> trace = trace_parameter_server(strategy, dataset_fn, steps=4)   # doctest: +SKIP
    """
    import tensorflow as tf

    _check_args(strategy, steps, timeout)
    timeout = float(bounded_timeout(timeout) or timeout)  # a number stays a number
    if coordinator is None:
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    per_worker_dataset, per_worker_iterator, info, contexts = _per_worker_input(coordinator, strategy, dataset_fn)
    tagged = info.get("provenance") != "content"
    t0 = time.perf_counter_ns()
    observer = ClosureObserver(coordinator, t0)
    observer.install()
    try:
        step = make_step(strategy, step_fn, tagged, list((variables or {}).values()))
        remotes, stopped, errors, interventions = run_closures(
            coordinator, step, per_worker_iterator, steps=steps, timeout=float(timeout),
            pause_after=pause_after, on_pause=on_pause, t0=t0)
    finally:
        observer.remove()
    from vizdist.instrument.core.codes import decode_tags

    decode = (lambda t: decode_tags(t, info)) if tagged else None
    rec, closures, events = record_closures(remotes, observer, stopped, tagged=tagged, step_fn=step_fn,
                                             decode=decode)
    meta = _meta(strategy, closures, info, contexts, errors, stopped, timeout, observer)
    meta.update(steps_requested=steps,per_worker_values={"dataset": type(per_worker_dataset).__name__,
                                   "iterator": type(per_worker_iterator).__name__,
                                   "values": per_worker_values(per_worker_iterator)},
                remote_values={"per_worker_dataset": type(per_worker_dataset).__name__,
                               "per_worker_iterator": type(per_worker_iterator).__name__,
                               "schedule() returns": type(remotes[0]).__name__ if remotes else ""},
                interventions=interventions)
    if variables:
        meta["variables"] = _with_updates(variable_shards(variables), _read_updates(variables))
    elements, batches = rec.tables()
    import pandas as pd

    return Trace(elements=elements, batches=batches, events=pd.DataFrame(events), meta=meta)


def _per_worker_input(coordinator: Any, strategy: Any,
                      dataset_fn: Callable[[Any], Any]) -> tuple[Any, Any, dict[str, Any], list[dict[str, Any]]]:
    """``create_per_worker_dataset`` over the tagged ``dataset_fn``, and ``iter`` of it."""
    import tensorflow as tf

    contexts: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []
    traced_fn = tagging_dataset_fn(dataset_fn, contexts, infos)
    try:
        per_worker_dataset = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(traced_fn))
        per_worker_iterator = iter(per_worker_dataset)
    except (TypeError, ValueError, tf.errors.OpError) as exc:
        raise TracingError(f"ClusterCoordinator.create_per_worker_dataset failed: {error_text(exc)}") from exc
    return per_worker_dataset, per_worker_iterator, (infos[0] if infos else {"provenance": "content"}), contexts


def _with_updates(shards: list[dict[str, Any]], updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(u["variable"], u["shard"]): u for u in updates}
    for row in shards:
        u = by.get((row["variable"], row["shard"]), {"updates": -1, "error": "not read (timed out)"})
        row.update(updates=u["updates"], read_error=u["error"])
    return shards


def _read_updates(variables: Mapping[str, Any], timeout: float = 30.0) -> list[dict[str, Any]]:
    """How many times each shard was updated (its first element; every element moves together)."""
    import numpy as np

    rows: list[dict[str, Any]] = []

    def read() -> None:
        for name, var in variables.items():
            for i, shard in enumerate(getattr(var, "variables", [var])):
                try:
                    value = np.asarray(shard.read_value()).reshape(-1)
                    rows.append({"variable": name, "shard": i, "updates": int(value[0]) if value.size else 0,
                                 "error": ""})
                except Exception as exc:  # a lost ps: TF's UnavailableError
                    rows.append({"variable": name, "shard": i, "updates": -1, "error": error_text(exc)})

    thread = threading.Thread(target=read, name="vizdist-ps-read", daemon=True)
    thread.start()
    thread.join(timeout)
    return list(rows)


def _meta(strategy: Any, closures: list[dict[str, Any]], info: Mapping[str, Any],
          contexts: list[dict[str, Any]], errors: list[str], stopped: str, timeout: float,
          observer: ClosureObserver) -> dict[str, Any]:
    import tensorflow as tf

    meta: dict[str, Any] = {
        "kind": "parameter_server",
        "strategy": strategy_name(strategy),
        "api": "ClusterCoordinator.create_per_worker_dataset",
        **runtime.strategy_counts(strategy),
        "steps_scheduled": len(closures),
        "steps_run": sum(c["status"] == "done" for c in closures),
        "step_workers": [c["worker"] for c in closures],
        "closures": closures,
        "attempts_recorded": observer.ok,
        "provenance": str(info.get("provenance", "content")),
        "input_contexts": contexts,
        "pipeline": list(info.get("pipeline") or []),
        "errors": errors,
        "stopped": stopped,
        "timeout_s": float(timeout),
        "tf_version": tf.__version__,
        "timing": {"clock": "time.perf_counter_ns() in the coordinator, from the first schedule()",
                   "notes": ["closure spans run from a coordinator worker thread taking the closure to its "
                             "result arriving (or its failure being handled); they include the RPC to the worker"]},
    }
    notes = list(info.get("provenance_notes") or []) + ([info["provenance_note"]] if "provenance_note" in info else [])
    if notes:
        meta["provenance_note"] = "; ".join(notes)
    if stopped != "done":
        meta["partial"] = True
    if not observer.ok:
        meta["note"] = ("this TensorFlow's ClusterCoordinator has no per-worker closure threads vizdist knows, "
                        "so attempts (re-runs after a lost worker) were not recorded; results are.")
    return meta


def record_parameter_server(
    ctx: Any,
    dataset_fn: Callable[[Any], Any],
    *,
    steps: int = 8,
    partitioners: Mapping[str, Mapping[str, Any] | Any] | None = None,
    variable_shape: Sequence[int] = (8, 4),
    step_fn: Callable[[Any], Any] | None = None,
    stop: str | None = None,
    stop_after: int | None = None,
    update_variables: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
) -> Trace:
    """A ``LocalCluster.run`` callable for a parameter-server cluster (runs in the chief).

    Creates one variable of ``variable_shape`` per partitioner (real TF
    partitioners through :class:`PartitionerSwitch`), records where its
    shards live (``meta["variables"]``), then traces ``steps`` scheduled
    closures with :func:`trace_parameter_server`, each updating every variable.

    Args:
        ctx: the :class:`~vizdist.instrument.processes.cluster.WorkerContext` the cluster passes.
        dataset_fn: ``input_context -> tf.data.Dataset`` (see :func:`trace_parameter_server`).
        steps: closures to schedule.
        partitioners: partitioner name -> constructor kwargs (or a partitioner
            object); default :data:`PARTITIONERS`; ``{}`` for none.
        variable_shape: shape of each variable.
        step_fn: optional per-replica step (see :func:`trace_parameter_server`).
        stop: a task to kill part-way (``"worker-1"``, ``"ps-0"``), as a crash
            or preemption would (:meth:`WorkerContext.stop_task`).
        stop_after: schedule this many closures (default 2), wait for them, kill
            ``stop``, then schedule the rest (so the demo repeats; TF handles
            a task lost in the middle of a closure the same way).
        update_variables: each closure adds 1 to every variable (real writes
            on every ps holding a shard); ``meta["variables"][i]["updates"]``
            is how many times that shard was updated (-1: unreadable).
        timeout: seconds to wait for the closures (see :func:`trace_parameter_server`: at most
            until 15 s before the cluster's own ``timeout``).

    Example:
        >>> with LocalCluster(workers=2, ps=2) as c:                       # doctest: +SKIP
        ...     t = c.run(record_parameter_server, dataset_fn, steps=6, stop="worker-1")
    """
    import tensorflow as tf

    stop_after = 2 if stop_after is None else stop_after
    if stop is not None and not re.fullmatch(r"(worker|ps)-\d+", str(stop)):
        raise ValueError(f"stop must name a worker or ps task such as 'worker-1' or 'ps-0'; got {stop!r}.")
    if stop is not None and (isinstance(stop_after, bool) or not isinstance(stop_after, int)
                             or not 0 <= stop_after < steps):
        raise ValueError(f"stop_after must be an int from 0 to steps - 1 = {steps - 1} (closures to finish "
                         f"before {stop} is killed); got {stop_after!r}.")
    switch = PartitionerSwitch()
    strategy = ctx.parameter_server_strategy(variable_partitioner=switch)
    specs = dict(PARTITIONERS if partitioners is None else partitioners)
    variables, labels = {}, {}
    with strategy.scope():
        for name, spec in specs.items():
            part = _make_partitioner(name, spec)
            label = f"{name}({', '.join(f'{k}={v}' for k, v in spec.items())})" if isinstance(spec, Mapping) else name
            with switch.use(part):
                variables[name] = tf.Variable(tf.zeros(list(variable_shape)), name=name)
            labels[name] = label
    shards = variable_shards(variables, partitioners=labels)

    def stop_task() -> dict[str, Any]:
        try:
            return {"stopped_task": stop, **ctx.stop_task(stop)}
        except TimeoutError as exc:
            return {"stopped_task": stop, "error": str(exc)}

    trace = trace_parameter_server(strategy, dataset_fn, steps=steps, step_fn=step_fn, timeout=timeout,
                                   variables=variables if update_variables else None,
                                   pause_after=stop_after if stop else None, on_pause=stop_task if stop else None)
    meta: dict[str, Any] = dict(trace.meta)
    for row in meta.get("variables") or shards:
        row["partitioner"] = labels.get(row["variable"], "")
    meta["variables"] = meta.get("variables") or shards
    meta["variable_shape"] = list(variable_shape)
    return Trace(elements=trace.elements, batches=trace.batches, events=trace.events, meta=meta)
