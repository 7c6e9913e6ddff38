"""The trace's three tables: their columns, a frame normalized to them, and each column to JSON and back.

:data:`SCHEMA` gives every column each table always holds (with its dtype and default), :data:`EXTRA_COLUMNS`
those vizdist's instruments add; :func:`normalize` makes a frame hold them (the schema's columns added and
coerced, nulls of a known extra column filled). A trace is stored column by column: :func:`column_to_json` /
:func:`table_from_json` for a JSON trace, :func:`arrow_table` / :func:`storable_arrow` for a Parquet one, both
with the same rule of what a column may hold (:func:`check_storable`). Read by :mod:`vizdist.trace`, which
re-exports the public names.

Example:
    >>> normalize("elements", None).columns.tolist()[:4]
    ['step', 'replica', 'worker', 'device']
    >>> column_to_json(pd.Series([1, 2], name="step"), "elements")
    ('int64', [1, 2])
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from vizdist._clip import ellipsis
from vizdist._loadcheck import Limits, check_rows, check_table
from vizdist.errors import TraceFormatError

__all__ = ["EXTRA_COLUMNS", "PASS_COLUMNS", "SCHEMA", "TABLES", "arrow_table", "check_storable", "check_tables", "coerced",
           "column_from_json", "column_to_json", "fits", "is_text_categorical", "joined_columns", "known_dtype",
           "load_types", "normalize", "plain_text", "storable_arrow", "table_from_json"]

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


def load_types(name: str) -> dict[str, tuple[str, bool]]:
    """Column -> (dtype, nulls allowed) that a loaded table must hold (schema nulls become defaults)."""
    return {**{c: (d, True) for c, (d, _) in SCHEMA[name].items()},
            **{c: (d, False) for c, (d, _) in EXTRA_COLUMNS[name].items()}}


def normalize(name: str, df: pd.DataFrame | None) -> pd.DataFrame:
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
        columns[col] = (coerced(name, df[col], dtype, default) if col in df.columns
                        else pd.Series([default] * n, dtype=dtype))
    for col in df.columns:
        if col in schema:
            continue
        series = df[col]
        if col in extra and (series.isna().any() or not fits(series, extra[col][0])):
            series = coerced(name, series, *extra[col])  # a merge of shards without it left nulls
        columns[col] = series
    return pd.DataFrame(columns, index=pd.RangeIndex(n))


def fits(series: pd.Series, dtype: str) -> bool:
    """Whether ``series`` already holds ``dtype``'s kind of values (``record()`` keeps its int32 and
    categorical columns as they are)."""
    if dtype == "str":
        return is_text_categorical(series) or str(series.dtype) in ("str", "string")
    return str(series.dtype) == dtype or (dtype == "int64" and series.dtype.kind == "i")


def coerced(name: str, series: pd.Series, dtype: str, default: Any) -> pd.Series:
    """``series`` as ``dtype`` values, nulls as ``default`` (itself when it holds them already)."""
    col = series.name
    if dtype == "str" and is_text_categorical(series):
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


def is_text_categorical(series: pd.Series) -> bool:
    """A categorical column of text (instruments store devices and files so: few strings, many rows)."""
    return isinstance(series.dtype, pd.CategoricalDtype) and all(isinstance(c, str) for c in series.cat.categories)


def check_storable(series: pd.Series, table: str) -> None:
    """The dtype rule of :func:`column_to_json`, without converting any value (Parquet stores columns as they are),
    and no Infinity in a float column (JSON has none, and a loaded trace never holds one)."""
    dtype = str(series.dtype)
    if not (is_text_categorical(series) or dtype.startswith(("int", "uint", "float"))
            or dtype in ("bool", "str", "string", "object")):
        raise TraceFormatError(f"table {table!r} column {series.name!r} has dtype {dtype}, which traces cannot store")
    if dtype.startswith("float") and len(series) and (inf := np.isinf(series.to_numpy())).any():
        row = int(inf.argmax())
        raise TraceFormatError(f"table {table!r} column {series.name!r} row {row} holds {series.iloc[row]}, which a "
                               "trace cannot store (JSON has no Infinity): replace it, say with NaN (stored as null)")


def arrow_table(name: str, df: pd.DataFrame) -> Any:
    """``df`` as a pyarrow table, or a TraceFormatError naming the table and column that cannot be stored."""
    from vizdist._optional import require

    pa = require("pyarrow", pip="pyarrow", conda="pyarrow")

    for col in df.columns:
        check_storable(df[col], name)  # same column rules as JSON
        if str(df[col].dtype) == "object" and not all(v is None or isinstance(v, str) for v in df[col].tolist()):
            raise TraceFormatError(
                f"table {name!r} column {col!r} holds values that are not text (lists, dicts or numbers in a "
                "text column): a Parquet trace stores a column of one type only. Save the trace as .json, "
                "which keeps them.")
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise TraceFormatError(f"table {name!r} cannot be stored as Parquet ({type(exc).__name__}: "
                               f"{ellipsis(str(exc))})") from None


def column_to_json(series: pd.Series, table: str) -> tuple[str, list[Any]]:
    if is_text_categorical(series):
        return "str", series.astype(str).tolist()
    dtype = str(series.dtype)
    if dtype.startswith(("int", "uint")):
        return dtype, [int(v) for v in series.tolist()]
    if dtype.startswith("float"):
        check_storable(series, table)  # no Infinity
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


def column_from_json(name: str, dtype: str, values: list[Any]) -> pd.Series:
    if dtype == "object":
        return pd.Series(values, dtype="object", name=name)
    if dtype.startswith("float"):
        return pd.Series([math.nan if v is None else v for v in values], dtype=dtype, name=name)
    return pd.Series(values, dtype=dtype, name=name)


def known_dtype(dtype: Any) -> bool:
    """The dtypes :func:`column_to_json` writes."""
    return isinstance(dtype, str) and (dtype in ("bool", "str", "object")
                                       or dtype.startswith(("int", "uint", "float")))


def table_from_json(name: str, t: Any, limits: Limits) -> pd.DataFrame:
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
        if not known_dtype(d):
            raise TraceFormatError(f"table {name!r} column {c!r} has unknown dtype {d!r:.40}")
        if not isinstance(data.get(c), list):
            raise TraceFormatError(f"table {name!r} column {c!r} has no list of values")
    series = [column_from_json(c, d, data[c]) for c, d in zip(cols, dtypes, strict=True)]
    lengths = {len(s) for s in series}
    if len(lengths) > 1:
        raise TraceFormatError(f"table {name!r} has columns of different lengths {sorted(lengths)}")
    return pd.concat(series, axis=1) if series else pd.DataFrame()


def plain_text(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with categorical text columns as plain text (equality compares values, not storage)."""
    cats = {c: "str" for c in df.columns if is_text_categorical(df[c])}
    return df.astype(cats) if cats else df


def storable_arrow(t: Any) -> bool:
    """Arrow types a trace table may hold: what :func:`check_storable` lets Trace.save write."""
    from vizdist._optional import require

    pa = require("pyarrow", pip="pyarrow", conda="pyarrow")

    if pa.types.is_dictionary(t):
        return bool(pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type))
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
                or pa.types.is_string(t) or pa.types.is_large_string(t))


def joined_columns(tables: list[Any]) -> dict[str, Any] | None:
    """One JSON table of many with the same columns and dtypes (None when they differ)."""
    first = tables[0]
    cols, dtypes = first["columns"], first["dtypes"]
    if any(t["columns"] != cols or t["dtypes"] != dtypes for t in tables[1:]):
        return None
    data = {c: [v for t in tables for v in t["data"][c]] for c in cols}
    return {"columns": cols, "dtypes": dtypes, "data": data}


def check_tables(tables: Mapping[str, pd.DataFrame], limits: Limits) -> None:
    """Each loaded table within ``limits`` and of the dtypes :func:`load_types` gives (before a Trace is built)."""
    for name, df in tables.items():
        check_table(name, df, load_types(name), limits)
