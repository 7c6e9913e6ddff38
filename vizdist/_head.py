"""A trace document's head: its format and version, its meta checked as it is read and written as JSON, and the
meta of a merge.

Every trace file starts with ``{"format": "vizdist.trace", "version": 2, "meta": {...}}`` (a Parquet trace's
``meta.json`` holds the same); :func:`head_meta` checks it and returns the meta validated by
:mod:`vizdist.contract`, and :func:`damaged` turns any error met while rebuilding a file's tables into a
:class:`~vizdist.errors.TraceFormatError` naming the file. :func:`merged_meta` is the meta of
:meth:`vizdist.trace.Trace.merge`. Read by :mod:`vizdist.trace`, which re-exports the public names.

Example:
    >>> head_meta({"format": FORMAT, "version": VERSION, "meta": {"kind": "distribution"}}, "x", Limits())["kind"]
    'distribution'
    >>> nonfinite_key({"a": [1.0, {"b": float("inf")}]})
    'a[1].b'
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from vizdist._clip import ellipsis
from vizdist._loadcheck import Limits, OverLimit, check_meta, check_meta_counts
from vizdist.contract import JOINS, TraceMeta, validate_meta
from vizdist.errors import TraceFormatError

__all__ = ["FORMAT", "READS", "VERSION", "damaged", "head_meta", "json_meta", "merged_kind", "merged_meta",
           "meta_json", "nonfinite_key", "short"]

FORMAT = "vizdist.trace"
#: Format version written by :meth:`vizdist.trace.Trace.save`. Version 2 added ``meta["kind"]``
#: (see :mod:`vizdist.contract`); version 1 files still load (their kind is inferred).
VERSION = 2
#: The format versions this vizdist reads.
READS = (1, 2)


def nonfinite_key(value: Any, where: str = "") -> str | None:
    """The path (``"a.b[2]"``) of the first float in ``value`` that is Infinity or NaN, or None.

    Example:
        >>> nonfinite_key({"a": [1.0, {"b": float("inf")}]})
        'a[1].b'
    """
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return path
        if isinstance(v, dict):
            stack.extend((f"{path}.{k}" if path else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list | tuple):
            stack.extend((f"{path}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


def meta_json(meta: Mapping[str, Any]) -> str:
    """``meta`` as JSON text, or a TraceFormatError naming the key that holds Infinity or NaN."""
    try:
        return json.dumps(meta, separators=(",", ":"), allow_nan=False)
    except ValueError:
        key = nonfinite_key(dict(meta))
        if key is None:
            raise
        raise TraceFormatError(f"trace meta key {ellipsis(key)!r} holds Infinity or NaN, which a trace file cannot "
                               "store (JSON has neither): replace it, say with None or a string") from None


def json_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """``meta`` as plain JSON values (tuples become lists; other objects their ``str``)."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise TraceFormatError(f"trace meta must be an object (a dict); got {type(meta).__name__}.")
    try:
        plain: dict[str, Any] = json.loads(json.dumps(dict(meta), default=str))
        return plain
    except (TypeError, ValueError, RecursionError) as exc:
        raise TraceFormatError(f"trace meta is not JSON-able ({type(exc).__name__}: {exc}).") from None


def head_meta(doc: Any, source: str, limits: Limits) -> TraceMeta:
    """Check a trace document's format and version; return its meta, migrated and validated."""
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise TraceFormatError(
            f"{source} is not a vizdist trace (no \"format\": \"{FORMAT}\" field). "
            "Load files written by Trace.save()."
        )
    version = doc.get("version")
    if type(version) is not int or version not in READS:
        raise TraceFormatError(
            f"{source} is a vizdist trace of format version {short(version)}; "
            f"this vizdist reads versions {list(READS)}. Upgrade vizdist or re-record the trace."
        )
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        what = "no 'meta'" if "meta" not in doc else f"a 'meta' that is {type(meta).__name__}, not an object"
        raise TraceFormatError(f"{source} is a damaged vizdist trace: it has {what}. Re-record it.")
    if version >= 2 and "kind" not in meta:
        raise TraceFormatError(f"{source} is a damaged vizdist trace: its meta has no 'kind'. Re-record it.")
    with damaged(source):
        check_meta(meta, limits)  # bounded and finite, before anything reads it
    checked = validate_meta(meta, source=source)  # version 1: kind inferred
    with damaged(source):
        check_meta_counts(checked, limits)
    return checked


def short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters."""
    return ellipsis(repr(value), 60)


@contextlib.contextmanager
def damaged(source: str) -> Iterator[None]:
    """Turn any error while rebuilding tables into a TraceFormatError naming ``source``."""
    try:
        yield
    except OverLimit as exc:
        raise OverLimit(f"{source}: {str(exc).rstrip('.')}.") from None
    except TraceFormatError as exc:
        raise TraceFormatError(f"{source} is a damaged vizdist trace: {str(exc).rstrip('.')}.") from None
    except (KeyError, TypeError, ValueError, OverflowError, IndexError, AttributeError, RecursionError) as exc:
        raise TraceFormatError(
            f"{source} is a damaged vizdist trace ({type(exc).__name__}: {ellipsis(str(exc))}). "
            "Re-record it, or load another copy."
        ) from None


def merged_kind(traces: Sequence[Any]) -> str:
    """The kind of a merge of ``traces`` (anything with a ``.meta``): theirs, ``distribution`` becoming
    ``multi_worker`` when there are several; a ValueError for traces of different kinds."""
    kinds = {t.meta["kind"] for t in traces}
    if len(traces) > 1:
        kinds = {"multi_worker" if k == "distribution" else k for k in kinds}
    if len(kinds) > 1:
        raise ValueError(
            f"cannot merge traces of different kinds {sorted(kinds)}: merge the shards of one run "
            "(each instrument writes one kind; see vizdist.contract).")
    kind: str = kinds.pop()
    return kind


def merged_meta(traces: Sequence[Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The meta of :meth:`Trace.merge` (anything with a ``.meta`` will do): keys every shard agrees on,
    the shards' metas under ``shards``, and the keys :data:`vizdist.contract.JOINS` names joined."""
    common: dict[str, Any] = {"kind": merged_kind(traces)}
    first = traces[0].meta
    for key, value in first.items():
        if key in ("shards", "kind"):
            continue
        if all(t.meta.get(key) == value for t in traces[1:]):
            common[key] = value
    shards: list[Any] = []
    for t in traces:
        shards.extend(t.meta.get("shards", [t.meta]))
    common["shards"] = shards
    for key, join in JOINS.items():  # keys whose shards join rather than agree (contract.JOINS)
        if (joined := join([t.meta for t in traces])) is not None:
            common[key] = joined
    common.update(extra or {})
    return common
