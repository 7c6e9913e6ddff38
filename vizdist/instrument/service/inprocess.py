"""``LocalDataService(in_process=True)``: dispatcher, workers and consumers in the notebook's process.

These servers cannot be isolated (they live in this process's network
namespace); :class:`LocalDataService` warns about that.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from vizdist.instrument.service.consume import Plan, open_readers, record
from vizdist.instrument.service.pipeline import Pipeline
from vizdist.instrument.tfapi import service as tf_service
from vizdist.trace import Trace


@dataclass
class Servers:
    """In-process ``DispatchServer`` (unless external) and ``WorkerServer`` s."""

    dispatcher: Any
    workers: list[Any] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)

    @classmethod
    def start(cls, port: int | None, address: str, worker_ports: list[int], worker_addresses: list[str],
              journal: str) -> Servers:
        """Start the servers (``port=None``: the dispatcher at ``address`` is someone else's)."""
        import tensorflow as tf

        svc = tf.data.experimental.service
        dispatcher = None
        if port is not None:
            cfg: dict[str, Any] = dict(port=port, worker_addresses=worker_addresses or None)
            if journal:
                cfg.update(fault_tolerant_mode=True, work_dir=journal)
            dispatcher = svc.DispatchServer(svc.DispatcherConfig(**cfg))
        out = cls(dispatcher)
        for p in worker_ports:
            out.workers.append(svc.WorkerServer(svc.WorkerConfig(
                dispatcher_address=address, worker_address="127.0.0.1:%port%", port=p,
                heartbeat_interval_ms=200)))
        return out

    def stop_worker(self, index: int) -> None:
        """Stop worker ``index``."""
        if index not in self.stopped:
            self.stopped.add(index)
            tf_service.stop_server(self.workers[index])

    def trace(self, prepared: Pipeline, plan: Plan, meta: dict[str, Any], strategy: Any,
              stopped: dict[int, float], *, progress: bool) -> Trace:
        """Read the job in this process (consumer threads watched by the watchdog)."""
        from tqdm.auto import tqdm

        from vizdist.instrument.core.codes import decode_tags

        factories, unpack, meta["api"] = open_readers(prepared.dataset, plan, strategy)
        bar = tqdm(total=plan.expected_total, desc="tf.data service", unit="elem", disable=not progress,
                   leave=False)

        def kill(i: int) -> None:
            stopped.setdefault(i, time.time())
            self.stop_worker(i)

        try:
            return record(factories, unpack, meta, plan=plan, kill=kill, on_progress=bar.update,
                          decode=lambda t: decode_tags(t, prepared.info))
        finally:
            bar.close()

    def close(self) -> None:
        """Stop every server; warn about consumer threads a stall left blocked inside TensorFlow."""
        for i in range(len(self.workers)):
            with contextlib.suppress(Exception):
                self.stop_worker(i)
        self.workers = []
        if self.dispatcher is not None:
            with contextlib.suppress(Exception):
                tf_service.stop_server(self.dispatcher)
            self.dispatcher = None
        _warn_blocked_threads()


def _warn_blocked_threads(wait_s: float = 2.0) -> None:
    end = time.monotonic() + wait_s
    threads = [th for th in threading.enumerate() if th.name.startswith("vizdist-consumer-")]
    for th in threads:
        th.join(max(0.0, end - time.monotonic()))
    blocked = [th.name for th in threads if th.is_alive()]
    if blocked:
        warnings.warn(
            f"LocalDataService(in_process=True): {blocked} stayed blocked inside TensorFlow's next() after a "
            "stall, and a thread cannot be stopped from outside. They hold no server and end with this "
            "process. The default in_process=False runs consumers in a process that close() ends.",
            RuntimeWarning, stacklevel=3)
