"""The parameter-server ``ClusterCoordinator``'s private side: its workers' closure loop (which a recording
wraps for the length of a run), the closures' remote values, and how it ships a dataset to its workers.

Example:
    >>> workers(object())
    []
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

__all__ = ["WORKER_HOOKS", "closure_errors", "closure_output", "dataset_graph_functions", "hookable", "per_worker",
           "remote_error", "remote_status", "unwrap_worker", "workers", "wrap_worker"]

#: The methods of a coordinator's ``Worker`` vizdist wraps: vizdist's name -> TF's.
WORKER_HOOKS = {"process": "_process_closure", "failure": "_on_closure_failure"}
Hook = Literal["process", "failure"]


def workers(coordinator: Any) -> list[Any]:
    """The coordinator's ``Worker`` objects (``[]`` when it keeps none where TF 2.15-2.21 keep them)."""
    return list(getattr(getattr(coordinator, "_cluster", None), "workers", []) or [])


def hookable(worker: Any) -> bool:
    """Whether ``worker`` has the closure methods vizdist wraps, and its index."""
    return all(hasattr(worker, name) for name in WORKER_HOOKS.values()) and hasattr(worker, "worker_index")


def wrap_worker(worker: Any, hook: Hook, wrap: Callable[[Any, Any], Any]) -> None:
    """Replace one of the worker's closure methods (on the instance) by ``wrap(worker, original)``."""
    name = WORKER_HOOKS[hook]
    setattr(worker, name, wrap(worker, getattr(worker, name)))


def unwrap_worker(worker: Any) -> None:
    """Give the worker its class's closure methods back."""
    for name in WORKER_HOOKS.values():
        worker.__dict__.pop(name, None)


def closure_output(closure: Any) -> Any:
    """The ``RemoteValue`` a closure fills (None when gone or unknown)."""
    ref = getattr(closure, "_output_remote_value_ref", None)
    return ref() if ref is not None else None


def remote_status(rv: Any) -> str:
    """A ``RemoteValue``'s status name (``READY``, ``NOT_READY``, ...; ``""`` when it has none)."""
    return str(getattr(getattr(rv, "_status", None), "name", "") or "")


def remote_error(rv: Any) -> Any:
    """The error a ``RemoteValue`` holds (None if none)."""
    return getattr(rv, "_error", None)


def per_worker(per_worker_value: Any) -> list[Any]:
    """The per-worker values of a ``PerWorkerValues`` (a per-worker iterator or dataset)."""
    return list(getattr(per_worker_value, "_values", ()) or ())


def closure_errors() -> tuple[type[BaseException], ...]:
    """The coordinator's own wrappers of a failed closure's error (``ClosureInputError``, ...)."""
    from tensorflow.python.distribute.coordinator import cluster_coordinator as cc

    return tuple(getattr(cc, name) for name in ("ClosureInputError", "ClosureAbortedError") if hasattr(cc, name))


def dataset_graph_functions() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(serialize_dataset_to_graph, deserialize_dataset_from_graph)``: how TF ships a dataset to workers."""
    from tensorflow.python.distribute.coordinator.values import (
        deserialize_dataset_from_graph,
        serialize_dataset_to_graph,
    )

    return serialize_dataset_to_graph, deserialize_dataset_from_graph
