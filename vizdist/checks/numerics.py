"""Findings about NaN / Inf and failed numeric checks (recorded with ``placement=True``).

The trace names the bad element exactly: ``meta["placement"]["numerics"]``
holds the rows of each per-replica batch that held a NaN or an Inf (read from
the real tensors), joined here with the trace's provenance (``elements`` on
step, replica and position) to give the source elements; TF's debugger gives
the first op whose output held a NaN or an Inf, with its device.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(
    ...     elements=[dict(step=0, replica=1, source_id=5, position=0)],
    ...     meta={"placement": {"numerics": {"bad_rows": [dict(step=0, replica=1, position=0, device="CPU:1")],
    ...           "first_nonfinite_op": dict(op_type="RealDiv", op_name="truediv", graph="Dataset_map_f",
    ...                                      device="CPU:0", stage="pipeline", step=-1)}}})
    >>> f = vizdist.diagnose(t)
    >>> f["code"].tolist(), "source element 5" in f["message"][0]
    (['nonfinite-element'], True)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from vizdist.checks.finding import Finding
from vizdist.contract import FailedElement, FailedStep, NonfiniteOp, NumericsMeta
from vizdist.trace import Trace


def _numerics(trace: Trace) -> NumericsMeta:
    return (trace.meta.get("placement") or {}).get("numerics") or {}


def _op_text(op: NonfiniteOp | None) -> str:
    if not op:
        return ""
    where = "the input pipeline" if op.get("stage") == "pipeline" else (
        f"step {op['step']}" if op.get("step", -1) >= 0 else f"the {op.get('stage', '?')} stage")
    graph = f" in {op['graph']}" if op.get("graph") else ""
    return (f" The first op whose output held a NaN/Inf was {op.get('op_type')} '{op.get('op_name') or '?'}'"
            f"{graph} on {op.get('device') or '?'} ({where}), per TF's debugger.")


def _ids(trace: Trace, step: int, replica: int, positions: list[int]) -> list[str]:
    e = trace.elements
    rows = e[(e["step"] == step) & (e["replica"] == replica) & (e["position"].isin(positions))]
    out = []
    for sid, f, line in zip(rows["source_id"], rows["source_file"], rows["source_line"], strict=False):
        out.append(f"{int(sid)} ({f}:{int(line)})" if f else str(int(sid)))
    return out


def nonfinite_element(trace: Trace) -> Iterator[Finding]:
    num = _numerics(trace)
    groups: dict[tuple[int, int], dict[str, Any]] = {}
    for row in num.get("bad_rows") or []:
        key = (int(row.get("step", -1)), int(row.get("replica", -1)))
        g = groups.setdefault(key, {"positions": [], "device": row.get("device", "?")})
        g["positions"].append(int(row.get("position", -1)))
    for (step, replica), g in sorted(groups.items()):
        ids = _ids(trace, step, replica, sorted(set(g["positions"])))
        what = f"source element {', '.join(ids)}" if len(ids) == 1 else f"source elements {', '.join(ids)}"
        if not ids:
            what = f"the element(s) at position(s) {sorted(set(g['positions']))} (provenance not recorded)"
        yield Finding(
            "nonfinite-element", "error",
            f"Step {step}: replica {replica} ({g['device']}) received {what} holding a NaN or an Inf."
            + _op_text(num.get("first_nonfinite_op"))
            + " Fix the data or the transformation that makes it (guard divisions, clip logs), or drop such "
              "elements with dataset.filter(lambda x: tf.reduce_all(tf.math.is_finite(x))).",
            step=step, replicas=(replica,))


def nonfinite_result(trace: Trace) -> Iterator[Finding]:
    num = _numerics(trace)
    bad_inputs = {(int(r.get("step", -1)), int(r.get("replica", -1))) for r in num.get("bad_rows") or []}
    op = num.get("first_nonfinite_op")
    for row in num.get("bad_results") or []:
        step, replica = int(row.get("step", -1)), int(row.get("replica", -1))
        if (step, replica) in bad_inputs:
            continue  # already named by nonfinite-element
        ids = _ids(trace, step, replica, list(range(10_000)))
        made = _op_text(op) if op and op.get("stage") == "step" else ""
        yield Finding(
            "nonfinite-result", "error",
            f"Step {step}: replica {replica}'s step_fn result holds a NaN or an Inf, though its inputs (source "
            f"elements {', '.join(ids) or 'none'}) were finite: the step made it.{made} Look at that op for a "
            "division by zero, a log of 0, or an overflow.",
            step=step, replicas=(replica,))


def _node(message: str) -> str:
    m = re.search(r"\{\{node ([^}]+)\}\}", message)
    return m.group(1) if m else ""


def _arrived_inputs(failed: FailedStep, failing: int | None) -> tuple[str, tuple[int, ...]]:
    """What the failed step's replicas held (its batch had arrived), and the replicas to name."""
    parts = []
    for r in failed.get("replicas", []):
        bad = r.get("nonfinite_positions") or []
        ids = r.get("source_ids") or []
        named = [str(ids[p]) for p in bad if p < len(ids)]
        parts.append(f"replica {r.get('replica', '?')} ({r.get('device', '?')}): elements {ids}"
                     + (f", NaN/Inf in {', '.join(named)}" if named else ""))
    replicas = tuple(int(r.get("replica", -1)) for r in failed.get("replicas", [])
                     if r.get("nonfinite_positions") or int(r.get("replica", -1)) == failing)
    return " The step's batch had arrived: " + "; ".join(parts) + ".", replicas


def _element_text(element: FailedElement, step: int, host: str) -> str:
    """The element a function (map, filter, ...) of the input pipeline raised on (``failed_element``), in words."""
    ids = element.get("source_ids") or []
    files = element.get("source_files") or [""] * len(ids)
    lines = element.get("source_lines") or [-1] * len(ids)
    names = [f"{sid} ({f}:{ln})" if f else str(sid) for sid, f, ln in zip(ids, files, lines, strict=False)]
    what = f"source element {names[0]}" if len(names) == 1 else f"one of source elements {', '.join(names)} (a batch)"
    op = f"{element.get('op_type') or 'op'} '{element.get('op_name') or '?'}'"
    devices = element.get("devices") or []
    on = (f"on {', '.join(devices)}" if devices else
          f"TF's debugger has no record of its device; the input pipeline runs on the host, {host}")
    which = f"{element.get('function', 'map')} #{int(element.get('map_index', 0)) + 1}"  # "filter #1"
    return (f" It failed in the input pipeline, before the batch of step {step} reached the replicas: "
            f"{which} of the pipeline raised on {what} ({op}, {on}). Found after "
            f"the run: {element.get('how', '')}; {element.get('checked', '?')} element(s) checked.")


def _failed_inputs(failed: FailedStep, failing: int | None, element: FailedElement | None,
                   host: str) -> tuple[str, tuple[int, ...]]:
    """What is known of the inputs of the step that raised, and the replicas to name."""
    if failed.get("arrived"):
        return _arrived_inputs(failed, failing)
    if element:
        return _element_text(element, int(failed.get("step", -1)), host), ()
    return (" It failed while producing the batch of that step (in the input pipeline), so no element of "
            "it reached a replica and vizdist cannot name it from the trace; run again without the "
            "check (e.g. drop check_numerics) and placement=True to see which element carries the NaN/Inf."), ()


def numerics_error(trace: Trace) -> Iterator[Finding]:
    num = _numerics(trace)
    message = num.get("error")
    if not message:
        return
    failed = num.get("failed_step") or {}
    step = int(failed.get("step", -1))
    node = _node(message)
    ops = (trace.meta.get("placement") or {}).get("ops") or []
    devices = sorted({o["device"] for o in ops if node and o.get("op_name", "").endswith(node) and o.get("device")})
    where = f" The failing op is '{node}'" + (f" on {', '.join(devices)}" if devices else "") + "." if node else ""
    m = re.match(r"replica_(\d+)/", node)
    failing = int(m.group(1)) if m else None  # "replica_r/..." for r > 0 (mirrored_run.py); replica 0's ops,
    # like the input pipeline's, carry no prefix, so no replica is named from them
    if failed.get("arrived") and failing is not None:
        hit = [r for r in failed.get("replicas", []) if int(r.get("replica", -1)) == failing]
        if hit:
            where += (f" It ran on replica {failing} ({hit[0].get('device', '?')}), whose batch held source elements "
                      f"{hit[0].get('source_ids')}.")
    host = (trace.meta.get("placement") or {}).get("host") or "?"
    inputs, replicas = _failed_inputs(failed, failing, num.get("failed_element"), host)
    yield Finding(
        "numerics-error", "error",
        f"Step {step} failed with a numeric check.{where}{inputs}{_op_text(num.get('first_nonfinite_op'))} "
        f"TensorFlow's message: {message}",
        step=step, replicas=replicas)
