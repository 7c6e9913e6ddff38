"""The ops tagging cannot follow element by element: numbered by position, or refused.

An op vizdist has no handler for (or whose input it cannot read) numbers its output, and the trace says so
(``info["provenance"] == "positional"``), unless it sits above a file reader or a batch, where numbering would
change how TF shards files or split batches: :class:`.state.Untaggable`. ``window`` and ``group_by_window``
are always refused (:data:`BY_CONTENT`): vizdist then matches elements by content.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from vizdist.instrument.ids.handlers.state import BuilderState, Untaggable, upstream_has
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["BY_CONTENT", "opaque"]

#: TF's class -> why tagging refuses it (vizdist matches those pipelines by content).
BY_CONTENT = {
    tfd.GROUP_BY_WINDOW: "group_by_window (and bucket_by_sequence_length) hands each group to a function that "
                         "builds batches vizdist cannot follow element by element",
    tfd.WINDOW: "window yields datasets of elements; what the next function makes of them cannot be "
                "followed element by element",
}


def opaque(b: BuilderState, ds: Any) -> tf.data.Dataset:
    """An op vizdist cannot see into: its outputs numbered (labelled positional), where that keeps TF's sharding."""
    name = type(ds).__name__.lstrip("_")
    if upstream_has(ds, tfd.FILE_READERS):
        raise Untaggable(
            f"{name} sits above a file reader; numbering its output would change how TF shards files"
        )
    if upstream_has(ds, tfd.BATCHERS):
        raise Untaggable(f"{name} transforms batches; vizdist can only number whole elements")
    b.flags["opaque"] = True
    b.positional.append(name)
    b.ops.append(f"{name} (ids number its output)")
    return b.enumerate_source(ds, "opaque", op=name)
