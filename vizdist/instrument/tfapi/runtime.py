"""TF's runtime internals vizdist reads: the eager context, op callbacks and the debugger's dumps, TF1
deprecation warnings, TF's export registry, a ``tf.function``'s settings and a strategy's private parts.

Example:
    >>> isinstance(context_initialized(), bool)
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = [
    "HOST_GRAPHS",
    "STRATEGY_NAMES",
    "TRANSFER_GRAPHS",
    "add_op_callback",
    "canonical_name",
    "communication_options",
    "context_initialized",
    "cross_device_ops",
    "debug_data_reader",
    "distribute_base",
    "dumping_callback",
    "empty_strategy_caches",
    "function_graphs",
    "jit_compile",
    "nccl_config",
    "op_callbacks",
    "silence_deprecation",
    "strategy_counts",
]


#: The names TF's multi-device iterator gives the functions it runs on the host to feed a device (their
#: graphs' names start so in the debugger's dumps): copied to the device, and run on the host.
TRANSFER_GRAPHS = ("_remote_next_func", "_remote_init_func", "_remote_finalize_func")
HOST_GRAPHS = ("_next_func", "_init_func", "_finalize_func")


def context_initialized() -> bool:
    """Whether TF's eager context is initialized (devices can no longer be configured then)."""
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None


def nccl_config() -> bool:
    """Whether the eager context's config asks collectives to use NCCL (False where it cannot be read)."""
    from tensorflow.python.eager import context

    try:
        return bool(context.context().config.experimental.collective_nccl)
    except Exception:
        return False


def op_callbacks() -> list[Any]:
    """The op callbacks of this thread's eager context."""
    from tensorflow.python.eager import context

    return list(context.context().op_callbacks)


def add_op_callback(callback: Any) -> None:
    """Add an op callback in this thread (TF keeps them per thread)."""
    from tensorflow.python.framework import op_callbacks as callbacks

    callbacks.add_op_callback(callback)


def dumping_callback() -> Any:
    """The callback ``tf.debugging.experimental.enable_dump_debug_info`` added (TF keeps it per thread)."""
    from tensorflow.python.debug.lib import dumping_callback as dumping

    return dumping._state.dumping_callback.callback


def debug_data_reader(dump_root: Any) -> Any:
    """TF's reader of the debugger's dumps, over ``dump_root`` (a context manager)."""
    from tensorflow.python.debug.lib.debug_events_reader import DebugDataReader as Reader

    return Reader(dump_root)


@contextlib.contextmanager
def silence_deprecation() -> Iterator[None]:
    """Silence TF's deprecation warnings for the calls vizdist itself makes (TF1 API it replays)."""
    from tensorflow.python.util import deprecation

    with deprecation.silence():
        yield


#: Strategy classes whose names are not what users write -> what they write (TF's default strategy's class is
#: private).
STRATEGY_NAMES = {
    "CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy",
    "CollectiveAllReduceStrategyV1": "MultiWorkerMirroredStrategy",
    "_DefaultDistributionStrategy": "default strategy",
    "ParameterServerStrategyV2": "ParameterServerStrategy",
}


def canonical_name(cls: type) -> str | None:
    """The public name TF exports a class under (``"distribute.MirroredStrategy"``), None if none."""
    from tensorflow.python.util import tf_export

    name = tf_export.get_canonical_name_for_symbol(cls)
    return str(name) if name else None


def function_graphs(graph: Any) -> list[Any]:
    """The functions a graph (a ``FuncGraph``) calls, as TF keeps them (``graph._functions``)."""
    return list(getattr(graph, "_functions", {}).values())


def jit_compile(function: Any) -> Any:
    """A ``tf.function``'s ``jit_compile`` setting (None when unset or not a ``tf.function``)."""
    return getattr(function, "_jit_compile", None)


#: A strategy's caches of traced reduce functions (``strategy._reduce_sum_fns``, ...).
_STRATEGY_FN_CACHES = ("_reduce_sum_fns", "_mean_reduce_helper_fns")


@contextlib.contextmanager
def empty_strategy_caches(strategy: Any) -> Iterator[None]:
    """Empty the strategy's caches of traced reduce functions for the block; put the originals back after."""
    saved = {a: getattr(strategy, a) for a in _STRATEGY_FN_CACHES if isinstance(getattr(strategy, a, None), dict)}
    for a in saved:
        setattr(strategy, a, {})
    try:
        yield
    finally:
        for a, v in saved.items():
            setattr(strategy, a, v)


def communication_options(strategy: Any) -> Any:
    """The ``CommunicationOptions`` a strategy was made with (None when it keeps none)."""
    return getattr(getattr(strategy, "extended", None), "_communication_options", None)


def cross_device_ops(strategy: Any, value: Any) -> Any:
    """The ``CrossDeviceOps`` the strategy picks to reduce ``value`` (None: it keeps none)."""
    ext = strategy.extended
    getter = getattr(ext, "_get_cross_device_ops", None)
    try:
        return getter(value) if getter is not None else getattr(ext, "_cross_device_ops", None)
    except Exception:
        return getattr(ext, "_cross_device_ops", None)


def strategy_counts(strategy: Any) -> dict[str, int | None]:
    """A parameter-server strategy's ``num_workers`` and ``num_ps`` (None where it keeps no such count)."""
    ext = strategy.extended
    return {"num_workers": int(ext._num_workers) if hasattr(ext, "_num_workers") else None,
            "num_ps": int(ext._num_ps) if hasattr(ext, "_num_ps") else None}


def distribute_base() -> type:
    """``StrategyBase``: the class whose ``experimental_distribute_dataset`` and
    ``distribute_datasets_from_function`` every strategy inherits (a recording patches them there)."""
    from tensorflow.python.distribute import distribute_lib

    return distribute_lib.StrategyBase  # type: ignore[no-any-return]  # TF ships no types: the class is Any
