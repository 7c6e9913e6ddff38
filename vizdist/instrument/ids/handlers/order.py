"""Tagging the ops that choose which elements pass and in which order: ``shuffle``, ``repeat``, ``take``,
``skip``, ``shard``.

A shuffle of the tagged copy draws the user's own random sequence (:mod:`vizdist.instrument.ids.random_state`);
a ``repeat`` adds the epoch to each tag where the length of one pass is known, else the trace says the epochs
are ambiguous.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from vizdist.instrument.core.codes import SOURCE_SHIFT, const_value
from vizdist.instrument.ids import random_state
from vizdist.instrument.ids.handlers.state import BuilderState, Untaggable, cardinality, used_bits
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["count_op", "repeat", "shard", "shuffle"]


def shuffle(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``shuffle``, sharing the user's seeds and reshuffle sequence with the tagged copy."""
    t = b.build(tfd.field(ds, "input_dataset"))
    b.ops.append(f"shuffle({const_value(tfd.field(ds, 'buffer_size'))})")
    b.flags["shuffle"] = True
    # Seeds (0, 0) make TF's shuffle draw a random seed at run time (tensorflow/python/framework/
    # random_seed.py, get_seed: "the C++ ops interpret it as nondeterminism"): each process its own order.
    if const_value(tfd.field(ds, "seed")) == 0 and const_value(tfd.field(ds, "seed2")) == 0:
        b.flags["shuffle_unseeded"] = True
    b.shuffle_seeds.append([const_value(tfd.field(ds, "seed")), const_value(tfd.field(ds, "seed2"))])
    shuffled = random_state.shared_shuffle(t, ds)  # the user's seeds and reshuffle sequence
    if shuffled is None:
        raise Untaggable("a shuffle whose reshuffle sequence vizdist cannot share with its copy (TF made "
                         "it without a seed generator vizdist can read)")
    return shuffled


def repeat(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``repeat``: the epoch joins each tag (:func:`_epochs`)."""
    first = len(b.sources)
    t = b.build(tfd.field(ds, "input_dataset"))
    count = const_value(tfd.field(ds, "count"))
    b.ops.append(f"repeat({count})")
    b.flags["repeat"] = True
    return _epochs(b, t.repeat(tfd.field(ds, "count")), first, cardinality(t), count)


def _epochs(b: BuilderState, repeated: tf.data.Dataset, first: int, card: int, count: Any) -> tf.data.Dataset:
    """Add the epoch (which repetition) to every tag: position after repeat // elements per epoch."""
    if count in (0, 1):
        return repeated
    srcs = b.sources[first:]
    shift = max((used_bits(s) for s in srcs), default=0)
    bits = (count - 1).bit_length() if isinstance(count, int) and count > 1 else SOURCE_SHIFT - shift
    if card < 0 or bits <= 0 or shift + bits > SOURCE_SHIFT:
        why = ("the length of one pass is unknown" if card < 0 else "the ids leave no room for the epoch")
        b.ambiguities.append(
            f"repeat({count}): the trace cannot tell the repetitions of a source element apart ({why}); "
            "equal ids in different epochs are one source element seen again")
        return repeated
    for s in srcs:
        s.setdefault("epochs", []).append(
            {"shift": shift, "bits": bits, "count": count if isinstance(count, int) and count > 1 else None})
    mask, per_epoch = (1 << bits) - 1, max(card, 1)

    def add_epoch(n: tf.Tensor, element: Any) -> Any:
        tag, v = element
        epoch = tf.bitwise.bitwise_and(n // per_epoch, mask)
        return n + 1, (tag + tf.bitwise.left_shift(epoch, shift), v)

    return repeated.scan(tf.constant(0, tf.int64), add_epoch)


def count_op(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``take`` / ``skip``, with the user's count."""
    t = b.build(tfd.field(ds, "input_dataset"))
    kind = {tfd.TAKE: "take", tfd.SKIP: "skip"}[type(ds).__name__]
    b.ops.append(f"{kind}({const_value(tfd.field(ds, 'count'))})")
    b.flags[kind] = True
    return t.take(tfd.field(ds, "count")) if kind == "take" else t.skip(tfd.field(ds, "count"))


def shard(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``shard``, with the user's number of shards and index."""
    t = b.build(tfd.field(ds, "input_dataset"))
    b.ops.append(f"shard({const_value(tfd.field(ds, 'num_shards'))}, {const_value(tfd.field(ds, 'index'))})")
    # shard(1, 0) keeps every element (an InputContext's shard over one input pipeline): no flag
    b.flags["shard"] = b.flags["shard"] or const_value(tfd.field(ds, "num_shards")) != 1
    return t.shard(tfd.field(ds, "num_shards"), tfd.field(ds, "index"))
