"""Tagging the ops that read several datasets: ``zip`` (and ``enumerate``, which zips a counter in front),
``concatenate``, ``sample_from_datasets`` / ``choose_from_datasets``.

A zip's elements take the ids of its first dataset that is not a counter (the others' sources are recorded as
not traced); the other ops keep each input's own tags.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from vizdist.instrument.ids.handlers.state import BuilderState, is_counter
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["concatenate", "directed", "zip_"]


def zip_(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """zip (and enumerate, which zips a counter in front): ids from the first non-counter dataset."""
    struct = tfd.field(ds, "datasets")
    flat = tf.nest.flatten(struct)
    counters = [is_counter(d) for d in flat]
    if all(counters) or (any(counters) and not (len(flat) == 2 and counters == [True, False])):
        counters = [False] * len(flat)  # only enumerate's own counter is left untagged
    lead = counters.index(False)
    parts = []
    for i, (d, c) in enumerate(zip(flat, counters, strict=True)):
        first = len(b.sources)
        parts.append(d if c else b.build(d))
        for s in b.sources[first:] if i != lead else []:
            s["id_is"] = "not traced (zipped beside the dataset whose ids are traced)"
    b.ops.append("enumerate" if len(flat) == 2 and counters[0] else f"zip (ids from dataset {lead})")

    def pick(*elems: Any) -> Any:
        values = [e if c else e[1] for e, c in zip(elems, counters, strict=True)]
        return elems[lead][0], tf.nest.pack_sequence_as(struct, values)

    return tf.data.Dataset.zip(tuple(parts)).map(pick)


def concatenate(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``concatenate``: each part keeps its own tags."""
    first = b.build(tfd.field(ds, "input_dataset"))
    second = b.build(tfd.field(ds, "dataset_to_concatenate"))
    b.ops.append("concatenate")
    return first.concatenate(second)


def directed(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """sample_from_datasets / choose_from_datasets: the same selector over the tagged inputs."""
    parts = [b.build(d) for d in tfd.field(ds, "data_inputs")]
    b.ops.append("sample_from_datasets/choose_from_datasets")
    return tfd.directed_interleave(tfd.field(ds, "selector_input"), parts, tfd.field(ds, "stop_on_empty_dataset"))
