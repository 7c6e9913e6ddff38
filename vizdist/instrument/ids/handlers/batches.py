"""Tagging the ops that make or unmake batches: ``batch`` (also parallel, padded, ragged), ``rebatch``, ``unbatch``.

The tags are batched beside the values, so a batch carries the vector of its elements' tags and a strategy
splits it across replicas together with the data; the builder's flags record the global batch size and
``drop_remainder``.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from vizdist.instrument.core.codes import const_value
from vizdist.instrument.ids.handlers.state import BuilderState, parallel
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["batch", "rebatch", "unbatch"]


def _row_splits_dtype(ds: Any) -> Any:
    specs = [s for s in tf.nest.flatten(ds.element_spec) if isinstance(s, tf.RaggedTensorSpec)]
    return specs[0].row_splits_dtype if specs else tf.int64


def batch(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``batch``, ``padded_batch`` (tags padded with -1) and ``ragged_batch``, with the user's arguments."""
    inner, name = tfd.field(ds, "input_dataset"), type(ds).__name__
    bs, drop = const_value(tfd.field(ds, "batch_size")), const_value(tfd.field(ds, "drop_remainder"))
    if type(inner).__name__ == tfd.DENSE_TO_RAGGED:
        t = b.build(tfd.field(inner, "input_dataset"))
        b.flags.update(global_batch_size=bs, drop_remainder=drop, batched=True)
        b.ops.append(f"ragged_batch({bs}, drop_remainder={drop})")
        return t.ragged_batch(tfd.field(ds, "batch_size"), drop_remainder=tfd.field(ds, "drop_remainder"),
                              row_splits_dtype=_row_splits_dtype(ds))
    t = b.build(inner)
    b.flags.update(global_batch_size=bs, drop_remainder=drop, batched=True)
    if name == tfd.PADDED_BATCH:
        b.ops.append(f"padded_batch({bs}, drop_remainder={drop})")
        return t.padded_batch(tfd.field(ds, "batch_size"), drop_remainder=tfd.field(ds, "drop_remainder"),
                              padded_shapes=(tf.TensorShape([]), tfd.field(ds, "padded_shapes")),
                              padding_values=(tf.constant(-1, tf.int64), tfd.field(ds, "padding_values")))
    b.ops.append(f"batch({bs}, drop_remainder={drop})")
    return t.batch(tfd.field(ds, "batch_size"), drop_remainder=tfd.field(ds, "drop_remainder"), **parallel(ds))


def rebatch(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``rebatch``, with the user's batch sizes."""
    t = b.build(tfd.field(ds, "input_dataset"))
    sizes, drop = const_value(tfd.field(ds, "batch_sizes")), const_value(tfd.field(ds, "drop_remainder"))
    b.flags.update(global_batch_size=sizes if isinstance(sizes, int) else None, drop_remainder=drop)
    b.ops.append(f"rebatch({sizes})")
    return t.rebatch(tfd.field(ds, "batch_sizes"), drop_remainder=tfd.field(ds, "drop_remainder"))


def unbatch(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``unbatch``: each row gets its own tag back."""
    t = b.build(tfd.field(ds, "input_dataset"))
    b.ops.append("unbatch")
    b.flags.update(unbatch=True, batched=False, global_batch_size=None)
    return t.unbatch()
