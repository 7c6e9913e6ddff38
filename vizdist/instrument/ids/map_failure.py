"""Which source element made a function of the input pipeline fail (a ``check_numerics`` or ``tf.debugging.assert_*`` inside it).

When a function of the input pipeline raises, TensorFlow stops the run at
the iterator: the batch never forms, so no replica receives the element and
the trace cannot name it from what arrived. :func:`find_map_failure` finds it
afterwards: it rebuilds the pipeline with vizdist's tags (the same ids the
trace uses), and for each ``map``, ``filter``, ``scan``, ``flat_map`` and
``interleave`` (source first) walks its tagged input in order, calling its own Python
function (the predicate, for a ``filter``), traced by a fresh ``tf.function``
as ``Dataset.map`` traces it, on each element until it raises:

* ``scan`` carries its state from one call to the next, as TF does;
* ``flat_map``: the dataset the function returned is read to its end, so a
  ``map`` inside it (``lambda f: TextLineDataset(f).map(parse)``) is searched
  too; the element named is the output that raised: the input's id and its
  position in that dataset (for files: the file and line, as the trace numbers
  them);
* ``interleave`` reads several of those datasets in turn (``cycle_length``), so
  the first one that raises in input order need not be the one that stopped the
  run. vizdist first reads the interleave in TF's own order up to its error,
  counting each element's outputs; the element named is the one whose dataset
  raises at exactly the position it had reached. When more than one does (or
  the order is not deterministic), none is named: that would be a guess.

The element it raises on is named by its tag (source id, file and line,
epoch), with TF's message from that call and the failing node.

It is bounded (``limit`` elements, ``seconds``) and exact for pipelines
that run the same way twice; the result says how many elements were checked.
It walks the pipeline as given, before a strategy shards it: on a worker of
a multi-worker run that shards by file, the element named is the first one
any worker's function raises on.

Example:
    >>> import tensorflow as tf  # doctest: +SKIP
    >>> ds = tf.data.Dataset.range(8).map(lambda x: tf.debugging.check_numerics(1.0 / tf.cast(x - 5, tf.float32), "m"))
    >>> find_map_failure([ds])["source_ids"]  # doctest: +SKIP
    [5]
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.instrument.core.codes import LINE_BITS, SOURCE_SHIFT, decode_tags
from vizdist.instrument.ids.handlers import maps
from vizdist.instrument.ids.handlers.files import file_index_fn
from vizdist.instrument.ids.handlers.state import apply_fn, is_generator, py_call
from vizdist.instrument.ids.tagging import Builder
from vizdist.instrument.tfapi import datasets as tfd
from vizdist.instrument.tfapi import runtime

__all__ = ["find_map_failure", "node_of"]

_UPSTREAM_ERRORS = 100  # errors in a row before a function: its input is broken (say, a missing file), stop there

HOW = ("vizdist re-ran the input pipeline after the run failed, with its tags, and called the {what} "
       "(a fresh tf.function, as Dataset.map traces it) on each element in order until it raised{extra} (the pipeline "
       "as given, before the strategy shards it; a pipeline that shuffles without a seed may order it differently)")
_OWN = {"map": ("map's own function", ""), "filter": ("filter's own predicate", ""),
        "scan": ("scan's own function", ", carrying its state from one element to the next"),
        "flat_map": ("flat_map's own function", ", reading the dataset it returned for each element to its end")}
HOW_INTERLEAVE = (
    "vizdist re-ran the input pipeline after the run failed, with its tags: it read the interleave in TF's own order "
    "up to its error, then called the interleave's own function (a fresh tf.function, as Dataset.map traces it) on "
    "every element and read the dataset it returned up to the point TF had reached; exactly one element raised "
    "there (the pipeline as given, before the strategy shards it; a pipeline that shuffles without a seed may order "
    "it differently)")


def node_of(message: str) -> str:
    """The node TF names in an error message (``[[{{node X}}]]``), or ``""``.

    Example:
        >>> node_of("bad : Tensor had Inf values\\n\\t [[{{node CheckNumerics}}]] [Op:X]")
        'CheckNumerics'
    """
    m = re.search(r"\{\{node ([^}]+)\}\}", message)
    return m.group(1) if m else ""


@dataclass
class _Stage:
    """One function of the pipeline to search: its kind, its tagged input ``(tag, value)`` and the
    transformation's function (``state``: a scan's initial state; ``part_shift`` / ``part_bits``: where
    the position of a flat_map's or interleave's output goes in its tag; ``output``: an interleave's
    tagged outputs, read in TF's order)."""

    kind: str
    tagged: tf.data.Dataset
    fn: Any
    state: Any = None
    part_shift: int = 0
    part_bits: int = LINE_BITS
    output: tf.data.Dataset | None = None


class _MapStages(Builder):
    """tagging's builder, keeping each function's tagged input (a :class:`_Stage` each)."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[_Stage] = []

    def build(self, ds: Any) -> tf.data.Dataset:
        name = type(ds).__name__  # tagging dispatches by TF's class name
        if name in (tfd.MAP, tfd.PARALLEL_MAP):
            return self._map(ds)
        if name == tfd.FILTER:
            out = maps.filter_(self, ds)
            self.stages.append(_Stage("filter", tfd.field(out, "input_dataset"), tfd.field(ds, "predicate")))
            return out
        if name == tfd.SCAN:
            out = maps.scan(self, ds)
            self.stages.append(_Stage("scan", tfd.field(out, "input_dataset"), tfd.field(ds, "scan_func"),
                                      state=tfd.field(ds, "initial_state")))
            return out
        if name in (tfd.FLAT_MAP, tfd.INTERLEAVE, tfd.PARALLEL_INTERLEAVE):
            return self._flat_map(ds)
        return super().build(ds)

    def _map(self, ds: Any) -> tf.data.Dataset:
        inner, fn = tfd.field(ds, "input_dataset"), tfd.field(ds, "map_func")
        if type(inner).__name__ == tfd.SNAPSHOT:
            return maps.map_(self, ds)
        t = self.build(inner)  # unfused: a range source is tagged by its value, as in the traced run
        self.ops.append("map")
        self.stages.append(_Stage("map", t, fn))
        return t.map(lambda tag, v: (tag, apply_fn(fn, v)))

    def _flat_map(self, ds: Any) -> tf.data.Dataset:
        """flat_map / interleave, tagged as tagging does; the stage's input is what its function is
        called on, with the tag its first output gets."""
        kind = "flat_map" if type(ds).__name__ == tfd.FLAT_MAP else "interleave"
        if is_generator(ds) or self.interleave_order(ds).get("deterministic") is False:
            return maps.flat_map(self, ds)  # (an interleave in no fixed order is not searched)
        first = len(self.sources)
        out = maps.flat_map(self, ds)
        source = self.sources[first]
        if source.get("id_is") == "file_line":  # files: tag = file index << 32 | position
            files = source["files"] if source["file_ids"] == "index" else None
            index, off = file_index_fn(files), first << SOURCE_SHIFT
            tagged = tfd.field(ds, "input_dataset").map(
                lambda f: (off + tf.bitwise.left_shift(index(f), tf.constant(LINE_BITS, tf.int64)), f))
            self.stages.append(_Stage(kind, tagged, tfd.field(ds, "map_func"), output=out))
        else:
            parts = source["parts"]
            self.stages.append(_Stage(kind, tfd.field(out, "input_dataset"), tfd.field(ds, "map_func"),
                                      part_shift=parts["shift"],
                                      part_bits=parts["bits"], output=out))
        return out


def _op_type(fn: Any, node: str) -> str:
    """The type of op ``node`` in the probe's graph (or in a function it calls)."""
    graphs = [fn.graph]
    while graphs:
        g = graphs.pop()
        for op in g.get_operations():
            if op.name == node:
                return str(op.type)
        graphs += [f.graph for f in runtime.function_graphs(g) if getattr(f, "graph", None) is not None]
    return ""


def _message(exc: BaseException) -> str:
    """TF's error in words. Callers keep this, not the error: its traceback holds TF's iterator, and a
    kept error put the iterator in a reference cycle that a later garbage collection destroyed, stalling
    whatever thread ran it (see :func:`vizdist.errors.release_frames`)."""
    return f"{type(exc).__name__}: {str(exc).strip()}"


def _walk(stage: _Stage, deadline: float, limit: int) -> tuple[Any, str | None, int, str]:
    """(tag, TF's error message, elements checked, failing op's type) of the first element the stage's
    function raises on."""
    if stage.kind == "interleave":
        return _walk_interleave(stage, deadline, limit)
    call = _CALLS[stage.kind](stage)
    it, n, upstream = iter(stage.tagged), 0, 0
    while n < limit and upstream < _UPSTREAM_ERRORS and time.monotonic() < deadline:
        try:
            tag, value = next(it)
        except StopIteration:
            break
        except tf.errors.OpError:
            n, upstream = n + 1, upstream + 1  # it failed before this function (an earlier stage raised on it)
            continue
        n, upstream = n + 1, 0
        try:
            call.run(value, deadline)
        except tf.errors.OpError as exc:
            message = _message(exc)
        else:
            continue
        node = node_of(message)
        failed = tag + (call.position << stage.part_shift)
        return failed, message, n, _op_type(call.traced(value), node) if node else ""
    return None, None, n, ""


def _reached(stage: _Stage, deadline: float, limit: int) -> dict[int, int] | None:
    """Read the tagged interleave in TF's order: outputs per element (by the tag of its first output)
    before it raised, or None when it did not raise within the bounds."""
    if stage.output is None:  # kept for every interleave (Builder): nothing to read otherwise
        return None
    field = ((1 << stage.part_bits) - 1) << stage.part_shift
    counts: dict[int, int] = {}
    it, n = iter(stage.output), 0
    while n < limit and time.monotonic() < deadline:
        try:
            tag, _ = next(it)
        except StopIteration:
            return None
        except tf.errors.OpError:
            return counts
        base = int(tag) & ~field
        counts[base] = counts.get(base, 0) + 1
        n += 1
    return None


def _walk_interleave(stage: _Stage, deadline: float, limit: int) -> tuple[Any, str | None, int, str]:
    """The one element whose dataset raises at the position it had reached when the interleave raised."""
    counts = _reached(stage, deadline, limit)
    call = _ExpandCall(stage)
    hits, n = _raising_at(stage, call, counts, deadline, limit) if counts is not None else (None, 0)
    if hits is None or len(hits) != 1:
        return None, None, n, ""  # two raise there, or not every element was tried: naming one would be a guess
    tag, message, value = hits[0]
    node = node_of(message)
    return tag, message, n, _op_type(call.traced(value), node) if node else ""


def _raising_at(stage: _Stage, call: _ExpandCall, counts: dict[int, int], deadline: float,
                limit: int) -> tuple[list[tuple[Any, Any, Any]] | None, int]:
    """``([(tag, TF's error message, value)] of the elements whose dataset raises at the position in counts,
    elements tried)``; None instead of the list when not every element could be tried."""
    hits: list[tuple[Any, str, Any]] = []
    it, n = iter(stage.tagged), 0
    while len(hits) < 2:
        try:
            tag, value = next(it)
        except StopIteration:
            return hits, n
        except tf.errors.OpError:  # an element before the interleave is broken
            return None, n
        if n >= limit or time.monotonic() > deadline:
            return None, n
        n, reached = n + 1, counts.get(int(tag), 0)
        try:
            call.run(value, deadline, stop=reached)
        except tf.errors.OpError as exc:
            if call.position == reached:
                hits.append((tag + (reached << stage.part_shift), _message(exc), value))
    return hits, n


class _Call:
    """Calls a map's function or a filter's predicate on an element, as ``Dataset.map`` traces it."""

    def __init__(self, stage: _Stage) -> None:
        self.probe = tf.function(lambda v: apply_fn(stage.fn, v), reduce_retracing=True)
        self.position = 0  # the output of the element that raised (flat_map / interleave)

    def run(self, value: Any, deadline: float) -> None:
        self.probe(value)

    def traced(self, value: Any) -> Any:
        return self.probe.get_concrete_function(value)


class _ScanCall(_Call):
    """A scan's function, its state carried from one element to the next."""

    def __init__(self, stage: _Stage) -> None:
        self.state = stage.state
        self.probe = tf.function(lambda s, v: py_call(stage.fn, s, v), reduce_retracing=True)
        self.position = 0

    def run(self, value: Any, deadline: float) -> None:
        self.state, _ = self.probe(self.state, value)

    def traced(self, value: Any) -> Any:
        return self.probe.get_concrete_function(self.state, value)


class _ExpandCall(_Call):
    """A flat_map's (or interleave's) function, and the dataset it returned read to its end (or to
    output ``stop``, or the deadline)."""

    def run(self, value: Any, deadline: float, stop: int | None = None) -> None:
        self.position = 0
        for _ in self.probe(value):
            if self.position == stop or time.monotonic() > deadline:
                return
            self.position += 1


_CALLS = {"map": _Call, "filter": _Call, "scan": _ScanCall, "flat_map": _ExpandCall}  # (interleave: _walk_interleave)


def _how(kind: str) -> str:
    """How the element was found, in words (``failed_element["how"]``)."""
    return HOW_INTERLEAVE if kind == "interleave" else HOW.format(what=_OWN[kind][0], extra=_OWN[kind][1])


def _named(tag: Any, sources: list[dict[str, Any]]) -> dict[str, Any]:
    d = decode_tags(np.atleast_1d(np.asarray(tag)), {"sources": sources})
    return {"source_ids": [int(x) for x in d["source_id"]], "source_files": [str(x) for x in d["source_file"]],
            "source_lines": [int(x) for x in d["source_line"]], "epochs": [int(x) for x in d["epoch"]]}


def find_map_failure(datasets: list[tf.data.Dataset], *, node: str = "", limit: int = 100_000,
                     seconds: float = 20.0) -> dict[str, Any] | None:
    """The first element a function of these pipelines raises on (see the module docs), or None.

    Args:
        datasets: the user's pipelines (as given to ``trace_distribution``,
            or built by its ``dataset_fn``).
        node: the node TF's error named; a map whose failure names it is preferred.
        limit: elements to check per function at most.
        seconds: wall-clock budget for the whole search.

    Returns:
        ``{function, map_index, source_ids, source_files, source_lines, epochs,
        op_name, op_type, message, checked, how}``: ``function`` is ``"map"``,
        ``"filter"``, ``"scan"``, ``"flat_map"`` or ``"interleave"`` and
        ``map_index`` which one of that kind (source first); ``source_ids``
        holds several ids when it ran on a batch.
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
        for i, stage in enumerate(b.stages):
            tag, message, n, op_type = _walk(stage, deadline, limit)
            if message is None:
                continue
            failed = node_of(message)
            index = sum(s.kind == stage.kind for s in b.stages[:i])
            found.append({"function": stage.kind, "map_index": index, **_named(tag, b.sources), "op_name": failed,
                          "op_type": op_type, "message": message, "checked": n,
                          "how": _how(stage.kind)})
            if not node or failed == node:
                return found[-1]
    return found[0] if found else None
