"""Which source element made a ``map`` or ``filter`` fail (a ``check_numerics`` or ``tf.debugging.assert_*`` inside it).

When a function of the input pipeline raises, TensorFlow stops the run at
the iterator: the batch never forms, so no replica receives the element and
the trace cannot name it from what arrived. :func:`find_map_failure` finds it
afterwards: it rebuilds the pipeline with vizdist's tags (the same ids the
trace uses), and for each ``map`` and ``filter`` (source first) walks its
tagged input in order, calling its own Python function (the predicate, for a
``filter``), traced by a fresh ``tf.function`` as ``Dataset.map`` traces it,
on each element until it raises.
The element it raises on is named by its tag (source id, file and line,
epoch), with TF's message from that call and the failing node.

It is bounded (``limit`` elements, ``seconds``) and exact for pipelines
that run the same way twice; the result says how many elements were checked.
It walks the pipeline as given, before a strategy shards it: on a worker of
a multi-worker run that shards by file, the element named is the first one
any worker's map or filter raises on.

Example:
    >>> import tensorflow as tf  # doctest: +SKIP
    >>> ds = tf.data.Dataset.range(8).map(lambda x: tf.debugging.check_numerics(1.0 / tf.cast(x - 5, tf.float32), "m"))
    >>> find_map_failure([ds])["source_ids"]  # doctest: +SKIP
    [5]
"""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.instrument.tagging import _apply, _Builder, decode_tags

__all__ = ["find_map_failure", "node_of"]

_UPSTREAM_ERRORS = 100  # errors in a row before a function: its input is broken (say, a missing file), stop there

HOW = ("vizdist re-ran the input pipeline after the run failed, with its tags, and called the {what} "
       "(a fresh tf.function, as Dataset.map traces it) on each element in order until it raised (the pipeline as "
       "given, before the strategy shards it; a pipeline that shuffles without a seed may order it differently)")
_OWN = {"map": "map's own function", "filter": "filter's own predicate"}


def node_of(message: str) -> str:
    """The node TF names in an error message (``[[{{node X}}]]``), or ``""``.

    Example:
        >>> node_of("bad : Tensor had Inf values\\n\\t [[{{node CheckNumerics}}]] [Op:X]")
        'CheckNumerics'
    """
    m = re.search(r"\{\{node ([^}]+)\}\}", message)
    return m.group(1) if m else ""


class _MapStages(_Builder):
    """tagging's builder, keeping each ``map``'s and ``filter``'s tagged input and function."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[tuple[str, tf.data.Dataset, Any]] = []  # (kind, tagged input, function)

    def build(self, ds: Any) -> tf.data.Dataset:
        name = type(ds).__name__  # tagging dispatches by class name
        if name in ("_MapDataset", "_ParallelMapDataset"):
            return self._map(ds)
        if name == "_FilterDataset":
            out = super()._filter(ds)
            self.stages.append(("filter", out._input_dataset, ds._predicate))
            return out
        return super().build(ds)

    def _map(self, ds: Any) -> tf.data.Dataset:
        inner, fn = ds._input_dataset, ds._map_func
        if type(inner).__name__ == "_SnapshotDataset":
            return super()._map(ds)
        t = self.build(inner)  # unfused: a range source is tagged by its value, as in the traced run
        self.ops.append("map")
        self.stages.append(("map", t, fn))
        return t.map(lambda tag, v: (tag, _apply(fn, v)))


def _op_type(fn: Any, node: str) -> str:
    """The type of op ``node`` in the probe's graph (or in a function it calls)."""
    graphs = [fn.graph]
    while graphs:
        g = graphs.pop()
        for op in g.get_operations():
            if op.name == node:
                return str(op.type)
        graphs += [f.graph for f in getattr(g, "_functions", {}).values() if getattr(f, "graph", None) is not None]
    return ""


def _walk(stage: tf.data.Dataset, fn: Any, deadline: float, limit: int) -> tuple[Any, Any, int, str]:
    """(tag, error, elements checked, failing op's type) of the first element the map's function raises on."""
    probe = tf.function(lambda v: _apply(fn, v), reduce_retracing=True)
    it, n, upstream = iter(stage), 0, 0
    while n < limit and upstream < _UPSTREAM_ERRORS and time.monotonic() < deadline:
        try:
            tag, value = next(it)
        except StopIteration:
            break
        except tf.errors.OpError:
            n, upstream = n + 1, upstream + 1  # it failed before this map (an earlier stage raised on it)
            continue
        n, upstream = n + 1, 0
        try:
            probe(value)
        except tf.errors.OpError as exc:
            node = node_of(str(exc))
            return tag, exc, n, _op_type(probe.get_concrete_function(value), node) if node else ""
    return None, None, n, ""


def _named(tag: Any, sources: list[dict[str, Any]]) -> dict[str, Any]:
    d = decode_tags(np.atleast_1d(np.asarray(tag)), {"sources": sources})
    return {"source_ids": [int(x) for x in d["source_id"]], "source_files": [str(x) for x in d["source_file"]],
            "source_lines": [int(x) for x in d["source_line"]], "epochs": [int(x) for x in d["epoch"]]}


def find_map_failure(datasets: list[tf.data.Dataset], *, node: str = "", limit: int = 100_000,
                     seconds: float = 20.0) -> dict[str, Any] | None:
    """The first element a ``map`` or ``filter`` of these pipelines raises on (see the module docs), or None.

    Args:
        datasets: the user's pipelines (as given to ``trace_distribution``,
            or built by its ``dataset_fn``).
        node: the node TF's error named; a map whose failure names it is preferred.
        limit: elements to check per function at most.
        seconds: wall-clock budget for the whole search.

    Returns:
        ``{function, map_index, source_ids, source_files, source_lines, epochs,
        op_name, op_type, message, checked, how}``: ``function`` is ``"map"``
        or ``"filter"`` and ``map_index`` which one of that kind (source
        first); ``source_ids`` holds several ids when it ran on a batch.
        ``None`` when none raised within the bounds (or the pipeline cannot
        be tagged).

    Example:
        >>> ds = tf.data.Dataset.range(4).map(lambda x: tf.debugging.check_numerics(1.0 / tf.cast(x - 2, tf.float32), "m"))
        >>> found = find_map_failure([ds])
        >>> found["source_ids"], found["op_type"], found["checked"]
        ([2], 'CheckNumerics', 3)
    """
    deadline = time.monotonic() + seconds
    found: list[dict[str, Any]] = []
    for ds in datasets:
        b = _MapStages()
        try:
            b.build(ds)
        except Exception:
            continue
        for i, (kind, stage, fn) in enumerate(b.stages):
            tag, exc, n, op_type = _walk(stage, fn, deadline, limit)
            if exc is None:
                continue
            message = f"{type(exc).__name__}: {str(exc).strip()}"
            failed = node_of(message)
            index = sum(k == kind for k, _, _ in b.stages[:i])
            found.append({"function": kind, "map_index": index, **_named(tag, b.sources), "op_name": failed,
                          "op_type": op_type, "message": message, "checked": n, "how": HOW.format(what=_OWN[kind])})
            if not node or failed == node:
                return found[-1]
    return found[0] if found else None
