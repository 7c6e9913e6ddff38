"""Trace files on disk: read safely, and what a save may replace.

:func:`read_json` reads one JSON trace file (bounded as it is read, gunzipped for ``.gz``, a link refused where
asked); :func:`parquet_table` one table of a Parquet trace, its bounds checked before its data is read. A folder
of shards holds only files named as :func:`shard_name` names them (:func:`folder_listing` says which entries are
read, and why the others are not; :func:`check_task` keeps a copy of a shard under another task's name out).
:func:`parquet_trace_folder` says whether an existing folder may be replaced by a saved Parquet trace. Read by
:mod:`vizdist.trace`, which builds the :class:`~vizdist.trace.Trace` and re-exports the public names.

Example:
    >>> shard_name("worker", 3), shard_task(Path("worker-chief-00000.json")), shard_task(Path("notes.json"))
    ('worker-worker-00003.json', 'chief-0', '')
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from vizdist._clip import ellipsis
from vizdist._files import NotRegularFile, open_regular
from vizdist._head import head_meta
from vizdist._loadcheck import Budget, Limits, OverLimit, check_rows, read_compact
from vizdist._tables import TABLES, storable_arrow
from vizdist.contract import TASK_TYPES, TraceMeta
from vizdist.errors import TraceFormatError

__all__ = ["NOT_A_SHARD", "PARQUET_FILES", "SHARD_NAME", "check_task", "folder_entry", "folder_listing",
           "never_replace", "parquet_table", "parquet_trace_folder", "read_json", "read_parquet_trace", "shard_name", "shard_task",
           "why_not_regular"]


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


def read_json(p: Path, limits: Limits, *, follow: bool = True, budget: Budget | None = None) -> Any:
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
            f"{str(p)!r} is not a readable vizdist trace ({type(exc).__name__}: {ellipsis(str(exc))}). "
            "Is it a trace written by Trace.save(), and complete?"
        ) from None


def why_not_regular(p: Path) -> str:
    """Why ``p`` may not be read as part of a trace ("" when it is a regular file, not a link)."""
    if p.is_symlink():
        return "a symbolic link (load_trace reads only regular files inside the folder)"
    if not p.is_file():
        return "not a regular file"
    return ""


def parquet_table(name: str, fh: Any, limits: Limits, budget: Budget) -> pd.DataFrame:
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
        if not storable_arrow(field.type):
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


NOT_A_SHARD = ("not a shard: a folder merge reads only files named worker-<task type>-<index>.json, as "
               "record_worker_shard writes them (load any other trace by its own path)")


def folder_entry(c: Path) -> tuple[bool, str]:
    """(is it a shard, why it may not be read / why it is not) for one entry of a shard folder.

    Only a name of the layout :func:`vizdist.record_worker_shard` writes (:data:`SHARD_NAME`) is a shard;
    another file that looks like a trace (``.json``, ``.json.gz``, ``.parquet``: a merged trace, a copy)
    is not read, and said so; anything else (notes, vizdist's own temporary files) is passed over.
    """
    if SHARD_NAME.fullmatch(c.name):
        return True, why_not_regular(c)
    if c.name.lower().endswith((".json", ".json.gz", ".parquet")) and not c.name.startswith("."):
        return False, NOT_A_SHARD
    return False, ""


def shard_task(c: Path) -> str:
    """``"<type>-<index>"`` of a shard file's name ("" when the name is not a shard's)."""
    m = SHARD_NAME.fullmatch(c.name)
    return f"{m[1]}-{int(m[2])}" if m else ""


def folder_listing(p: Path, errors: str) -> tuple[list[Path], list[dict[str, str]]]:
    """The shards of folder ``p`` to read, in name order, and the entries not read (with why).

    Two names for one task (``worker-worker-1.json`` beside ``worker-worker-00001.json``) are two
    shards of one task: a :class:`TraceFormatError` naming both, unless ``errors="skip"``.
    """
    shards: list[Path] = []
    skipped: list[dict[str, str]] = []
    first: dict[str, Path] = {}
    for c in sorted(p.iterdir()):
        is_shard, why = folder_entry(c)
        task = shard_task(c) if is_shard else ""
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


def check_task(c: Path, meta: Mapping[str, Any]) -> None:
    """A shard's name and the task its meta says wrote it must agree (a copy under another name does not)."""
    task, wrote = shard_task(c), meta.get("task")
    if task and isinstance(wrote, str) and wrote != task:
        raise TraceFormatError(f"{str(c)!r} is named for task {task} but was written by task {wrote} (its meta's "
                               "'task'): a copy or a renamed shard, whose rows another shard holds too. Remove it.")


#: The files of a Parquet trace folder (what :meth:`Trace.save` writes and replaces).
PARQUET_FILES = ("meta.json", *(f"{name}.parquet" for name in TABLES))


def parquet_trace_folder(p: Path) -> str:
    """Why the existing folder ``p`` may not be replaced by a Parquet trace ("" when it holds only one's files)."""
    others = sorted(c.name for c in p.iterdir() if c.name not in PARQUET_FILES)
    if not others:
        return ""
    return (f"{str(p)!r} is a folder that is not a vizdist Parquet trace (it holds {ellipsis(', '.join(others), 200)}); "
            "saving there would replace it. Choose another path, or remove the folder first.")


def never_replace(p: Path) -> str:
    """Why nothing at ``p`` may be replaced (``save(..., overwrite=False)``)."""
    return f"{str(p)!r} exists (save(..., overwrite=False) replaces nothing)"


def read_parquet_trace(p: Path, limits: Limits) -> tuple[TraceMeta, dict[str, pd.DataFrame]]:
    """The checked head and the tables of the Parquet trace folder ``p`` (every file a regular one, the files
    together within ``limits.max_bytes``)."""
    from vizdist._optional import require

    require("pyarrow.parquet", pip="pyarrow", conda="pyarrow")
    source = repr(str(p))
    files = [p / "meta.json"] + [p / f"{name}.parquet" for name in TABLES]
    for f in files:
        why = "missing" if not (f.exists() or f.is_symlink()) else why_not_regular(f)
        if why:
            raise TraceFormatError(f"{source} is a damaged vizdist trace: {f.name} is {why}.")
    budget = Budget(limits.max_bytes, source)  # the trace's files together, as a JSON trace's one file
    meta = head_meta(read_json(files[0], limits, follow=False, budget=budget), source, limits)
    tables: dict[str, pd.DataFrame] = {}
    for name, f in zip(TABLES, files[1:], strict=True):
        try:
            with open_regular(f, follow=False) as fh:
                tables[name] = parquet_table(name, fh, limits, budget)
        except TraceFormatError as exc:
            raise type(exc)(f"{source}: {exc}") from None
        except Exception as exc:  # pyarrow raises many types
            raise TraceFormatError(f"{str(f)!r} is not readable Parquet ({ellipsis(str(exc))}).") from None
    return meta, tables
