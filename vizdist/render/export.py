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
    >>> p = vizdist.to_chrome_trace(t, os.path.join(tempfile.mkdtemp(), "run.trace.json"))
    >>> [e["dur"] for e in json.load(open(p))["traceEvents"] if e["ph"] == "X"]
    [2.5]
"""

from __future__ import annotations

import gzip
import io
import json
import os
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


def _span_args(step: Any, replica: Any, op: str, elements: str, buffered: Any, limit: Any) -> dict[str, Any]:
    """A span's ``args``: its step, then its replica, op, source ids and buffer fill where it has them."""
    args: dict[str, Any] = {"step": int(step)}
    if replica >= 0:
        args["replica"] = int(replica)
    if op:
        args["op"] = op
    if elements:
        try:
            args["elements"] = json.loads(elements)
        except ValueError:
            args["elements"] = elements
    if buffered >= 0:
        args["buffered"] = int(buffered)
        if limit >= 0:
            args["buffer_limit"] = int(limit)
    return args


def _span_events(ev: pd.DataFrame, t0: int, tids: dict[tuple[int, str], int]) -> list[dict[str, Any]]:
    """One complete (``X``) event per span, each followed by a counter (``C``) event when it measured a buffer."""
    start = ev["t_start_ns"].to_numpy(np.int64) - t0
    dur = ev["t_end_ns"].to_numpy(np.int64) - ev["t_start_ns"].to_numpy(np.int64)
    c = _columns(ev)
    rows = zip(_us(start), _us(dur), c["worker"], c["lane"], c["stage"], c["origin"], c["step"], c["replica"],
               c["op"], c["elements"], c["buffered"], c["buffer_limit"], strict=True)
    out: list[dict[str, Any]] = []
    for ts, d, worker, lane, stage, origin, step, replica, op, elements, buffered, limit in rows:
        w = int(worker)
        out.append({
            "ph": "X", "name": str(stage), "cat": f"vizdist,{origin or 'host'}", "ts": ts, "dur": d, "pid": w,
            "tid": tids[(w, str(lane))], "args": _span_args(step, replica, op, elements, buffered, limit),
        })
        if buffered >= 0:
            name = "prefetch buffer " + (op.rsplit("::", 1)[-1] if op else "")
            out.append({"ph": "C", "name": name.strip(), "ts": ts, "pid": w, "tid": 0,
                        "args": {"buffered": int(buffered)}})
    return out


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


def _events(trace: Trace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The trace's Trace Event list (track names, spans, buffer counters) and its ``otherData``."""
    from vizdist.analysis.timeline_layout import lane_order

    ev = trace.events
    _check_spans(ev, trace.meta)
    t0 = int(ev["t_start_ns"].min())
    out, tids = _track_names(lane_order(ev))
    out.extend(_span_events(ev, t0, tids))
    return out, _other_data(trace, t0)


def _write(fh: IO[str], events: list[dict[str, Any]], other: dict[str, Any]) -> None:
    fh.write('{"displayTimeUnit":"ms","otherData":')
    fh.write(json.dumps(other, allow_nan=False))
    fh.write(',"traceEvents":[\n')
    enc = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    for i, e in enumerate(events):
        if i:
            fh.write(",\n")
        fh.write(enc(e))
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
