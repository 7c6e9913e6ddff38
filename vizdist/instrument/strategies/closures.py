"""Who ran what under ``ParameterServerStrategy``: the closures, run, waited for (bounded) and recorded.

What :func:`vizdist.instrument.strategies.parameter_server.trace_parameter_server` does between making the
per-worker dataset and building the trace: the dataset ``dataset_fn`` gives, tagged
(:func:`tagging_dataset_fn`); the step each closure runs (:func:`make_step`); scheduling and waiting with a
deadline (:func:`run_closures`); every attempt of every closure, read on the coordinator's worker threads
(:class:`ClosureObserver`); and what each ``RemoteValue`` gave back (:func:`record_closures`).

Example:
    >>> error_text(ValueError("first line" + chr(10) + "second line"))
    'ValueError: first line | second line'
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from vizdist.instrument.core.rows import Recorder
from vizdist.instrument.tfapi import coordinator as tf_coordinator

__all__ = ["ClosureObserver", "error_text", "make_step", "per_worker_values", "record_closures", "run_closures",
           "tagging_dataset_fn"]

_ERROR_CHARS = 2000  # per attempt; the error join() raised is kept whole


def _jsonable(x: Any) -> Any:
    import numpy as np

    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.generic,)):
        return x.item()
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if hasattr(x, "numpy"):
        return _jsonable(x.numpy())
    return x


def error_text(exc: BaseException | None, limit: int | None = _ERROR_CHARS) -> str:
    """``Type: message`` on one line (`` | `` between lines); cut at ``limit`` characters (None: whole)."""
    if exc is None:
        return ""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {' | '.join(lines)}"
    return text if limit is None else text[:limit]


# -- who ran what: the coordinator's worker threads --------------------------------------------
class ClosureObserver:
    """Records every attempt of every closure on the coordinator's worker threads.

    TF's ``ClusterCoordinator`` runs one thread per worker, each calling
    ``Worker._process_closure(closure)``; a worker failure calls
    ``Worker._on_closure_failure(closure, error)`` and puts the closure back
    in the queue. Both are wrapped on the worker *instances* (undone by
    :meth:`remove`); the ``RemoteValue`` a closure fills identifies it.
    A closure TF puts back as a transient ps failure is seen through TF's own
    log line (``"...treated as a transient connectivity failure"``).
    """

    def __init__(self, coordinator: Any, t0: int) -> None:
        self.t0 = t0
        self.attempts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._last_log: dict[int, str] = {}
        self._workers = tf_coordinator.workers(coordinator)
        self.ok = bool(self._workers) and all(tf_coordinator.hookable(w) for w in self._workers)
        self._handler = _LogTap(self._last_log)

    def _now(self) -> int:
        return time.perf_counter_ns() - self.t0

    def install(self) -> None:
        if not self.ok:
            return
        for w in self._workers:
            tf_coordinator.wrap_worker(w, "process", self._wrap_process)
            tf_coordinator.wrap_worker(w, "failure", self._wrap_failure)
        logging.getLogger("tensorflow").addHandler(self._handler)

    def remove(self) -> None:
        for w in self._workers:
            tf_coordinator.unwrap_worker(w)
        logging.getLogger("tensorflow").removeHandler(self._handler)

    def _attempt(self, closure: Any, worker: int) -> dict[str, Any]:
        att = {"rv": tf_coordinator.closure_output(closure), "worker": worker, "t_start_ns": self._now(),
               "t_end_ns": -1, "outcome": "running", "error": ""}
        with self._lock:
            self.attempts.append(att)
        return att

    def _wrap_process(self, worker: Any, original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def process(closure: Any) -> Any:
            att = self._attempt(closure, int(worker.worker_index))
            self._last_log.pop(threading.get_ident(), None)
            try:
                return original(closure)
            finally:
                if att["outcome"] == "running":
                    att["outcome"], att["error"] = self._outcome(att["rv"])
                    att["t_end_ns"] = self._now()

        return process

    def _outcome(self, rv: Any) -> tuple[str, str]:
        status = tf_coordinator.remote_status(rv)
        error = tf_coordinator.remote_error(rv)
        if status == "READY":
            if error is None:
                return "done", ""
            return ("cancelled" if type(error).__name__ == "CancelledError" else "failed"), error_text(error)
        if status == "ABORTED":
            return "aborted", error_text(error)
        # Not ready after the attempt: TF put the closure back (a transient failure) to run it again.
        return "retried", self._last_log.pop(threading.get_ident(), "")[:_ERROR_CHARS]

    def _wrap_failure(self, worker: Any, original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def on_failure(closure: Any, error: Any) -> Any:
            with self._lock:
                mine = [a for a in self.attempts if a["worker"] == int(worker.worker_index)
                        and a["outcome"] == "running"]
            if mine:
                mine[-1].update(outcome="rescheduled", error=error_text(error), t_end_ns=self._now())
            return original(closure, error)

        return on_failure

    def of(self, rv: Any) -> list[dict[str, Any]]:
        """The attempts of the closure whose RemoteValue is ``rv``, in order."""
        with self._lock:
            return [a for a in self.attempts if a["rv"] is rv]


class _LogTap(logging.Handler):
    """Keeps TF's last coordinator log line per thread (the error of a closure TF put back)."""

    def __init__(self, sink: dict[int, str]) -> None:
        super().__init__(level=logging.ERROR)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.pathname).endswith("cluster_coordinator.py"):
            with contextlib.suppress(Exception):
                self._sink[threading.get_ident()] = " | ".join(
                    ln.strip() for ln in record.getMessage().splitlines() if ln.strip())


# -- the dataset, tagged ------------------------------------------------------------------------
def tagging_dataset_fn(dataset_fn: Callable[[Any], Any], contexts: list[dict[str, Any]],
                        infos: list[dict[str, Any]]) -> Callable[[Any], Any]:
    """``dataset_fn`` as TF calls it, with its pipeline tagged.

    TF calls it once, inside a ``tf.function`` it traces in the coordinator;
    vizdist calls your ``dataset_fn`` there (once, with TF's ``InputContext``)
    under ``tf.init_scope()`` so the pipeline is built eagerly and can be
    tagged, then hands TF the tagged pipeline as a serialized graph (how TF
    itself ships a ``tf.data.Dataset`` to workers).
    """
    import tensorflow as tf

    serialize_dataset_to_graph, deserialize_dataset_from_graph = tf_coordinator.dataset_graph_functions()

    from vizdist.instrument.ids.tagging import Untaggable, tag_dataset

    def traced_fn(input_context: Any) -> Any:
        contexts.append({"num_input_pipelines": int(input_context.num_input_pipelines),
                         "input_pipeline_id": int(input_context.input_pipeline_id),
                         "num_replicas_in_sync": int(input_context.num_replicas_in_sync)})
        with tf.init_scope():
            ds = dataset_fn(input_context)
            if not isinstance(ds, tf.data.Dataset):
                raise TypeError(f"dataset_fn must return a tf.data.Dataset; got {type(ds).__name__}.")
            try:
                tagged = tag_dataset(ds)
                ds, info = tagged.dataset, tagged.info
            except Untaggable as exc:
                info = {"provenance": "content", "provenance_note": f"not tagged ({exc}); ids are the "
                        "first value of each element"}
            infos.append(info)
            graph, spec = serialize_dataset_to_graph(ds), ds.element_spec
        return deserialize_dataset_from_graph(graph, spec)

    return traced_fn


def make_step(strategy: Any, step_fn: Callable[[Any], Any] | None, tagged: bool, variables: list[Any]) -> Any:
    import tensorflow as tf

    @tf.function
    def traced_step(iterator: Any) -> Any:
        batch = next(iterator)
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()

        def replica_fn(b: Any) -> Any:
            if tagged:
                ids, value = b
            else:
                leaf = tf.nest.flatten(b)[0]
                ids, value = tf.reshape(leaf, [tf.shape(leaf)[0], -1])[:, 0], b
            for v in variables:  # one "update" per closure, on the ps tasks holding v
                v.assign_add(tf.ones(v.shape, v.dtype))
            result = step_fn(value) if step_fn is not None else tf.constant(0)
            return ids, result

        ids, result = strategy.run(replica_fn, args=(batch,))
        return ids, result, worker

    return traced_step


# -- waiting, bounded ---------------------------------------------------------------------------
def _wait(coordinator: Any, timeout: float) -> tuple[str, list[str]]:
    """``coordinator.join()`` in a thread, at most ``timeout`` s: returns (stopped, errors).

    ``stopped`` is ``"done"``, ``"error"`` (join raised TF's first closure
    error; TF then cancels what had not run) or ``"timeout"`` (join is left
    waiting in its daemon thread).
    """
    box: dict[str, BaseException] = {}

    def join() -> None:
        try:
            coordinator.join()
        except BaseException as exc:  # TF raises the first closure error here
            box["error"] = exc

    thread = threading.Thread(target=join, name="vizdist-ps-join", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return "timeout", []
    if "error" in box:
        return "error", [error_text(box["error"], None)]
    return "done", []


def run_closures(coordinator: Any, step: Any, iterator: Any, *, steps: int, timeout: float,
                  pause_after: int | None, on_pause: Callable[[], Any] | None,
                  t0: int) -> tuple[list[Any], str, list[str], list[dict[str, Any]]]:
    """Schedule ``steps`` closures (in two waves around ``on_pause``); wait for them, bounded."""
    end = time.monotonic() + timeout
    first = min(steps, pause_after) if pause_after is not None and on_pause is not None else steps
    remotes: list[Any] = []
    stopped, errors = _schedule_and_wait(coordinator, step, iterator, first, remotes, end)
    interventions: list[dict[str, Any]] = []
    if first < steps and stopped == "done" and on_pause is not None:
        note = on_pause()
        interventions.append({**dict(note or {}), "after_closures": first, "t_ns": time.perf_counter_ns() - t0})
        stopped, errors = _schedule_and_wait(coordinator, step, iterator, steps - first, remotes, end)
    return remotes, stopped, errors, interventions


def _schedule_and_wait(coordinator: Any, step: Any, iterator: Any, n: int, remotes: list[Any],
                       end: float) -> tuple[str, list[str]]:
    """Schedule ``n`` closures into ``remotes``, then wait for them until ``end``: (stopped, errors).

    ``schedule()`` raises the first error of any earlier closure (a lost ps, say) and TF then cancels
    the closures still queued. Each ``RemoteValue`` is kept as soon as ``schedule()`` returns it, so a
    raise keeps the records of every closure scheduled before it; the rest are not scheduled.
    """
    errors: list[str] = []
    for _ in range(n):
        try:
            remotes.append(coordinator.schedule(step, args=(iterator,)))
        except _closure_errors() as exc:
            errors.append(error_text(exc, None))
            break
    stopped, more = _wait(coordinator, max(0.1, end - time.monotonic()))
    return ("error" if errors else stopped), errors + more


def _closure_errors() -> tuple[type[BaseException], ...]:
    """What ``schedule()`` raises for an earlier closure's failure (TF's errors and the coordinator's wrappers).

    Anything else (a ``TypeError`` from tracing your ``step_fn``, say) is a bug to show, not a run to record.
    """
    import tensorflow as tf

    return (tf.errors.OpError, *tf_coordinator.closure_errors())


# -- what came back -----------------------------------------------------------------------------
def _status(rv: Any) -> str:
    return tf_coordinator.remote_status(rv) or "UNKNOWN"


def _fetch(rv: Any, stopped: str) -> tuple[str, Any, str]:
    """(status, values, error) of one RemoteValue, without blocking on one that is not ready."""
    status = _status(rv)
    if status == "NOT_READY" or (status == "UNKNOWN" and stopped != "done"):
        return "pending", None, ""
    try:
        return "done", rv.fetch(), ""
    except Exception as exc:  # the closure's own error, or CancelledError after another failed
        import tensorflow as tf

        return ("cancelled" if isinstance(exc, tf.errors.CancelledError) else "failed"), None, error_text(exc)


def _attempt_rows(attempts: list[dict[str, Any]], closure: int, now: int) -> list[dict[str, Any]]:
    return [{"worker": a["worker"], "outcome": a["outcome"], "error": a["error"], "t_start_ns": a["t_start_ns"],
             "t_end_ns": a["t_end_ns"] if a["t_end_ns"] >= 0 else now, "closure": closure} for a in attempts]


def record_closures(remotes: list[Any], observer: ClosureObserver, stopped: str, *, tagged: bool,
                     step_fn: Any, decode: Any) -> tuple[Recorder, list[dict[str, Any]], list[dict[str, Any]]]:
    import numpy as np

    rec = Recorder(worker=-1, decode=decode)  # rows come from every worker: each closure names its own
    closures: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    now = time.perf_counter_ns() - observer.t0
    for i, rv in enumerate(remotes):
        status, values, error = _fetch(rv, stopped)
        attempts = _attempt_rows(observer.of(rv), i, now)
        worker, result = -1, None
        if values is not None:
            ids, result, w = values
            worker = int(np.asarray(w))
            ids = np.asarray(ids).reshape(-1)
            kw = {"tags": ids.astype(np.int64)} if tagged else {
                "ids": ids.astype(np.int64) if np.issubdtype(ids.dtype, np.integer) else np.full(len(ids), -1)}
            rec.add(i, 0, worker=worker, device=f"/job:worker/replica:0/task:{worker}/device:CPU:0",
                    shape=str([len(ids)]), dtype=str(ids.dtype),
                    result=json.dumps(_jsonable(result)) if step_fn is not None else "", **kw)
        closures.append({"closure": i, "worker": worker, "status": status, "error": error,
                         "result": _jsonable(result) if step_fn is not None and values is not None else None,
                         "attempts": [{k: v for k, v in a.items() if k != "closure"} for a in attempts]})
        events.extend({"lane": f"worker {a['worker']}", "stage": "closure", "step": i, "worker": a["worker"],
                       "replica": 0, "t_start_ns": a["t_start_ns"], "t_end_ns": a["t_end_ns"],
                       "elements": "", "outcome": a["outcome"]} for a in attempts)
    return rec, closures, events


def per_worker_values(per_worker_iterator: Any) -> list[dict[str, Any]]:
    values = tf_coordinator.per_worker(per_worker_iterator)
    return [{"worker": w, "type": type(v).__name__, "status": _status(v).lower()} for w, v in enumerate(values)]
