"""Tag every source element with an id that rides through the user's pipeline.

:func:`tag_dataset` rebuilds a ``tf.data`` pipeline with one extra int64
component per element, the *tag*: ``(tag, value)``. The value part is
computed by the user's own traced functions (the concrete functions TF built
for their ``map``/``filter``), so it is exactly what the untagged pipeline
yields; ``batch`` turns tags into a vector that the strategy splits across
replicas together with the data. vizdist strips the tag before a value
reaches the user's step. What a strategy distributes is :func:`keyed`:
the same tensors nested as ``{"tag": tag, "value": value}``, which TF
repacks per replica at each step more cheaply than a pair.

How a tag is made (``tag = source << 56 | local``):

* ``range`` with a non-negative start and positive step: the value itself
  (plus the source's offset), computed inside the user's own ``map`` when
  one follows, else in a map of its own; for source 0 it is the value as is
  (no op per element).
* ``from_tensor_slices``, ``from_tensors``, generators and other sources:
  the element's index (``enumerate``).
* Text/TFRecord files read through ``flat_map``/``interleave`` (which is how
  ``TextLineDataset(files)`` works): ``file index << 32 | line``, computed
  *inside* the per-file function, so the list of files and the reader stay as
  TF built them and FILE auto-sharding still applies. The file index is the
  file's position in the list of files, found exactly (by comparing the name
  with each listed one, up to ``SCAN_FILES`` files; beyond, a search over 63-bit
  fingerprints of the known names, confirmed by comparing the name), so two
  files never share an id however many there are.

Tag layout (one int64, ``source << 56 | local``; its constants and the reading back are in
:mod:`vizdist.instrument.core.codes`): the low ``id_bits`` of ``local`` are the id;
above them, per source, ``parts`` (the position of an output inside the dataset a
``flat_map``/``interleave`` function returned, decoded as ``source_line``) and one field per
``repeat`` holding the epoch (which repetition; ``scan`` over the position after ``repeat``, exact
whenever one pass has a known length), and, through a tf.data service read, ``service_worker``
(the worker's id + 1, read on the worker; 0: unknown). ``info["sources"]`` records the layout;
:func:`decode_tags` reads it back with numpy.

A read from the tf.data service (``distribute``, ``from_dataset_id``) keeps the real id too: the
dataset it serves (recorded by :mod:`vizdist.instrument.core.service_registry`) is tagged, registered with
the same dispatcher and read with the same arguments (:mod:`vizdist.instrument.ids.own_service`).

Every transformation of the ``tf.data.Dataset`` API keeps the real id
(see the README's generated table and ``tests/instrument/test_transformations.py``), except:
``unique`` and unknown transformations, whose outputs are numbered (``info["provenance"] ==
"positional"``); ``window``, ``group_by_window``/``bucket_by_sequence_length`` and opaque ops above
files or batches, which raise :class:`Untaggable` (vizdist then matches by content); and a
``repeat`` whose pass length is unknown (files, filters), whose epochs are ambiguous
(``"ambiguous"``). ``info["provenance_notes"]`` says why in each case.

Example:
    >>> import tensorflow as tf                      # doctest: +SKIP
    >>> t = tag_dataset(tf.data.Dataset.range(5).map(lambda x: x * 10).batch(2))  # doctest: +SKIP
    >>> [tuple(a.numpy().tolist() for a in e) for e in t.dataset]  # doctest: +SKIP
    [([0, 1], [0, 10]), ([2, 3], [20, 30]), ([4], [40])]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from vizdist.instrument.core import service_registry
from vizdist.instrument.core.codes import SOURCE_SHIFT
from vizdist.instrument.ids.handlers import handler_for

# Re-exported: they live in the handler modules (vizdist.instrument.ids.handlers) and were first read from here.
from vizdist.instrument.ids.handlers.files import SCAN_FILES as SCAN_FILES
from vizdist.instrument.ids.handlers.files import file_index_fn as file_index_fn
from vizdist.instrument.ids.handlers.state import MAX_SOURCES as MAX_SOURCES
from vizdist.instrument.ids.handlers.state import BuilderState, used_bits
from vizdist.instrument.ids.handlers.state import Untaggable as Untaggable
from vizdist.instrument.ids.handlers.state import apply_fn as apply_fn
from vizdist.instrument.ids.handlers.state import cardinality as cardinality
from vizdist.instrument.ids.handlers.state import is_generator as is_generator
from vizdist.instrument.ids.handlers.state import py_call as py_call

# decode_tags, keyed, untag, values_are_ids and the layout's constants live in .codes (the read side)
__all__ = ["ROW_BITS", "Builder", "Tagged", "Untaggable", "cardinality", "tag_batch_rows", "tag_dataset"]

#: Bits of a tag that tell the rows of one source element apart when that element is a batch
#: (:func:`tag_batch_rows`; decoded as ``source_line``).
ROW_BITS = 24


@dataclass
class Tagged:
    """A tagged pipeline: ``dataset`` yields ``(tag, value)``; ``info`` says how to read tags."""

    dataset: tf.data.Dataset
    info: dict[str, Any] = field(default_factory=dict)


class Builder(BuilderState):
    """Walks the user's dataset graph (sink to sources) and rebuilds it with a tag per element: each dataset by
    the handler of its TF class (:data:`vizdist.instrument.ids.handlers.HANDLERS`)."""

    def build(self, ds: Any) -> tf.data.Dataset:
        return handler_for(ds)(self, ds)


def tag_dataset(dataset: tf.data.Dataset) -> Tagged:
    """Rebuild ``dataset`` so each element is ``(tag, value)``.

    Args:
        dataset: the user's ``tf.data.Dataset``, as built (not distributed).

    Returns:
        :class:`Tagged` with the tagged dataset and an ``info`` dict
        (``sources``, ``pipeline``, ``global_batch_size``, ``drop_remainder``,
        and flags such as ``filter`` / ``repeat`` / ``shuffle``).

    Raises:
        Untaggable: a transformation vizdist cannot carry tags through sits
            above a file reader.

    Example:
        >>> import tensorflow as tf                                  # doctest: +SKIP
        >>> tag_dataset(tf.data.Dataset.range(3)).info["pipeline"]    # doctest: +SKIP
        ['range(0, 3, 1)']
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"tag_dataset takes a tf.data.Dataset; got {type(dataset).__name__}.")
    b = Builder()
    with service_registry.one_run():
        tagged = b.build(dataset)
    notes = [f"{op}: ids number its output elements (their position), not the source elements that made them"
             for op in b.positional] + b.ambiguities
    provenance = "positional" if b.positional else "ambiguous" if b.ambiguities else "tagged"
    info = {"provenance": provenance, "provenance_notes": notes, "sources": b.sources, "pipeline": b.ops, **b.flags,
            "shuffle_seeds": b.shuffle_seeds}
    if b.services:
        info["services"] = b.services
    return Tagged(dataset=tagged, info=info)


def tag_batch_rows(tagged: Tagged) -> Tagged | None:
    """Where each tagged element is a whole batch (one tag, values with a batch dimension: a generator of
    batches, as Keras makes of a Python generator), give each row a tag of its own: the element's tag plus
    the row's place in it (``source_line``), so a strategy splitting the batch splits the tags with it.
    None when the values have no batch dimension to split.

    Example:
        >>> import tensorflow as tf                                                       # doctest: +SKIP
        >>> gen = tf.data.Dataset.from_generator(lambda: iter([[1, 2], [3, 4]]), output_signature=
        ...     tf.TensorSpec([None], tf.int64))                                          # doctest: +SKIP
        >>> rows = tag_batch_rows(tag_dataset(gen))                                       # doctest: +SKIP
        >>> [t.numpy().tolist() for t, _ in rows.dataset]                                 # doctest: +SKIP
        [[0, 16777216], [1, 16777217]]
    """
    leaves = [s for s in tf.nest.flatten(tagged.dataset.element_spec[1]) if hasattr(s, "shape")]
    if not leaves or any(spec.shape.rank in (None, 0) for spec in leaves):
        return None
    sources = tagged.info.get("sources", [])
    if any(src.get("parts") or src.get("epochs") for src in sources):
        return None
    # An element count with no known end (an endless generator) keeps the low bits below the rows' field.
    shift = min(max((used_bits(src) for src in sources), default=0), SOURCE_SHIFT - ROW_BITS)
    notes = ["each source element is a batch: its rows are told apart in source_line"]
    if any(src.get("id_bits", SOURCE_SHIFT) > shift for src in sources):
        notes.append(f"element numbers are counted modulo 2^{shift}")
    info = dict(tagged.info, sources=[dict(src, id_bits=min(src.get("id_bits", SOURCE_SHIFT), shift),
                                           parts={"shift": shift, "bits": ROW_BITS}) for src in sources])
    info["provenance_notes"] = [*info.get("provenance_notes", []), *notes]
    keep = (((1 << 7) - 1) << SOURCE_SHIFT) | ((1 << shift) - 1)  # the source (< 128) and the element number

    def rows(tag: tf.Tensor, value: Any) -> Any:
        n = tf.shape(tf.nest.flatten(value)[0], out_type=tf.int64)[0]
        row = tf.bitwise.left_shift(tf.range(n, dtype=tf.int64), shift)
        return tf.bitwise.bitwise_and(tag, keep) + row, value

    return Tagged(dataset=tagged.dataset.map(rows), info=info)
