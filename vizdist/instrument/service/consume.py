"""Consumers reading a job from the service, each in its own thread, watched by a watchdog.

When a worker dies a plain ``next()`` can block forever; the watchdog stops
waiting after ``timeout`` seconds without an element and records the stall
(``trace.meta["stall"]``) instead of hanging. Used in the consumer process
(:mod:`.host`) and, for ``in_process=True``, in the notebook's process.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vizdist.errors import TracingError
from vizdist.instrument.service.rows import Part, Rows
from vizdist.trace import Trace

Unpack = Callable[[Any], list[Part]]


@dataclass
class Plan:
    """How to read one job (plain data: it travels to the consumer process as JSON)."""

    target: str
    policy: str
    job_name: str | None
    consumers: int
    num_consumers: int | None
    steps: int | None
    timeout: float
    stop_worker: tuple[int, int] | None = None
    expected_total: int | None = None


def _distributed_unpack(tf: Any, strategy: Any) -> Unpack:
    def unpack(item: Any) -> list[Part]:
        tags, vals, wids = item
        out: list[Part] = []
        locs = zip(strategy.experimental_local_results(tags), strategy.experimental_local_results(vals),
                   strategy.experimental_local_results(wids), strict=True)
        for r, (t, v, w) in enumerate(locs):
            flat = tf.nest.flatten(v)
            out.append((r, t.numpy(), w.numpy(), flat[0] if flat else None, t.device))
        return out
    return unpack


def _plain_unpack(tf: Any) -> Unpack:
    def unpack(item: Any) -> list[Part]:
        tags, vals, wids = item
        flat = tf.nest.flatten(vals)
        return [(-1, tags.numpy(), wids.numpy(), flat[0] if flat else None, "")]
    return unpack


def _service_datasets(tf: Any, dataset: Any, plan: Plan) -> tuple[list[Any], str]:
    svc = tf.data.experimental.service
    tf_policy = getattr(svc.ShardingPolicy, plan.policy)
    if plan.consumers == 1 and plan.num_consumers is None:
        return [dataset.apply(svc.distribute(processing_mode=tf_policy, service=plan.target,
                                             job_name=plan.job_name))], "distribute"
    dataset_id = svc.register_dataset(plan.target, dataset)
    return [svc.from_dataset_id(
        processing_mode=tf_policy, service=plan.target, dataset_id=dataset_id,
        element_spec=dataset.element_spec, job_name=plan.job_name,
        consumer_index=None if plan.num_consumers is None else i,
        num_consumers=plan.num_consumers) for i in range(plan.consumers)], "register_dataset+from_dataset_id"


def open_readers(dataset: Any, plan: Plan, strategy: Any) -> tuple[list[Callable[[], Iterator[Any]]], Unpack, str]:
    """Iterator factories (one per consumer), how to unpack an item, and the API used."""
    import tensorflow as tf

    try:
        service_ds, api = _service_datasets(tf, dataset, plan)
    except (tf.errors.OpError, ValueError) as exc:
        raise TracingError(
            f"the tf.data service refused this dataset ({type(exc).__name__}: {exc}). "
            "Check that the dispatcher is running and the pipeline uses only TensorFlow ops.") from exc
    if strategy is not None:
        dist = strategy.experimental_distribute_dataset(service_ds[0])
        return [lambda: iter(dist)], _distributed_unpack(tf, strategy), api
    return [functools.partial(iter, d) for d in service_ds], _plain_unpack(tf), api


@dataclass
class StopAfter:
    """Stops one worker (``kill(index)``) once the consumers together received ``after`` elements."""

    stop_worker: tuple[int, int] | None
    kill: Callable[[int], None]
    t0: int
    counted: int = 0
    stopped: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, n_new: int) -> None:
        """Runs in the consumer thread right after elements arrived (so the stop lands there)."""
        if self.stop_worker is None:
            return
        with self.lock:
            self.counted += n_new
            if self.stopped or self.counted < self.stop_worker[1]:
                return
            self.kill(self.stop_worker[0])
            self.stopped.append({"worker": self.stop_worker[0], "after_elements": self.counted,
                                 "t_ns": time.perf_counter_ns() - self.t0})


class Consumers:
    """One daemon thread per consumer, feeding one queue; :meth:`close` joins them (bounded)."""

    def __init__(self, factories: list[Callable[[], Iterator[Any]]], unpack: Unpack, *, steps: int | None,
                 stopper: StopAfter) -> None:
        self.q: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.halt = threading.Event()
        self.unpack, self.steps, self.stopper, self.t0 = unpack, steps, stopper, stopper.t0
        self.threads = [threading.Thread(target=self._pump, args=(c, f), daemon=True,
                                         name=f"vizdist-consumer-{c}") for c, f in enumerate(factories)]

    def _pump(self, c: int, make: Callable[[], Iterator[Any]]) -> None:
        import tensorflow as tf

        try:
            it, n = make(), 0
            while not self.halt.is_set() and (self.steps is None or n < self.steps):
                start = time.perf_counter_ns()
                try:
                    item = next(it)
                except (StopIteration, tf.errors.OutOfRangeError):
                    break
                parts = self.unpack(item)
                self.q.put(("item", c, n, start - self.t0, time.perf_counter_ns() - self.t0, parts))
                self.stopper.count(sum(int(np.size(p[1])) for p in parts))
                n += 1
            self.q.put(("end", c))
        except BaseException as exc:
            self.q.put(("error", c, exc))

    def start(self) -> None:
        """Start every consumer thread."""
        for th in self.threads:
            th.start()

    def close(self, timeout: float = 5.0) -> list[threading.Thread]:
        """Ask the threads to stop and wait at most ``timeout`` s; the ones still blocked in ``next()``."""
        self.halt.set()
        end = time.monotonic() + timeout
        for th in self.threads:
            th.join(max(0.0, end - time.monotonic()))
        return [th for th in self.threads if th.is_alive()]


def _drain(cons: Consumers, rows: Rows, timeout: float, on_progress: Callable[[int], None]) -> tuple[
        dict[str, Any] | None, BaseException | None]:
    """Move queued items into ``rows`` until every consumer ended; ``(stall, error)``."""
    ended: set[int] = set()
    last = time.monotonic()
    while len(ended) < len(cons.threads):
        try:
            msg = cons.q.get(timeout=0.25)
        except queue.Empty:
            if time.monotonic() - last > timeout:
                waiting = sorted(set(range(len(cons.threads))) - ended)
                return {"consumers": waiting, "after_s": timeout, "elements_received": rows.received}, None
            continue
        last = time.monotonic()
        if msg[0] == "end":
            ended.add(msg[1])
        elif msg[0] == "error":
            return None, msg[2]
        else:
            on_progress(rows.add(*msg[1:]))
    return None, None


def record(factories: list[Callable[[], Iterator[Any]]], unpack: Unpack, meta: dict[str, Any], *,
           plan: Plan, decode: Callable[[Any], dict[str, np.ndarray]], kill: Callable[[int], None],
           on_progress: Callable[[int], None]) -> Trace:
    """Read the job with one thread per consumer; the trace of what arrived (stalls recorded)."""
    stopper = StopAfter(plan.stop_worker, kill, time.perf_counter_ns())
    cons = Consumers(factories, unpack, steps=plan.steps, stopper=stopper)
    rows = Rows(decode)
    if plan.stop_worker is not None and plan.stop_worker[1] == 0:
        stopper.count(0)
    cons.start()
    try:
        stall, error = _drain(cons, rows, plan.timeout, on_progress)
    finally:
        cons.halt.set()
    meta["stopped_workers"] = list(stopper.stopped)
    rows.add_stops(stopper.stopped)
    meta["complete"] = stall is None and error is None and plan.steps is None
    if stall is not None:
        meta["stall"] = stall
        meta["abandoned_consumer_threads"] = len(stall["consumers"])
    trace = rows.trace(meta)
    if error is not None:
        raise TracingError(
            f"the tf.data service failed while consumers read the dataset "
            f"({type(error).__name__}: {str(error).strip()[:600]}). Check that the pipeline can run "
            "on the workers (only TensorFlow ops, splittable sources for DYNAMIC/distributed_epoch, "
            "files for FILE) and that the workers are up.", partial_trace=trace) from error
    if stall is None:
        cons.close()
    return trace
