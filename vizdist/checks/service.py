"""Findings for tf.data service traces (``LocalDataService.trace``), and for ``trace_distribution``
traces of a pipeline that reads from the service (``meta["services"]``; the service worker of each
element is then the ``service_worker`` column).

The service makes different promises per sharding policy:

* ``parallel_epochs`` (``OFF``): every worker processes the whole dataset, so
  each element arrives once *per worker*: duplicates are expected.
* ``distributed_epoch`` (``DYNAMIC``): each element at most once overall; the
  splits a stopped (or restarted) worker held are lost, and none is handed out twice.
* the static policies ``FILE``, ``DATA``, ``FILE_OR_DATA``: each worker makes its
  own shard, so each element once overall while no worker restarts; a worker
  restarted at its address makes its shard again from the beginning, so what it
  had sent arrives twice (notebook 04, ledger 04-2).
* ``HINT`` shards only where the pipeline says ``shard(SHARD_HINT, ...)``.

When a worker stops, what it had not delivered is lost (no other worker makes
it); the consumer may also block: vizdist's watchdog records that as a stall.

Example:
    >>> import vizdist
    >>> from vizdist.diagnose import diagnose
    >>> t = vizdist.Trace.from_records(
    ...     elements=[dict(step=s, worker=s % 2, source_id=0) for s in range(2)],
    ...     meta={"kind": "data_service", "sharding_policy": "DYNAMIC",
    ...           "num_workers": 2, "expected_source_ids": [0], "complete": True})
    >>> [c for c in diagnose(t)["code"] if c.startswith("service-")]
    ['service-duplicates']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from vizdist.checks.finding import Finding
from vizdist.contract import ServiceRead, TraceMeta
from vizdist.trace import Trace

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["copies_by_design", "service_attribution", "service_copies", "service_duplicates", "service_lost",
           "service_stall"]

_AT_MOST_ONCE = ("DYNAMIC", "FILE", "DATA", "FILE_OR_DATA")


def _is_service(trace: Trace) -> bool:
    return trace.meta["kind"] == "data_service"


def _reads(trace: Trace) -> list[ServiceRead]:
    """The pipeline's reads from the service, in a distribution trace (``meta["services"]``)."""
    if trace.meta["kind"] not in ("distribution", "multi_worker"):
        return []
    return list(trace.meta.get("services") or [])


def _policy(trace: Trace) -> str:
    """The sharding policy the elements went through ("" when the trace has no service in it)."""
    if _is_service(trace):
        return str(trace.meta.get("sharding_policy", ""))
    reads = _reads(trace)
    return str(reads[-1].get("sharding_policy", "")) if reads else ""


def _worker_column(trace: Trace) -> str | None:
    """Which ``elements`` column names the service worker (None: this trace has no service in it).

    ``"service_worker"`` may be missing from a trace with service reads (``watch`` reads values): read it as -1.
    """
    if _is_service(trace):
        return "worker"
    return "service_worker" if _reads(trace) else None


def _elements(trace: Trace) -> Any:
    """The elements, with ``service_worker`` (-1, unknown) added where a trace with service reads lacks it."""
    e = trace.elements
    if _reads(trace) and "service_worker" not in e.columns:
        e = e.assign(service_worker=-1)
    return e


def copies_by_design(trace: Trace) -> str:
    """How a distribution trace's repeated ids relate to ``parallel_epochs`` copies (for the duplicate check).

    ``""``: the pipeline makes no service copies; ``"per_worker"``: each element comes once from each
    service worker and the ``service_worker`` column tells the copies apart; ``"unknown"``: copies are
    expected but the worker of each is unknown, so a repeated id is no evidence of a duplicate.

    Example:
        >>> from vizdist.trace import Trace
        >>> t = Trace.from_records(elements=[dict(source_id=0, service_worker=-1)] * 2,
        ...                        meta={"services": [{"sharding_policy": "OFF"}]})
        >>> copies_by_design(t)
        'unknown'
    """
    if _is_service(trace) or _policy(trace) not in ("OFF", "HINT"):
        return ""
    e = _elements(trace)
    col = _worker_column(trace)
    known = col is not None and len(e) > 0 and bool((e[col] >= 0).all())
    return "per_worker" if known and trace.meta.get("provenance", "tagged") == "tagged" else "unknown"


def _element_keys(e: Any) -> list[str]:
    return ["source_id"] + [c for c in ("source", "source_line", "epoch") if c in e.columns]


def _ids(ids: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > limit else "")


def _mode(meta: TraceMeta) -> str:
    policy = str(meta.get("sharding_policy", ""))
    mode = {"OFF": "parallel_epochs", "DYNAMIC": "distributed_epoch"}.get(policy)
    return f"{mode} (ShardingPolicy.{policy})" if mode else f"ShardingPolicy.{policy}"


def _stopped(meta: TraceMeta) -> list[int]:
    return [int(s["worker"]) for s in meta.get("stopped_workers") or []]


_BY_DESIGN = ("parallel_epochs makes every worker process the whole dataset, so each element comes once from "
              "each worker. That is by design (duplicates are expected here). If the model should see each "
              "element once per epoch, use processing_mode='distributed_epoch' (or a static sharding policy "
              "such as DATA or FILE).")
_NO_HINT = ("HINT shards only where the pipeline calls ds.shard(tf.data.experimental.SHARD_HINT, "
            "tf.data.experimental.SHARD_HINT); this pipeline has none, so every worker read everything, as "
            "with OFF. Add that shard call, or use DATA/FILE/DYNAMIC.")


def _copy_places(e: Any, col: str, keys: list[str], key: Any) -> str:
    """Where the copies of one element arrived: ``step s replica r (service worker w)`` each."""
    rows = e[(e[keys] == list(key)).all(axis=1)] if len(keys) > 1 else e[e[keys[0]] == key]
    return "; ".join(f"step {int(s)} replica {int(r)} from service worker {int(w) if w >= 0 else '?'}"
                     for s, r, w in zip(rows["step"], rows["replica"], rows[col], strict=True))


def service_copies(trace: Trace) -> Iterator[Finding]:
    """parallel_epochs (or HINT without hints): one copy per worker, as designed."""
    col, policy, e = _worker_column(trace), _policy(trace), _elements(trace)
    if col is None or policy not in ("OFF", "HINT") or e.empty or (_is_service(trace) and (e[col] < 0).all()):
        return
    keys = _element_keys(e) if not _is_service(trace) else ["source_id"]
    per = e.groupby(keys)[col].agg(["size", "nunique"])
    multi = per[per["size"] > 1]
    if multi.empty:
        return
    workers = sorted(int(w) for w in e[col].unique() if w >= 0)
    once_each = bool((multi["size"] == multi["nunique"]).all()) and bool((e[col] >= 0).all())
    how = ("each copy from a different worker" if once_each else
           "some more than once from one worker" if (e[col] >= 0).all() else "which worker sent each is unknown")
    times = " or ".join(map(str, sorted(set(int(v) for v in multi["size"]))))
    named = f"; workers {', '.join(map(str, workers))}" if workers else ""
    text = (f"{len(multi)} of {len(per)} source elements arrived {times} times ({how}{named}): "
            f"{_BY_DESIGN if policy == 'OFF' else _NO_HINT}")
    if not _is_service(trace):
        last = multi.index[-1]
        text = (f"The pipeline reads from the tf.data service with {_mode(trace.meta | {'sharding_policy': policy})}. "
                f"{text} Element {last if len(keys) == 1 else last[0]} arrived at: {_copy_places(e, col, keys, last)}."
                + ("" if trace.meta.get("provenance", "tagged") == "tagged" else
                   f" (Ids here are not exact: {trace.meta.get('provenance_note') or trace.meta.get('provenance')}; "
                   "equal ids may be equal values.)"))
    yield Finding("service-copies", "info", text, workers=workers)


def service_duplicates(trace: Trace) -> Iterator[Finding]:
    """More copies than one pass of the pipeline yields, under an at-most-once policy."""
    meta = trace.meta
    if not _is_service(trace) or meta.get("sharding_policy") not in _AT_MOST_ONCE:
        return
    expected = meta.get("expected_source_ids")
    e = trace.elements
    if expected is None or e.empty:
        return
    want = Counter(int(i) for i in expected)
    got = Counter(int(i) for i in e["source_id"].tolist())
    extra = sorted(i for i, n in got.items() if n > want.get(i, 0))
    if not extra:
        return
    rows = e[e["source_id"].isin(extra)]
    workers = sorted(int(w) for w in rows["worker"].unique() if w >= 0)
    ex = extra[0]
    from_w = sorted(int(w) for w in e[e["source_id"] == ex]["worker"].tolist())
    cause = ("a worker restarted (or the dispatcher recovered from its journal) and produced part of the "
             "data again" if _stopped(meta) or meta.get("fault_tolerant_mode") else
             "several jobs read the same data (consumers without one shared job_name), or the pipeline "
             "repeats before the service")
    yield Finding(
        "service-duplicates", "error" if meta.get("provenance", "tagged") == "tagged" else "info",
        f"{len(extra)} source elements arrived more often than the pipeline yields them ({_ids(extra)}); "
        f"element {ex} came {got[ex]} times (from workers {from_w}). {_promise(meta)} Likely cause: {cause}. "
        "Fix: give all consumers one job_name; if duplicates "
        "after a restart are not acceptable, make the step idempotent or de-duplicate by id.",
        workers=workers,
    )


def service_lost(trace: Trace) -> Iterator[Finding]:
    """Elements that never arrived: lost with a stopped worker, or missing from a complete run."""
    meta = trace.meta
    if not _is_service(trace):
        return
    expected = meta.get("expected_source_ids")
    if expected is None or meta.get("steps") is not None or meta.get("coordinated_reads"):
        return
    e = trace.elements
    universe = sorted(set(int(i) for i in expected))
    if meta.get("sharding_policy") in ("OFF", "HINT") and not (e["worker"] < 0).all():
        yield from _lost_per_worker(meta, e, universe)  # every worker owes every element
    else:
        yield from _lost_overall(meta, e, universe)


def _lost_per_worker(meta: TraceMeta, e: pd.DataFrame, universe: list[int]) -> Iterator[Finding]:
    """OFF / HINT: each worker makes the whole dataset; what each one's consumers never got."""
    stopped = _stopped(meta)
    for w in range(int(meta.get("num_workers") or 0)):
        got = set(e[e["worker"] == w]["source_id"].tolist())
        lost = [i for i in universe if i not in got]
        if not lost:
            continue
        if w in stopped:
            info = next(s for s in meta["stopped_workers"] if s["worker"] == w)
            yield Finding(
                "service-lost-elements", "error",
                f"Worker {w} stopped after the consumers had received {info['after_elements']} elements; "
                f"its copies of {len(lost)} of {len(universe)} elements never arrived ({_ids(lost)}). Under "
                f"{_mode(meta)} no other worker makes up for them: the epoch is short by what worker {w} "
                "had not yet sent. A worker restarted at the same address makes its whole copy again from "
                "the start (what had arrived arrives twice), so count epochs by elements seen, not by end "
                "of sequence, or de-duplicate by id.",
                workers=[w])
        elif meta.get("complete"):
            yield Finding(
                "service-missing-elements", "warning",
                f"Worker {w} delivered only {len(universe) - len(lost)} of {len(universe)} elements under "
                f"{_mode(meta)}; missing {_ids(lost)}. It probably joined the job late or failed; check its "
                "log.", workers=[w])


def _lost_overall(meta: TraceMeta, e: pd.DataFrame, universe: list[int]) -> Iterator[Finding]:
    """Sharded (or unattributed) reads: the elements no consumer got, from any worker."""
    got = set(e["source_id"].tolist())
    lost = [i for i in universe if i not in got]
    if not lost:
        return
    stopped = _stopped(meta)
    if stopped:
        names = ", ".join(map(str, stopped))
        after = ", ".join(str(s["after_elements"]) for s in meta["stopped_workers"])
        yield Finding(
            "service-lost-elements", "error",
            f"Worker {names} stopped after the consumers had received {after} elements, and {len(lost)} of "
            f"{len(universe)} elements never reached any consumer ({_ids(lost)}). {_why_lost(meta, names)}",
            workers=stopped)
    elif meta.get("complete"):
        yield Finding(
            "service-missing-elements", "warning",
            f"{len(lost)} of {len(universe)} elements never reached a consumer ({_ids(lost)}) although no "
            "worker was stopped by vizdist. A worker may have failed: check the worker logs.")


def _promise(meta: TraceMeta) -> str:
    """What the policy promises about copies (TF's ShardingPolicy; restarts: ledger 04-2, 04-3)."""
    if meta.get("sharding_policy") == "DYNAMIC":
        return f"{_mode(meta)} promises each element at most once per epoch."
    return (f"{_mode(meta)} gives each element once per epoch while no worker restarts (a restarted worker "
            "makes its shard again from the start).")


def _why_lost(meta: TraceMeta, names: str) -> str:
    if meta.get("sharding_policy") == "DYNAMIC":
        return (f"Under {_mode(meta)} the dispatcher had handed those elements' splits to worker {names}; they "
                "died with it and are not handed out again. Fix: with fault_tolerant_mode=True and a work_dir "
                "the dispatcher survives restarts, but a dead worker's splits are still lost; use "
                "parallel_epochs with repeat() if every element must be seen, or accept a short epoch.")
    return (f"Under {_mode(meta)} those elements were in worker {names}'s shard, and no other worker makes them. "
            "Fix: a worker restarted at the same address makes its whole shard again from the start (what had "
            "arrived arrives twice: de-duplicate by id), or accept a short epoch.")


def _restart(meta: TraceMeta) -> str:
    if meta.get("sharding_policy") == "DYNAMIC":
        return "it asks for the next split; the splits it held are lost"
    return "it makes its copy or shard again from the start: what had arrived arrives twice"


def service_stall(trace: Trace) -> Iterator[Finding]:
    """The consumer waited ``timeout`` seconds for an element that never came."""
    meta = trace.meta
    stall = meta.get("stall") if _is_service(trace) else None
    if not stall:
        return
    stopped = _stopped(meta)
    why = (f"worker {', '.join(map(str, stopped))} had stopped; the client keeps waiting for the tasks of "
           "that worker to come back (the dispatcher never ends a stopped worker's task)" if stopped
           else "no worker sent an element")
    yield Finding(
        "service-stall", "error",
        f"Consumer {', '.join(map(str, stall['consumers']))} waited {stall['after_s']} s for the next element "
        f"and got none, after {stall['elements_received']} elements in all: {why}. Without vizdist's "
        "watchdog a plain next() keeps waiting. Fix: restart the stopped worker at the same address "
        f"({_restart(meta)}), or put a deadline on your input loop (vizdist stopped waiting and kept what had "
        "arrived).",
        workers=stopped,
    )


def service_attribution(trace: Trace) -> Iterator[Finding]:
    """Say so when the worker of each element could not be read."""
    meta, col, e = trace.meta, _worker_column(trace), _elements(trace)
    if col is None or e.empty or not (e[col] < 0).all():
        return
    if _is_service(trace):
        why = str(meta.get("worker_attribution") or "the workers hold no vizdist_worker_id file")
        fix = "Run the workers as processes (LocalDataService(in_process=False), the default)"
    else:
        why = "; ".join(sorted({str(r.get("worker_attribution") or "unknown").removeprefix("unknown: ")
                                for r in _reads(trace)}))
        fix = ("Read from a vizdist.LocalDataService(isolate=False) (its workers are processes that know their "
               "id)")
    yield Finding(
        "service-no-worker-attribution", "info",
        f"The tf.data service worker of each element is unknown ({why}). {fix} to see which worker produced "
        "what.")
