"""Send one ``trace()`` to the service's consumer process (:mod:`.host`) and collect the result."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from vizdist._files import write_file
from vizdist.errors import TracingError
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.supervisor import POLL_S, Child, Supervisor
from vizdist.instrument.service.consume import Plan
from vizdist.instrument.service.pipeline import Pipeline, serialize
from vizdist.trace import Trace, load_trace

#: Extra seconds the notebook waits past the consumer's own watchdog before giving up on the host.
_HOST_GRACE_S = 60.0


def _send(folder: Path, key: str, prepared: Pipeline, plan: Plan, meta: dict[str, Any],
          strategy: dict[str, Any] | None, workers: list[Child]) -> None:
    graph, spec = serialize(prepared.dataset)
    write_file(jobfiles.REQUEST_GRAPH.path(folder, key), graph)
    write_file(jobfiles.REQUEST_SPEC.path(folder, key), spec)
    req = {"plan": dataclasses.asdict(plan), "meta": meta, "strategy": strategy,
           "worker_pids": [c.main_pid or c.pid for c in workers]}
    write_file(jobfiles.REQUEST.path(folder, key), json.dumps(req))


def _progress(folder: Path, key: str) -> int:
    try:
        return int(jobfiles.PROGRESS.path(folder, key).read_text(encoding="utf-8") or 0)
    except (OSError, ValueError):
        return 0


def _result(sup: Supervisor, host: Child, folder: Path, key: str, plan: Plan, bar: Any) -> Trace:
    last_change, seen = time.monotonic(), 0
    while True:
        if jobfiles.RESPONSE.path(folder, key).exists():
            return load_trace(jobfiles.RESPONSE.path(folder, key))
        if jobfiles.SERVICE_ERROR.path(folder, key).exists():
            raise _error(json.loads(jobfiles.SERVICE_ERROR.path(folder, key).read_text(encoding="utf-8")))
        n = _progress(folder, key)
        if n != seen:
            bar.update(n - seen)
            seen, last_change = n, time.monotonic()
        if not host.alive():
            raise TracingError("the service's consumer process died while tracing: " + sup.failure_text(host))
        if time.monotonic() - last_change > plan.timeout + _HOST_GRACE_S:
            raise TracingError(
                f"the service's consumer process reported nothing for {plan.timeout + _HOST_GRACE_S:.0f} s "
                "(its own watchdog stops after timeout= seconds without an element). "
                + sup.failure_text(host))
        time.sleep(POLL_S)


def _error(doc: dict[str, Any]) -> Exception:
    partial = Trace.from_dict(doc["partial_trace"]) if doc.get("partial_trace") else None
    if doc["type"] in ("TracingError", "OutOfRangeError") or partial is not None:
        return TracingError(doc["message"], partial_trace=partial)
    return TracingError(f"the service's consumer process failed: {doc['type']}: {doc['message']}")


def trace_in_host(sup: Supervisor, host: Child, workers: list[Child], prepared: Pipeline, plan: Plan,
                  meta: dict[str, Any], strategy: dict[str, Any] | None, *, progress: bool, key: str) -> Trace:
    """Run ``plan`` in the consumer process; the trace it recorded (errors re-raised here)."""
    from tqdm.auto import tqdm

    _send(sup.folder, key, prepared, plan, meta, strategy, workers)
    bar = tqdm(total=plan.expected_total, desc="tf.data service", unit="elem", disable=not progress, leave=False)
    try:
        return _result(sup, host, sup.folder, key, plan, bar)
    finally:
        bar.close()
