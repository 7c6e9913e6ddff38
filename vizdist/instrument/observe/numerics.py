"""NaN and Inf in what each replica received or returned (read from the real tensors).

Used by :class:`vizdist.instrument.observe.placement.PlacementRecorder` on every step
of a traced run: which rows of each per-replica batch hold a NaN or an Inf
(joined later with the trace's provenance to name the source elements), and
which replicas' step results do.

Example:
    >>> import vizdist; vizdist.virtual_devices(4)  # doctest: +SKIP
    >>> import tensorflow as tf                     # doctest: +SKIP
    >>> s = tf.distribute.OneDeviceStrategy("/cpu:0")  # doctest: +SKIP
    >>> nonfinite_rows(s, tf.constant([1.0, float("nan")]))[0]  # doctest: +SKIP
    [{'replica': 0, 'position': 1, 'device': 'CPU:0', 'leaf': 0}]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["failed_step_inputs", "nonfinite_results", "nonfinite_rows"]


def _bad_positions(value: Any) -> list[int]:
    """Rows (first axis) of a float tensor holding a NaN or Inf."""
    if isinstance(value, tf.RaggedTensor):
        value = value.to_tensor()
    if not hasattr(value, "dtype") or not (value.dtype.is_floating or value.dtype.is_complex):
        return []
    arr = np.asarray(value)
    if arr.ndim == 0:
        return [] if np.isfinite(arr) else [0]
    bad = ~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1)
    return [int(i) for i in np.flatnonzero(bad)]


def nonfinite_rows(strategy: tf.distribute.Strategy, values: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows of each replica's batch holding a NaN/Inf, each replica's batch device)."""
    leaves = tf.nest.flatten(values, expand_composites=False)
    local = [strategy.experimental_local_results(leaf) for leaf in leaves]
    n = len(local[0]) if local else 0
    rows: list[dict[str, Any]] = []
    devices = []
    for r in range(n):
        first = local[0][r]
        device = str(getattr(first, "device", "")).split("device:")[-1]
        devices.append(device)
        for i, lv in enumerate(local):
            for pos in _bad_positions(lv[r]):
                rows.append(dict(replica=r, position=pos, device=device, leaf=i))
    return rows, devices


def nonfinite_results(results: list[Any] | None) -> list[int]:
    """Replicas whose step result holds a NaN or Inf."""
    out = []
    for r, res in enumerate(results or []):
        if any(_bad_positions(leaf) for leaf in tf.nest.flatten(res) if hasattr(leaf, "dtype")):
            out.append(r)
    return out


def failed_step_inputs(reader: Any, element: Any) -> list[dict[str, Any]]:
    """Each replica's source ids (and NaN/Inf rows) of a step whose batch arrived but whose step raised."""
    strategy = reader.strategy
    tags, values = reader.split(element)
    rows, devices = nonfinite_rows(strategy, values)
    decode = getattr(getattr(reader, "rec", None), "_decode", None)
    local_tags = strategy.experimental_local_results(tags) if tags is not None else None
    out = []
    for r, device in enumerate(devices):
        ids: list[int] = []
        if local_tags is not None and decode is not None:
            ids = [int(i) for i in np.asarray(decode(np.atleast_1d(local_tags[r].numpy()))["source_id"]).tolist()]
        bad = sorted({row["position"] for row in rows if row["replica"] == r})
        out.append({"replica": r + int(getattr(reader, "replica_offset", 0)), "device": device, "source_ids": ids,
                    "nonfinite_positions": bad})
    return out
