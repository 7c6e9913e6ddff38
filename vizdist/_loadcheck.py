"""Bounds and type checks on the tables of a trace read from a file (data nobody vetted).

A trace file may come from anyone. Before vizdist builds on it, :func:`check_table` makes sure that a
table has at most ``max_rows`` rows, at most ``max_lanes`` distinct replicas, workers and lanes (each
is a row or lane of a view), no string longer than ``max_string`` characters, and that every column
vizdist knows holds its type: a float ``1e20`` in an integer column, a string ``"false"`` in a bool
column or a null in a text column vizdist never leaves empty is a :class:`TraceFormatError` naming the
table, the column and the row. :class:`Limits` holds the bounds; ``load_trace(path, max_rows=...)``
raises one for a real big trace.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from vizdist.errors import TraceFormatError

__all__ = ["Budget", "Limits", "OverLimit", "check_meta", "check_meta_counts", "check_rows", "check_table",
           "read_compact"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
#: Columns whose distinct values become rows or lanes of a view.
LANE_COLUMNS = {"elements": ("replica", "worker"), "batches": ("replica", "worker"),
                "events": ("lane", "replica", "worker")}


class OverLimit(TraceFormatError):
    """A trace file is bigger than a bound of :class:`Limits` (the message names the bound to raise)."""


@dataclass(frozen=True)
class Limits:
    """What ``load_trace`` reads from one file at most; pass bigger ones for a real big trace.

    Example:
        >>> Limits(max_rows=50_000_000).max_rows
        50000000
        >>> Limits(max_rows=0)
        Traceback (most recent call last):
        ...
        ValueError: max_rows must be a positive int; got 0.
    """

    max_bytes: int = 1 << 30  # bytes of JSON, after gunzip
    max_rows: int = 10_000_000  # rows of one table
    max_lanes: int = 10_000  # distinct replicas, workers or lanes of one table
    max_string: int = 65_536  # characters of one string value

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{f.name} must be a positive int; got {value!r}.")


class Budget:
    """The bytes of JSON (after gunzip) a load may still read: one file's, or a whole folder's together.

    Example:
        >>> b = Budget(10, "'t.json'")
        >>> b.take(8); b.take(4)
        Traceback (most recent call last):
        ...
        vizdist._loadcheck.OverLimit: 't.json' holds more than max_bytes=10 bytes of JSON (after gunzip); to read a trace this big on purpose, pass load_trace(..., max_bytes=...)
    """

    def __init__(self, max_bytes: int, where: str, *, folder: bool = False) -> None:
        self.max_bytes, self.left, self.where, self.folder = max_bytes, max_bytes, where, folder

    def take(self, n: int) -> None:
        """Count ``n`` more bytes read; :class:`OverLimit` once the total passes ``max_bytes``."""
        self.left -= n
        if self.left >= 0:
            return
        if self.folder:
            raise OverLimit(f"folder {self.where}: its shards hold more than max_bytes={self.max_bytes} bytes of JSON "
                            "together (after gunzip); the bound is for a whole folder, as for one file. To read "
                            "it on purpose, pass load_trace(..., max_bytes=...)")
        raise OverLimit(f"{self.where} holds more than max_bytes={self.max_bytes} bytes of JSON (after gunzip); to "
                        "read a trace this big on purpose, pass load_trace(..., max_bytes=...)")


_CHUNK = 1 << 20
_BLANKS = b" \t\n\r"
#: Whitespace (outside what it pads) a file may hold before the reader drops it as it reads.
_SLACK = 1 << 20
#: One JSON token: a run of whitespace, a whole string, or a run of anything else but a quote.
_TOKEN = re.compile(rb'[ \t\n\r]+|"[^"\\]*(?:\\.[^"\\]*)*"|[^ \t\n\r"]+')


def read_compact(fh: BinaryIO, budget: Budget, limits: Limits) -> bytearray:
    """The JSON text read from ``fh``, holding at most about twice its text without its blanks.

    Every byte read counts against ``budget``. While a file's whitespace is no more than the rest of it
    (plus 1 MiB), it is kept as read (what vizdist writes has none); past that, whitespace between
    tokens is dropped as it is read (never inside a string), so a megabyte of gzip holding a gibibyte of
    blanks costs megabytes, not gigabytes.

    Example:
        >>> import io
        >>> read_compact(io.BytesIO(b'{"a b": [1, 2]}' + b" " * (3 << 20)), Budget(1 << 30, "x"), Limits())
        bytearray(b'{"a b":[1,2]}')
    """
    out = bytearray()  # json.loads reads it as it is: no joined copy
    text = blanks = 0
    strip: _Stripper | None = None
    while chunk := fh.read(_CHUNK):
        budget.take(len(chunk))
        if strip is not None:
            out += strip.feed(chunk)
            continue
        n = len(chunk) - len(chunk.translate(None, _BLANKS))
        blanks, text = blanks + n, text + len(chunk) - n
        out += chunk
        if blanks > text + _SLACK:  # mostly padding: from here on it is dropped as it is read
            strip = _Stripper(6 * limits.max_string + 64)  # a string's bytes: at most 6 per character escaped
            out = bytearray(strip.feed(bytes(out)))
    if strip is not None:
        out += strip.carry
    return out


class _Stripper:
    """Drops the whitespace between JSON tokens, chunk by chunk (a string cut by a chunk waits for its end)."""

    def __init__(self, longest: int) -> None:
        self.carry, self.longest = b"", longest

    def feed(self, chunk: bytes) -> bytes:
        buf = self.carry + chunk if self.carry else chunk
        out, pos, end = [], 0, len(buf)
        match = _TOKEN.match
        while pos < end:
            m = match(buf, pos)
            if m is None:  # a string that goes on in the next chunk
                break
            if buf[pos] not in _BLANKS:
                out.append(m.group())
            pos = m.end()
        self.carry = buf[pos:]
        if len(self.carry) > self.longest:
            raise OverLimit(f"a string of more than {self.longest} bytes, more than max_string allows; pass "
                            "load_trace(..., max_string=...)")
        return b"".join(out)


def check_rows(table: str, rows: int, limits: Limits) -> None:
    """:class:`OverLimit` when ``table`` has (or declares) more than ``limits.max_rows`` rows."""
    if rows > limits.max_rows:
        raise OverLimit(f"table {table!r} has {rows} rows, more than max_rows={limits.max_rows}; to read "
                        f"a trace this big on purpose, pass load_trace(..., max_rows={rows})")


#: Meta keys that count replicas, workers or other lanes of a view (checked against ``max_lanes``).
COUNT_KEYS = ("num_replicas", "num_workers", "num_ps", "replicas_per_worker", "num_hosts", "cores_per_host",
              "num_cores", "consumers", "num_consumers")


def check_meta_counts(meta: Mapping[str, Any], limits: Limits) -> None:
    """:class:`OverLimit` when a count in ``meta`` (say ``num_workers``) is above ``limits.max_lanes``."""
    for key in COUNT_KEYS:
        value = meta.get(key)
        if isinstance(value, int) and value > limits.max_lanes:
            raise OverLimit(f"meta key {key!r} is {value}, more than max_lanes={limits.max_lanes}; pass "
                            f"load_trace(..., max_lanes={value}) to read it")


def check_meta(meta: Mapping[str, Any], limits: Limits) -> None:
    """Bound what a trace file's meta holds, as its tables are: no string (value or key) longer than
    ``max_string``, no list longer than ``max_rows``, and no Infinity or NaN (JSON has neither; vizdist
    never writes one). The error names the key (``"reductions[0].results[1].value"``).

    Example:
        >>> check_meta({"a": [1.0, {"b": float("inf")}]}, Limits())
        Traceback (most recent call last):
        ...
        vizdist.errors.TraceFormatError: meta key 'a[1].b' holds inf, which a trace file cannot hold (JSON has no Infinity or NaN)
    """
    stack: list[tuple[str, Any]] = [("", meta)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if len(value) > limits.max_string:
                raise OverLimit(f"meta key {_key(where)!r} holds a string of {len(value)} characters, more than "
                                f"max_string={limits.max_string}; pass load_trace(..., max_string={len(value)})")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise TraceFormatError(f"meta key {_key(where)!r} holds {value}, which a trace file cannot hold "
                                       "(JSON has no Infinity or NaN)")
        elif isinstance(value, Mapping):
            for k in value:
                if len(str(k)) > limits.max_string:
                    raise OverLimit(f"meta key {_key(f'{where}.{k}' if where else str(k))!r} is a name of "
                                    f"{len(str(k))} characters, more than max_string={limits.max_string}")
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            if len(value) > limits.max_rows:
                raise OverLimit(f"meta key {_key(where)!r} holds a list of {len(value)} items, more than "
                                f"max_rows={limits.max_rows}; pass load_trace(..., max_rows={len(value)})")
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))


def _key(where: str) -> str:
    return where if len(where) <= 60 else where[:57] + "..."


def check_table(table: str, df: pd.DataFrame, types: Mapping[str, tuple[str, bool]], limits: Limits) -> None:
    """Check ``df`` against ``limits`` and ``types`` (column -> (dtype, nulls allowed)); raise on the first fault."""
    check_rows(table, len(df), limits)
    for col, (dtype, nulls_ok) in types.items():
        if col in df.columns:
            _check_values(table, col, df[col], dtype, nulls_ok)
    for col in LANE_COLUMNS.get(table, ()):
        if col in df.columns and (n := df[col].nunique()) > limits.max_lanes:
            raise OverLimit(f"table {table!r} column {col!r} has {n} distinct values, more than "
                            f"max_lanes={limits.max_lanes}; pass load_trace(..., max_lanes={n}) to read it")
    for col in df.columns:
        _check_lengths(table, col, df[col], limits.max_string)
        _check_finite(table, col, df[col])


def _check_finite(table: str, col: str, s: pd.Series) -> None:
    """No Infinity in a float column (JSON has none and vizdist never writes one; NaN is a null)."""
    if s.dtype.kind == "f" and len(s) and (inf := np.isinf(s.to_numpy())).any():
        row = int(inf.argmax())
        raise TraceFormatError(f"table {table!r} column {col!r} row {row}: float {s.iloc[row]} where a finite number "
                               "belongs")


def _check_values(table: str, col: str, s: pd.Series, dtype: str, nulls_ok: bool) -> None:
    null = s.isna().to_numpy()
    if not nulls_ok and null.any():
        _fault(table, col, int(null.argmax()), "a null", dtype)
    if _fast_ok(s, dtype):
        return
    ok = _VALID[dtype]
    for row, value in enumerate(s.tolist()):
        if not null[row] and not ok(value):
            _fault(table, col, row, f"{type(value).__name__} {_short(value)}", dtype)


def _fast_ok(s: pd.Series, dtype: str) -> bool:
    """Whether ``s`` certainly holds ``dtype`` values (checked without a Python loop)."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        return dtype == "str" and all(isinstance(c, str) for c in s.cat.categories)
    kind = s.dtype.kind
    if dtype == "int64":
        if kind == "f":
            v = s.to_numpy()
            whole = np.isfinite(v) & (v == np.floor(v)) & (v >= _INT64_MIN) & (v < 2.0**63)
            return bool((np.isnan(v) | whole).all())  # nulls were checked above
        return bool(kind == "i" or (kind == "u" and (len(s) == 0 or int(s.max()) <= _INT64_MAX)))
    if dtype == "bool":
        return bool(kind == "b")
    return bool(kind in "OU" and pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"))


def _whole(v: Any) -> bool:
    if isinstance(v, bool | np.bool_):
        return False
    if isinstance(v, int | np.integer):
        return _INT64_MIN <= int(v) <= _INT64_MAX
    return bool(isinstance(v, float | np.floating) and math.isfinite(v) and float(v).is_integer()
                and _INT64_MIN <= v < 2.0**63)


_VALID: dict[str, Callable[[Any], bool]] = {
    "int64": _whole,
    "bool": lambda v: isinstance(v, bool | np.bool_),
    "str": lambda v: isinstance(v, str),
}
_WANT = {"int64": "a whole number (int64)", "bool": "true or false", "str": "text"}


def _fault(table: str, col: str, row: int, what: str, dtype: str) -> None:
    raise TraceFormatError(f"table {table!r} column {col!r} row {row}: {what} where {_WANT[dtype]} belongs")


def _check_lengths(table: str, col: str, s: pd.Series, limit: int) -> None:
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.cat.categories.to_series()
        where = "a category"
    elif s.dtype.kind in "OU":
        where = "row {row}"
    else:
        return
    try:
        lengths = s.str.len().fillna(0).to_numpy()
    except AttributeError:  # not all text: count the text only
        lengths = s.map(lambda v: len(v) if isinstance(v, str) else 0).to_numpy()
    if len(lengths) and (longest := int(lengths.max())) > limit:
        row = int(lengths.argmax())
        raise OverLimit(f"table {table!r} column {col!r} {where.format(row=row)} holds a string of {longest} "
                        f"characters, more than max_string={limit}; pass load_trace(..., max_string={longest})")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
