"""Tagging a read from the tf.data service (``distribute``, ``from_dataset_id``).

The dataset the service serves (recorded by :mod:`vizdist.instrument.core.service_registry`) is tagged,
registered with the same dispatcher and read with the same arguments (:mod:`vizdist.instrument.ids.own_service`),
so each element keeps its real id; the worker that served it joins the tag where there is room. Where that cannot
be (the registration was not seen, or DYNAMIC sharding over numbered sources), the read's output is numbered and
labelled.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from vizdist.instrument.core import service_registry
from vizdist.instrument.core.codes import SOURCE_SHIFT
from vizdist.instrument.ids import own_service as service_own
from vizdist.instrument.ids.handlers.state import BuilderState, Untaggable, used_bits

__all__ = ["service"]


def service(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """A read from the tf.data service: the dataset it serves, tagged, registered and read the same way
    (:mod:`vizdist.instrument.ids.own_service`); numbered by position, and labelled, where that cannot be."""
    read, entry = service_registry.read_of(ds), service_own.describe(ds)
    b.services.append(entry)
    if read is None or read.registration is None:
        return _positional(b, ds, entry, service_own.NOT_SEEN)
    mark = b.mark()
    up = b.build(read.registration.dataset)
    srcs = b.sources[mark[0]:]
    enumerated = sorted({str(s["kind"]) for s in srcs if s.get("id_is") == "index" and s["kind"] != "slices"})
    if entry["sharding_policy"] == "DYNAMIC" and enumerated:
        b.undo(mark)
        return _positional(b, ds, entry, service_own.dynamic_note(enumerated))
    where = service_own.worker_field(entry, max((used_bits(s) for s in srcs), default=0), SOURCE_SHIFT)
    if where is not None and srcs:
        for s in srcs:
            s["service_worker"] = where
        up = service_own.stamp_worker(up, where)
    b.ops.append(f"tf.data service ({entry['processing_mode'] or 'ShardingPolicy.' + entry['sharding_policy']})")
    return service_own.reread(read, up, entry)


def _positional(b: BuilderState, ds: Any, entry: dict[str, Any], why: str) -> tf.data.Dataset:
    entry["note"] = why
    if not service_own.scalar_elements(ds):
        raise Untaggable(f"a tf.data service read whose elements are not scalars (they may be batches), and {why}")
    b.flags["opaque"] = True
    b.positional.append(f"tf.data service read ({why})")
    b.ops.append("tf.data service (ids number its output)")
    return b.enumerate_source(ds, "opaque", op="DataServiceDataset")
