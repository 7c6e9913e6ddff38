"""The one intermediate form every split view is drawn from (PNG, HTML, widget).

:func:`split_layout` turns a :class:`~vizdist.trace.Trace` into plain JSON:
steps, replicas (with device and worker), and per (step, replica) cells with
the ids and their display labels. Figures, the static HTML and the explorer
widget all read this, never the trace tables directly.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from vizdist.render._text import MAX_LABEL, MAX_RESULT, short
from vizdist.trace import Trace

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["element_label", "pass_choices", "short_device", "split_layout", "step_label", "step_labels"]


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


def step_labels(trace: Trace) -> dict[int, str]:
    """For a ``vizdist.record()`` trace, each step's place in the user's run: ``"train epoch 1 · 2"`` (phase,
    the user's epoch, the step within it; ``"build (Keras)"`` for Keras's build read). Empty otherwise.

    Example:
        >>> t = Trace.from_records(batches=[dict(step=s, replica=0, n_elements=1, phase=p, epoch=0,
        ...                                      epoch_step=k, dataset=0)
        ...                                 for s, p, k in [(0, "build", 0), (1, "train", 0), (2, "train", 1)]],
        ...                        meta={"api": "record"})
        >>> step_labels(t)
        {0: 'build (Keras)', 1: 'train epoch 0 · 0', 2: 'train epoch 0 · 1'}
    """
    b = trace.batches
    if trace.meta.get("api") != "record" or not {"phase", "epoch", "epoch_step"} <= set(b.columns) or b.empty:
        return {}
    first = b.drop_duplicates("step")
    out = {}
    for s, ph, ep, k in zip(first["step"].tolist(), first["phase"].astype(str).tolist(), first["epoch"].tolist(),
                            first["epoch_step"].tolist(), strict=True):
        out[int(s)] = step_label(ph, ep, k)
    return out


def step_label(phase: str, epoch: int, epoch_step: int) -> str:
    """One step's label in :func:`step_labels`.

    Example:
        >>> step_label("train", 1, 2), step_label("build", 0, 0)
        ('train epoch 1 · 2', 'build (Keras)')
    """
    return "build (Keras)" if phase == "build" else f"{phase} epoch {int(epoch)} · {int(epoch_step)}"


def pass_choices(trace: Trace) -> list[tuple[str, list[int]]]:
    """For a ``vizdist.record()`` trace, each (phase, epoch) in run order with its steps: what a selector
    offers (``[]`` for any other trace).

    Example:
        >>> t = Trace.from_records(batches=[dict(step=s, replica=0, n_elements=1, phase="train", epoch=s // 2,
        ...                                      epoch_step=s % 2, dataset=0) for s in range(4)],
        ...                        meta={"api": "record"})
        >>> pass_choices(t)
        [('train epoch 0', [0, 1]), ('train epoch 1', [2, 3])]
    """
    labels = step_labels(trace)
    out: dict[str, list[int]] = {}
    for s in sorted(labels):
        key = labels[s].rsplit(" · ", 1)[0]
        out.setdefault(key, []).append(s)
    return list(out.items())


def _selected_steps(trace: Trace, phase: str | None, epoch: int | None) -> list[int]:
    steps = trace.steps
    if phase is None and epoch is None:
        return steps
    b = trace.batches
    if not {"phase", "epoch"} <= set(b.columns):
        raise ValueError("phase= and epoch= pick steps of a vizdist.record() trace; this trace has no "
                         "phase or epoch column (it was not recorded by vizdist.record()).")
    keep = b[((b["phase"].astype(str) == phase) if phase is not None else True)
             & ((b["epoch"] == epoch) if epoch is not None else True)]
    if keep.empty:
        have = ", ".join(name for name, _ in pass_choices(trace)) or "none"
        raise ValueError(f"no step of this trace is in phase={phase!r}, epoch={epoch!r}; it has: {have}.")
    return sorted(int(s) for s in keep["step"].unique())


def split_layout(trace: Trace, *, max_steps: int | None = None, max_replicas: int | None = None,
                 phase: str | None = None, epoch: int | None = None, steps: list[int] | None = None) -> dict[str, Any]:
    """Plain-JSON description of who got what, step by step.

    Each replica has its device and its worker (the process it runs in; ``None`` for a tf.data service
    trace, whose replicas are in the consumer); each cell its ids, labels and, for a service trace, the
    service ``workers`` that made its elements. For a ``vizdist.record()`` trace each step has a label
    (``step_labels``: phase, the user's epoch, the step within it), and ``phase=`` / ``epoch=`` keep only
    the steps of that phase and epoch. ``max_steps`` / ``max_replicas`` keep the first steps / replicas
    only (``total_steps`` / ``total_replicas`` say how many there are), and ``steps`` lays out just those
    steps (a live view, one step at a time), so a view of a trace with thousands of replicas or millions
    of steps costs what its picture shows.

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
    selected = _selected_steps(trace, phase, epoch)
    shown = selected if max_steps is None else selected[:max_steps]
    if steps is not None:
        kept = set(selected)
        shown = [s for s in steps if s in kept]
    replicas = trace.replicas
    shown_reps = replicas if max_replicas is None else replicas[:max_replicas]
    e, b = _shown_rows(trace.elements, shown, shown_reps), _shown_rows(trace.batches, shown, shown_reps)
    e = e.sort_values(["step", "replica", "position"], kind="stable")
    labels = step_labels(trace)
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
        "title": _title(trace, phase, epoch),
        "steps": shown,
        "step_labels": [labels.get(s, "") for s in shown],
        "total_steps": len(selected),
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


def _title(trace: Trace, phase: str | None = None, epoch: int | None = None) -> str:
    m = trace.meta
    parts = [short(m.get("strategy", "trace"), MAX_LABEL)]
    n = m.get("num_replicas") or len(trace.replicas)
    parts.append(f"{n} replica{'s' if n != 1 else ''}")
    if m.get("global_batch_size"):
        parts.append(f"global batch {m['global_batch_size']}")
    if m.get("api"):
        parts.append(short(m["api"], MAX_LABEL))
    if phase is not None or epoch is not None:
        parts.append(" ".join(x for x in (phase, None if epoch is None else f"epoch {epoch}") if x))
    note = _PROVENANCE_LABELS.get(str(m.get("provenance", "")))
    return " · ".join(parts) + (f"\n{note}" if note else "")


#: What the numbers in the cells are, said on the picture itself where they are not exact source ids.
_PROVENANCE_LABELS = {
    "fingerprint": "ids by content: equal values share an id, numbered in order of first arrival (not source positions)",
    "positional": "ids number an output position (a transformation vizdist cannot see through), not source elements",
    "ambiguous": "ids are exact, but repetitions of a source element cannot be told apart",
}
