"""Export a trace's timed spans as Chrome Trace Event JSON.

The file opens in Perfetto UI (https://ui.perfetto.dev, "Open trace file")
and in ``chrome://tracing``. Layout of the export:

* one *process* per worker (``pid`` = worker, named ``worker N``),
* one *thread* per lane (``tid`` = lane index, named after the lane, in the
  same order as the vizdist timeline),
* one complete event (``"ph": "X"``) per span: ``name`` = stage, ``cat`` =
  ``vizdist,<origin>``, ``ts``/``dur`` in microseconds from the first span
  (fractional, so nanoseconds survive), ``args`` = step, replica, op and the
  source element ids,
* one counter track (``"ph": "C"``) per prefetch buffer with the measured
  ``buffered_elements``.

The epoch time of ``ts == 0`` is kept in ``otherData.t0_unix_ns``.

Example:
    >>> import vizdist, tempfile, os, json
    >>> t = vizdist.Trace.from_records(events=[
    ...     dict(lane="w0 host", stage="consume", step=0, t_start_ns=1000, t_end_ns=3500)])
    >>> p = t.to_chrome_trace(os.path.join(tempfile.mkdtemp(), "run.trace.json"))
    >>> [e["dur"] for e in json.load(open(p))["traceEvents"] if e["ph"] == "X"]
    [2.5]
"""

from __future__ import annotations

import functools
import gzip
import io
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO

import numpy as np

from vizdist._files import write_file
from vizdist.contract import recording_call

if TYPE_CHECKING:
    import pandas as pd

    from vizdist.trace import Trace

__all__ = ["to_chrome_trace"]


def _us(ns: np.ndarray) -> list[float]:
    """``ns`` in µs as floats; exact to the ns for runs shorter than ~100 days."""
    return (ns.astype(np.float64) / 1000.0).tolist()


def _check_spans(ev: pd.DataFrame, meta: Any) -> None:
    """Raise ValueError unless ``ev`` has spans, none of which ends before it starts."""
    if ev.empty:
        raise ValueError(
            "this trace has no timed spans to export (its events table is empty). Record it with "
            f"{recording_call(meta, 'timing=True')}."
        )
    bad = ev["t_end_ns"] < ev["t_start_ns"]
    if bad.any():
        raise ValueError(f"{int(bad.sum())} spans end before they start; the trace is damaged.")


def _track_names(order: list[tuple[int, str]]) -> tuple[list[dict[str, Any]], dict[tuple[int, str], int]]:
    """The metadata events naming and ordering each worker's process and each lane's thread, and each lane's tid."""
    out: list[dict[str, Any]] = []
    tids: dict[tuple[int, str], int] = {}
    for w in sorted({w for w, _ in order}):
        out.append({"ph": "M", "name": "process_name", "pid": int(w), "tid": 0, "args": {"name": f"worker {w}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": int(w), "tid": 0,
                    "args": {"sort_index": int(w)}})
    for i, (w, lane) in enumerate(order):
        tid = i + 1  # tid 0 is left for process-level tracks
        tids[(w, lane)] = tid
        out.append({"ph": "M", "name": "thread_name", "pid": int(w), "tid": tid, "args": {"name": lane}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": int(w), "tid": tid, "args": {"sort_index": i}})
    return out, tids


def _columns(ev: pd.DataFrame) -> dict[str, list[Any]]:
    """The columns the export reads, as lists (``origin``, ``op`` and the buffer columns defaulted when absent)."""
    cols = {c: ev[c].tolist() for c in ("lane", "stage", "step", "worker", "replica", "elements")}
    n = len(ev)
    cols["origin"] = ev["origin"].astype(str).tolist() if "origin" in ev.columns else ["host"] * n
    cols["op"] = ev["op"].astype(str).tolist() if "op" in ev.columns else [""] * n
    cols["buffered"] = ev["buffered"].tolist() if "buffered" in ev.columns else [-1] * n
    cols["buffer_limit"] = ev["buffer_limit"].tolist() if "buffer_limit" in ev.columns else [-1] * n
    return cols


#: A flat JSON list of whole numbers (what the timing recorder writes in ``elements``): copied into the
#: file as it is. Anything else is kept as text, never parsed (a trace file may hold any string there).
_ID_LIST = re.compile(r"\[\s*(-?\d{1,20}\s*(,\s*-?\d{1,20}\s*)*)?\]")


def _span_args(step: Any, replica: Any, op: str, elements: str, buffered: Any, limit: Any) -> str:
    """A span's ``args`` as JSON text: its step, then its replica, op, source ids and buffer fill where it has them."""
    parts = [f'"step":{int(step)}']
    if replica >= 0:
        parts.append(f'"replica":{int(replica)}')
    if op:
        parts.append(f'"op":{_text(op)}')
    if elements:
        parts.append(f'"elements":{elements if _ID_LIST.fullmatch(elements) else _text(elements)}')
    if buffered >= 0:
        parts.append(f'"buffered":{int(buffered)}')
        if limit >= 0:
            parts.append(f'"buffer_limit":{int(limit)}')
    return "{" + ",".join(parts) + "}"


@functools.lru_cache(maxsize=4096)
def _text(value: str) -> str:
    """``value`` as a JSON string (lane, stage and op names repeat: each is encoded once)."""
    return json.dumps(value)


def _span_lines(ev: pd.DataFrame, t0: int, tids: dict[tuple[int, str], int]) -> Iterator[str]:
    """One complete (``X``) event per span, each followed by a counter (``C``) event when it measured a buffer,
    as JSON lines made one at a time (a trace of millions of spans is never held as objects)."""
    start = ev["t_start_ns"].to_numpy(np.int64) - t0
    dur = ev["t_end_ns"].to_numpy(np.int64) - ev["t_start_ns"].to_numpy(np.int64)
    c = _columns(ev)
    rows = zip(_us(start), _us(dur), c["worker"], c["lane"], c["stage"], c["origin"], c["step"], c["replica"],
               c["op"], c["elements"], c["buffered"], c["buffer_limit"], strict=True)
    for ts, d, worker, lane, stage, origin, step, replica, op, elements, buffered, limit in rows:
        w = int(worker)
        cat = _text("vizdist," + (origin or "host"))
        yield (f'{{"ph":"X","name":{_text(str(stage))},"cat":{cat},"ts":{ts!r},'
               f'"dur":{d!r},"pid":{w},"tid":{tids[(w, str(lane))]},'
               f'"args":{_span_args(step, replica, op, elements, buffered, limit)}}}')
        if buffered >= 0:
            name = ("prefetch buffer " + (op.rsplit("::", 1)[-1] if op else "")).strip()
            yield (f'{{"ph":"C","name":{_text(name)},"ts":{ts!r},"pid":{w},"tid":0,'
                   f'"args":{{"buffered":{int(buffered)}}}}}')


def _other_data(trace: Trace, t0: int) -> dict[str, Any]:
    """The file's ``otherData``: producer, epoch time of ``ts == 0``, clock, strategy and span count."""
    timing = trace.meta.get("timing")
    return {
        "producer": "vizdist",
        "t0_unix_ns": t0,
        "clock": timing.get("clock", "") if isinstance(timing, dict) else "",
        "strategy": str(trace.meta.get("strategy", "")),
        "spans": len(trace.events),
    }


def _events(trace: Trace) -> tuple[Iterator[str], dict[str, Any]]:
    """The trace's Trace Events as JSON lines (track names, spans, buffer counters) and its ``otherData``."""
    from vizdist.analysis.timeline_layout import lane_order

    ev = trace.events
    _check_spans(ev, trace.meta)
    t0 = int(ev["t_start_ns"].min())
    names, tids = _track_names(lane_order(ev))
    enc = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    return itertools.chain(map(enc, names), _span_lines(ev, t0, tids)), _other_data(trace, t0)


def _write(fh: IO[str], events: Iterable[str], other: dict[str, Any]) -> None:
    fh.write('{"displayTimeUnit":"ms","otherData":')
    fh.write(json.dumps(other, allow_nan=False))
    fh.write(',"traceEvents":[\n')
    for i, e in enumerate(events):
        if i:
            fh.write(",\n")
        fh.write(e)
    fh.write("\n]}\n")


def to_chrome_trace(trace: Trace, path: str | os.PathLike[str]) -> Path:
    """Write ``trace.events`` as Chrome Trace Event JSON (``.json`` or ``.json.gz``).

    Args:
        trace: a trace with timed spans.
        path: output file; a name ending in ``.gz`` is gzipped (Perfetto reads both).

    Returns:
        The path written.

    Raises:
        ValueError: the trace has no spans, or spans that end before they start.

    Example:
        >>> import vizdist, tempfile, os
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=10)])
        >>> to_chrome_trace(t, os.path.join(tempfile.mkdtemp(), "t.json")).name
        't.json'
    """
    p = Path(path)
    events, other = _events(trace)
    p.parent.mkdir(parents=True, exist_ok=True)
    gz = p.name.lower().endswith(".gz")

    def write(raw: BinaryIO) -> None:
        out: BinaryIO = gzip.GzipFile(fileobj=raw, mode="wb") if gz else raw  # type: ignore[assignment]  # GzipFile is a binary file object, typed as GzipFile, not BinaryIO
        text = io.TextIOWrapper(out, encoding="utf-8")
        _write(text, events, other)
        text.flush()
        text.detach()  # write_file closes the file itself
        if gz:
            out.close()  # the gzip trailer; raw stays open

    return write_file(p, write)
