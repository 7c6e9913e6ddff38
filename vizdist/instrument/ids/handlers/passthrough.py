"""Tagging the ops that change how elements are held or described, not which: ``prefetch``, ``cache``,
``with_options`` and TF's internal restructuring of an element.

Each is rebuilt with the user's arguments over the tagged input; a file cache gets a file of its own
(``<name>.vizdist``), and a cache over random data is refused (its random draws cannot be shared).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from vizdist.instrument.core.codes import const_value
from vizdist.instrument.ids import random_state
from vizdist.instrument.ids.handlers.state import BuilderState, Untaggable
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["cache", "options", "prefetch", "restructure"]


def prefetch(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``prefetch``, with the user's buffer size."""
    t = b.build(tfd.field(ds, "input_dataset"))
    size = const_value(tfd.field(ds, "buffer_size"))
    b.ops.append(f"prefetch({size})")
    # A tensor buffer_size breaks TF's own `buffer_size == AUTOTUNE` check (legacy_autotune).
    return t.prefetch(int(size) if size is not None else tfd.field(ds, "buffer_size"))


def cache(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``cache``: in memory, or in a file beside the user's."""
    if random_state.reshuffles(tfd.field(ds, "input_dataset")):
        # The user's cache keeps the first pass's random draws; a copy's cache would draw new ones.
        raise Untaggable("a cache over random data (a shuffle, Dataset.random or a random map): the "
                         "elements the user's cache holds cannot be shared with vizdist's copy")
    t = b.build(tfd.field(ds, "input_dataset"))
    fname = const_value(tfd.field(ds, "filename")) or ""
    if isinstance(fname, bytes):
        fname = fname.decode()
    b.ops.append("cache")
    return t.cache(fname + ".vizdist" if fname else "")


def restructure(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """TF's restructuring of an element (same tensors, another structure)."""
    inner = tfd.field(ds, "input_dataset")
    t = b.build(inner)
    src_spec, dst_spec = inner.element_spec, ds.element_spec

    def repack(tag: tf.Tensor, *v: Any) -> Any:
        value = v[0] if len(v) == 1 else v
        flat = tfd.to_tensor_list(src_spec, value)
        return tag, tfd.from_tensor_list(dst_spec, flat)

    return t.map(repack)


def options(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``with_options``: the user's options on the tagged copy."""
    t = b.build(tfd.field(ds, "input_dataset"))
    return t.with_options(tfd.field(ds, "options_attr")) if tfd.field(ds, "options_attr") else t
