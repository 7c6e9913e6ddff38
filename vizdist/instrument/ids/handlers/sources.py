"""Tagging sources: ``range``, ``from_tensors`` and ``from_tensor_slices`` (files are :mod:`.files`).

A ``range`` with a non-negative start and a positive step is tagged by its value (plus the source's offset);
``from_tensor_slices`` by its elements' index, sliced beside the data; ``from_tensors`` by its position.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from vizdist.instrument.core.codes import SOURCE_SHIFT, const_value
from vizdist.instrument.ids.handlers.state import BuilderState, bits, cardinality, offset
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["range_", "range_offset", "slices", "tensors"]


def range_offset(b: BuilderState, ds: Any) -> int | None:
    """Register a ``range`` source whose values can be its ids; return the tag offset (or None).

    Either way the range's label is the last of ``b.ops``.
    """
    start, stop, step = (const_value(tfd.field(ds, "start")), const_value(tfd.field(ds, "stop")),
                         const_value(tfd.field(ds, "step")))
    label = f"range({start}, {stop}, {step})"
    b.ops.append(label)
    card = cardinality(ds)
    top = start + (card - 1) * step if isinstance(start, int) and isinstance(step, int) and card > 0 else 0
    if isinstance(start, int) and isinstance(step, int) and start >= 0 and step > 0 and top < 1 << SOURCE_SHIFT:
        src = b.new_source("range", id_is="value", label=label, start=start, stop=stop, step=step,
                           cardinality=card, id_bits=max(top, 0).bit_length())
        return src << SOURCE_SHIFT
    return None


def range_(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``Dataset.range``: its value is its id where it can be, else its position."""
    off = range_offset(b, ds)
    if off is not None:
        # One source, tag computed from the value: a zip with a twin range would give the
        # tf.data service two split providers under DYNAMIC sharding (distributed_epoch), and
        # workers would pair tags and values from different splits.
        return ds.map(lambda x: (offset(x, off), x))
    return b.enumerate_source(ds, "range", label=b.ops[-1])


def tensors(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``Dataset.from_tensors``: numbered."""
    b.ops.append("from_tensors")
    return b.enumerate_source(ds, "tensors")


def slices(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``from_tensor_slices`` rebuilt with its ids as one more sliced tensor (no per-element op,
    and each element keeps its id however TF splits the source)."""
    n = cardinality(ds)
    b.ops.append("from_tensor_slices")
    try:
        batched = tf.nest.map_structure(lambda spec: tfd.spec_batched(spec, n), tfd.field(ds, "structure"))
        element = tfd.from_tensor_list(batched, tfd.field(ds, "tensors"))
    except Exception:
        return b.enumerate_source(ds, "slices")
    src = b.new_source("slices", id_is="index", cardinality=n, id_bits=bits(n))
    ids = tf.range(n, dtype=tf.int64) + (src << SOURCE_SHIFT)
    return tf.data.Dataset.from_tensor_slices((ids, element))
