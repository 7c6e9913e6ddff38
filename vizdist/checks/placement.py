"""Findings from the placement record and the loss-scaling record (``placement=True``, ``trace_loss_scaling``).

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(meta={"loss_scaling": [dict(step=2, n=[1, 1, 0, 0],
    ...     reduced_compute_average_loss=4.25, reduced_per_replica_mean=None, expected=8.5, global_batch_size=4)]})
    >>> vizdist.diagnose(t)["code"].tolist()
    ['loss-scaling']
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from vizdist.checks.finding import Finding
from vizdist.trace import Trace


def placement_notes(trace: Trace) -> Iterator[Finding]:
    for note in (trace.meta.get("placement") or {}).get("notes") or []:
        yield Finding("placement-note", "info", f"Placement record: {note}.")


def _off(value: float | None, expected: float) -> bool:
    return value is None or math.isnan(value) or not math.isclose(value, expected, rel_tol=1e-5, abs_tol=1e-6)


def loss_scaling(trace: Trace) -> Iterator[Finding]:
    for row in trace.meta.get("loss_scaling") or []:
        expected = row.get("expected")
        if expected is None:
            continue
        cal, mean = row.get("reduced_compute_average_loss"), row.get("reduced_per_replica_mean")
        wrong = []
        if _off(cal, expected):
            wrong.append(f"compute_average_loss summed gives {cal:g}")
        if _off(mean, expected):
            wrong.append(f"the MEAN of per-replica means gives {'NaN' if mean is None else f'{mean:g}'}")
        if not wrong:
            continue
        n = row.get("n") or []
        yield Finding(
            "loss-scaling", "warning",
            f"Step {row.get('step', -1)}: the replicas got {n} elements (sum {sum(n)}) and their mean loss is "
            f"{expected:g}, but {' and '.join(wrong)}. compute_average_loss divides by the global_batch_size you "
            f"pass ({row.get('global_batch_size')}) even when fewer elements arrived, and an empty replica's "
            "mean is NaN. Drop the remainder (batch(..., drop_remainder=True)) or pass the real batch size.",
            step=int(row.get("step", -1)))
