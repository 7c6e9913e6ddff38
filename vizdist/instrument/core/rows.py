"""The one row builder: what arrived at (worker, step, replica) -> ``elements`` and ``batches`` rows.

Every instrument (``trace_distribution``, ``watch``, ``compare_shard_policies``,
the tf.data service, parameter servers) hands :class:`Recorder` one call of
:meth:`Recorder.add` per (step, replica) with the ids (or raw tags) that
arrived there, and gets back tables with one set of rules:

* ``position`` is the index inside that replica's batch (0, 1, ...);
* ``empty`` is ``n_elements == 0``;
* ``partial`` is true for a non-empty batch of a step whose *global* batch
  (all replicas of all workers) is shorter than the global batch size
  (:func:`partial_flags`; one process sees only its own replicas, so a
  multi-worker recorder passes the global per-step totals, e.g. from one
  all-reduce, or the merged table is re-marked with :func:`mark_partial`);
* ``worker`` is the task's number in the cluster, :func:`task_number`
  (chief 0, then the workers, then evaluators), the number TensorFlow gives
  the task's replicas too;
* ``device`` (and ``replica_device``, ``source_file``, ``shape``, ``dtype``)
  are categorical columns: a run repeats a handful of strings millions of
  times.

Storage is columnar (:class:`Column`): each ``add`` appends its ids (or raw
tags) and a few numbers, packed into numpy chunks of their own dtype every
1,024 batches, the texts as codes; raw tags are decoded once, in chunks, when
the tables are built. No Python object per element or per batch is kept, so a
batch costs about 30 bytes plus 8 per element while it is recorded.

Example (a 4-replica step whose global batch of 8 is short: 6 arrived):

    >>> import numpy as np
    >>> rec = Recorder(worker=0)
    >>> for r, ids in enumerate([[0, 1], [2, 3], [4, 5], []]):
    ...     _ = rec.add(0, r, ids=np.array(ids), device=f"/device:CPU:{r}", shape=(len(ids),), dtype="int64")
    >>> e, b = rec.tables(global_batch_size=8)
    >>> e[["replica", "position", "source_id"]].values.tolist()[:3]
    [[0, 0, 0], [0, 1, 1], [1, 0, 2]]
    >>> b[["replica", "n_elements", "empty", "partial"]].values.tolist()
    [[0, 2, False, True], [1, 2, False, True], [2, 2, False, True], [3, 0, True, False]]
    >>> task_number("worker", 0, {"chief": ["h:1"], "worker": ["h:2", "h:3"]})
    1

With tags (``tag_dataset``), pass ``decode`` once and ``tags=`` to ``add``:
``Recorder(worker=w, decode=lambda t: decode_tags(t, tagged.info))``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from vizdist.instrument.core.columns import Column, Texts
from vizdist.instrument.core.workers import (
    num_workers,
    replica_devices,
    strategy_name,
    task_number,
    worker_position,
)

# Where a strategy's replicas are (workers.py) and the columnar storage (columns.py) live in modules of their own;
# their names stay importable from here.
__all__ = ["Column", "Recorder", "mark_partial", "num_workers", "partial_flags", "replica_devices", "strategy_name",
           "task_number", "worker_position"]

#: Elements decoded per chunk when tables are built (bounds the temporary memory of decoding).
DECODE_CHUNK = 1 << 16


def partial_flags(
    steps: np.ndarray, n_elements: np.ndarray, global_batch_size: int | None,
    totals: Mapping[int, int] | np.ndarray | None = None,
) -> np.ndarray:
    """The ``partial`` rule: a non-empty batch of a step whose global batch is short.

    ``totals`` gives the elements of each step over *all* replicas of all
    workers (array indexed by step, or a mapping); without it they are
    summed from the rows given, which must then be the whole step.

    Example:
        >>> partial_flags(np.array([0, 0, 1, 1]), np.array([2, 2, 2, 0]), 4).tolist()
        [False, False, True, False]
    """
    steps, n = np.asarray(steps, dtype=np.int64), np.asarray(n_elements, dtype=np.int64)
    if not global_batch_size or not len(steps):
        return np.zeros(len(steps), dtype=bool)
    if totals is None:
        totals = np.bincount(steps, weights=n, minlength=int(steps.max()) + 1).astype(np.int64)
    elif isinstance(totals, Mapping):
        size = max([int(steps.max()), *map(int, totals)]) + 1
        arr = np.zeros(size, dtype=np.int64)
        for s, v in totals.items():
            arr[int(s)] = int(v)
        totals = arr
    per_step = np.asarray(totals, dtype=np.int64)[steps]
    return (n > 0) & (per_step < int(global_batch_size))


def mark_partial(batches: pd.DataFrame, global_batch_size: int | None) -> pd.DataFrame:
    """Re-mark ``empty``/``partial`` of a *merged* batches table (all workers) with the one rule.

    Rows whose ``step`` is negative (not a step of a loop) are left unpartial.

    Example:
        >>> b = pd.DataFrame({"step": [0, 0, 1, 1], "n_elements": [2, 2, 2, 0]})
        >>> mark_partial(b, 4)["partial"].tolist()
        [False, False, True, False]
    """
    out = batches.copy()
    steps = out["step"].to_numpy(dtype=np.int64)
    n = out["n_elements"].to_numpy(dtype=np.int64)
    ok = steps >= 0
    flags = np.zeros(len(out), dtype=bool)
    flags[ok] = partial_flags(steps[ok], n[ok], global_batch_size)
    out["empty"] = n == 0
    out["partial"] = flags
    return out


_BATCH_INTS = {"step": "int64", "replica": "int32", "worker": "int32", "n_elements": "int32"}
_BATCH_TEXTS = ("device", "replica_device", "shape", "dtype", "result")


class Recorder:
    """Collects what arrived at each (step, replica) and builds the ``elements`` / ``batches`` tables.

    Args:
        worker: this process's task number (:func:`task_number`); rows get it
            unless :meth:`add` is given per-element workers.
        decode: ``tags -> {"source", "source_id", "source_file", "source_line", "epoch"}``
            arrays (``lambda t: decode_tags(t, info)``); needed to pass ``tags=``.

    Storage is columnar (:class:`Column`): a batch costs about 30 bytes plus 8 per element while recorded.
    :meth:`drain` hands over the rows recorded so far and forgets them (a recording streamed to disk).

    Example:
        >>> rec = Recorder(worker=1)
        >>> rec.add(0, 2, ids=np.array([5, 6]), device="/device:CPU:0", batch={"policy": "DATA"})
        2
        >>> e, b = rec.tables()
        >>> e[["worker", "replica", "position", "source_id"]].values.tolist()
        [[1, 2, 0, 5], [1, 2, 1, 6]]
        >>> b["policy"].tolist(), str(e["device"].dtype)
        (['DATA'], 'category')
    """

    def __init__(self, *, worker: int = 0, decode: Callable[[np.ndarray], Mapping[str, np.ndarray]] | None = None) -> None:
        self.worker = int(worker)
        self._decode = decode
        self._release = False
        self._reset()

    def _reset(self) -> None:
        self._ints = {k: Column(d) for k, d in _BATCH_INTS.items()}
        self._texts = {k: Texts() for k in _BATCH_TEXTS}
        self._ids = Column("int64")  # every batch's ids (or raw tags when decode is set), one after another
        self._b_extra: dict[str, list[Any]] = {}
        self._e_extra: dict[str, list[Any]] = {}
        self._files: dict[int, Any] = {}  # batch index -> per-element source_file / source_line / source
        self._workers: dict[int, Any] = {}  # batch index -> per-element workers (tf.data service)
        self._n = 0
        self._n_total = 0
        self._cache: tuple[int, pd.DataFrame] | None = None

    def __len__(self) -> int:
        """Number of batches (rows of the ``batches`` table) recorded."""
        return self._n

    @property
    def n_elements(self) -> int:
        """Number of element rows recorded."""
        return self._n_total

    def nbytes(self) -> int:
        """Bytes the recorded rows hold (what :meth:`add` stored; the built tables are not counted)."""
        cols = [*self._ints.values(), *(t.codes for t in self._texts.values()), self._ids]
        return sum(c.nbytes() for c in cols)

    def add(
        self,
        step: int,
        replica: int,
        *,
        ids: Any = None,
        tags: Any = None,
        device: str = "",
        replica_device: str | None = None,
        worker: int | np.ndarray | None = None,
        shape: Sequence[int] | str = (),
        dtype: str = "",
        result: str = "",
        sources: Mapping[str, Any] | None = None,
        elements: Mapping[str, Any] | None = None,
        batch: Mapping[str, Any] | None = None,
    ) -> int:
        """Record the batch that arrived at (``step``, ``replica``); return its number of elements.

        Args:
            step, replica: where it arrived (global replica id).
            ids: source ids of the elements, in batch order (or give ``tags``).
            tags: raw tags, decoded when tables are built (needs ``decode``).
            device: device the batch was on; ``replica_device`` the replica's
                compute device (default: ``device``).
            worker: the task number, or one per element (tf.data service; the
                batch row then gets their common worker, or -1 when they differ).
            shape, dtype, result: the batch's shape, dtype name, and JSON of
                the step function's result for this replica (or ``""``).
            sources: per-element ``source`` / ``source_file`` / ``source_line``
                when ``ids`` are given (default 0 / ``""`` / -1).
            elements: more per-element columns (array of the batch's length, or a scalar).
            batch: more per-batch columns (scalars).
        """
        if self._release:
            raise ValueError("this Recorder's tables were built with release=True; it takes no more rows.")
        if (ids is None) == (tags is None):
            raise ValueError("Recorder.add takes exactly one of ids= or tags=.")
        if tags is not None and self._decode is None:
            raise ValueError("Recorder.add(tags=...) needs Recorder(decode=...) to read them.")
        arr = _int64_vector(tags if tags is not None else ids)
        n = len(arr)
        index = self._n
        ints, texts = self._ints, self._texts
        ints["step"].append(step)
        ints["replica"].append(replica)
        ints["worker"].append(self.worker if worker is None else _batch_worker(worker, self.worker))
        ints["n_elements"].append(n)
        texts["device"].append(device)
        texts["replica_device"].append(device if replica_device is None else replica_device)
        texts["shape"].append(shape if isinstance(shape, str) else str(tuple(shape)))
        texts["dtype"].append(dtype)
        texts["result"].append(result)
        self._ids.extend(arr)
        if sources:
            self._files[index] = sources
        if worker is not None and np.ndim(worker):
            self._workers[index] = worker
        self._n = index + 1
        if batch or self._b_extra:  # the common case (no extra columns) skips both
            self._add_extra(self._b_extra, batch or {}, index, None)
        if elements or self._e_extra:
            self._add_extra(self._e_extra, elements or {}, index, n)
        self._n_total += n
        return n

    @staticmethod
    def _add_extra(store: dict[str, list[Any]], values: Mapping[str, Any], index: int, n: int | None) -> None:
        for k, v in values.items():
            col = store.setdefault(k, [])
            col.extend([None] * (index - len(col)))  # a column first given later: earlier rows missing
            col.append(v if n is None else (np.asarray(v) if np.ndim(v) else np.full(n, v)))
        for col in store.values():
            if len(col) <= index:
                col.append(None)

    # -- tables --------------------------------------------------------------
    def step_totals(self) -> np.ndarray:
        """Elements per step recorded by this process (index = step)."""
        steps = self._ints["step"].array()
        n = self._ints["n_elements"].array().astype(np.int64)
        if not len(steps) or steps.max() < 0:
            return np.zeros(0, dtype=np.int64)
        ok = steps >= 0
        return np.bincount(steps[ok], weights=n[ok], minlength=int(steps.max()) + 1).astype(np.int64)

    def tables(
        self, *, global_batch_size: int | None = None, totals: Mapping[int, int] | np.ndarray | None = None,
        release: bool = False,
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The ``(elements, batches)`` tables (see :func:`partial_flags` for ``totals``).

        ``release=True`` frees the raw ids once the table is built; the recorder then takes no more
        :meth:`add` calls.
        """
        self._release = self._release or release
        return self._elements(), self._batches(global_batch_size, totals)

    def drain(self, *, global_batch_size: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The tables of every batch recorded so far, which the recorder then forgets (it takes more rows).

        Example:
            >>> rec = Recorder()
            >>> _ = rec.add(0, 0, ids=np.array([1, 2]))
            >>> e, b = rec.drain(); _ = rec.add(1, 0, ids=np.array([3]))
            >>> e["source_id"].tolist(), rec.tables()[0]["source_id"].tolist(), len(rec)
            ([1, 2], [3], 1)
        """
        out = self._elements(), self._batches(global_batch_size, None)
        self._reset()
        return out

    def tail(self, batches: int) -> dict[str, Any]:
        """The last ``batches`` batches: ``step``, ``replica``, ``n_elements``, ``device`` (one per batch) and
        ``source_id``, ``source``, ``source_file``, ``source_line`` (their elements, one after another, tags
        decoded).

        Cheap at any length (it reads only those batches): what a live view of a long run follows.

        Example:
            >>> rec = Recorder()
            >>> for s in range(3):
            ...     _ = rec.add(s, 0, ids=np.array([2 * s, 2 * s + 1]), device="CPU:0")
            >>> t = rec.tail(2); t["step"].tolist(), t["source_id"].tolist()
            ([1, 2], [2, 3, 4, 5])
        """
        lo = max(self._n - batches, 0)
        n = self._ints["n_elements"].array(lo).astype(np.int64)
        raw = self._ids.array(self._n_total - int(n.sum()))
        out = {"step": self._ints["step"].array(lo), "replica": self._ints["replica"].array(lo).astype(np.int64),
               "n_elements": n, "device": self._texts["device"].values(lo)}
        return {**out, **self._tail_sources(raw, lo, n)}

    def _tail_sources(self, raw: np.ndarray, lo: int, n: np.ndarray) -> dict[str, np.ndarray]:
        """``source_id``, ``source``, ``source_file``, ``source_line`` of the elements of :meth:`tail`, the
        batches from ``lo`` on (``n`` elements each): tags decoded, or the sources given with each batch."""
        out = {"source_id": np.array(raw, dtype=np.int64), "source": np.zeros(len(raw), np.int64),
               "source_file": np.full(len(raw), "", dtype=object), "source_line": np.full(len(raw), -1, np.int64)}
        given: list[tuple[int, int, Any]]
        if self._decode is not None and len(raw):
            given = [(0, len(raw), self._decode(raw))]
        else:
            starts = (np.cumsum(n) - n).tolist()
            given = [(s0, s0 + k, self._files.get(lo + i)) for i, (s0, k) in enumerate(zip(starts, n.tolist(),
                                                                                             strict=True))]
        keys = ("source", "source_line", "source_file") + (("source_id",) if self._decode is not None else ())
        for s0, s1, g in given:
            for k in keys if g else ():
                if k in g:  # as _fill_sources reads them
                    out[k][s0:s1] = np.asarray(g[k], dtype=object if k == "source_file" else np.int64)
        return out

    def _batches(self, global_batch_size: int | None, totals: Any) -> pd.DataFrame:
        ints, texts = self._ints, self._texts
        n = ints["n_elements"].array().astype(np.int64)
        steps = ints["step"].array()
        cols: dict[str, Any] = {
            "step": steps, "replica": ints["replica"].array().astype(np.int64),
            "worker": ints["worker"].array().astype(np.int64), "device": texts["device"].categorical(),
            "replica_device": texts["replica_device"].categorical(), "n_elements": n,
            "shape": texts["shape"].categorical(), "dtype": texts["dtype"].categorical(),
            "empty": n == 0, "partial": partial_flags(steps, n, global_batch_size, totals),
            "result": np.asarray(texts["result"].values(), dtype=object),
        }
        for k, v in self._b_extra.items():
            cols[k] = v + [None] * (self._n - len(v))
        return pd.DataFrame(cols, copy=False)

    def _elements(self) -> pd.DataFrame:
        """The elements table, filled chunk by chunk: temporary memory is bounded by DECODE_CHUNK.

        Built once per state of the recorder (a later :meth:`add` builds it again).
        """
        if self._cache is not None and self._cache[0] == len(self):
            return self._cache[1]
        ints, texts = self._ints, self._texts
        counts = ints["n_elements"].array().astype(np.int64)
        total = int(counts.sum())
        cols: dict[str, Any] = {k: np.empty(total, dtype=np.int64) for k in (
            "step", "replica", "worker", "source_id", "source", "source_line", "epoch", "position")}
        per_batch = {k: ints[k].array().astype(np.int64) for k in ("step", "replica", "worker")}
        cats = {k: texts[k].categorical() for k in ("device", "replica_device")}
        codes = {k: np.empty(total, dtype=c.codes.dtype) for k, c in cats.items()}
        files = _Files(total)
        starts = np.concatenate([[0], np.cumsum(counts)])
        at = 0
        for lo, hi in self._chunk_bounds(counts):
            c = counts[lo:hi]
            n = int(c.sum())
            sl = slice(at, at + n)
            for k, v in per_batch.items():
                cols[k][sl] = np.repeat(v[lo:hi], c)
            for k, cat in cats.items():
                codes[k][sl] = np.repeat(cat.codes[lo:hi], c)
            cols["position"][sl] = np.arange(n) - np.repeat(np.cumsum(c) - c, c)
            self._fill_workers(lo, hi, cols["worker"][sl], c)
            self._fill_sources(lo, hi, c, cols, files, sl, int(starts[lo]))
            at += n
        if self._release:
            self._ids = Column("int64")
        ordered = {k: cols[k] for k in ("step", "replica", "worker")}
        ordered["device"] = pd.Categorical.from_codes(codes["device"], categories=cats["device"].categories)
        ordered.update({k: cols[k] for k in ("source_id", "source")})
        ordered["source_file"] = files.categorical()
        ordered.update({k: cols[k] for k in ("source_line", "position")})
        ordered["epoch"] = cols["epoch"]
        ordered["consumer"] = np.full(total, -1, dtype=np.int64)
        ordered["replica_device"] = pd.Categorical.from_codes(codes["replica_device"],
                                                              categories=cats["replica_device"].categories)
        ordered.update({k: v for k, v in cols.items() if k not in _BUILT})
        for k, parts in self._e_extra.items():
            parts = parts + [None] * (self._n - len(parts))
            ordered[k] = np.concatenate([p if p is not None else np.full(c, None) for p, c in zip(parts, counts, strict=True)])
        frame = pd.DataFrame(ordered, copy=False)
        self._cache = (len(self), frame)
        return frame

    def _chunk_bounds(self, counts: np.ndarray) -> Any:
        """Yield (first, end) batch indexes of runs of batches holding about DECODE_CHUNK elements."""
        lo, size = 0, 0
        for i, n in enumerate(counts.tolist()):
            size += n
            if size >= DECODE_CHUNK:
                yield lo, i + 1
                lo, size = i + 1, 0
        if lo < len(counts):
            yield lo, len(counts)

    def _fill_workers(self, lo: int, hi: int, out: np.ndarray, c: np.ndarray) -> None:
        """Per-element workers given to :meth:`add` (tf.data service) over the batch's own."""
        if not self._workers:
            return
        at = 0
        for i, n in zip(range(lo, hi), c.tolist(), strict=True):
            w = self._workers.get(i)
            if w is not None:
                out[at:at + n] = np.asarray(w, dtype=np.int64).reshape(-1)
            at += n

    def _fill_sources(self, lo: int, hi: int, c: np.ndarray, cols: dict[str, np.ndarray], files: _Files,
                      sl: slice, first: int) -> None:
        """``source_id``, ``source``, ``source_file``, ``source_line`` of one chunk (tags decoded here)."""
        raw = self._ids.array(first, first + int(c.sum()))
        parts: list[tuple[int, int, Any]]
        if self._decode is not None:
            parts = [(0, len(raw), self._decode(raw))]
        else:
            cols["source_id"][sl] = raw
            starts = (np.cumsum(c) - c).tolist()
            parts = [(s0, s0 + n, self._files.get(i)) for s0, n, i in zip(starts, c.tolist(), range(lo, hi),
                                                                          strict=True)]
        cols["source"][sl] = 0
        cols["source_line"][sl] = -1
        cols["epoch"][sl] = 0
        base = sl.start
        for s0, s1, given in parts:
            if not given:
                continue
            part = slice(base + s0, base + s1)
            if self._decode is not None:
                cols["source_id"][part] = np.asarray(given["source_id"], dtype=np.int64)
            for k in ("source", "source_line", "epoch"):
                if k in given:
                    cols[k][part] = np.asarray(given[k], dtype=np.int64)
            for k in set(given).difference(_DECODED):  # more int columns a decoder gives (service_worker)
                cols.setdefault(k, np.full(len(files.codes), -1, dtype=np.int64))[part] = given[k]
            if "source_file" in given:
                files.fill(part, given["source_file"])


_DECODED = {"source", "source_id", "source_line", "epoch", "source_file"}
_BUILT = {"step", "replica", "worker", "source_id", "source", "source_line", "epoch", "position"}


def _int64_vector(values: Any) -> np.ndarray:
    """``values`` as a 1-D int64 array (no copy when it already is one: the per-step case)."""
    if type(values) is np.ndarray and values.dtype == np.int64 and values.ndim == 1:
        return values
    return np.asarray(values, dtype=np.int64).reshape(-1)


class _Files:
    """The ``source_file`` column as category codes, grown chunk by chunk."""

    def __init__(self, total: int) -> None:
        self.codes = np.zeros(total, dtype=np.int32)
        self.names: dict[str, int] = {"": 0}

    def fill(self, part: slice, values: Any) -> None:
        n = part.stop - part.start
        if isinstance(values, str):
            self.codes[part] = self.names.setdefault(values, len(self.names))
            return
        if isinstance(values, pd.Categorical):  # decode_tags: codes already, no hashing per element
            lookup = np.array([self.names.setdefault(str(c), len(self.names)) for c in values.categories] or [0],
                              dtype=np.int32)
            self.codes[part] = lookup[values.codes] if n else 0
            return
        codes, uniques = pd.factorize(np.asarray(values, dtype=object).reshape(-1))
        lookup = np.array([self.names.setdefault(str(u), len(self.names)) for u in uniques] or [0], dtype=np.int32)
        self.codes[part] = lookup[codes] if n else 0

    def categorical(self) -> pd.Categorical:
        cats = list(self.names)
        dtype = np.int8 if len(cats) < 127 else np.int16 if len(cats) < 32767 else np.int32
        return pd.Categorical.from_codes(self.codes.astype(dtype, copy=False), categories=cats)


def _batch_worker(worker: Any, default: int) -> int:
    """The batch's worker: the one given, the one all its elements share, or -1 when they differ."""
    if worker is None:
        return default
    if not np.ndim(worker):
        return int(worker)
    uniq = np.unique(np.asarray(worker))
    return int(uniq[0]) if len(uniq) == 1 else (default if len(uniq) == 0 else -1)
