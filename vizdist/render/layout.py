"""The one intermediate form every split view is drawn from (PNG, HTML, widget).

:func:`split_layout` turns a :class:`~vizdist.trace.Trace` into plain JSON:
steps, replicas (with device and worker), and per (step, replica) cells with
the ids and their display labels. Figures, the static HTML and the explorer
widget all read this, never the trace tables directly.
"""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from vizdist.render._text import MAX_LABEL, MAX_RESULT, short
from vizdist.trace import Trace

__all__ = ["element_label", "short_device", "split_layout"]


def short_device(device: str) -> str:
    """``/job:localhost/replica:0/task:0/device:CPU:1`` -> ``CPU:1`` (task kept when not 0).

    Example:
        >>> short_device("/job:worker/replica:0/task:1/device:CPU:0")
        'task:1/CPU:0'
    """
    if not device:
        return ""
    if len(device) > 4 * MAX_LABEL:  # a name no TF device has: cut before it is parsed (and say so)
        return short(device, MAX_LABEL)
    dev = device.split("device:")[-1]
    task = ""
    if "/task:" in device:
        t = device.split("/task:")[1].split("/")[0]
        if t not in ("0", ""):
            task = f"task:{t}/"
    return short(task + dev, MAX_LABEL)


def element_label(source_id: int, source: int, source_file: str, source_line: int, multi_source: bool) -> str:
    """How one element is named on screen: ``7``, ``s1:7`` or ``part-2.txt:5``.

    Example:
        >>> element_label(4294967298, 0, "/tmp/a/part-1.txt", 2, False)
        'part-1.txt:2'
    """
    if source_file:
        return f"{short(os.path.basename(source_file), MAX_LABEL)}:{source_line}"
    return f"s{source}:{source_id}" if multi_source else str(source_id)


def split_layout(trace: Trace, *, max_steps: int | None = None, max_replicas: int | None = None,
                 steps: list[int] | None = None) -> dict[str, Any]:
    """Plain-JSON description of who got what, step by step.

    Each replica has its device and its worker (the process it runs in; ``None`` for a tf.data service
    trace, whose replicas are in the consumer); each cell its ids, labels and, for a service trace, the
    service ``workers`` that made its elements. ``max_steps`` / ``max_replicas`` keep the first steps /
    replicas only (``total_steps`` / ``total_replicas`` say how many there are), and ``steps`` lays out
    just those steps (a live view, one step at a time), so a view of a trace with thousands of replicas
    or millions of steps costs what its picture shows.

    Example:
        >>> t = Trace.from_records(
        ...     elements=[dict(step=0, replica=0, source_id=5, position=0, device="/device:CPU:0")],
        ...     batches=[dict(step=0, replica=0, n_elements=1, device="/device:CPU:0"),
        ...              dict(step=0, replica=1, n_elements=0, empty=True, device="/device:CPU:1")])
        >>> lay = split_layout(t)
        >>> [c["labels"] for c in lay["cells"][0]], lay["cells"][0][1]["empty"]
        ([['5'], []], True)
        >>> split_layout(t, max_replicas=1)["total_replicas"], len(split_layout(t, max_replicas=1)["replicas"])
        (2, 1)
    """
    all_steps, replicas = trace.steps, trace.replicas
    shown = all_steps if max_steps is None else all_steps[:max_steps]
    if steps is not None:
        shown = [s for s in steps if s in set(all_steps)]
    shown_reps = replicas if max_replicas is None else replicas[:max_replicas]
    e, b = _shown_rows(trace.elements, shown, shown_reps), _shown_rows(trace.batches, shown, shown_reps)
    e = e.sort_values(["step", "replica", "position"], kind="stable")
    device, input_device, worker = _replica_places(_firsts(trace.batches, shown_reps),
                                                   _firsts(trace.elements, shown_reps))
    # tf.data service traces: each element may come from a different service worker; name it.
    by_worker = trace.meta["kind"] == "data_service"
    cells = {(s, r): {"ids": [], "labels": [], "n": 0, "empty": False, "partial": False, "result": "",
                      "workers": []} for s in shown for r in shown_reps}
    multi = bool(trace.elements["source"].nunique() > 1) if len(trace.elements) else False
    _fill_elements(cells, e, by_worker, multi=multi)
    _fill_batches(cells, b, has_batches=len(trace.batches) > 0)
    ids = trace.elements["source_id"]
    meta = trace.meta
    return {
        "title": _title(trace),
        "steps": shown,
        "total_steps": len(all_steps),
        "total_replicas": len(replicas),
        # A service trace's replicas live in the consumer: "worker" there is who made each element (per
        # cell, "workers"), not a property of the replica.
        "replicas": [{"id": r, "device": short_device(device.get(r, "")),
                      "worker": None if by_worker else worker.get(r, 0),
                      "input_device": short_device(input_device.get(r, ""))}
                     for r in shown_reps],
        "cells": [[cells[(s, r)] for r in shown_reps] for s in shown],
        "id_range": [int(ids.min()), int(ids.max())] if len(ids) else [0, 0],
        "global_batch_size": meta.get("global_batch_size"),
        "provenance": short(meta.get("provenance", ""), MAX_LABEL),
    }


def _shown_rows(frame: pd.DataFrame, steps: list[int], replicas: list[int]) -> pd.DataFrame:
    """The rows of the steps and replicas a view shows."""
    return frame[frame["step"].isin(steps) & frame["replica"].isin(replicas)]


def _firsts(frame: pd.DataFrame, replicas: list[int]) -> pd.DataFrame:
    """Each shown replica's first row (where its device and worker are read)."""
    return frame[frame["replica"].isin(replicas)].drop_duplicates("replica")


def _replica_places(b: pd.DataFrame, e: pd.DataFrame) -> tuple[dict[int, str], dict[int, str], dict[int, int]]:
    """Each replica's compute device, input device and worker, first seen in batches, then elements."""
    device: dict[int, str] = {}
    input_device: dict[int, str] = {}
    worker: dict[int, int] = {}
    for frame in (b, e):
        compute = frame["replica_device"] if "replica_device" in frame.columns else frame["device"]
        for r, d, cd, w in zip(frame["replica"].tolist(), frame["device"].tolist(), compute.tolist(),
                               frame["worker"].tolist(), strict=False):
            device.setdefault(int(r), cd or d)
            input_device.setdefault(int(r), d)
            worker.setdefault(int(r), int(w))
    return device, input_device, worker


def _fill_elements(cells: dict[tuple[int, int], dict[str, Any]], e: pd.DataFrame, by_worker: bool, *,
                   multi: bool) -> None:
    """Each shown cell's ids and labels in batch order (and, for a service trace, who made each)."""
    cols = ["step", "replica", "source_id", "source", "source_file", "source_line", "worker"]
    for s, r, i, src, f, ln, w in zip(*(e[c].tolist() for c in cols), strict=False):
        c = cells.get((s, r))
        if c is None:
            continue
        c["ids"].append(int(i))
        label = element_label(int(i), int(src), f, int(ln), multi)
        c["labels"].append(f"{label}@w{int(w)}" if by_worker and int(w) >= 0 else label)
        if by_worker and int(w) >= 0 and int(w) not in c["workers"]:
            c["workers"].append(int(w))


def _fill_batches(cells: dict[tuple[int, int], dict[str, Any]], b: pd.DataFrame, *, has_batches: bool) -> None:
    """Each cell's size, empty/partial flags and step result from the batches table (or, without one,
    its size from its ids)."""
    cols = ("step", "replica", "n_elements", "empty", "partial", "result")
    for s, r, n, empty, partial, result in zip(*(b[c].tolist() for c in cols), strict=False):
        if (s, r) in cells:
            cells[(s, r)].update(n=int(n), empty=bool(empty), partial=bool(partial), result=short(result, MAX_RESULT))
    if not has_batches:
        for c in cells.values():
            c["n"] = len(c["ids"])
            c["empty"] = c["n"] == 0


def _title(trace: Trace) -> str:
    m = trace.meta
    parts = [short(m.get("strategy", "trace"), MAX_LABEL)]
    n = m.get("num_replicas") or len(trace.replicas)
    parts.append(f"{n} replica{'s' if n != 1 else ''}")
    if m.get("global_batch_size"):
        parts.append(f"global batch {m['global_batch_size']}")
    if m.get("api"):
        parts.append(short(m["api"], MAX_LABEL))
    note = _PROVENANCE_LABELS.get(str(m.get("provenance", "")))
    return " · ".join(parts) + (f"\n{note}" if note else "")


#: What the numbers in the cells are, said on the picture itself where they are not exact source ids.
_PROVENANCE_LABELS = {
    "fingerprint": "ids by content: equal values share an id, numbered in order of first arrival (not source positions)",
    "positional": "ids number an output position (a transformation vizdist cannot see through), not source elements",
    "ambiguous": "ids are exact, but repetitions of a source element cannot be told apart",
}
