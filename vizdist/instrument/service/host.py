"""The consumer process of a :class:`LocalDataService` (also home of its dispatcher).

Started by the service's supervisor as ``-m vizdist.instrument.service.host JOB_DIR``,
inside the service's private network namespace when it has one, so that the
dispatcher and the consumers talk over that namespace's loopback only. It reads
``JOB_DIR/host.json``, starts the ``DispatchServer`` (unless the service uses
your dispatcher), reports ``ready``, then serves trace requests:
``req-K.json`` (+ the pipeline's graph and element spec as protocol-buffer
files) in, ``res-K.json`` (the trace) or ``err-K.json`` out, ``prog-K.txt``
counting elements as they arrive. No pickle crosses the process boundary.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from vizdist._files import write_file
from vizdist.errors import TracingError
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.supervisor import POLL_S, report


def _start_dispatcher(cfg: dict[str, Any]) -> Any:
    import tensorflow as tf

    svc = tf.data.experimental.service
    kwargs: dict[str, Any] = dict(port=cfg["port"], worker_addresses=cfg["worker_addresses"] or None)
    if cfg["journal"]:
        kwargs.update(fault_tolerant_mode=True, work_dir=cfg["journal"])
    return svc.DispatchServer(svc.DispatcherConfig(**kwargs))


def _write(path: Path, text: str) -> None:
    write_file(path, text)


class _Progress:
    """Writes the element count to ``prog-K.txt`` at most every 0.2 s."""

    def __init__(self, path: Path) -> None:
        self.path, self.n, self.last = path, 0, 0.0

    def __call__(self, n_new: int) -> None:
        self.n += n_new
        if time.monotonic() - self.last > 0.2:
            self.last = time.monotonic()
            _write(self.path, str(self.n))


def _kill_worker(pids: list[int]) -> Any:
    def kill(index: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pids[index], signal.SIGKILL)
    return kill


def handle(job: Path, key: str) -> None:
    """Serve request ``key``: read the job on the service, write the trace (or the error)."""
    from vizdist.instrument.core.codes import decode_tags
    from vizdist.instrument.service.consume import Plan, open_readers, record
    from vizdist.instrument.service.pipeline import deserialize, rebuild_strategy
    from vizdist.trace import Trace

    req = json.loads(jobfiles.REQUEST.path(job, key).read_text(encoding="utf-8"))
    meta = req["meta"]
    try:
        dataset = deserialize(jobfiles.REQUEST_GRAPH.path(job, key).read_bytes(), jobfiles.REQUEST_SPEC.path(job, key).read_bytes())
        plan = Plan(**req["plan"])
        factories, unpack, meta["api"] = open_readers(dataset, plan, rebuild_strategy(req["strategy"]))
        trace = record(factories, unpack, meta, plan=plan, decode=lambda t: decode_tags(t, meta["tagging"]),
                       kill=_kill_worker(req["worker_pids"]), on_progress=_Progress(jobfiles.PROGRESS.path(job, key)))
        trace.save(jobfiles.RESPONSE.path(job, key))  # atomic: the parent sees all of it or none
    except Exception as exc:
        partial = exc.partial_trace if isinstance(exc, TracingError) else None
        doc = {"type": type(exc).__name__, "message": str(exc),
               "partial_trace": partial.to_dict() if isinstance(partial, Trace) else None}
        _write(jobfiles.SERVICE_ERROR.path(job, key), json.dumps(doc, default=str))


def main(argv: list[str]) -> int:
    """Run the host for ``argv = [JOB_DIR]`` until the service stops it."""
    job = Path(argv[0])
    cfg = json.loads((job / jobfiles.HOST_CONFIG).read_text(encoding="utf-8"))
    if cfg["cpus"] > 1:
        from vizdist.instrument.core.devices import virtual_devices

        virtual_devices(cfg["cpus"])
    dispatcher = _start_dispatcher(cfg) if cfg["port"] else None  # noqa: F841 (kept alive)
    report("ready")
    done: set[str] = set()
    while True:
        for req in jobfiles.REQUEST.all(job):
            key = jobfiles.REQUEST.task(req)
            if key not in done:
                done.add(key)
                handle(job, key)
        time.sleep(POLL_S)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
