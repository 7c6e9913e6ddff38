"""Checks about how a traced run ended: data that never came, a run stopped by ``timeout=``.

``trace_distribution`` writes why its loop ended in ``meta["stopped"]``
(``"end_of_data"``, ``"steps"``, ``"timeout"``, ...) and how far it got in
``meta["steps_run"]`` (see :mod:`vizdist.contract`).

Example:
    >>> from vizdist import Trace
    >>> from vizdist.diagnose import diagnose
    >>> t = Trace(meta={"kind": "distribution", "stopped": "end_of_data", "steps_run": 0})
    >>> diagnose(t)["code"].tolist()
    ['empty-dataset']
"""

from __future__ import annotations

from collections.abc import Iterator

from vizdist.checks.finding import Finding
from vizdist.trace import Trace

__all__ = ["empty_dataset", "not_recorded", "timed_out"]

_LOOP_KINDS = ("distribution", "multi_worker")


def _pipeline(trace: Trace) -> str:
    ops = trace.meta.get("pipeline") or []
    return " -> ".join(str(op) for op in ops)


def empty_dataset(trace: Trace) -> Iterator[Finding]:
    """The data ended before the first step: nothing reached any replica."""
    m = trace.meta
    if m.get("kind") not in _LOOP_KINDS or m.get("stopped") != "end_of_data" or m.get("steps_run") != 0:
        return
    where = f" ({_pipeline(trace)})" if _pipeline(trace) else ""
    yield Finding(
        "empty-dataset", "warning",
        f"The dataset{where} ended before its first element: the loop ran 0 steps and no replica got "
        "anything. Check the source (empty files or folder, an empty tensor), a filter that drops every "
        "element, take(0) or skip() past the end, and batch(..., drop_remainder=True) over fewer "
        "elements than one batch.")


def timed_out(trace: Trace) -> Iterator[Finding]:
    """``timeout=`` stopped the run while TensorFlow was still producing (or waiting for) data."""
    m = trace.meta
    if m.get("stopped") != "timeout":
        return
    n = int(m.get("steps_run") or 0)
    limit = m.get("timeout_s")
    after = f"after {limit:g} s" if isinstance(limit, (int, float)) else "at the timeout"
    yield Finding(
        "timed-out", "warning",
        f"Tracing stopped {after} with {n} step{'s' if n != 1 else ''} recorded: the pipeline had not "
        "ended, so this trace holds only the steps before the timeout. If the run is just long, pass "
        "steps=N or a larger timeout=; if it was stuck, look for a source that waits forever (a generator "
        "or tf.data service that never yields, a lock in a py_function, a peer worker that is gone).",
        step=n)


def not_recorded(trace: Trace) -> Iterator[Finding]:
    """A ``vizdist.record()`` block read data it could not record (``meta["not_recorded"]``)."""
    missed = trace.meta.get("not_recorded") or []
    if not missed:
        return
    steps = int(trace.meta.get("steps_run") or 0)
    head = "This block recorded nothing" if steps == 0 else f"This block recorded {steps} steps, but not all it read"
    yield Finding("not-recorded", "warning", f"{head}: " + "; ".join(str(m) for m in missed) + ". What your "
                  "code ran was not changed; only the trace is missing it.")
