"""DistributedValues as plain rows: each component with the device TF reports for it.

Example:
    >>> import vizdist; vizdist.virtual_devices(4)   # doctest: +SKIP
    >>> import tensorflow as tf                      # doctest: +SKIP
    >>> s = tf.distribute.MirroredStrategy()         # doctest: +SKIP
    >>> with s.scope(): v = tf.Variable(1.0)         # doctest: +SKIP
    >>> [r["device"] for r in value_rows(s, v)]      # doctest: +SKIP
    ['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3']
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.instrument.observe.stages import short_device
from vizdist.trace import Trace

__all__ = ["trace_values", "value_rows"]


def json_value(value: Any) -> Any:
    arr = np.asarray(value)
    return arr.tolist() if arr.size <= 256 else {"shape": list(arr.shape), "dtype": str(arr.dtype)}


def value_rows(strategy: tf.distribute.Strategy, value: Any, *, offset: int = 0) -> list[dict[str, Any]]:
    """One row per component of a ``DistributedValues`` (or plain tensor): replica, device, value.

    ``offset`` is the global id of this process's first replica (a
    ``MultiWorkerMirroredStrategy`` worker holds only its own components).

    Example:
        >>> import vizdist; vizdist.virtual_devices(4)   # doctest: +SKIP
        >>> value_rows(tf.distribute.get_strategy(), tf.constant(1.0))  # doctest: +SKIP
        [{'replica': 0, 'device': 'CPU:0', 'value': 1.0, 'type': 'EagerTensor'}]
    """
    local = strategy.experimental_local_results(value)
    kind = type(value).__name__
    rows = []
    for r, v in enumerate(local):
        if isinstance(v, tf.Variable):
            v_value, device = v.read_value(), v.device
        else:
            v_value, device = v, getattr(v, "device", "")
        rows.append({"replica": offset + r, "device": short_device(str(device)), "value": json_value(v_value), "type": kind})
    return rows


def trace_values(strategy: tf.distribute.Strategy, value: Any) -> Trace:
    """A trace holding one ``DistributedValues``: every component with its device.

    Example:
        >>> t = trace_values(s, s.experimental_distribute_values_from_function(
        ...     lambda ctx: float(ctx.replica_id_in_sync_group)))   # doctest: +SKIP
        >>> [r["value"] for r in t.meta["distributed_values"][0]["components"]]  # doctest: +SKIP
        [0.0, 1.0, 2.0, 3.0]
    """
    from vizdist.instrument.core.rows import worker_position

    meta = reduction_meta(strategy)
    rows = value_rows(strategy, value, offset=worker_position(strategy)[1])
    meta["distributed_values"] = [{"type": type(value).__name__, "components": rows}]
    return Trace(meta=meta)


def reduction_meta(strategy: tf.distribute.Strategy) -> dict[str, Any]:
    from vizdist.instrument.core.rows import strategy_name

    try:
        devices = [short_device(d) for d in strategy.extended.worker_devices]
    except (RuntimeError, AttributeError):
        devices = [short_device(tf.constant(0).device)]
    return {"kind": "distribution", "strategy": strategy_name(strategy),
            "num_replicas": int(strategy.num_replicas_in_sync), "devices": devices, "tf_version": tf.__version__,
            "api": "reduction"}


