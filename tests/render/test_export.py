"""Chrome Trace Event export, read back by a strict, independent Trace Event Format checker.

Perfetto's trace processor is not usable offline here (its Python package downloads a
shell binary on first use), so the reader below implements the Trace Event Format
rules itself (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
it does not import vizdist's exporter and checks the file, not strings in it.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import vizdist

PHASES = set("BEXiICbnesftPONDMRc()STpF")
METADATA = {"process_name": "name", "process_labels": "labels", "process_sort_index": "sort_index",
            "thread_name": "name", "thread_sort_index": "sort_index"}


class TraceEventFormatError(AssertionError):
    pass


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _load(path: Path) -> Any:
    """The JSON document in ``path`` (gzipped or not); NaN and Infinity are refused."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)

    def no_constants(name: str) -> Any:
        raise TraceEventFormatError(f"non-JSON constant {name} in the file")

    return json.loads(raw.decode("utf-8"), parse_constant=no_constants)


def _events_and_top(doc: Any) -> tuple[list[Any], dict[str, Any]]:
    """The event list and the top-level object (``{}`` for the bare array form) of a trace document."""
    if isinstance(doc, list):
        return doc, {}
    if not isinstance(doc, dict):
        raise TraceEventFormatError("a trace file is a JSON array or object")
    if not isinstance(doc.get("traceEvents"), list):
        raise TraceEventFormatError("object form needs a traceEvents array")
    unit = doc.get("displayTimeUnit", "ms")
    if unit not in ("ms", "ns"):
        raise TraceEventFormatError(f"displayTimeUnit must be ms or ns, not {unit!r}")
    if "otherData" in doc and not isinstance(doc["otherData"], dict):
        raise TraceEventFormatError("otherData must be an object")
    return doc["traceEvents"], doc


def _check_common(where: str, e: Any) -> None:
    """Raise unless ``e`` is an object with a known phase and well-typed name, args, pid and tid."""
    if not isinstance(e, dict):
        raise TraceEventFormatError(f"{where} is not an object")
    if e.get("ph") not in PHASES:
        raise TraceEventFormatError(f"{where}: unknown phase {e.get('ph')!r}")
    if not isinstance(e.get("name", ""), str):
        raise TraceEventFormatError(f"{where}: name must be a string")
    if "args" in e and not isinstance(e["args"], dict):
        raise TraceEventFormatError(f"{where}: args must be an object")
    if "pid" in e and not _int(e["pid"]):
        raise TraceEventFormatError(f"{where}: pid must be an integer")
    if "tid" in e and not _int(e["tid"]):
        raise TraceEventFormatError(f"{where}: tid must be an integer")


def _read_metadata(where: str, e: dict[str, Any], read: dict[str, Any]) -> None:
    """Check a metadata (``M``) event and record the thread or process name it gives in ``read``."""
    key = METADATA.get(e.get("name"))
    if key is None:
        raise TraceEventFormatError(f"{where}: unknown metadata event {e.get('name')!r}")
    args = e.get("args", {})
    if key not in args:
        raise TraceEventFormatError(f"{where}: {e['name']} needs args.{key}")
    if key == "sort_index" and not _int(args[key]):
        raise TraceEventFormatError(f"{where}: sort_index must be an integer")
    if key == "name" and not isinstance(args[key], str):
        raise TraceEventFormatError(f"{where}: name must be a string")
    if e["name"] == "thread_name":
        read["threads"][(e["pid"], e["tid"])] = args["name"]
    if e["name"] == "process_name":
        read["processes"][e["pid"]] = args["name"]


def _read_timed(where: str, e: dict[str, Any], read: dict[str, Any]) -> None:
    """Check a timed event and add it to ``read``'s spans (``X``) or counters (``C``)."""
    if not _num(e.get("ts")):
        raise TraceEventFormatError(f"{where}: ts must be a finite number")
    if "pid" not in e or "tid" not in e:
        raise TraceEventFormatError(f"{where}: pid and tid are required")
    if e["ph"] == "X":
        if not _num(e.get("dur")) or e["dur"] < 0:
            raise TraceEventFormatError(f"{where}: complete events need dur >= 0")
        if "cat" in e and not isinstance(e["cat"], str):
            raise TraceEventFormatError(f"{where}: cat must be a string")
        read["spans"].append(e)
    elif e["ph"] == "C":
        vals = e.get("args", {})
        if not vals or not all(_num(v) for v in vals.values()):
            raise TraceEventFormatError(f"{where}: counter args must be numbers")
        read["counters"].append(e)


def read_trace_event_file(path: Path) -> dict[str, Any]:
    """Parse and validate a Trace Event Format file; return threads, spans and counters."""
    events, top = _events_and_top(_load(path))
    read: dict[str, Any] = {"top": top, "threads": {}, "processes": {}, "spans": [], "counters": []}
    for i, e in enumerate(events):
        _check_common(f"event {i}", e)
        if e["ph"] == "M":
            _read_metadata(f"event {i}", e, read)
        else:
            _read_timed(f"event {i}", e, read)
    for e in read["spans"]:
        if (e["pid"], e["tid"]) not in read["threads"]:
            raise TraceEventFormatError(f"span on pid {e['pid']} tid {e['tid']} has no thread_name")
    return read


@pytest.fixture(scope="module")
def real_trace(tf, mirrored):
    def work(v):
        time.sleep(0.001)
        return v

    ds = tf.data.Dataset.range(24).map(lambda x: tf.py_function(work, [x], tf.int64)).batch(8).prefetch(2)

    def step_fn(x):
        time.sleep(0.002)
        return tf.reduce_sum(x)

    return vizdist.trace_distribution(mirrored, ds, step_fn=step_fn, timing=True)


def _spans_as_rows(read: dict[str, Any]) -> Counter:
    t0 = read["top"]["otherData"]["t0_unix_ns"]
    rows = Counter()
    for e in read["spans"]:
        start = t0 + round(e["ts"] * 1000)
        rows[(e["pid"], read["threads"][(e["pid"], e["tid"])], e["name"], e["args"]["step"],
              start, start + round(e["dur"] * 1000))] += 1
    return rows


@pytest.mark.parametrize("name", ["run.trace.json", "run.trace.json.gz"])
def test_real_run_exports_every_span_exactly(real_trace, tmp_path, name):
    path = real_trace.to_chrome_trace(tmp_path / name)
    read = read_trace_event_file(path)
    ev = real_trace.events
    assert len(read["spans"]) == len(ev)
    want = Counter(zip(ev["worker"], ev["lane"], ev["stage"], ev["step"], ev["t_start_ns"], ev["t_end_ns"], strict=True))
    assert _spans_as_rows(read) == want  # every span, to the nanosecond
    assert read["processes"] == {0: "worker 0"}
    assert set(read["threads"].values()) == set(ev["lane"])
    # prefetch depth becomes counter tracks, one sample per profiler sample
    assert len(read["counters"]) == int((ev["buffered"] >= 0).sum()) > 0
    # the hover data travels too: element ids of the step
    host0 = [e for e in read["spans"] if read["threads"][(e["pid"], e["tid"])] == "w0 host"
             and e["args"]["step"] == 0 and e["name"] == "transfer"]
    assert host0[0]["args"]["elements"] == list(range(8))


def test_merged_workers_become_processes_with_aligned_times(tmp_path):
    a = vizdist.Trace.from_records(events=[dict(lane="w0 host", stage="consume", step=0, worker=0,
                                                t_start_ns=1_000_000_000, t_end_ns=1_000_000_500)])
    b = vizdist.Trace.from_records(events=[dict(lane="w1 host", stage="consume", step=0, worker=1,
                                                t_start_ns=1_000_000_250, t_end_ns=1_000_001_000)])
    read = read_trace_event_file(vizdist.Trace.merge([a, b]).to_chrome_trace(tmp_path / "m.json"))
    assert read["processes"] == {0: "worker 0", 1: "worker 1"}
    by_pid = {e["pid"]: e for e in read["spans"]}
    assert by_pid[0]["ts"] == 0 and by_pid[1]["ts"] == 0.25 and by_pid[1]["dur"] == 0.75


def test_checker_rejects_broken_files(tmp_path):
    bad = {"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": -1, "pid": 0, "tid": 1}]}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(TraceEventFormatError, match="dur >= 0"):
        read_trace_event_file(p)
    p.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1, "pid": 0, "tid": 1}]}')
    with pytest.raises(TraceEventFormatError, match="NaN"):
        read_trace_event_file(p)
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 0, "tid": 1}]}))
    with pytest.raises(TraceEventFormatError, match="no thread_name"):
        read_trace_event_file(p)


def test_trace_without_spans_is_refused_with_a_hint(tmp_path):
    t = vizdist.Trace.from_records(elements=[dict(step=0, replica=0, source_id=1)])
    with pytest.raises(ValueError, match="timing=True"):
        t.to_chrome_trace(tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


def test_lane_names_with_markup_stay_data(tmp_path):
    t = vizdist.Trace(events=pd.DataFrame([dict(lane='w0 <b>"x"</b>', stage="consume", step=0,
                                                 t_start_ns=0, t_end_ns=5)]))
    read = read_trace_event_file(t.to_chrome_trace(tmp_path / "x.json"))
    assert list(read["threads"].values()) == ['w0 <b>"x"</b>']



def test_a_5000_deep_elements_string_is_exported_as_text_not_parsed(tmp_path):
    """Issue 36 item 9: 5,000-deep JSON in events.elements raised RecursionError in to_chrome_trace."""
    import json

    import vizdist

    deep = "[" * 5000 + "]" * 5000
    t = vizdist.Trace.from_records(events=[dict(lane="w0 host", stage="consume", step=0, t_start_ns=0, t_end_ns=5,
                                                elements=deep), dict(lane="w0 host", stage="consume", step=1,
                                                                     t_start_ns=5, t_end_ns=9, elements="[3, 4]")])
    spans = [e for e in json.loads(t.to_chrome_trace(tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]
    assert [s["args"]["elements"] for s in spans] == [deep, [3, 4]]
