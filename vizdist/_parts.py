"""A recording streamed to disk: ``vizdist.record(path=FOLDER)`` writes it in parts; ``load_trace(FOLDER)`` joins them.

A part is one Parquet trace, in the folder layout :meth:`vizdist.Trace.save` writes for ``*.parquet``
(``meta.json`` and one Parquet file per table), holding every step the block recorded since the previous
part: each step whole, with its ``phase``, ``epoch`` and ``epoch_step``. Its meta is the block's meta so
far, stamped with the task that wrote it (``"task": "worker-0"``, as :func:`vizdist.record_worker_shard`
stamps a shard) and ``meta["recording"]``: ``run`` (one ``record()`` block: when it started, then a random
part), ``part`` (0, 1, ...), ``first_step`` and ``steps`` (the steps it holds), ``ended`` (the block ended:
this is its last part) and ``error`` (how the block ended, if by an exception).

Names: ``record-<task type>-<task index>-<run>-<part>.parquet`` (:func:`part_name`), so a listing sorts by
task, then by when each run started, then by part. A part is whole or absent: its tables are written
first, each beside its name and renamed into place, and its ``meta.json`` last; a part without one is
still being written (or its writer stopped) and is not read. The part's own folder is created
exclusively: something already at its name (a planted link) is never written into.

Loading (:func:`load_recording`) joins each run's parts; several runs of one task (a crashed script and
its resumed run) follow each other in the order they started, their steps and datasets numbered on
after the previous run's (``meta["recording"]["runs"]`` says where each begins), so the trace reads as
one long block; the tasks of a cluster merge as shards do (:meth:`vizdist.Trace.merge`).

Example:
    >>> import tempfile
    >>> from vizdist._storage import LOCAL
    >>> d = tempfile.mkdtemp()
    >>> t = Trace.from_records(batches=[dict(step=0, replica=0, n_elements=1)],
    ...                        elements=[dict(step=0, replica=0, source_id=5)], meta={"api": "record"})
    >>> name = part_name("worker", 0, "0000000000000000001x00000000", 0)
    >>> _ = write_part(LOCAL, d, name, stamp(t, run="0000000000000000001x00000000", part=0, task="worker-0",
    ...                                             first_step=0, steps=1, ended=True))
    >>> load_recording(d).elements["source_id"].tolist()
    [5]
"""

from __future__ import annotations

import io
import json
import re
import secrets
import time
import warnings
from collections.abc import Sequence
from typing import Any

import pandas as pd

from vizdist._loadcheck import Limits, OverLimit, check_rows
from vizdist._storage import FileSystem, for_path, scheme_of
from vizdist.errors import TraceFormatError
from vizdist.trace import FORMAT, TABLES, VERSION, Trace

__all__ = ["PART_NAME", "concat_frames", "is_recording", "join_parts", "load_recording", "new_run", "part_name", "stamp",
           "write_part"]

#: A part's folder name: ``record-<task type>-<index>-<run>-<part>.parquet``.
PART_NAME = re.compile(r"record-(chief|worker|evaluator|ps)-(\d{5})-(\d{19}x[0-9a-f]{8})-(\d{6})\.parquet")
PART_FILES = ("meta.json", *(f"{name}.parquet" for name in TABLES))


def new_run() -> str:
    """A run's id: when it started (ns since the epoch, so runs sort in start order), then 8 random hex digits."""
    return f"{time.time_ns():019d}x{secrets.token_hex(4)}"


def part_name(task_type: str, task_index: int, run: str, part: int) -> str:
    """The folder name of part ``part`` of ``run``, written by task ``task_type:task_index``.

    Example:
        >>> part_name("worker", 1, "0000000000000000001x0000abcd", 2)
        'record-worker-00001-0000000000000000001x0000abcd-000002.parquet'
    """
    name = f"record-{task_type}-{int(task_index):05d}-{run}-{int(part):06d}.parquet"
    if not PART_NAME.fullmatch(name):
        raise ValueError(f"not a part name: {name!r} (task type one of chief, worker, evaluator, ps).")
    return name


def stamp(trace: Trace, *, run: str, part: int, task: str, first_step: int, steps: int, ended: bool,
          error: str | None = None) -> Trace:
    """``trace`` with the part's ``task`` and ``recording`` meta (see the module docs)."""
    recording = {"run": run, "part": part, "first_step": first_step, "steps": steps, "ended": ended,
                 "error": error}
    return Trace(elements=trace.elements, batches=trace.batches, events=trace.events,
                 meta={**trace.meta, "task": task, "recording": recording})


def write_part(fs: FileSystem, folder: str, name: str, trace: Trace) -> str:
    """Write ``trace`` as the part ``name`` of ``folder``: its tables, then its ``meta.json``; return its path.

    Raises:
        FileExistsError: something is already at the part's name (never written into).
    """
    pa, pq = _arrow()
    part = fs.join(folder, name)
    fs.mkdir_new(part)
    for table in TABLES:
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(getattr(trace, table), preserve_index=False), buf)
        fs.write(fs.join(part, f"{table}.parquet"), buf.getvalue())
    head = {"format": FORMAT, "version": VERSION, "storage": "parquet", "meta": trace.meta}
    fs.write(fs.join(part, "meta.json"), json.dumps(head, separators=(",", ":"), allow_nan=False).encode())
    return part


def _arrow() -> tuple[Any, Any]:
    from vizdist._optional import require

    return (require("pyarrow", pip="pyarrow", conda="pyarrow"),
            require("pyarrow.parquet", pip="pyarrow", conda="pyarrow"))


def is_recording(path: Any) -> bool:
    """Whether ``path`` is a folder ``record(path=...)`` wrote (a URL always is one to vizdist)."""
    if scheme_of(path) not in ("", "file"):
        return True
    fs, folder = for_path(path)
    if not fs.isdir(folder):
        return False
    return any(PART_NAME.fullmatch(name) for name, _ in fs.entries(folder))


class _Budget:
    """Bytes a load may still read, for the folder as a whole (as one trace file's ``max_bytes``)."""

    def __init__(self, limits: Limits, where: str) -> None:
        self.left, self.limits, self.where = limits.max_bytes, limits, where

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise OverLimit(f"folder {self.where}: its parts hold more than max_bytes={self.limits.max_bytes} bytes "
                            "together; to read it on purpose, pass load_trace(..., max_bytes=...)")


def _read(fs: FileSystem, path: str, budget: _Budget) -> bytes:
    data = fs.read(path, limit=max(budget.left, 0))
    budget.take(len(data))
    return data


def _listing(fs: FileSystem, folder: str) -> tuple[list[tuple[str, re.Match[str]]], list[dict[str, str]]]:
    """The whole parts of ``folder`` (name order) and what was not read, with why."""
    parts, skipped = [], []
    for name, kind in fs.entries(folder):
        m = PART_NAME.fullmatch(name)
        path = fs.join(folder, name)
        if m is None:
            if not name.startswith("."):  # vizdist's own temporary files start with a dot
                skipped.append({"path": path, "reason": "not a part of a recording (record-<task>-<index>-<run>-"
                                                        "<part>.parquet folders, as vizdist.record(path=) writes)"})
            continue
        if kind != "dir":
            skipped.append({"path": path, "reason": f"a {'symbolic link' if kind == 'link' else kind}, not a part's "
                                                    "folder (a part is read only from a folder of its own)"})
            continue
        inside = dict(fs.entries(path))
        if inside.get("meta.json") != "file":
            skipped.append({"path": path, "reason": "incomplete: no meta.json yet (being written, or its writer "
                                                    "stopped before finishing it)"})
            continue
        bad = [f for f in PART_FILES if inside.get(f) != "file"]
        if bad:
            raise TraceFormatError(f"{path!r} is a damaged part: {', '.join(bad)} "
                                   f"{'is' if len(bad) == 1 else 'are'} missing or not a regular file.")
        parts.append((name, m))
    return parts, skipped


def _read_part(fs: FileSystem, path: str, budget: _Budget, limits: Limits) -> Trace:
    _, pq = _arrow()
    source = repr(path)
    try:
        head = json.loads(_read(fs, fs.join(path, "meta.json"), budget))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceFormatError(f"{source} has an unreadable meta.json ({type(exc).__name__}: {exc}).") from None
    tables = {}
    for table in TABLES:
        data = _read(fs, fs.join(path, f"{table}.parquet"), budget)
        try:
            f = pq.ParquetFile(io.BytesIO(data))
            check_rows(table, f.metadata.num_rows, limits)  # as declared, before reading any
            tables[table] = f.read().to_pandas()
        except OverLimit as exc:
            raise OverLimit(f"{source}: {exc}") from None
        except Exception as exc:  # pyarrow raises many types
            raise TraceFormatError(f"{source}: {table}.parquet is not readable Parquet ({exc}).") from None
    return Trace.from_frames(head, tables, source=source, limits=limits)


def concat_frames(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Rows of ``frames`` one after the other; a text column categorical in each stays categorical."""
    frames = [f for f in frames if len(f.columns)]
    if len(frames) <= 1:
        return frames[0].reset_index(drop=True) if frames else pd.DataFrame()
    cats = [c for c in frames[0].columns
            if all(c in f.columns and isinstance(f[c].dtype, pd.CategoricalDtype) for f in frames)]
    if cats:
        union = {c: sorted(set().union(*(f[c].cat.categories for f in frames))) for c in cats}
        frames = [f.assign(**{c: f[c].cat.set_categories(union[c]) for c in cats}) for f in frames]
    return pd.concat(frames, ignore_index=True)


def join_parts(parts: Sequence[Trace]) -> Trace:
    """One run's parts (in order) as one trace: their rows one after the other, the last part's meta."""
    if not parts:
        raise ValueError("join_parts needs at least one part.")
    return Trace(**{t: concat_frames([getattr(p, t) for p in parts]) for t in TABLES}, meta=parts[-1].meta)


_COMMON = ("kind", "strategy", "num_replicas", "devices", "tf_version", "host", "gpus", "num_workers", "task",
           "worker")


def _shift(df: pd.DataFrame, column: str, by: int) -> pd.DataFrame:
    if by and column in df.columns and len(df):
        values = df[column].to_numpy()
        df = df.assign(**{column: values + by * (values >= 0)})  # -1 (no step) stays -1
    return df


def join_runs(runs: Sequence[Trace]) -> Trace:
    """Several runs of one task, in the order they started, as one long block (see the module docs)."""
    if len(runs) == 1:
        return runs[0]
    tables: dict[str, list[pd.DataFrame]] = {t: [] for t in TABLES}
    datasets: list[Any] = []
    passes: list[Any] = []
    infos, steps = [], 0
    for t in runs:
        n_ds = len(datasets)
        for name in TABLES:
            tables[name].append(_shift(_shift(getattr(t, name), "step", steps), "dataset", n_ds))
        datasets.extend(t.meta.get("datasets") or [])
        passes.extend({**p, "dataset": p["dataset"] + n_ds, "first_step": p["first_step"] + steps}
                      for p in t.meta.get("passes") or [])
        rec = dict(t.meta.get("recording") or {})
        infos.append({k: rec.get(k) for k in ("run", "error")} | {"first_step": steps, "first_dataset": n_ds})
        steps += int(t.meta.get("steps_run") or 0)
    metas: list[dict[str, Any]] = [dict(r.meta) for r in runs]
    meta = {k: metas[0][k] for k in _COMMON if k in metas[0] and all(m.get(k) == metas[0][k] for m in metas)}
    meta.update(api="record", datasets=datasets, passes=passes, steps_run=steps, stopped="end_of_block",
                recording={"runs": infos})
    joined = [x for m in metas for x in m.get("not_recorded") or []]
    if joined:
        meta["not_recorded"] = joined
    return Trace(**{t: concat_frames(frames) for t, frames in tables.items()}, meta=meta)


def load_recording(path: Any, *, limits: Limits | None = None, run: str | None = None,
                   parts: int | None = None) -> Trace:
    """The trace of the folder ``record(path=...)`` wrote (only ``run``'s parts if given, only its first
    ``parts`` parts if given), read while it is written too: every part written whole so far.

    Raises:
        TraceFormatError: a part is damaged, or parts of a run are missing between the ones there.
        FileNotFoundError: no folder at ``path``.
    """
    limits = limits or Limits()
    fs, folder = for_path(path)
    if not fs.isdir(folder):
        raise FileNotFoundError(f"no recording folder at {folder!r}: check the path.")
    listed, skipped = _listing(fs, folder)
    budget = _Budget(limits, repr(folder))
    by_task: dict[tuple[str, int], dict[str, list[Trace]]] = {}
    for name, m in listed:
        if (run is not None and m[3] != run) or (parts is not None and int(m[4]) >= parts):
            continue
        runs = by_task.setdefault((m[1], int(m[2])), {})
        got = runs.setdefault(m[3], [])
        if int(m[4]) != len(got):
            raise TraceFormatError(f"{fs.join(folder, name)!r} is part {int(m[4])} of run {m[3]}, but part "
                                   f"{len(got)} is missing or incomplete: the steps it held are not in the folder.")
        got.append(_read_part(fs, fs.join(folder, name), budget, limits))
    if not by_task:
        raise TraceFormatError(f"folder {folder!r} holds no whole part of a recording yet"
                               + (f" (of run {run})" if run else "")
                               + "; " + "; ".join(f"{s['path']}: {s['reason']}" for s in skipped[:5]))
    bad = [s for s in skipped if not s["reason"].startswith("incomplete")]
    if bad:
        lines = "".join(f"\n  {s['path']}: {s['reason']}" for s in bad)
        warnings.warn(f"load_trace({folder!r}) skipped {len(bad)} entr{'y' if len(bad) == 1 else 'ies'}:{lines}",
                      stacklevel=3)
    tasks = [join_runs([join_parts(p) for _, p in sorted(runs.items())]) for _, runs in sorted(by_task.items())]
    trace = tasks[0] if len(tasks) == 1 else Trace.merge(tasks)
    for name in TABLES:
        check_rows(name, len(getattr(trace, name)), limits)
    if skipped:
        trace = Trace(elements=trace.elements, batches=trace.batches, events=trace.events,
                      meta={**trace.meta, "skipped": skipped})
    return trace
