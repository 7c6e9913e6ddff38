"""Checks of the knobs of :class:`LocalDataService` and its ``trace()``: one clear error each."""

from __future__ import annotations

import re
from typing import Any

from vizdist.errors import TracingError

PROCESSING_MODES = {"parallel_epochs": "OFF", "distributed_epoch": "DYNAMIC"}
SHARDING_POLICIES = ("OFF", "DYNAMIC", "FILE", "DATA", "FILE_OR_DATA", "HINT")
PYTHON_OPS = {"EagerPyFunc", "PyFunc", "PyFuncStateless", "GeneratorDataset"}


def _policy_of(sharding_policy: Any) -> str:
    n = getattr(sharding_policy, "name", sharding_policy)
    if not isinstance(n, str) or n.upper() not in SHARDING_POLICIES:
        raise ValueError(
            f"sharding_policy must be one of {', '.join(SHARDING_POLICIES)} "
            f"(or a tf.data.experimental.service.ShardingPolicy); got {sharding_policy!r}."
        )
    return n.upper()


def _mode_policy(processing_mode: Any) -> str | None:
    if processing_mode is None:
        return None
    if isinstance(processing_mode, str) and processing_mode in PROCESSING_MODES:
        return PROCESSING_MODES[processing_mode]
    if getattr(processing_mode, "name", None) in SHARDING_POLICIES:
        return str(processing_mode.name)
    raise ValueError(
        f"processing_mode must be 'parallel_epochs' or 'distributed_epoch' (or a "
        f"ShardingPolicy); got {processing_mode!r}. parallel_epochs = every worker "
        "processes the whole dataset; distributed_epoch = the dataset is split across workers."
    )


def policy_name(processing_mode: Any, sharding_policy: Any) -> str:
    """Resolve the two user knobs into one ShardingPolicy name (TF has one knob).

    Example:
        >>> policy_name("distributed_epoch", None), policy_name(None, "data")
        ('DYNAMIC', 'DATA')
    """
    mode_policy = _mode_policy(processing_mode)
    if sharding_policy is None:
        if mode_policy is None:
            raise ValueError(
                "say how the service should split the data: processing_mode='parallel_epochs' or "
                "'distributed_epoch', or sharding_policy='OFF'|'DYNAMIC'|'FILE'|'DATA'|'FILE_OR_DATA'|'HINT'."
            )
        return mode_policy
    policy = _policy_of(sharding_policy)
    if mode_policy is not None and mode_policy != policy:
        raise ValueError(
            f"processing_mode={processing_mode!r} means ShardingPolicy.{mode_policy}, but "
            f"sharding_policy={policy} was also given. TensorFlow has one knob: parallel_epochs is "
            "OFF and distributed_epoch is DYNAMIC; pass only sharding_policy for FILE, DATA, "
            "FILE_OR_DATA or HINT."
        )
    return policy


def check_consumers(consumers: Any, num_consumers: Any, steps: Any, strategy: Any) -> None:
    """Consumers, coordinated reads and ``steps`` that fit together.

    Example:
        >>> check_consumers(2, None, None, None)
        >>> check_consumers(2, 2, None, None)
        Traceback (most recent call last):
        ...
        ValueError: coordinated reads (num_consumers) need an infinite dataset (.repeat()) and steps=... to know when to stop.
    """
    if isinstance(consumers, bool) or not isinstance(consumers, int) or consumers < 1:
        raise ValueError(f"consumers must be a positive int; got {consumers!r}.")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a positive int or None; got {steps!r}.")
    if num_consumers is not None:
        if num_consumers != consumers:
            raise ValueError(
                f"num_consumers={num_consumers} turns on coordinated reads, where consumer i of "
                f"num_consumers reads round-robin; pass consumers={num_consumers} too.")
        if steps is None:
            raise ValueError("coordinated reads (num_consumers) need an infinite dataset "
                             "(.repeat()) and steps=... to know when to stop.")
    if strategy is not None and consumers != 1:
        raise ValueError("with strategy=..., use one consumer (the strategy's input pipeline).")


def check_stop(stop: Any, stop_after: Any, num_workers: int, *, own_workers: bool) -> tuple[int, int] | None:
    """``(worker index, elements before it stops)`` for ``stop="worker-<i>"``, a worker this service started; or
    ``None`` when nothing is to stop.

    ``stop`` names a task, as everywhere in vizdist (``record_parameter_server(stop="worker-1")``): here a
    worker of this service, ``"worker-0"`` to ``"worker-<n-1>"``.

    Example:
        >>> check_stop("worker-1", 5, 2, own_workers=True)
        (1, 5)
        >>> check_stop(1, 5, 2, own_workers=True)
        Traceback (most recent call last):
        ...
        TypeError: stop names the worker to stop, such as stop='worker-1' (a task name, as in record_parameter_server); got 1.
    """
    if stop is None:
        if stop_after is not None:
            raise ValueError(f"stop_after={stop_after!r} needs stop='worker-<i>': the worker to stop.")
        return None
    match = re.fullmatch(r"worker-(\d{1,6})", stop) if isinstance(stop, str) else None
    if match is None:
        raise TypeError(f"stop names the worker to stop, such as stop='worker-1' (a task name, as in "
                        f"record_parameter_server); got {stop!r}.")
    if not own_workers:
        raise ValueError("stop= needs workers started by this LocalDataService.")
    w, after = int(match[1]), 0 if stop_after is None else stop_after
    if not w < num_workers or isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"stop='worker-<i>', stop_after=n need i in 0..{num_workers - 1} and a whole n >= 0; "
                         f"got stop={stop!r}, stop_after={after!r}.")
    return w, after


def graph_ops(dataset: Any) -> set[str]:
    """Op types in the dataset's graph (including its functions)."""
    from vizdist.instrument.tfapi import datasets as tfd

    g = tfd.parse_graph(tfd.graph_tensor(dataset, external_state_policy=None).numpy())
    ops = {n.op for n in g.node}
    for f in g.library.function:
        ops |= {n.op for n in f.node_def}
    return ops


def check_runs_on_workers(dataset: Any) -> None:
    """Refuse datasets that call Python in this process (they cannot run on worker processes)."""
    bad = graph_ops(dataset) & PYTHON_OPS
    if bad:
        raise TracingError(
            f"this dataset cannot run on tf.data service worker processes: it uses {sorted(bad)} "
            "(tf.py_function / tf.numpy_function / Dataset.from_generator), which call Python in "
            "the process that built the dataset. Rewrite those steps with TensorFlow ops, or use "
            "LocalDataService(in_process=True) (no worker attribution then).")
