"""Checks for parameter-server runs: a worker or a ps that was lost, and what TF's coordinator did about it.

TensorFlow's ``ClusterCoordinator`` treats the two losses differently (seen on
TF 2.21, and in its ``cluster_coordinator.py``):

* a lost **worker**: the closure it was running (or took next) fails with an
  ``UnavailableError``; TF puts it back in the queue and another worker runs it.
  Nothing is raised; the run finishes on the workers that are left.
* a lost **ps**: after the failures TF takes as transient (the first K - 1
  reported for a ps, K = ``TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES``,
  default 3; put back and retried), closures that touch its variables fail with ``UnavailableError``,
  ``join()`` raises it and the closures not yet run are cancelled. TF's
  documented recovery is to restart the ps *and* the coordinator and restore a
  checkpoint.

The lost tasks come from ``meta["lost_tasks"]`` (``LocalCluster``) or, in a
trace of your own cluster, from the closures' attempts and errors.

Example:
    >>> from vizdist import Trace
    >>> from vizdist.diagnose import diagnose
    >>> closures = [{"closure": 0, "worker": 0, "status": "done", "attempts": [
    ...     {"worker": 1, "outcome": "rescheduled", "error": "UnavailableError: ..."},
    ...     {"worker": 0, "outcome": "done", "error": ""}]}]
    >>> t = Trace(meta={"kind": "parameter_server", "closures": closures, "steps_scheduled": 1})
    >>> diagnose(t)["code"].tolist()
    ['ps-worker-lost']
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from vizdist.checks.finding import Finding
from vizdist.contract import ClosureRecord, TraceMeta
from vizdist.trace import Trace

__all__ = ["ps_ps_lost", "ps_worker_lost"]


def _closures(meta: TraceMeta) -> list[ClosureRecord]:
    return [c for c in meta.get("closures") or [] if isinstance(c, dict)]


def _lost(meta: TraceMeta, job: str) -> dict[int, str]:
    """Lost tasks of ``job`` (``worker``/``ps``) -> how they were lost, from the launcher or TF's errors."""
    out: dict[int, str] = {}
    for entry in meta.get("lost_tasks") or []:
        kind, _, index = str(entry.get("task", "")).partition("-")
        if kind == job and index.isdigit():
            after = entry.get("after_s")
            when = f", {after:.1f} s after the job started" if isinstance(after, (int, float)) and after >= 0 else ""
            out[int(index)] = f"{entry.get('how', 'lost')}{when}"
    for c in _closures(meta):
        for a in c.get("attempts") or []:
            if job == "worker" and a.get("outcome") == "rescheduled":
                out.setdefault(int(a.get("worker", -1)), "TF saw it fail (UnavailableError)")
            for m in re.finditer(rf"/job:{job}/replica:0/task:(\d+)", str(a.get("error", ""))):
                if job == "ps" and a.get("outcome") in ("failed", "retried"):
                    out.setdefault(int(m.group(1)), "TF saw it fail (UnavailableError)")
    return {k: v for k, v in out.items() if k >= 0}


def _count(closures: list[ClosureRecord], status: str) -> int:
    return sum(c.get("status") == status for c in closures)


def _ids(xs: list[int], limit: int = 8) -> str:
    shown = ", ".join(str(x) for x in xs[:limit])
    return shown + (f", ... ({len(xs)} in all)" if len(xs) > limit else "")


def _partial_writes(meta: TraceMeta, lost_ps: int, done: int) -> str:
    """Shards on the ps that survived, updated more often than closures finished (failed closures wrote there)."""
    more = sorted({str(r.get("variable")) for r in meta.get("variables") or []
                   if isinstance(r, dict) and r.get("job") == "ps" and r.get("task") != lost_ps
                   and isinstance(r.get("updates"), int) and r["updates"] > done})
    if not more:
        return ""
    return (f" Shards of {', '.join(more)} on the ps that survived were updated more often than {done} times: "
            "closures that then failed had already written there (an update is not atomic across ps tasks).")


def ps_worker_lost(trace: Trace) -> Iterator[Finding]:
    """A worker was lost: which closures TF re-ran, and on which workers."""
    meta = trace.meta
    closures = _closures(meta)
    for w, how in sorted(_lost(meta, "worker").items()):
        moved = [(int(c["closure"]), int(c.get("worker", -1))) for c in closures
                 if any(a.get("outcome") == "rescheduled" and a.get("worker") == w for a in c.get("attempts") or [])]
        done, n = _count(closures, "done"), len(closures)
        if moved:
            where = sorted({dst for _, dst in moved if dst >= 0})
            what = (f"TF's ClusterCoordinator put back the closure(s) it was running ({_ids([c for c, _ in moved])}) "
                    f"and re-ran them on worker(s) {_ids(where) if where else 'none (they did not finish)'}. ")
        else:
            what = "No closure was running on it, so TF had nothing to re-run. "
        yield Finding(
            "ps-worker-lost", "warning",
            f"worker {w} was lost ({how}). {what}{done} of {n} scheduled closures finished; the run went on "
            "without it and raised nothing. A re-run closure takes the next batch of the worker that runs it, "
            "not the batch the lost worker was reading, and whatever it did before the loss may happen twice "
            "(TF runs a closure at least once). TF waits for the worker to come back (up to an hour) and "
            "rebuilds its dataset then.",
            workers=[w])


def ps_ps_lost(trace: Trace) -> Iterator[Finding]:
    """A parameter server was lost: closures that touch it fail and the coordinator raises."""
    meta = trace.meta
    closures = _closures(meta)
    for p, how in sorted(_lost(meta, "ps").items()):
        done, failed, cancelled = (_count(closures, s) for s in ("done", "failed", "cancelled"))
        retried = sum(a.get("outcome") == "retried" for c in closures for a in c.get("attempts") or [])
        errors = [str(e) for e in meta.get("errors") or []] if isinstance(meta.get("errors"), list) else []
        if failed or errors:
            first = errors[0].split(":")[0] if errors else "an error"
            retry = (f"after putting back {retried} attempt(s) it took for transient failures (the first K - 1 "
                     "reported for a ps; K = TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES, default 3), "
                     if retried else "")
            msg = (f"ps {p} was lost ({how}). TF does not reschedule around a lost parameter server: {retry}"
                   f"closures failed with UnavailableError naming /job:ps/replica:0/task:{p}, join() raised "
                   f"{first} and the rest "
                   f"were cancelled: {done} of {len(closures)} closures finished, {failed} failed, {cancelled} "
                   f"cancelled. The trace keeps the {done} that finished.{_partial_writes(meta, p, done)} "
                   "Fix (TF's documented recovery): "
                   "restart the ps and the coordinator, and restore the variables from a checkpoint you save "
                   "regularly.")
            yield Finding("ps-ps-lost", "error", msg)
        else:
            yield Finding(
                "ps-ps-lost", "warning",
                f"ps {p} was lost ({how}), but no closure failed: none read or wrote a variable on it after "
                "the loss (TF notices a lost ps only when a function touches it). Its variables are gone; "
                "the next step that uses them fails.")
