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
The tables' columns and how a column is stored are :mod:`vizdist._tables`,
a file's head (format, version, meta) :mod:`vizdist._head`, reading files
and shard folders :mod:`vizdist._tracefiles`; their public names are
importable from here too.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(
    ...     elements=[dict(step=0, replica=0, device="CPU:0", source_id=3)])
    >>> t.elements[["step", "replica", "source_id"]].values.tolist()
    [[0, 0, 3]]
"""

from __future__ import annotations

import gzip
import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vizdist import views
from vizdist._clip import ellipsis
from vizdist._files import write_file, write_folder
from vizdist._head import (
    FORMAT,
    READS,
    VERSION,
    damaged,
    head_meta,
    json_meta,
    merged_meta,
    meta_json,
    nonfinite_key,
)
from vizdist._loadcheck import Budget, Limits, OverLimit, check_rows
from vizdist._tables import (
    EXTRA_COLUMNS,
    PASS_COLUMNS,
    SCHEMA,
    TABLES,
    arrow_table,
    check_tables,
    column_to_json,
    joined_columns,
    normalize,
    plain_text,
    table_from_json,
)
from vizdist._tracefiles import (
    NOT_A_SHARD,
    PARQUET_FILES,
    SHARD_NAME,
    check_task,
    folder_listing,
    never_replace,
    parquet_trace_folder,
    read_json,
    read_parquet_trace,
    shard_name,
)
from vizdist.contract import KINDS, TraceMeta, validate_meta
from vizdist.errors import TraceFormatError

# KINDS and validate_meta: the meta contract (vizdist/contract.py), re-exported beside SCHEMA. The trace's
# tables (vizdist/_tables.py), its head (vizdist/_head.py) and its files (vizdist/_tracefiles.py) live in modules
# of their own; their public names stay importable from here.
__all__ = ["EXTRA_COLUMNS", "FORMAT", "KINDS", "NOT_A_SHARD", "PARQUET_FILES", "PASS_COLUMNS", "READS", "SCHEMA",
           "SHARD_NAME", "TABLES", "VERSION", "Trace", "TraceFormatError", "load_trace", "nonfinite_key",
           "shard_name", "validate_meta"]


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
        self.elements = normalize("elements", elements)
        self.batches = normalize("batches", batches)
        self.events = normalize("events", events)
        self.meta: TraceMeta = validate_meta(json_meta(meta))

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
        return cls(**tables, meta=merged_meta(traces, meta))

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
                dtype, values = column_to_json(df[col], name)
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
        meta = head_meta(doc, source, limits)
        with damaged(source):
            tables = {name: table_from_json(name, doc["tables"][name], limits) for name in TABLES}
            check_tables(tables, limits)
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
        meta = head_meta(head, source, limits)
        with damaged(source):
            check_tables(tables, limits)
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
        data = (f'{{"format":{json.dumps(FORMAT)},"version":{VERSION},"meta":{meta_json(self.meta)},'
                f'"tables":{tables}}}').encode()
        if name.endswith(".gz"):
            data = gzip.compress(data)
        write_file(p, lambda fh: fh.write(data), replace=overwrite)
        return p

    def _save_parquet(self, p: Path, *, overwrite: bool) -> Path:
        from vizdist._optional import require

        pq = require("pyarrow.parquet", pip="pyarrow", conda="pyarrow")
        tables = {name: arrow_table(name, getattr(self, name)) for name in TABLES}  # every check before any write
        head = (f'{{"format":{json.dumps(FORMAT)},"version":{VERSION},"storage":"parquet",'
                f'"meta":{meta_json(self.meta)}}}').encode()

        def fill(folder: Path) -> None:
            for name, table in tables.items():
                # mypy infers no type for a lambda with a default argument (it binds this loop's table)
                write_file(folder / f"{name}.parquet", lambda fh, table=table: pq.write_table(table, fh))  # type: ignore[misc]
            write_file(folder / "meta.json", head)

        p.parent.mkdir(parents=True, exist_ok=True)
        # written beside, then swapped in whole: a failed save leaves the old trace, never a mix
        return write_folder(p, fill, replaceable=parquet_trace_folder if overwrite else never_replace)

    # -- comparison and display --------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        if self.meta != other.meta:
            return False
        for name in TABLES:
            a, b = plain_text(getattr(self, name)), plain_text(getattr(other, name))
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
            f"strategy={ellipsis(str(m.get('strategy', '?')), 80)}",
            f"replicas={m.get('num_replicas', len(self.replicas))}",
            f"steps={len(self.steps)}",
            f"elements={len(self.elements)}",
        ]
        if len(self.events):
            parts.append(f"events={len(self.events)}")
        return "Trace(" + ", ".join(parts) + ")"


def _load_parquet(p: Path, limits: Limits) -> Trace:
    meta, tables = read_parquet_trace(p, limits)
    with damaged(repr(str(p))):
        check_tables(tables, limits)
        return Trace(**tables, meta=meta)


def _load_entry(c: Path, limits: Limits, budget: Budget) -> Trace:
    """One shard of a folder, opened without following links (the entry may have changed since listed)."""
    trace = Trace.from_dict(read_json(c, limits, follow=False, budget=budget), source=repr(str(c)), limits=limits)
    check_task(c, trace.meta)
    return trace


class _Shard:
    """One shard's meta, for :func:`merged_meta` (the fast path builds no Trace per shard)."""

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
        docs = [read_json(c, limits, follow=False, budget=budget) for c in entries]
        metas = [head_meta(d, repr(str(c)), limits) for d, c in zip(docs, entries, strict=True)]
        for c, m in zip(entries, metas, strict=True):
            check_task(c, m)
        raw = {name: joined_columns([d["tables"][name] for d in docs]) for name in TABLES}
        if any(r is None for r in raw.values()):
            return None
        with damaged(f"folder {str(p)!r}"):
            tables = {name: table_from_json(name, raw[name], limits) for name in TABLES}
            check_tables(tables, limits)
            return Trace(**tables, meta=merged_meta([_Shard(m) for m in metas], None))
    except OverLimit as exc:
        if str(exc).startswith("folder "):
            raise  # the folder as a whole is over a bound: no shard is at fault
        return None
    except (TraceFormatError, ValueError, TypeError, KeyError):
        return None


def _load_folder(p: Path, errors: str, limits: Limits) -> Trace:
    """Merge the shards of a folder (regular files named as shards only; see :func:`load_trace`)."""
    entries, skipped = folder_listing(p, errors)
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
    with damaged(f"folder {where}"):
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
    return Trace.from_dict(read_json(p, limits), source=repr(str(p)), limits=limits)
