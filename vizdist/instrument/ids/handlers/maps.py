"""Tagging the ops that call your functions: ``map``, ``filter``, ``take_while``, ``scan``, ``flat_map``/``interleave``.

Each output keeps its input's tag; the value is computed by your own function (:func:`.state.apply_fn`), so it
is what the untagged pipeline yields. A ``map`` right after a ``range`` computes the tag inside your map (no op
of its own). Each output of ``flat_map``/``interleave`` gets its input's tag plus its position in the dataset
your function returned (``source_line``); over file names, :mod:`.files` tags the lines.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from vizdist.instrument.core.codes import LINE_BITS, SOURCE_SHIFT, const_value
from vizdist.instrument.ids.handlers import files, sources
from vizdist.instrument.ids.handlers.opaque import opaque
from vizdist.instrument.ids.handlers.state import (
    BuilderState,
    Untaggable,
    apply_fn,
    is_counter,
    is_generator,
    offset,
    parallel,
    py_call,
    upstream_has,
    used_bits,
)
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["filter_", "flat_map", "map_", "scan", "snapshot", "take_while"]


def flat_map(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """flat_map / interleave: files (string input) or any function of an element.

    Every output keeps the tag of the element its function was called on, plus its position in
    the dataset the function returned (``source_line``).
    """
    inp, fn, order = tfd.field(ds, "input_dataset"), tfd.field(ds, "map_func"), b.interleave_order(ds)
    if inp.element_spec == tf.TensorSpec([], tf.string):
        return files.files(b, ds, inp, lambda f: apply_fn(fn, f), order)
    if is_generator(ds):
        b.ops.append("from_generator")
        return b.enumerate_source(ds, "generator")
    if upstream_has(inp, tfd.FILE_READERS | tfd.BATCHERS):
        raise Untaggable(f"{type(ds).__name__.lstrip('_')} expands elements that are files' lines or batches")
    first = len(b.sources)
    t = b.build(inp)
    shift = max((used_bits(s) for s in b.sources[first:]), default=0)
    bits = min(LINE_BITS, SOURCE_SHIFT - shift)
    if bits <= 0:
        raise Untaggable("the source ids leave no room to number the outputs of flat_map/interleave")
    for s in b.sources[first:]:
        s["parts"] = {"shift": shift, "bits": bits}
    mask = (1 << bits) - 1
    b.ops.append(order["kind"])
    b.flags["filter"] = True  # an element may expand to nothing: not every id arrives

    def expand(tag: tf.Tensor, v: Any) -> tf.data.Dataset:
        part = lambda i, *x: (tag + tf.bitwise.left_shift(tf.bitwise.bitwise_and(i, mask), shift),  # noqa: E731
                              x[0] if len(x) == 1 else x)
        return apply_fn(fn, v).enumerate().map(part)

    return b.interleave(t, expand, order)


def map_(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``map`` (serial or parallel, with its own ``num_parallel_calls`` and ``deterministic``)."""
    inner, fn, kw = tfd.field(ds, "input_dataset"), tfd.field(ds, "map_func"), parallel(ds)
    if type(inner).__name__ == tfd.SNAPSHOT:
        return snapshot(b, inner)
    if type(inner).__name__ == tfd.RANGE:
        off = sources.range_offset(b, inner)
        if off is not None:
            # Fuse: the tag is computed inside the user's own map, so tagging adds no op.
            b.ops.append("map")
            return inner.map(lambda x: (offset(x, off), apply_fn(fn, x)), **kw)
        b.ops.pop()
    t = b.build(inner)
    b.ops.append("map")
    return t.map(lambda tag, v: (tag, apply_fn(fn, v)), **kw)


def snapshot(b: BuilderState, snap: Any) -> tf.data.Dataset:
    """``snapshot`` is enumerate -> _SnapshotDataset -> map; the tagged stream gets its own snapshot
    (TF keys snapshots by the dataset's fingerprint, so it never reads the user's files)."""
    zipped = tfd.field(snap, "input_dataset")
    if type(zipped).__name__ != tfd.ZIP or not is_counter(tf.nest.flatten(tfd.field(zipped, "datasets"))[0]):
        return opaque(b, snap)
    t = b.build(tf.nest.flatten(tfd.field(zipped, "datasets"))[1])
    path = const_value(tfd.field(snap, "path"))
    comp = const_value(tfd.field(snap, "compression"))
    b.ops.append("snapshot")
    return t.snapshot(path.decode() if isinstance(path, bytes) else path,
                      compression=comp.decode() if isinstance(comp, bytes) else (comp or "AUTO"))


def filter_(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``filter``: your predicate on the value; the tag rides along."""
    t = b.build(tfd.field(ds, "input_dataset"))
    pred = tfd.field(ds, "predicate")
    b.ops.append("filter")
    b.flags["filter"] = True
    return t.filter(lambda tag, v: apply_fn(pred, v))


def take_while(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``take_while``: your predicate on the value."""
    t = b.build(tfd.field(ds, "input_dataset"))
    pred = tfd.field(ds, "predicate")
    b.ops.append("take_while")
    b.flags["take"] = True
    return t.take_while(lambda tag, v: apply_fn(pred, v))


def scan(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``scan``: your function carries its state; each output keeps its input's tag."""
    t = b.build(tfd.field(ds, "input_dataset"))
    fn = tfd.field(ds, "scan_func")
    b.ops.append("scan")

    def step(state: Any, element: Any) -> Any:
        tag, v = element
        new_state, out = py_call(fn, state, v)
        return new_state, (tag, out)

    return t.scan(tfd.field(ds, "initial_state"), step)
