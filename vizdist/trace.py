"""The recorded run as plain data.

A :class:`Trace` is what every part of vizdist passes around: a few tidy
pandas tables plus a JSON-able metadata dict. It never holds a tensor, so a
trace recorded on a GPU cluster opens on a laptop without TensorFlow.

Tables (each has at least these columns; instruments may add more):

``elements``
    One row per delivered source element: ``step``, ``replica``, ``worker``,
    ``device``, ``source_id`` (the id given at the source: the value for
    ``range``, the index for ``from_tensor_slices``, the line for text
    files), ``source`` (which source of the pipeline, 0 for most),
    ``source_file`` / ``source_line`` (for file sources, else ``""`` / -1),
    ``position`` (index inside the per-replica batch), ``consumer``
    (tf.data service consumer, else -1).
``batches``
    One row per (step, replica): ``n_elements``, ``shape``, ``dtype``,
    ``device``, ``empty``, ``partial``, ``result`` (JSON of the per-replica
    ``step_fn`` result, or ``""``).
``events``
    Timed spans: ``lane``, ``stage``, ``step``, ``worker``, ``replica``,
    ``t_start_ns``, ``t_end_ns``, ``elements`` (JSON list of source ids or
    ``""``).

``meta``
    A JSON-able dict whose keys are defined by the meta contract in
    :mod:`vizdist.contract`: a ``kind`` (which instrument made the trace)
    and, per kind, the keys and their types (``Trace.meta`` is typed
    :class:`vizdist.contract.TraceMeta`, a plain dict at run time). It is
    checked whenever a trace is built or loaded.

Traces save to JSON (``.json`` / ``.json.gz``) or to a Parquet folder
(``.parquet``) and load back equal. Never pickle: a trace file is data
only, and every malformed one is a :class:`TraceFormatError` naming it.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(
    ...     elements=[dict(step=0, replica=0, device="CPU:0", source_id=3)])
    >>> t.elements[["step", "replica", "source_id"]].values.tolist()
    [[0, 0, 3]]
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vizdist import views
from vizdist._files import NotRegularFile, open_regular, write_file, write_folder
from vizdist._loadcheck import (
    Budget,
    Limits,
    OverLimit,
    check_meta,
    check_meta_counts,
    check_rows,
    check_table,
    read_compact,
)
from vizdist.contract import JOINS, KINDS, TASK_TYPES, TraceMeta, validate_meta
from vizdist.errors import TraceFormatError

# KINDS and validate_meta: the meta contract (vizdist/contract.py), re-exported beside SCHEMA.
__all__ = ["KINDS", "SCHEMA", "Trace", "TraceFormatError", "load_trace", "validate_meta"]

FORMAT = "vizdist.trace"
#: Format version written by :meth:`Trace.save`. Version 2 added ``meta["kind"]``
#: (see :mod:`vizdist.contract`); version 1 files still load (their kind is inferred).
VERSION = 2
READS = (1, 2)

# Column -> (dtype, default) for every table. Extra columns are kept as given.
SCHEMA: dict[str, dict[str, tuple[str, Any]]] = {
    "elements": {
        "step": ("int64", -1),
        "replica": ("int64", -1),
        "worker": ("int64", 0),
        "device": ("str", ""),
        "source_id": ("int64", -1),
        "source": ("int64", 0),
        "source_file": ("str", ""),
        "source_line": ("int64", -1),
        "position": ("int64", -1),
        "consumer": ("int64", -1),
    },
    "batches": {
        "step": ("int64", -1),
        "replica": ("int64", -1),
        "worker": ("int64", 0),
        "device": ("str", ""),
        "n_elements": ("int64", 0),
        "shape": ("str", ""),
        "dtype": ("str", ""),
        "empty": ("bool", False),
        "partial": ("bool", False),
        "result": ("str", ""),
    },
    "events": {
        "lane": ("str", ""),
        "stage": ("str", ""),
        "step": ("int64", -1),
        "worker": ("int64", 0),
        "replica": ("int64", -1),
        "t_start_ns": ("int64", 0),
        "t_end_ns": ("int64", 0),
        "elements": ("str", ""),
    },
}
TABLES = tuple(SCHEMA)

#: The columns of a ``vizdist.record()`` trace that say which pass a row belongs to (read by
#: ``vizdist.analysis.passes``, ``split()`` and the checks), and the service worker of an element.
PASS_COLUMNS: dict[str, tuple[str, Any]] = {
    "dataset": ("int64", -1), "phase": ("str", ""), "epoch": ("int64", -1), "epoch_step": ("int64", -1),
    "repetition": ("int64", -1),
}
#: Extra columns vizdist's instruments write, the one list of them (the timing recorder,
#: ``vizdist.instrument.observe.timing``, writes the events' from it): like the schema's, a trace holds them
#: with their kind of dtype (any whole-number dtype for int64, text or categorical text for str) and never
#: null (a merge fills a shard's missing ones with the default), and ``load_trace`` checks so. Other extra
#: columns are kept as given.
EXTRA_COLUMNS: dict[str, dict[str, tuple[str, Any]]] = {
    "elements": {"replica_device": ("str", ""), **PASS_COLUMNS, "service_worker": ("int64", -1),
                 "order": ("int64", -1), "t_ns": ("int64", -1)},  # a service trace's arrival order and time
    "batches": {"replica_device": ("str", ""), **PASS_COLUMNS},
    "events": {
        "buffered": ("int64", -1),  # elements waiting in a prefetch buffer (XPlane), else -1
        "buffer_limit": ("int64", -1),  # that buffer's capacity, else -1
        "origin": ("str", ""),  # "host" (TimingRecorder) or "xplane" (TF profiler)
        "op": ("str", ""),  # the tf.data iterator / event name the span came from
        "depth": ("int64", 0),  # nesting level on its lane (a tf.data iterator inside its parent's GetNext)
    },
}


#: The name of a shard file: ``worker-<task type>-<index>.json``, as :func:`vizdist.record_worker_shard`
#: writes it. A folder merge reads only files named so.
SHARD_NAME = re.compile(r"worker-(" + "|".join(TASK_TYPES) + r")-(\d{1,9})\.json")


def shard_name(task_type: str, task_index: int) -> str:
    """The file name of ``task_type:task_index``'s shard.

    Example:
        >>> shard_name("worker", 3), bool(SHARD_NAME.fullmatch(shard_name("chief", 0)))
        ('worker-worker-00003.json', True)
    """
    return f"worker-{task_type}-{int(task_index):05d}.json"


def _load_types(name: str) -> dict[str, tuple[str, bool]]:
    """Column -> (dtype, nulls allowed) that a loaded table must hold (schema nulls become defaults)."""
    return {**{c: (d, True) for c, (d, _) in SCHEMA[name].items()},
            **{c: (d, False) for c, (d, _) in EXTRA_COLUMNS[name].items()}}


def _normalize(name: str, df: pd.DataFrame | None) -> pd.DataFrame:
    """Return ``df`` with every schema column present and of its dtype.

    The columns are gathered and the frame built once (a column inserted at a time re-blocks the frame each
    time: the live explorer builds a small trace every half second). Raises :class:`TraceFormatError` naming
    the table and column when a column is duplicated or cannot hold its schema type.
    """
    schema = SCHEMA[name]
    df = pd.DataFrame() if df is None else df.reset_index(drop=True)  # copy-on-write: columns are not copied
    dup = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
    if dup:
        raise TraceFormatError(f"table {name!r} has duplicate columns {dup}")
    n, extra = len(df), EXTRA_COLUMNS[name]
    columns: dict[str, pd.Series] = {}
    for col, (dtype, default) in schema.items():
        columns[col] = (_coerced(name, df[col], dtype, default) if col in df.columns
                        else pd.Series([default] * n, dtype=dtype))
    for col in df.columns:
        if col in schema:
            continue
        series = df[col]
        if col in extra and (series.isna().any() or not _fits(series, extra[col][0])):
            series = _coerced(name, series, *extra[col])  # a merge of shards without it left nulls
        columns[col] = series
    return pd.DataFrame(columns, index=pd.RangeIndex(n))


def _fits(series: pd.Series, dtype: str) -> bool:
    """Whether ``series`` already holds ``dtype``'s kind of values (``record()`` keeps its int32 and
    categorical columns as they are)."""
    if dtype == "str":
        return _is_text_categorical(series) or str(series.dtype) in ("str", "string")
    return str(series.dtype) == dtype or (dtype == "int64" and series.dtype.kind == "i")


def _coerced(name: str, series: pd.Series, dtype: str, default: Any) -> pd.Series:
    """``series`` as ``dtype`` values, nulls as ``default`` (itself when it holds them already)."""
    col = series.name
    if dtype == "str" and _is_text_categorical(series):
        if series.isna().any():  # categorical text stays categorical (few strings, many rows)
            cats = series.cat.categories
            return (series if default in cats else series.cat.add_categories([default])).fillna(default)
        return series
    if str(series.dtype) == ("bool" if dtype == "bool" else dtype) and not series.isna().any():
        return series
    series = series.fillna(default)
    try:
        if dtype == "str":
            return series.astype(str).astype("str")
        return series.astype(bool if dtype == "bool" else dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceFormatError(
            f"table {name!r} column {col!r} must hold {dtype} values ({type(exc).__name__}: {exc})"
        ) from None


def _is_text_categorical(series: pd.Series) -> bool:
    """A categorical column of text (instruments store devices and files so: few strings, many rows)."""
    return isinstance(series.dtype, pd.CategoricalDtype) and all(isinstance(c, str) for c in series.cat.categories)


def _check_storable(series: pd.Series, table: str) -> None:
    """The dtype rule of :func:`_column_to_json`, without converting any value (Parquet stores columns as they are),
    and no Infinity in a float column (JSON has none, and a loaded trace never holds one)."""
    dtype = str(series.dtype)
    if not (_is_text_categorical(series) or dtype.startswith(("int", "uint", "float"))
            or dtype in ("bool", "str", "string", "object")):
        raise TraceFormatError(f"table {table!r} column {series.name!r} has dtype {dtype}, which traces cannot store")
    if dtype.startswith("float") and len(series) and (inf := np.isinf(series.to_numpy())).any():
        row = int(inf.argmax())
        raise TraceFormatError(f"table {table!r} column {series.name!r} row {row} holds {series.iloc[row]}, which a "
                               "trace cannot store (JSON has no Infinity): replace it, say with NaN (stored as null)")


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


def _meta_json(meta: Mapping[str, Any]) -> str:
    """``meta`` as JSON text, or a TraceFormatError naming the key that holds Infinity or NaN."""
    try:
        return json.dumps(meta, separators=(",", ":"), allow_nan=False)
    except ValueError:
        key = nonfinite_key(dict(meta))
        if key is None:
            raise
        raise TraceFormatError(f"trace meta key {_clip(key)!r} holds Infinity or NaN, which a trace file cannot "
                               "store (JSON has neither): replace it, say with None or a string") from None


#: The files of a Parquet trace folder (what :meth:`Trace.save` writes and replaces).
PARQUET_FILES = ("meta.json", *(f"{name}.parquet" for name in TABLES))


def _parquet_trace_folder(p: Path) -> str:
    """Why the existing folder ``p`` may not be replaced by a Parquet trace ("" when it holds only one's files)."""
    others = sorted(c.name for c in p.iterdir() if c.name not in PARQUET_FILES)
    if not others:
        return ""
    return (f"{str(p)!r} is a folder that is not a vizdist Parquet trace (it holds {_clip(', '.join(others), 200)}); "
            "saving there would replace it. Choose another path, or remove the folder first.")


def _never(p: Path) -> str:
    return f"{str(p)!r} exists (save(..., overwrite=False) replaces nothing)"


def _arrow_table(name: str, df: pd.DataFrame) -> Any:
    """``df`` as a pyarrow table, or a TraceFormatError naming the table and column that cannot be stored."""
    from vizdist._optional import require

    pa = require("pyarrow", pip="pyarrow", conda="pyarrow")

    for col in df.columns:
        _check_storable(df[col], name)  # same column rules as JSON
        if str(df[col].dtype) == "object" and not all(v is None or isinstance(v, str) for v in df[col].tolist()):
            raise TraceFormatError(
                f"table {name!r} column {col!r} holds values that are not text (lists, dicts or numbers in a "
                "text column): a Parquet trace stores a column of one type only. Save the trace as .json, "
                "which keeps them.")
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise TraceFormatError(f"table {name!r} cannot be stored as Parquet ({type(exc).__name__}: "
                               f"{_clip(str(exc))})") from None


def _column_to_json(series: pd.Series, table: str) -> tuple[str, list[Any]]:
    if _is_text_categorical(series):
        return "str", series.astype(str).tolist()
    dtype = str(series.dtype)
    if dtype.startswith(("int", "uint")):
        return dtype, [int(v) for v in series.tolist()]
    if dtype.startswith("float"):
        _check_storable(series, table)  # no Infinity
        return dtype, [None if (v is None or math.isnan(v)) else float(v) for v in series.tolist()]
    if dtype == "bool":
        return dtype, [bool(v) for v in series.tolist()]
    if dtype in ("str", "string", "object"):
        values = series.tolist()
        if all(v is None or isinstance(v, str) for v in values):
            return "str", values
        # Anything else must already be JSON-able (lists of numbers, dicts).
        return "object", values
    raise TraceFormatError(f"table {table!r} column {series.name!r} has dtype {dtype}, which traces cannot store")


def _column_from_json(name: str, dtype: str, values: list[Any]) -> pd.Series:
    if dtype == "object":
        return pd.Series(values, dtype="object", name=name)
    if dtype.startswith("float"):
        return pd.Series([math.nan if v is None else v for v in values], dtype=dtype, name=name)
    return pd.Series(values, dtype=dtype, name=name)


def _known_dtype(dtype: Any) -> bool:
    """The dtypes :func:`_column_to_json` writes."""
    return isinstance(dtype, str) and (dtype in ("bool", "str", "object")
                                       or dtype.startswith(("int", "uint", "float")))


def _table_from_json(name: str, t: Any, limits: Limits) -> pd.DataFrame:
    """One table of a JSON trace, checked column by column."""
    cols, dtypes, data = t["columns"], t["dtypes"], t["data"]
    if not (isinstance(cols, list) and isinstance(dtypes, list) and isinstance(data, dict)):
        raise TraceFormatError(f"table {name!r} must hold lists 'columns' and 'dtypes' and an object 'data'")
    for values in data.values():
        if isinstance(values, list):
            check_rows(name, len(values), limits)
    if len(cols) != len(dtypes):
        raise TraceFormatError(f"table {name!r} lists {len(cols)} columns but {len(dtypes)} dtypes")
    if not all(isinstance(c, str) for c in cols) or len(set(cols)) != len(cols):
        raise TraceFormatError(f"table {name!r} has duplicate or non-text column names {cols[:20]}")
    for c, d in zip(cols, dtypes, strict=True):
        if not _known_dtype(d):
            raise TraceFormatError(f"table {name!r} column {c!r} has unknown dtype {d!r:.40}")
        if not isinstance(data.get(c), list):
            raise TraceFormatError(f"table {name!r} column {c!r} has no list of values")
    series = [_column_from_json(c, d, data[c]) for c, d in zip(cols, dtypes, strict=True)]
    lengths = {len(s) for s in series}
    if len(lengths) > 1:
        raise TraceFormatError(f"table {name!r} has columns of different lengths {sorted(lengths)}")
    return pd.concat(series, axis=1) if series else pd.DataFrame()


def _json_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
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


def _head_meta(doc: Any, source: str, limits: Limits) -> TraceMeta:
    """Check a trace document's format and version; return its meta, migrated and validated."""
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise TraceFormatError(
            f"{source} is not a vizdist trace (no \"format\": \"{FORMAT}\" field). "
            "Load files written by Trace.save()."
        )
    version = doc.get("version")
    if type(version) is not int or version not in READS:
        raise TraceFormatError(
            f"{source} is a vizdist trace of format version {_short(version)}; "
            f"this vizdist reads versions {list(READS)}. Upgrade vizdist or re-record the trace."
        )
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        what = "no 'meta'" if "meta" not in doc else f"a 'meta' that is {type(meta).__name__}, not an object"
        raise TraceFormatError(f"{source} is a damaged vizdist trace: it has {what}. Re-record it.")
    if version >= 2 and "kind" not in meta:
        raise TraceFormatError(f"{source} is a damaged vizdist trace: its meta has no 'kind'. Re-record it.")
    with _damaged(source):
        check_meta(meta, limits)  # bounded and finite, before anything reads it
    checked = validate_meta(meta, source=source)  # version 1: kind inferred
    with _damaged(source):
        check_meta_counts(checked, limits)
    return checked


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any) -> str:
    return _clip(repr(value), 60)


@contextlib.contextmanager
def _damaged(source: str) -> Iterator[None]:
    """Turn any error while rebuilding tables into a TraceFormatError naming ``source``."""
    try:
        yield
    except OverLimit as exc:
        raise OverLimit(f"{source}: {str(exc).rstrip('.')}.") from None
    except TraceFormatError as exc:
        raise TraceFormatError(f"{source} is a damaged vizdist trace: {str(exc).rstrip('.')}.") from None
    except (KeyError, TypeError, ValueError, OverflowError, IndexError, AttributeError, RecursionError) as exc:
        raise TraceFormatError(
            f"{source} is a damaged vizdist trace ({type(exc).__name__}: {_clip(str(exc))}). "
            "Re-record it, or load another copy."
        ) from None


def _merged_kind(traces: Sequence[Trace]) -> str:
    kinds = {t.meta["kind"] for t in traces}
    if len(traces) > 1:
        kinds = {"multi_worker" if k == "distribution" else k for k in kinds}
    if len(kinds) > 1:
        raise ValueError(
            f"cannot merge traces of different kinds {sorted(kinds)}: merge the shards of one run "
            "(each instrument writes one kind; see vizdist.contract).")
    kind: str = kinds.pop()
    return kind


class Trace:
    """A recorded distributed-input run: tables of elements, batches, events.

    Build one with an instrument (``vizdist.trace_distribution`` and friends)
    or from plain records with :meth:`from_records`. A trace is plain data:
    compare two with ``==``, save with :meth:`save`, load with
    :func:`load_trace`, join shards with :meth:`merge`.

    Example:
        >>> t = Trace.from_records(
        ...     elements=[dict(step=0, replica=r, source_id=r) for r in range(2)],
        ...     meta={"num_replicas": 2})
        >>> t.ids(step=0, replica=1)
        [1]
    """

    def __init__(
        self,
        *,
        elements: pd.DataFrame | None = None,
        batches: pd.DataFrame | None = None,
        events: pd.DataFrame | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.elements = _normalize("elements", elements)
        self.batches = _normalize("batches", batches)
        self.events = _normalize("events", events)
        self.meta: TraceMeta = validate_meta(_json_meta(meta))

    # -- construction -----------------------------------------------------
    @classmethod
    def from_records(
        cls,
        *,
        elements: Iterable[Mapping[str, Any]] = (),
        batches: Iterable[Mapping[str, Any]] = (),
        events: Iterable[Mapping[str, Any]] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> Trace:
        """Build a trace from lists of row dicts (missing columns get defaults)."""
        return cls(
            elements=pd.DataFrame(list(elements)),
            batches=pd.DataFrame(list(batches)),
            events=pd.DataFrame(list(events)),
            meta=meta,
        )

    @classmethod
    def merge(cls, traces: Sequence[Trace], *, meta: Mapping[str, Any] | None = None) -> Trace:
        """Join traces recorded by several processes (one per worker) into one.

        Rows are concatenated in the order given. Metadata keys that agree in
        every shard are kept; the per-shard dicts stay under ``meta["shards"]``.
        The reductions every worker recorded (``vizdist.trace_reduction``) are
        joined into one per index.
        All traces must be of one kind (see :mod:`vizdist.contract`);
        ``distribution`` traces of several processes merge into one
        ``multi_worker`` trace.

        Example:
            >>> a = Trace.from_records(elements=[dict(step=0, worker=0, source_id=0)])
            >>> b = Trace.from_records(elements=[dict(step=0, worker=1, source_id=1)])
            >>> m = Trace.merge([a, b])
            >>> m.elements["worker"].tolist(), m.meta["kind"]
            ([0, 1], 'multi_worker')
        """
        traces = list(traces)
        if not traces:
            raise ValueError("Trace.merge needs at least one trace; got none.")
        for t in traces:
            if not isinstance(t, Trace):
                raise TypeError(f"Trace.merge takes Trace objects; got {type(t).__name__}.")
        tables = {
            name: pd.concat([getattr(t, name) for t in traces], ignore_index=True)
            for name in TABLES
        }
        return cls(**tables, meta=_merged_meta(traces, meta))

    # -- queries ----------------------------------------------------------
    @property
    def steps(self) -> list[int]:
        """The steps recorded, in order."""
        return self._ids("step")

    @property
    def replicas(self) -> list[int]:
        """The replica ids recorded (global ids across workers), in order."""
        return self._ids("replica")

    def _ids(self, col: str) -> list[int]:
        """The distinct values >= 0 of ``col`` in batches and elements, sorted (whole-column arithmetic)."""
        both = np.concatenate([self.batches[col].to_numpy(np.int64), self.elements[col].to_numpy(np.int64)])
        return [int(v) for v in np.unique(both[both >= 0]).tolist()]

    # -- views: real classes of vizdist.views, each method importing its renderer when called -----
    @property
    def plot(self) -> views.PlotAccessor:
        """This trace's figures (matplotlib), one method per view: ``trace.plot.split()``, ``.timeline()``,
        ``.coverage()``, ``.streams()``, ``.placement()``, ``.closures()``, ``.variable_shards()``,
        ``.topology()``; ``help(trace.plot.split)`` gives each one's options.

        Example:
            >>> dir(Trace().plot)[:3]
            ['closures', 'coverage', 'placement']
        """
        return views.PlotAccessor(self)

    @property
    def show(self) -> views.ShowAccessor:
        """This trace's interactive views (ipywidgets): ``trace.show()`` is the explorer (a step slider over
        the split); ``trace.show("timeline", step=3)`` is ``trace.show.timeline(step=3)``; also
        ``"placement"``, ``"topology"`` and ``"reduction"``.

        Example:
            >>> dir(Trace().show)
            ['explorer', 'placement', 'reduction', 'timeline', 'topology']
        """
        return views.ShowAccessor(self)

    @property
    def timing(self) -> views.TimingAccessor:
        """This trace's timing statistics, as methods (they read ``trace.events``: record with ``timing=True``):
        ``trace.timing.overlap_summary()``, ``.most_at_once(lane=...)``, ``.tf_data_iterators()``,
        ``.map_threads()``, ``.prefetch_buffers()``, ``.empty_buffer_steps()``.

        Example:
            >>> dir(Trace().timing)[:3]
            ['empty_buffer_steps', 'map_threads', 'most_at_once']
        """
        return views.TimingAccessor(self)

    def coverage(self) -> pd.DataFrame:
        """How many times each source element was delivered in each epoch, 0 for the elements of the dataset
        that never were: one row per ``data`` (input), ``phase``, ``epoch``, ``source``, ``source_file``,
        ``source_id``, with ``delivered``. Computed by :func:`vizdist.analysis.coverage.coverage` (its docs say
        how the inputs and the dataset's elements are known).

        Example:
            >>> Trace.from_records(elements=[dict(step=0, replica=0, source_id=3)]).coverage()["delivered"].tolist()
            [1]
        """
        return views.coverage(self)

    def to_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write the timed spans as a Chrome / Perfetto trace file (JSON, or ``.json.gz``); returns its path."""
        return views.to_chrome_trace(self, path)

    def ids(self, *, step: int, replica: int) -> list[int]:
        """Source ids that ``replica`` received at ``step``, in batch order."""
        e = self.elements
        rows = e[(e["step"] == step) & (e["replica"] == replica)].sort_values("position")
        return [int(v) for v in rows["source_id"].tolist()]

    def split(self) -> pd.DataFrame:
        """A steps × replicas table whose cells are the source ids each got.

        Example:
            >>> t = Trace.from_records(
            ...     elements=[dict(step=0, replica=r, source_id=r, position=0) for r in range(2)])
            >>> t.split().to_dict()
            {0: {0: [0]}, 1: {0: [1]}}
        """
        steps, reps = self.steps, self.replicas
        table: dict[int, dict[int, list[int]]] = {r: {s: [] for s in steps} for r in reps}
        e = self.elements.sort_values(["step", "replica", "position"], kind="stable")
        for s, r, i in zip(e["step"].tolist(), e["replica"].tolist(), e["source_id"].tolist(), strict=False):
            if s >= 0 and r >= 0:
                table[int(r)][int(s)].append(int(i))
        df = pd.DataFrame(table, index=pd.Index(steps, name="step"), columns=reps)
        df.columns.name = "replica"
        return self._pass_index(df)

    def _pass_index(self, df: pd.DataFrame) -> pd.DataFrame:
        """A ``vizdist.record()`` trace: index the steps by ``step, phase, epoch, epoch_step`` too."""
        cols = ["step", "phase", "epoch", "epoch_step"]
        if not set(cols) <= set(self.batches.columns):
            return df
        where = self.batches[cols].drop_duplicates("step").set_index("step")
        idx = [(s, str(where.at[s, "phase"]), int(where.at[s, "epoch"]), int(where.at[s, "epoch_step"]))
               if s in where.index else (s, "", -1, -1) for s in df.index]
        df.index = pd.MultiIndex.from_tuples(idx, names=cols)
        return df

    # -- persistence ------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The trace as one JSON-able dict (the format :meth:`save` writes)."""
        tables: dict[str, Any] = {}
        for name in TABLES:
            df = getattr(self, name)
            cols: list[str] = [str(c) for c in df.columns]
            dtypes, data = [], {}
            for col in cols:
                dtype, values = _column_to_json(df[col], name)
                dtypes.append(dtype)
                data[col] = values
            tables[name] = {"columns": cols, "dtypes": dtypes, "data": data}
        return {"format": FORMAT, "version": VERSION, "meta": self.meta, "tables": tables}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "the given dict", limits: Limits | None = None,
                  ) -> Trace:
        """Rebuild a trace from :meth:`to_dict` output, checking its form.

        Anything malformed, or beyond ``limits`` (see :func:`load_trace`), is a
        :class:`TraceFormatError` whose message starts with ``source``.

        Example:
            >>> Trace.from_dict({"format": "vizdist.trace", "version": 2}, source="x.json")
            Traceback (most recent call last):
            ...
            vizdist.errors.TraceFormatError: x.json is a damaged vizdist trace: it has no 'meta'. Re-record it.
        """
        limits = limits or Limits()
        meta = _head_meta(doc, source, limits)
        with _damaged(source):
            tables = {name: _table_from_json(name, doc["tables"][name], limits) for name in TABLES}
            for name, df in tables.items():
                check_table(name, df, _load_types(name), limits)
            return cls(**tables, meta=meta)

    @classmethod
    def from_frames(cls, head: Mapping[str, Any], tables: Mapping[str, pd.DataFrame], *, source: str,
                    limits: Limits | None = None) -> Trace:
        """A trace from a Parquet trace's head (its ``meta.json``) and its tables, read by someone else
        (``vizdist.record(path=...)``'s parts, on any file system), checked as :func:`load_trace` checks one.

        Example:
            >>> head = {"format": "vizdist.trace", "version": 2, "meta": {"kind": "distribution"}}
            >>> Trace.from_frames(head, {"elements": pd.DataFrame({"step": [0], "source_id": [4]})},
            ...                   source="x").elements["source_id"].tolist()
            [4]
        """
        limits = limits or Limits()
        meta = _head_meta(head, source, limits)
        with _damaged(source):
            for name, df in tables.items():
                check_table(name, df, _load_types(name), limits)
            return cls(**{name: tables.get(name) for name in TABLES}, meta=meta)

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = True) -> Path:
        """Write the trace to ``path`` and return the path.

        ``*.json`` writes one JSON file, ``*.json.gz`` the same gzipped,
        ``*.parquet`` a folder holding ``meta.json`` and one Parquet file per
        table (needs ``pyarrow``). The file (or folder) is written beside
        ``path`` and renamed (swapped) into place, so ``path`` holds the old
        trace or the new one, whole, even if the save fails; a symbolic link at
        ``path`` is refused (:class:`vizdist._files.LinkedTarget`), and so is a
        folder that is not a Parquet trace. ``overwrite=False`` refuses an
        existing ``path`` (``FileExistsError``), atomically.

        Example:
            >>> import tempfile, os
            >>> t = Trace.from_records(elements=[dict(step=0, replica=0, source_id=7)])
            >>> p = t.save(os.path.join(tempfile.mkdtemp(), "run.json"))
            >>> load_trace(p) == t
            True
        """
        p = Path(path)
        name = p.name.lower()
        if name.endswith(".parquet"):
            return self._save_parquet(p, overwrite=overwrite)
        if not (name.endswith(".json") or name.endswith(".json.gz")):
            raise ValueError(
                f"cannot tell the trace format from {str(p)!r}: use a name ending in "
                "'.json', '.json.gz' or '.parquet'."
            )
        p.parent.mkdir(parents=True, exist_ok=True)
        tables = json.dumps(self.to_dict()["tables"], separators=(",", ":"), allow_nan=False)  # no Infinity: checked
        data = (f'{{"format":{json.dumps(FORMAT)},"version":{VERSION},"meta":{_meta_json(self.meta)},'
                f'"tables":{tables}}}').encode()
        if name.endswith(".gz"):
            data = gzip.compress(data)
        write_file(p, lambda fh: fh.write(data), replace=overwrite)
        return p

    def _save_parquet(self, p: Path, *, overwrite: bool) -> Path:
        from vizdist._optional import require

        pq = require("pyarrow.parquet", pip="pyarrow", conda="pyarrow")
        tables = {name: _arrow_table(name, getattr(self, name)) for name in TABLES}  # every check before any write
        head = (f'{{"format":{json.dumps(FORMAT)},"version":{VERSION},"storage":"parquet",'
                f'"meta":{_meta_json(self.meta)}}}').encode()

        def fill(folder: Path) -> None:
            for name, table in tables.items():
                # mypy infers no type for a lambda with a default argument (it binds this loop's table)
                write_file(folder / f"{name}.parquet", lambda fh, table=table: pq.write_table(table, fh))  # type: ignore[misc]
            write_file(folder / "meta.json", head)

        p.parent.mkdir(parents=True, exist_ok=True)
        # written beside, then swapped in whole: a failed save leaves the old trace, never a mix
        return write_folder(p, fill, replaceable=_parquet_trace_folder if overwrite else _never)

    # -- comparison and display --------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        if self.meta != other.meta:
            return False
        for name in TABLES:
            a, b = _plain_text(getattr(self, name)), _plain_text(getattr(other, name))
            if list(a.columns) != list(b.columns) or list(map(str, a.dtypes)) != list(map(str, b.dtypes)):
                return False
            if not a.equals(b):
                return False
        return True

    # unhashable, as a mutable value with __eq__ should be; typeshed declares object.__hash__ a method
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        m = self.meta
        parts = [
            f"strategy={_clip(str(m.get('strategy', '?')), 80)}",
            f"replicas={m.get('num_replicas', len(self.replicas))}",
            f"steps={len(self.steps)}",
            f"elements={len(self.elements)}",
        ]
        if len(self.events):
            parts.append(f"events={len(self.events)}")
        return "Trace(" + ", ".join(parts) + ")"


def _merged_meta(traces: Sequence[Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The meta of :meth:`Trace.merge` (anything with a ``.meta`` will do): keys every shard agrees on,
    the shards' metas under ``shards``, and the keys :data:`vizdist.contract.JOINS` names joined."""
    common: dict[str, Any] = {"kind": _merged_kind(traces)}
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


def _plain_text(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with categorical text columns as plain text (equality compares values, not storage)."""
    cats = {c: "str" for c in df.columns if _is_text_categorical(df[c])}
    return df.astype(cats) if cats else df


def _read_json(p: Path, limits: Limits, *, follow: bool = True, budget: Budget | None = None) -> Any:
    """The JSON document in ``p`` (gunzipped for ``.gz``); ``follow=False`` refuses a link at ``p``.

    What is read counts against ``budget`` (a folder's, shared by its shards), else against the file's own
    ``max_bytes``; whitespace padding is dropped as it is read (:func:`vizdist._loadcheck.read_compact`).
    """
    budget = budget or Budget(limits.max_bytes, repr(str(p)))
    try:
        with open_regular(p, follow=follow) as raw:
            if p.name.lower().endswith(".gz"):
                with gzip.GzipFile(fileobj=raw) as fh:
                    data = read_compact(fh, budget, limits)  # type: ignore[arg-type]  # GzipFile reads bytes
            else:
                data = read_compact(raw, budget, limits)
        return json.loads(data)
    except OverLimit as exc:
        raise OverLimit(str(exc) if str(exc).startswith(("folder ", repr(str(p)))) else f"{str(p)!r}: {exc}") from None
    except NotRegularFile as exc:
        raise TraceFormatError(f"{exc}: a trace is a regular file") from None
    except (ValueError, EOFError, OSError, RecursionError, MemoryError) as exc:
        # ValueError covers bad JSON, bad UTF-8 and integers too long to convert;
        # RecursionError deeply nested brackets; OSError bad gzip and unreadable files.
        raise TraceFormatError(
            f"{str(p)!r} is not a readable vizdist trace ({type(exc).__name__}: {_clip(str(exc))}). "
            "Is it a trace written by Trace.save(), and complete?"
        ) from None


def _regular(p: Path) -> str:
    """Why ``p`` may not be read as part of a trace ("" when it is a regular file, not a link)."""
    if p.is_symlink():
        return "a symbolic link (load_trace reads only regular files inside the folder)"
    if not p.is_file():
        return "not a regular file"
    return ""


def _load_parquet(p: Path, limits: Limits) -> Trace:
    from vizdist._optional import require

    require("pyarrow.parquet", pip="pyarrow", conda="pyarrow")
    source = repr(str(p))
    files = [p / "meta.json"] + [p / f"{name}.parquet" for name in TABLES]
    for f in files:
        why = "missing" if not (f.exists() or f.is_symlink()) else _regular(f)
        if why:
            raise TraceFormatError(f"{source} is a damaged vizdist trace: {f.name} is {why}.")
    budget = Budget(limits.max_bytes, source)  # the trace's files together, as a JSON trace's one file
    meta = _head_meta(_read_json(files[0], limits, follow=False, budget=budget), source, limits)
    tables = {}
    for name, f in zip(TABLES, files[1:], strict=True):
        try:
            with open_regular(f, follow=False) as fh:
                tables[name] = _parquet_table(name, fh, limits, budget)
        except TraceFormatError as exc:
            raise type(exc)(f"{source}: {exc}") from None
        except Exception as exc:  # pyarrow raises many types
            raise TraceFormatError(f"{str(f)!r} is not readable Parquet ({_clip(str(exc))}).") from None
    with _damaged(source):
        for name, df in tables.items():
            check_table(name, df, _load_types(name), limits)
        return Trace(**tables, meta=meta)


def _parquet_table(name: str, fh: Any, limits: Limits, budget: Budget) -> pd.DataFrame:
    """One table of a Parquet trace, its bounds checked before its data is read (and, for text stored once
    and referenced by every row, before it is decoded)."""
    from vizdist._optional import require

    pa = require("pyarrow", pip="pyarrow", conda="pyarrow")
    pc = require("pyarrow.compute", pip="pyarrow", conda="pyarrow")
    pq = require("pyarrow.parquet", pip="pyarrow", conda="pyarrow")

    info = pq.ParquetFile(fh)
    check_rows(name, info.metadata.num_rows, limits)  # as declared, before reading any
    schema = info.schema_arrow
    for field in schema:
        if not _storable_arrow(field.type):
            raise TraceFormatError(f"table {name!r} column {field.name!r} is a Parquet {field.type} column, which "
                                   "traces do not store (numbers, true/false or text only)")
    budget.take(sum(info.metadata.row_group(i).total_byte_size for i in range(info.metadata.num_row_groups)))
    text = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    fh.seek(0)
    table = pq.ParquetFile(fh, read_dictionary=text).read()  # text as stored: each distinct string once
    for col in text:
        chunks = table.column(col).chunks
        budget.take(sum(int(pc.sum(pc.take(pc.binary_length(c.dictionary), c.indices)).as_py() or 0)
                        for c in chunks if len(c)))  # its size once decoded, before it is
        table = table.set_column(table.schema.get_field_index(col), col, table.column(col).cast(schema.field(col).type))
    return table.to_pandas()


def _storable_arrow(t: Any) -> bool:
    """Arrow types a trace table may hold: what :func:`_check_storable` lets Trace.save write."""
    from vizdist._optional import require

    pa = require("pyarrow", pip="pyarrow", conda="pyarrow")

    if pa.types.is_dictionary(t):
        return bool(pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type))
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
                or pa.types.is_string(t) or pa.types.is_large_string(t))


NOT_A_SHARD = ("not a shard: a folder merge reads only files named worker-<task type>-<index>.json, as "
               "record_worker_shard writes them (load any other trace by its own path)")


def _folder_entry(c: Path) -> tuple[bool, str]:
    """(is it a shard, why it may not be read / why it is not) for one entry of a shard folder.

    Only a name of the layout :func:`vizdist.record_worker_shard` writes (:data:`SHARD_NAME`) is a shard;
    another file that looks like a trace (``.json``, ``.json.gz``, ``.parquet``: a merged trace, a copy)
    is not read, and said so; anything else (notes, vizdist's own temporary files) is passed over.
    """
    if SHARD_NAME.fullmatch(c.name):
        return True, _regular(c)
    if c.name.lower().endswith((".json", ".json.gz", ".parquet")) and not c.name.startswith("."):
        return False, NOT_A_SHARD
    return False, ""


def _shard_task(c: Path) -> str:
    """``"<type>-<index>"`` of a shard file's name ("" when the name is not a shard's)."""
    m = SHARD_NAME.fullmatch(c.name)
    return f"{m[1]}-{int(m[2])}" if m else ""


def _folder_listing(p: Path, errors: str) -> tuple[list[Path], list[dict[str, str]]]:
    """The shards of folder ``p`` to read, in name order, and the entries not read (with why).

    Two names for one task (``worker-worker-1.json`` beside ``worker-worker-00001.json``) are two
    shards of one task: a :class:`TraceFormatError` naming both, unless ``errors="skip"``.
    """
    shards: list[Path] = []
    skipped: list[dict[str, str]] = []
    first: dict[str, Path] = {}
    for c in sorted(p.iterdir()):
        is_shard, why = _folder_entry(c)
        task = _shard_task(c) if is_shard else ""
        if is_shard and not why and task in first:
            why = f"a second shard for task {task} ({first[task].name} is the first); each task writes one"
            if errors == "raise":
                raise TraceFormatError(f"{str(c)!r} is {why}. Remove one, or pass errors='skip'.")
        if why:
            skipped.append({"path": str(c), "reason": why})
        elif is_shard:
            first.setdefault(task, c)
            shards.append(c)
    return shards, skipped


def _check_task(c: Path, meta: Mapping[str, Any]) -> None:
    """A shard's name and the task its meta says wrote it must agree (a copy under another name does not)."""
    task, wrote = _shard_task(c), meta.get("task")
    if task and isinstance(wrote, str) and wrote != task:
        raise TraceFormatError(f"{str(c)!r} is named for task {task} but was written by task {wrote} (its meta's "
                               "'task'): a copy or a renamed shard, whose rows another shard holds too. Remove it.")


def _load_entry(c: Path, limits: Limits, budget: Budget) -> Trace:
    """One shard of a folder, opened without following links (the entry may have changed since listed)."""
    trace = Trace.from_dict(_read_json(c, limits, follow=False, budget=budget), source=repr(str(c)), limits=limits)
    _check_task(c, trace.meta)
    return trace


class _Shard:
    """One shard's meta, for :func:`_merged_meta` (the fast path builds no Trace per shard)."""

    def __init__(self, meta: TraceMeta) -> None:
        self.meta = meta


def _fast_folder(p: Path, entries: list[Path], limits: Limits, budget: Budget) -> Trace | None:
    """A folder of JSON shards with the same columns, merged with one table build and one check per table.

    A real cluster's folder holds one small shard per worker: building and checking a Trace per shard
    costs about 25 ms of pandas each, so 1,000 workers took over 10 s. Here each shard is read and its
    meta checked as before, its columns are joined as plain lists, and the merged tables are built and
    checked once. Anything unusual (other columns, any error) returns None: the careful path then reads
    shard by shard and names the file at fault.
    """
    if not entries:
        return None
    try:
        docs = [_read_json(c, limits, follow=False, budget=budget) for c in entries]
        metas = [_head_meta(d, repr(str(c)), limits) for d, c in zip(docs, entries, strict=True)]
        for c, m in zip(entries, metas, strict=True):
            _check_task(c, m)
        raw = {name: _joined_columns([d["tables"][name] for d in docs]) for name in TABLES}
        if any(r is None for r in raw.values()):
            return None
        with _damaged(f"folder {str(p)!r}"):
            tables = {name: _table_from_json(name, raw[name], limits) for name in TABLES}
            for name, df in tables.items():
                check_table(name, df, _load_types(name), limits)
            return Trace(**tables, meta=_merged_meta([_Shard(m) for m in metas], None))
    except OverLimit as exc:
        if str(exc).startswith("folder "):
            raise  # the folder as a whole is over a bound: no shard is at fault
        return None
    except (TraceFormatError, ValueError, TypeError, KeyError):
        return None


def _joined_columns(tables: list[Any]) -> dict[str, Any] | None:
    """One JSON table of many with the same columns and dtypes (None when they differ)."""
    first = tables[0]
    cols, dtypes = first["columns"], first["dtypes"]
    if any(t["columns"] != cols or t["dtypes"] != dtypes for t in tables[1:]):
        return None
    data = {c: [v for t in tables for v in t["data"][c]] for c in cols}
    return {"columns": cols, "dtypes": dtypes, "data": data}


def _load_folder(p: Path, errors: str, limits: Limits) -> Trace:
    """Merge the shards of a folder (regular files named as shards only; see :func:`load_trace`)."""
    entries, skipped = _folder_listing(p, errors)
    where = repr(str(p))
    fast = (None if any(s["reason"] != NOT_A_SHARD for s in skipped)
            else _fast_folder(p, entries, limits, Budget(limits.max_bytes, where, folder=True)))
    shards = []
    if fast is None:
        budget = Budget(limits.max_bytes, where, folder=True)  # the bounds hold for the folder as a whole
        for c in entries:
            try:
                shards.append(_load_entry(c, limits, budget))
            except TraceFormatError as exc:
                if errors == "raise" or str(exc).startswith("folder "):  # a folder over a bound: no shard to skip
                    raise
                skipped.append({"path": str(c), "reason": str(exc)})
        skipped.sort(key=lambda s: s["path"])
    if skipped:
        lines = "".join(f"\n  {s['path']}: {s['reason']}" for s in skipped)
        warnings.warn(f"load_trace({str(p)!r}) skipped {len(skipped)} file(s):{lines}", stacklevel=3)
    if fast is not None:
        return fast if not skipped else Trace(elements=fast.elements, batches=fast.batches, events=fast.events,
                                              meta={**fast.meta, "skipped": skipped})
    if not shards:
        raise TraceFormatError(
            f"folder {str(p)!r} holds no readable shards (files named worker-<task type>-<index>.json, as "
            "record_worker_shard writes them)" + (f"; skipped {len(skipped)}, see the warning above." if skipped
                                                  else ". Load a trace file by its own path."))
    try:
        merged = Trace.merge(shards, meta={"skipped": skipped} if skipped else None)
    except ValueError as exc:
        raise TraceFormatError(f"the traces in folder {str(p)!r} cannot be merged: {exc}") from None
    with _damaged(f"folder {where}"):
        for name in TABLES:
            check_rows(name, len(getattr(merged, name)), limits)
    return merged


def load_trace(path: str | os.PathLike[str], *, errors: str = "raise", max_bytes: int = Limits.max_bytes,
               max_rows: int = Limits.max_rows, max_lanes: int = Limits.max_lanes,
               max_string: int = Limits.max_string) -> Trace:
    """Load a trace written by :meth:`Trace.save`, or merge a folder of shards.

    ``path`` may be a ``.json`` / ``.json.gz`` file, a ``.parquet`` trace
    folder, or any other folder: then every shard in it (one per task,
    written by each worker of a real cluster with
    :func:`vizdist.record_worker_shard`) is loaded, in name order, and merged
    with :meth:`Trace.merge`.

    In a folder only the shards are read: regular files directly inside it
    named ``worker-<task type>-<index>.json``, the names
    :func:`vizdist.record_worker_shard` writes (:func:`shard_name`). Other
    trace files there (a merged trace, a copy), symbolic links and special
    files are not read, and are listed in ``meta["skipped"]`` and in a
    warning, so a merge never reads its own output. A shard that is not a
    readable trace, or a second shard of one task (a copy under another
    task's name, whose meta's ``task`` says so, or one task under two
    spellings), raises :class:`TraceFormatError` naming it, unless
    ``errors="skip"``: then the good shards are merged and the bad ones
    listed in ``meta["skipped"]``.
    Trace files are data only: loading one never runs code (JSON or Parquet,
    never pickle), and every malformed file is a :class:`TraceFormatError`.

    A folder ``vizdist.record(path=...)`` writes (its parts,
    ``record-<task>-<index>-<run>-<part>.parquet``; also a URL on one of
    TensorFlow's file systems, ``gs://...``, read through ``tf.io.gfile``
    once ``vizdist.instrument`` is loaded) is read as :mod:`vizdist._parts`
    says: every part written whole so far, while the run goes on too; the
    runs of one task (a crashed script and its resumed run) one after the
    other.

    A trace file may come from anyone, so what one file may hold is bounded;
    a file beyond a bound is a :class:`TraceFormatError` that names the bound,
    read before the data it guards where the file declares it (a Parquet
    table's row count). Raise a bound to read a real big trace.

    Args:
        path: a trace file, a ``.parquet`` trace folder, or a folder of shards.
        errors: ``"raise"`` (default) or ``"skip"`` (folders only: merge the
            readable shards, list the others).
        max_bytes: bytes of JSON in one file, after gunzip (default 1 GiB).
        max_rows: rows of one table of one file (default 10 million).
        max_lanes: distinct replicas, workers or lanes in one table (default 10,000).
        max_string: characters of one string value (default 65,536).

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> for w in range(2):
        ...     _ = Trace.from_records(elements=[dict(step=0, worker=w, source_id=w)]).save(
        ...         os.path.join(d, shard_name("worker", w)))
        >>> load_trace(d).elements["worker"].tolist()
        [0, 1]
    """
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors must be 'raise' or 'skip'; got {errors!r}.")
    limits = Limits(max_bytes=max_bytes, max_rows=max_rows, max_lanes=max_lanes, max_string=max_string)
    if views.is_recording(path):  # a folder record(path=...) wrote, or a URL
        return views.load_recording(path, limits=limits)
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no trace at {str(p)!r}: check the path (cwd is {os.getcwd()!r}).")
    if p.is_dir():
        if (p / "meta.json").exists() or (p / "meta.json").is_symlink():
            return _load_parquet(p, limits)
        return _load_folder(p, errors, limits)
    if not p.is_file():
        raise TraceFormatError(f"{str(p)!r} is not a regular file; a trace is a .json/.json.gz file "
                               "or a .parquet folder.")
    return Trace.from_dict(_read_json(p, limits), source=repr(str(p)), limits=limits)
