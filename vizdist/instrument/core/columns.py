"""Columnar storage for recorded rows: numbers packed into numpy chunks of their own dtype, texts as codes.

A :class:`Column` keeps appended values in a short Python list, then packs them into numpy chunks, so a million
values cost about their dtype's bytes each; :class:`Texts` keeps a text column as int32 codes into the distinct
strings seen (a run repeats a handful of device names millions of times). The row builder
(:class:`vizdist.instrument.core.rows.Recorder`) stores every column so; ``Column`` is importable from
:mod:`vizdist.instrument.core.rows` too.

Example:
    >>> t = Texts()
    >>> for d in ["CPU:1", "CPU:0", "CPU:1"]:
    ...     t.append(d)
    >>> t.values(), list(t.categorical(1).categories), t.codes.array().tolist()
    (['CPU:1', 'CPU:0', 'CPU:1'], ['CPU:0', 'CPU:1'], [0, 1, 0])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["Column", "Texts"]


class Column:
    """A growable column of numbers: appended values wait in a short Python list, then are packed into
    numpy chunks of their own dtype, so a million values cost about their dtype's bytes each.

    Example:
        >>> c = Column("int32")
        >>> for v in range(5):
        ...     c.append(v)
        >>> c.extend(np.array([7, 8])); len(c), c.array().tolist()
        (7, [0, 1, 2, 3, 4, 7, 8])
        >>> c.tail(2).tolist(), c.array(3, 5).tolist()
        ([7, 8], [3, 4])
    """

    __slots__ = ("_chunks", "_dtype", "_n_chunked", "_pending", "_pending_n")

    #: Values (or appended arrays) held as Python objects before they are packed.
    PACK = 1024

    def __init__(self, dtype: Any) -> None:
        self._dtype = np.dtype(dtype)
        self._chunks: list[np.ndarray] = []
        self._n_chunked = 0
        self._pending: list[Any] = []  # scalars (append) or arrays (extend), never both kinds at once
        self._pending_n = 0

    def __len__(self) -> int:
        return self._n_chunked + self._pending_n

    def append(self, value: Any) -> None:
        """Add one value."""
        pending = self._pending
        pending.append(value)
        self._pending_n += 1
        if len(pending) >= self.PACK:
            self._pack()

    def extend(self, values: np.ndarray) -> None:
        """Add a 1-D array of values (kept as it is until packed)."""
        if self._pending and not isinstance(self._pending[0], np.ndarray):
            self._pack()
        self._pending.append(values)
        self._pending_n += len(values)
        if len(self._pending) >= self.PACK or self._pending_n >= 64 * self.PACK:
            self._pack()

    def _pack(self) -> None:
        if not self._pending:
            return
        p = self._pending
        arr = (np.concatenate(p).astype(self._dtype, copy=False) if isinstance(p[0], np.ndarray)
               else np.asarray(p, dtype=self._dtype))
        self._chunks.append(arr)
        self._n_chunked += len(arr)
        self._pending, self._pending_n = [], 0

    def array(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Values ``start:stop`` as one numpy array (a copy)."""
        self._pack()
        stop = len(self) if stop is None else min(stop, len(self))
        if start >= stop:
            return np.zeros(0, dtype=self._dtype)
        out, at = [], 0
        for c in self._chunks:
            lo, hi = max(start - at, 0), min(stop - at, len(c))
            if lo < hi:
                out.append(c[lo:hi])
            at += len(c)
            if at >= stop:
                break
        return np.concatenate(out) if len(out) != 1 else out[0].copy()

    def tail(self, n: int) -> np.ndarray:
        """The last ``n`` values."""
        return self.array(max(len(self) - n, 0))

    def drop_before(self, n: int) -> None:
        """Forget the first ``n`` values (they were written elsewhere); later indexes shift down by ``n``."""
        if n <= 0:
            return
        rest = self.array(n)
        self._chunks = [rest] if len(rest) else []
        self._n_chunked, self._pending, self._pending_n = len(rest), [], 0

    def nbytes(self) -> int:
        """Bytes held (numpy chunks; pending Python values counted at 36 B each, a list slot and a small int)."""
        return sum(c.nbytes for c in self._chunks) + 36 * self._pending_n


class Texts:
    """A text column as int32 codes into the distinct strings seen (a run repeats a handful)."""

    __slots__ = ("_index", "codes", "names")

    def __init__(self) -> None:
        self.codes = Column("int32")
        self.names: list[str] = []
        self._index: dict[str, int] = {}

    def append(self, text: str) -> None:
        """Add one text (its code; the text itself once)."""
        code = self._index.get(text)
        if code is None:
            code = self._index[text] = len(self.names)
            self.names.append(text)
        self.codes.append(code)

    def categorical(self, start: int = 0, stop: int | None = None) -> pd.Categorical:
        """Texts ``start:stop`` as a pandas categorical holding only the texts used there, in text order."""
        codes = self.codes.array(start, stop)
        used = sorted(np.unique(codes).tolist(), key=self.names.__getitem__)  # in text order, as pandas sorts
        remap = np.full(len(self.names) or 1, -1, dtype=np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        return pd.Categorical.from_codes(remap[codes] if len(codes) else codes,
                                         categories=[self.names[i] for i in used])

    def values(self, start: int = 0, stop: int | None = None) -> list[str]:
        """Texts ``start:stop`` as a list of strings."""
        names = self.names
        return [names[i] for i in self.codes.array(start, stop).tolist()]
