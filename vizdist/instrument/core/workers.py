"""Which task of its cluster this process is, and which replicas it holds: what a strategy says about where
its data goes.

:func:`task_number` is the number vizdist gives a task in traces (TensorFlow's own for chief and workers);
:func:`worker_position` is this task's number and the global id of its first replica, as TF numbers replicas;
:func:`replica_devices`, :func:`num_workers` and :func:`strategy_name` (the public name, not the class) are the
strategy facts each instrument records. Importable from :mod:`vizdist.instrument.core.rows` too.

Example:
    >>> task_number("worker", 0, {"chief": ["h:1"], "worker": ["h:2", "h:3"]})
    1
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vizdist.analysis.topology import task_number as numbered  # the one numbering rule; the view uses it too
from vizdist.instrument.tfapi import runtime

__all__ = ["num_workers", "replica_devices", "strategy_name", "task_number", "worker_position"]

_PUBLIC_STRATEGY_NAMES = runtime.STRATEGY_NAMES


def task_number(task_type: str | None, task_id: int | None, cluster_spec: Mapping[str, Any] | None) -> int:
    """The number vizdist gives a task in traces: chief 0, then workers, then evaluators.

    For ``chief`` and ``worker`` this is TensorFlow's own
    ``multi_worker_util.id_in_cluster`` (the chief is 0, ``worker:i`` is
    ``i + len(chief)``), which is also how ``MultiWorkerMirroredStrategy``
    numbers the task's replicas (first replica = number × local replicas).
    TF gives an ``evaluator`` its own id space; vizdist numbers evaluators
    after all chief and worker tasks so a merged trace never holds two tasks
    under one number. No cluster (a single process) is task 0.

    Args:
        task_type: ``"chief"``, ``"worker"``, ``"evaluator"`` (or None: a single process).
        task_id: index of the task in its job.
        cluster_spec: job name -> list of addresses (a dict, or a ``ClusterSpec``).

    Example:
        >>> spec = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "evaluator": ["h:4"]}
        >>> [task_number(t, i, spec) for t, i in [("chief", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)]]
        [0, 1, 2, 3]
        >>> task_number("worker", 1, {"worker": ["h:2", "h:3"]})
        1
    """
    if task_type is None or cluster_spec is None:
        return int(task_id or 0)
    spec = cluster_spec.as_dict() if hasattr(cluster_spec, "as_dict") else dict(cluster_spec)
    number = numbered(task_type, int(task_id or 0), spec)
    if number is not None:
        return number
    raise ValueError(
        f"task type {task_type!r} reads no data (only chief, worker and evaluator tasks are numbered in traces)."
    )


def _cluster(strategy: Any) -> tuple[str | None, int, dict[str, Any]]:
    """(task type, task id, cluster spec) of a multi-worker strategy; (None, 0, {}) in one process."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or getattr(resolver, "task_type", None) not in ("worker", "chief", "evaluator"):
        return None, 0, {}
    try:
        spec = resolver.cluster_spec().as_dict()
    except Exception:
        return None, 0, {}
    return resolver.task_type, int(resolver.task_id or 0), spec


def replica_devices(strategy: Any) -> list[str]:
    """This process's replica devices, in replica order (the default strategy: the default device)."""
    try:
        return list(strategy.extended.worker_devices)
    except RuntimeError:
        import tensorflow as tf

        return [tf.constant(0).device or "/device:CPU:0"]


def worker_position(strategy: Any) -> tuple[int, int]:
    """(this task's :func:`task_number`, global id of its first replica), as TF numbers replicas."""
    task_type, task_id, spec = _cluster(strategy)
    worker = task_number(task_type, task_id, spec)
    return worker, worker * len(replica_devices(strategy))


def num_workers(strategy: Any) -> int:
    """Tasks that hold replicas (chief and workers) in the strategy's cluster; 1 without a cluster."""
    _, _, spec = _cluster(strategy)
    return max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))


def strategy_name(strategy: Any) -> str:
    """The public name of a strategy (``MultiWorkerMirroredStrategy``, not its class ``CollectiveAllReduceStrategy``).

    Example:
        >>> class CollectiveAllReduceStrategy: ...
        >>> strategy_name(CollectiveAllReduceStrategy())
        'MultiWorkerMirroredStrategy'
    """
    name = type(strategy).__name__
    if name in _PUBLIC_STRATEGY_NAMES:
        return _PUBLIC_STRATEGY_NAMES[name]
    try:  # TF's own export registry: the name users write, e.g. "distribute.MirroredStrategy"
        public = runtime.canonical_name(type(strategy))
    except Exception:
        public = None
    return public.rsplit(".", 1)[-1] if public else name
