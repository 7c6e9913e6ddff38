"""Tagging file readers: ``TextLineDataset``, ``TFRecordDataset`` and a ``flat_map``/``interleave`` over file names.

A line's tag is ``file index << 32 | line``, computed *inside* the per-file function, so the list of files and
the reader stay as TF built them and FILE auto-sharding still applies. The file index is the file's position in
the list of files, found exactly (by comparing the name with each listed one, up to :data:`SCAN_FILES` files;
beyond, a search over 63-bit fingerprints of the known names, confirmed by comparing the name), so two files
never share an id however many there are. Where the list cannot be read up front, a 24-bit hash of the name
(labelled: two files may share an id).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.instrument.core.codes import (
    FILE_UNKNOWN,
    FINGERPRINT_BUCKETS,
    LINE_BITS,
    SOURCE_SHIFT,
    tensor_value,
)
from vizdist.instrument.ids import random_state
from vizdist.instrument.ids.handlers.state import BuilderState, cardinality
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["SCAN_FILES", "file_index_fn", "file_reader", "files"]

#: Up to this many files, a file's index is found by comparing names (files^2 comparisons in all).
SCAN_FILES = 1024

#: Transformations that change neither which file names a list holds nor how many (only their order).
_SAME_NAMES = (tfd.SHUFFLE, tfd.PREFETCH, tfd.OPTIONS)


def _names_source(filenames: Any) -> Any:
    """A dataset holding the same file names as ``filenames`` that can be read without drawing from the
    user's random state (reading a reshuffling list would advance its sequence: the next epoch's file order
    would change), or None when there is none (e.g. ``take`` after a shuffle)."""
    ds = filenames
    while type(ds).__name__ in _SAME_NAMES:
        ds = tfd.field(ds, "input_dataset")
    return None if random_state.reshuffles(ds) else ds


def _known_files(filenames: Any) -> list[str] | None:
    """The list of file names a reader will open, when it can be read up front (else None)."""
    with contextlib.suppress(Exception):
        names_ds = _names_source(filenames)
        card = cardinality(names_ds) if names_ds is not None else -1
        if 0 <= card < FILE_UNKNOWN:  # read as one batch: works eagerly and in graph mode
            names = tensor_value(names_ds.batch(card).get_single_element()) if card else []
            return [f.decode() if isinstance(f, bytes) else str(f) for f in names]
    return None


def _fingerprints(names: Any) -> Any:
    return tf.strings.to_hash_bucket_fast(names, FINGERPRINT_BUCKETS)


def _scan_index_fn(files: list[str]) -> Any:
    """File name -> the position of its first occurrence in ``files``, or ``len(files)``: one comparison
    per listed name, a handful of ops (a traced file run's set-up is about 15 ms shorter than with the
    fingerprint search)."""
    names = tf.constant(files, tf.string, shape=[len(files)])

    @tf.autograph.experimental.do_not_convert
    def file_index(filename: tf.Tensor) -> tf.Tensor:
        hit = tf.where(tf.equal(names, filename))[:, 0]
        return tf.concat([hit, [len(files)]], 0)[0]

    return file_index


def file_index_fn(files: list[str] | None) -> Any:
    """A graph function: file name -> its index in ``files`` (``len(files)`` if absent).

    ``files`` None: a 24-bit hash bucket (may collide; the trace says so). Up to
    :data:`SCAN_FILES` files the name is compared with each listed name; beyond, found by a
    fingerprint search.
    """
    if files is None:
        return lambda f: tf.strings.to_hash_bucket_fast(f, FILE_UNKNOWN)
    if len(files) <= SCAN_FILES:
        return _scan_index_fn(files)
    fps = tensor_value(_fingerprints(files)) if files else np.zeros(0, np.int64)
    order = np.argsort(fps, kind="stable")
    sorted_fps = tf.constant(np.append(fps[order], np.iinfo(np.int64).max), tf.int64)
    sorted_names = tf.constant([files[i] for i in order] + [""], tf.string)
    unknown = len(files)  # decodes as "<file not in the list>"
    sorted_index = tf.constant(np.append(order, unknown).astype(np.int64), tf.int64)

    @tf.autograph.experimental.do_not_convert
    def file_index(filename: tf.Tensor) -> tf.Tensor:
        fp = _fingerprints(tf.reshape(filename, [1]))
        lo = tf.searchsorted(sorted_fps, fp, side="left", out_type=tf.int64)[0]
        hi = tf.searchsorted(sorted_fps, fp, side="right", out_type=tf.int64)[0]
        # Equal fingerprints (vanishingly rare) are resolved by comparing the names themselves; no
        # match at all picks the last entry, ``unknown``. (No tf.cond: its two branch functions made
        # every traced run's set-up about 15 ms slower, when TF optimizes the input graph.)
        hit = tf.where(tf.equal(sorted_names[lo:hi], filename))[:, 0] + lo
        return tf.gather(sorted_index, tf.concat([hit, [unknown]], 0)[0])

    return file_index


def files(b: BuilderState, ds: Any, filenames: Any, reader: Any, order: dict[str, Any]) -> tf.data.Dataset:
    """Files read one per function call: tag = file index << 32 | line.

    The file index is the file's position in the known list of files, looked up exactly
    (:func:`file_index_fn`), so two files never share an id.
    """
    known = _known_files(filenames)
    exact = known is not None
    file_bits = len(known).bit_length() if known is not None else SOURCE_SHIFT - LINE_BITS
    src = b.new_source("files", id_is="file_line", files=known or [], id_bits=LINE_BITS + file_bits,
                       file_ids="index" if exact else "hash", reader=type(ds).__name__.lstrip("_"))
    if not exact:
        b.ambiguities.append(
            "the list of files could not be read up front, so files are told apart by a 24-bit hash of "
            "their path and two files may share an id")
    off = src << SOURCE_SHIFT
    file_index = file_index_fn(known)

    def read_tagged(filename: tf.Tensor) -> tf.data.Dataset:
        base = off + tf.bitwise.left_shift(file_index(filename), tf.constant(LINE_BITS, tf.int64))
        # zip with a range rather than enumerate().map(): no function call per line (about 7x cheaper)
        return tf.data.Dataset.zip((tf.data.Dataset.range(base, base + (1 << LINE_BITS)), reader(filename)))

    b.ops.append(f"{type(ds).__name__.lstrip('_')}({len(known) if known else '?'} files)")
    return b.interleave(filenames, read_tagged, order)


def file_reader(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """``TextLineDataset`` / ``TFRecordDataset``: the same reader, each file's lines tagged."""
    cls = tfd.reader_class(type(ds).__name__)
    comp, buf = tfd.field(ds, "compression_type"), tfd.field(ds, "buffer_size")

    def reader(f: tf.Tensor) -> tf.data.Dataset:
        return cls(f, comp, buf)

    return files(b, ds, tfd.field(ds, "filenames"), reader, b.interleave_order(tfd.field(ds, "impl")))
