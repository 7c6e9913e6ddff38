"""Tagging's handlers, one small module per family of ``tf.data`` ops, and the table that picks one by TF's class.

:data:`HANDLERS` maps the class of each dataset TF builds (``type(ds).__name__``; the names are
:mod:`vizdist.instrument.tfapi.datasets`'s constants) to the function that rebuilds it with a tag per element;
:func:`handler_for` adds the fallbacks (refused by content, or numbered as an opaque op). The families:

* :mod:`.sources` ``range``, ``from_tensors``, ``from_tensor_slices``;
* :mod:`.files` text and TFRecord readers, a ``flat_map``/``interleave`` over file names;
* :mod:`.maps` ``map``, ``filter``, ``take_while``, ``scan``, ``snapshot``, ``flat_map``/``interleave``;
* :mod:`.batches` ``batch`` (parallel, padded, ragged), ``rebatch``, ``unbatch``;
* :mod:`.order` ``shuffle``, ``repeat``, ``take``, ``skip``, ``shard``;
* :mod:`.passthrough` ``prefetch``, ``cache``, ``with_options``, TF's restructuring;
* :mod:`.several` ``zip``/``enumerate``, ``concatenate``, ``sample_from_datasets``/``choose_from_datasets``;
* :mod:`.service` a tf.data service read;
* :mod:`.opaque` everything else: numbered by position, or refused.

:mod:`.state` holds what they share (the builder's state, :class:`.state.Untaggable`).

Example:
    >>> from vizdist.instrument.tfapi import datasets as tfd
    >>> HANDLERS[tfd.RANGE].__module__, HANDLERS[tfd.PARALLEL_MAP].__name__
    ('vizdist.instrument.ids.handlers.sources', 'map_')
"""

from __future__ import annotations

from typing import Any

from vizdist.instrument.ids.handlers import (
    batches,
    files,
    maps,
    order,
    passthrough,
    service,
    several,
    sources,
)
from vizdist.instrument.ids.handlers.opaque import BY_CONTENT, opaque
from vizdist.instrument.ids.handlers.state import Handler, Untaggable
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["HANDLERS", "MULTI", "SOURCES", "handler_for"]

#: TF's dataset class -> the handler that tags it.
HANDLERS: dict[str, Handler] = {
    tfd.RANGE: sources.range_, tfd.TENSOR_SLICES: sources.slices, tfd.TENSORS: sources.tensors,
    "TextLineDatasetV2": files.file_reader, "TFRecordDatasetV2": files.file_reader,
    tfd.ZIP: several.zip_, tfd.CONCATENATE: several.concatenate, tfd.DIRECTED_INTERLEAVE: several.directed,
    **dict.fromkeys((tfd.FLAT_MAP, tfd.INTERLEAVE, tfd.PARALLEL_INTERLEAVE, "ParallelInterleaveDataset"),
                    maps.flat_map),
    tfd.MAP: maps.map_, tfd.PARALLEL_MAP: maps.map_,
    tfd.FILTER: maps.filter_, tfd.TAKE_WHILE: maps.take_while, tfd.SCAN: maps.scan,
    **dict.fromkeys((tfd.BATCH, tfd.PARALLEL_BATCH, tfd.PADDED_BATCH), batches.batch),
    tfd.REBATCH: batches.rebatch, tfd.UNBATCH: batches.unbatch,
    tfd.SHUFFLE: order.shuffle, tfd.REPEAT: order.repeat,
    tfd.TAKE: order.count_op, tfd.SKIP: order.count_op, tfd.SHARD: order.shard,
    tfd.PREFETCH: passthrough.prefetch, "CacheDataset": passthrough.cache,
    tfd.RESTRUCTURED: passthrough.restructure, tfd.OPTIONS: passthrough.options,
    tfd.DATA_SERVICE: service.service,
}
#: The handlers of datasets that read no other dataset (no ``input_dataset``).
SOURCES: frozenset[Handler] = frozenset({sources.range_, sources.slices, sources.tensors, files.file_reader,
                                         service.service})
#: Datasets that read several (``datasets`` / ``data_inputs``, not ``input_dataset``).
MULTI = frozenset({tfd.ZIP, tfd.DIRECTED_INTERLEAVE})


def handler_for(ds: Any) -> Handler:
    """The handler that tags ``ds``: by its class, else :func:`.opaque.opaque` (also for a class vizdist knows
    whose input it cannot read).

    Raises:
        Untaggable: ``ds`` is one of the ops vizdist matches by content (:data:`.opaque.BY_CONTENT`).
    """
    name = type(ds).__name__
    if name in BY_CONTENT:
        raise Untaggable(BY_CONTENT[name])
    handler = HANDLERS.get(name)
    if handler is None or (handler not in SOURCES and not tfd.has_field(ds, "input_dataset") and name not in MULTI):
        return opaque
    return handler
