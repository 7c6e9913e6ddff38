"""``LocalDataService``: the life cycle of a traced tf.data service (start, trace, stop)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from vizdist._files import write_file
from vizdist.errors import IsolationError, TracingError
from vizdist.instrument.core import service_registry as registry
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.isolation import EXPOSURE, IsolationWarning, start_namespace, warn_exposed
from vizdist.instrument.processes.supervisor import (
    Child,
    FolderJanitor,
    Namespace,
    Supervisor,
    check_count,
    check_seconds,
    free_ports,
    process_limit,
    temp_folder,
)
from vizdist.instrument.service import inprocess, options, pipeline
from vizdist.instrument.service.consume import Plan
from vizdist.trace import Trace

_LIVE = registry.LIVE  # every open LocalDataService (registry finds one by its address)


@atexit.register
def _close_all() -> None:  # pragma: no cover - runs at interpreter exit
    for s in list(_LIVE):
        with contextlib.suppress(Exception):
            s.close()


def _cpu_count_configured() -> int:
    """Logical CPUs this process configured (``vizdist.virtual_devices``), without starting TF's runtime."""
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    return max(1, len(tf.config.get_logical_device_configuration(cpus[0]) or [])) if cpus else 1


class LocalDataService:
    """A real tf.data service (dispatcher + workers) on loopback, for tracing.

    Args:
        workers: number of ``WorkerServer`` s to start (0 with ``dispatcher``
            to use only the workers already registered there).
        fault_tolerant: start the dispatcher with ``fault_tolerant_mode``
            (its journal lives in ``work_dir``).
        work_dir: folder for the dispatcher journal and logs (a temporary
            folder, removed on close, when ``None``). Nothing in it is ever
            imported or run.
        in_process: run dispatcher, workers and consumers in this process
            instead of one process each. Faster to start, but then every
            worker shares this process's working directory, so vizdist cannot
            tell which worker produced an element (the ``worker`` column is
            -1 and ``trace.meta["worker_attribution"]`` says why), and the
            servers cannot be isolated: anyone who can reach this machine can
            connect to them and run code in them while they run (an
            :class:`IsolationWarning` says so unless ``isolate=False``).
        dispatcher: ``"host:port"`` (or ``"grpc://host:port"``) of a
            dispatcher you already run: vizdist then starts no dispatcher and
            no namespace (its workers and consumer must reach yours). To get
            worker attribution on your own deployment, start each worker in
            its own folder holding a file ``vizdist_worker_id`` with its id
            (or with ``python -P -m vizdist.instrument.service._service_worker``).
        start_timeout: seconds to wait for the processes to start.
        progress: show ``tqdm`` progress bars (None: shown, as starting servers takes seconds).
        isolate: (default) run the dispatcher, the workers and the consumer
            in one private network namespace with only loopback, so no other
            machine (nor this one) can connect to the servers. Where the OS
            cannot make one, :class:`vizdist.IsolationError` names the cause
            and nothing starts (likewise for workers that must reach your
            ``dispatcher``). ``False`` lets them listen on every interface as
            TensorFlow does: anyone who can reach this machine can then
            connect to them and run code in them while they run. Your own
            pipeline in this process (``distribute(..., service.target)``)
            needs ``False``: an isolated dispatcher is refused with an error
            (TensorFlow would wait for it forever). ``vizdist.trace_distribution``
            then traces that pipeline with real ids and the worker of each element.
        max_workers: refuse more worker processes than this (default: 4 per
            core, at least 8); raise it to start more on purpose.

    TensorFlow's tf.data service servers listen on every interface
    (``[::]:port``; TF 2.21 has no option to bind one address). vizdist
    isolates them (above), advertises ``127.0.0.1`` addresses only, and stops
    every server on :meth:`close`, on leaving the ``with`` block and at exit.

    Example:
        >>> import vizdist, tensorflow as tf                       # doctest: +SKIP
        >>> with vizdist.LocalDataService(workers=2) as service:   # doctest: +SKIP
        ...     t = service.trace(tf.data.Dataset.range(20), processing_mode="distributed_epoch")
        >>> sorted(t.elements["source_id"]) == list(range(20))     # doctest: +SKIP
        True
    """

    def __init__(self, workers: int = 2, *, fault_tolerant: bool = False,
                 work_dir: str | os.PathLike[str] | None = None, in_process: bool = False,
                 dispatcher: str | None = None, start_timeout: float = 90.0, progress: bool | None = None,
                 isolate: bool = True, max_workers: int | None = None) -> None:
        limit = process_limit() if max_workers is None else check_count("max_workers", max_workers, minimum=1)
        self.num_workers = check_count("workers", workers, minimum=0, limit=None if in_process else limit,
                                       owner="LocalDataService: ")
        self._check_combination(workers, dispatcher, fault_tolerant)
        self.fault_tolerant, self.in_process = bool(fault_tolerant), bool(in_process)
        self.start_timeout = check_seconds("start_timeout", start_timeout)
        self.progress = True if progress is None else bool(progress)  # None: shown (starting takes seconds)
        self.isolate = bool(isolate)
        self._own_dir = work_dir is None
        # removes the folders vizdist makes here even if this process is killed (ended by close())
        self._janitor: FolderJanitor | None = FolderJanitor() if not in_process or work_dir is None else None
        self.work_dir = Path(temp_folder("vizdist-service-") if work_dir is None else work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self._own_dir and self._janitor is not None:
            self._janitor.watch(self.work_dir)
        self.external = dispatcher is not None
        self.address = dispatcher.split("://", 1)[-1] if dispatcher is not None else ""
        self.worker_addresses: list[str] = []
        self.isolated = False
        self._stopped: dict[int, float] = {}
        self._jobs, self._closed = 0, False
        self._sup: Supervisor | None = None
        self._ns: Any = None
        self._host: Child | None = None
        self._workers: list[Child] = []
        self._local: inprocess.Servers | None = None
        _LIVE.add(self)
        try:
            self._ns = self._namespace()  # refuses before any server starts
            self.isolated = self._ns is not None
            if self.external:
                registry.check_reachable(self.address)
            registry.install()
            self._start()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _check_combination(workers: int, dispatcher: str | None, fault_tolerant: bool) -> None:
        if workers == 0 and dispatcher is None:
            raise ValueError("workers=0 only makes sense with dispatcher='host:port' of a running service.")
        if fault_tolerant and dispatcher is not None:
            raise ValueError(
                "fault_tolerant configures the dispatcher vizdist starts; with dispatcher=... "
                "set fault_tolerant_mode on your own dispatcher instead.")

    # -- life cycle ---------------------------------------------------------
    def _start(self) -> None:
        ports = free_ports(self.num_workers + (0 if self.external else 1))
        worker_ports = ports[-self.num_workers:] if self.num_workers else []
        self.worker_addresses = [f"127.0.0.1:{p}" for p in worker_ports]
        if not self.external:
            self.address = f"127.0.0.1:{ports[0]}"
        journal = str(self.work_dir / "dispatcher") if self.fault_tolerant else ""
        if self.in_process:
            self._local = inprocess.Servers.start(None if self.external else ports[0], self.address,
                                                  worker_ports, self.worker_addresses, journal)
            return
        self._start_processes(ports[0] if not self.external else 0, worker_ports, journal)

    def _namespace(self) -> Namespace | None:
        """The private namespace of the servers vizdist starts (``None`` where you opted out or none start).

        Raises :class:`IsolationError` where ``isolate=True`` cannot be kept.
        """
        if not self.isolate:
            warn_exposed(f"LocalDataService(isolate=False{', in_process=True' if self.in_process else ''})",
                         stacklevel=4)
            return None
        if self.in_process:
            if self.num_workers or not self.external:
                warnings.warn(
                    "LocalDataService(in_process=True) runs the dispatcher and workers inside this process, "
                    f"which vizdist cannot put in a private network namespace. {EXPOSURE} Use in_process=False "
                    "to isolate them, or isolate=False to say you accept it.",
                    IsolationWarning, stacklevel=3)
            return None
        if self.external:
            if self.num_workers:
                raise IsolationError(
                    "LocalDataService(dispatcher=..., workers=...): the workers vizdist would start must reach "
                    f"your dispatcher, so they cannot be isolated; vizdist starts none. {EXPOSURE} Pass "
                    "isolate=False to start them anyway, or workers=0 to use only your own workers.")
            return None
        return start_namespace("LocalDataService", True,
                               opt_out="LocalDataService(isolate=False), or in_process=True")

    def _start_processes(self, port: int, worker_ports: list[int], journal: str) -> None:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
        sup = self._sup = Supervisor(temp_folder("vizdist-service-run-"), label="service",
                                     namespace=self._ns, env=env, janitor=self._janitor)
        cfg = {"port": port, "worker_addresses": self.worker_addresses, "journal": journal,
               "cpus": _cpu_count_configured()}
        write_file(sup.folder / jobfiles.HOST_CONFIG, json.dumps(cfg))
        self._host = sup.spawn("host", "vizdist.instrument.service.host", [str(sup.folder)])
        for i, p in enumerate(worker_ports):
            home = sup.folder / f"worker-{i}"  # private, neutral: only the worker-id file lives here
            home.mkdir()
            self._workers.append(sup.spawn(f"worker-{i}", "vizdist.instrument.service._service_worker", [
                "--dispatcher", self.address, "--port", str(p), "--worker-id", str(i),
                "--dispatcher-timeout-ms", str(int(self.start_timeout * 1000))], cwd=home))
        self._wait_ready(sup)

    def _wait_ready(self, sup: Supervisor) -> None:
        from tqdm.auto import tqdm

        n = len(sup.children)
        bar = tqdm(total=n, desc=f"starting {n} tf.data service processes", unit="process",
                   disable=not self.progress, leave=False)
        try:
            state, which = sup.wait(sup.children, ("ready",), deadline=time.monotonic() + self.start_timeout,
                                    bar=bar)
        finally:
            bar.close()
        if state == "dead":
            raise TracingError("a tf.data service process exited during start-up: "
                               + "\n".join(sup.failure_text(c) for c in which))
        if state == "timeout":
            raise TracingError(
                f"tf.data service process(es) {[c.name for c in which]} did not start within "
                f"{self.start_timeout:.0f} s. The machine may be overloaded: pass a larger start_timeout. "
                + "\n".join(sup.failure_text(c) for c in which))

    @property
    def _procs(self) -> list[Any]:
        """The worker processes' ``Popen`` objects (for tests)."""
        return [c.popen for c in self._workers]

    @property
    def target(self) -> str:
        """The ``grpc://host:port`` target of the dispatcher (inside the namespace when isolated).

        With ``isolate=True`` (the default) only :meth:`trace` can reach it: a
        pipeline built in this process with ``distribute(..., service.target)``
        is refused with an error that says so (TensorFlow would wait forever).
        Use ``LocalDataService(isolate=False)`` to read it with your own pipeline.
        """
        return f"grpc://{self.address}"

    @property
    def worker_attribution(self) -> str:
        """How the ``worker`` column is known: ``"worker-process-file"`` or why it is not."""
        if self.in_process:
            return ("unavailable: in-process WorkerServers share this process's working directory and "
                    "environment, so the pipeline cannot read which worker runs it; use in_process=False")
        if self.external and not self._workers:
            return ("external dispatcher: each worker is read from a vizdist_worker_id file in its working "
                    "directory; workers without one show as -1")
        return "worker-process-file"

    def alive_workers(self) -> list[int]:
        """Indices of the workers vizdist started that are still running."""
        if self._local is not None:
            return [i for i in range(len(self._local.workers)) if i not in self._stopped]
        return [i for i, c in enumerate(self._workers) if c.alive()]

    def stop_worker(self, index: int) -> None:
        """Stop worker ``index`` abruptly (SIGKILL for a process), as a crash would.

        Example:
            >>> with vizdist.LocalDataService(workers=2) as s:   # doctest: +SKIP
            ...     s.stop_worker(1)
        """
        n = len(self._local.workers) if self._local is not None else len(self._workers)
        if not 0 <= index < n:
            raise ValueError(f"worker index must be in 0..{n - 1}; got {index}.")
        self._stopped.setdefault(index, time.time())
        if self._local is not None:
            self._local.stop_worker(index)
        elif self._sup is not None:
            self._sup.kill(self._workers[index], grace=0.0)

    def close(self) -> None:
        """Stop every process, thread and server vizdist started; remove its temporary folders.

        Folders whose logs an error named are kept (the error says where).
        """
        if self._closed:
            return
        self._closed = True
        if self._local is not None:
            self._local.close()
        if self._sup is not None:
            self._sup.close()
        if self._ns is not None:
            self._ns.close()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        if self._janitor is not None:
            self._janitor.close()  # everything it watched is gone (or kept on purpose)
        _LIVE.discard(self)

    def __enter__(self) -> LocalDataService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        kind = "in-process" if self.in_process else "processes"
        return (f"LocalDataService(dispatcher={self.address}, workers={self.num_workers} ({kind}), "
                f"alive={self.alive_workers()}, fault_tolerant={self.fault_tolerant})")

    # -- tracing ------------------------------------------------------------
    def trace(self, dataset: Any, *, processing_mode: Any = None, sharding_policy: Any = None,
              job_name: str | None = None, consumers: int = 1, num_consumers: int | None = None,
              steps: int | None = None, stop: str | None = None, stop_after: int | None = None,
              strategy: Any = None, stall_timeout: float = 20.0, progress: bool | None = None) -> Trace:
        """Run ``dataset`` on this service and record where every element went.

        Args:
            dataset: the ``tf.data.Dataset`` to run on the workers (as you would
                pass it to ``tf.data.experimental.service.distribute``).
            processing_mode: ``"parallel_epochs"`` (every worker processes the
                whole dataset) or ``"distributed_epoch"`` (the dispatcher splits
                it across workers).
            sharding_policy: instead of ``processing_mode``, a
                ``ShardingPolicy`` or its name: OFF, DYNAMIC, FILE, DATA,
                FILE_OR_DATA, HINT (static policies use the fixed worker list
                this service's dispatcher was started with).
            job_name: share one job between consumers (and between calls).
            consumers: how many consumers read the job, each in its own thread;
                with more than one, the dataset is registered once
                (``register_dataset``) and each consumer reads it with
                ``from_dataset_id`` under one shared ``job_name``.
            num_consumers: turn on coordinated reads (``consumer_index`` /
                ``num_consumers``); needs an infinite dataset and ``steps``.
            steps: stop each consumer after this many elements (batches).
            stop: a worker of this service to stop abruptly, by name (``"worker-1"``, a task name as
                everywhere in vizdist), as a crash would, once the consumers together received
                ``stop_after`` elements.
            stop_after: see ``stop`` (default 0: before the first element).
            strategy: a ``MirroredStrategy`` or ``OneDeviceStrategy`` (any
                strategy with ``in_process=True``): the service dataset is fed
                to ``strategy.experimental_distribute_dataset`` and the trace
                follows each element from worker to replica (one consumer).
            stall_timeout: seconds to wait for the *next* element before reporting
                a stall (recorded in ``trace.meta["stall"]``) instead of hanging.
            progress: show a ``tqdm`` progress bar (None: shown).

        Returns:
            A :class:`vizdist.Trace`: ``elements`` rows carry ``worker``,
            ``consumer``, ``step`` (index in that consumer's stream),
            ``position`` (index inside the batch), ``source_id``, and the extra
            columns ``order`` (arrival order) and ``t_ns`` (arrival time since
            the start).

        Example:
            >>> with vizdist.LocalDataService(workers=2) as service:   # doctest: +SKIP
            ...     t = service.trace(tf.data.Dataset.range(20), processing_mode="distributed_epoch")
        """
        progress = True if progress is None else progress
        plan, prepared, meta = self._prepare(dataset, processing_mode, sharding_policy, job_name, consumers,
                                             num_consumers, steps, (stop, stop_after), strategy, stall_timeout)
        if self._local is not None:
            trace = self._local.trace(prepared, plan, meta, strategy, self._stopped, progress=progress)
        else:
            from vizdist.instrument.service.remote import trace_in_host

            assert self._sup is not None and self._host is not None
            trace = trace_in_host(self._sup, self._host, self._workers, prepared, plan, meta,
                                  pipeline.strategy_spec(strategy), progress=progress, key=str(self._jobs))
        return self._finish(trace)

    def _finish(self, trace: Trace) -> Trace:
        for s in trace.meta.get("stopped_workers", []):
            self._stopped.setdefault(int(s["worker"]), time.time())
        meta: dict[str, Any] = dict(trace.meta)
        meta["network"] = self._network()  # after the run: the consumers' connections are open now
        if "stall" in meta:
            meta["stall"] = dict(meta["stall"], alive_workers=self.alive_workers())
        return Trace(elements=trace.elements, batches=trace.batches, events=trace.events, meta=meta)

    def _prepare(self, dataset: Any, processing_mode: Any, sharding_policy: Any, job_name: str | None,
                 consumers: int, num_consumers: int | None, steps: int | None, stop: tuple[Any, Any],
                 strategy: Any, timeout: Any) -> tuple[Plan, pipeline.Pipeline, dict[str, Any]]:
        import tensorflow as tf

        if self._closed:
            raise TracingError("this LocalDataService is closed; start a new one.")
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"trace() takes a tf.data.Dataset; got {type(dataset).__name__}.")
        policy = options.policy_name(processing_mode, sharding_policy)
        options.check_consumers(consumers, num_consumers, steps, strategy)
        stop_plan = options.check_stop(*stop, self.num_workers,
                                       own_workers=bool(self._workers or (self._local and self._local.workers)))
        timeout = check_seconds("stall_timeout", timeout)
        if not self.in_process:
            options.check_runs_on_workers(dataset)
        prepared = pipeline.instrument(dataset, policy, in_process=self.in_process)
        self._jobs += 1
        shared_job = job_name if job_name is not None else (
            f"vizdist-job-{os.getpid()}-{self._jobs}" if consumers > 1 else None)
        plan = Plan(self.target, policy, shared_job, consumers, num_consumers, steps, timeout, stop_plan,
                    self._expected_total(prepared.expected, policy, steps))
        return plan, prepared, self._meta(plan, prepared, strategy)

    def _expected_total(self, expected: list[int] | None, policy: str, steps: int | None) -> int | None:
        if expected is None or steps is not None:
            return None
        return len(expected) * (self.num_workers if policy == "OFF" else 1)

    def _meta(self, plan: Plan, prepared: pipeline.Pipeline, strategy: Any) -> dict[str, Any]:
        import tensorflow as tf

        meta: dict[str, Any] = {
            "kind": "data_service", "instrument": "tf.data service",
            "strategy": type(strategy).__name__ if strategy is not None else "tf.data service",
            "processing_mode": {"OFF": "parallel_epochs", "DYNAMIC": "distributed_epoch"}.get(plan.policy, ""),
            "sharding_policy": plan.policy, "num_workers": self.num_workers,
            "workers_in_process": self.in_process, "worker_attribution": self.worker_attribution,
            "fault_tolerant_mode": self.fault_tolerant, "job_name": plan.job_name or "",
            "consumers": plan.consumers, "num_consumers": plan.num_consumers,
            "coordinated_reads": plan.num_consumers is not None, "api": "", "steps": plan.steps,
            "timeout_s": plan.timeout, "tagging": prepared.info, "expected_source_ids": prepared.expected,
            "tf_version": tf.__version__,
        }
        note = pipeline.static_note(plan.policy, self.external)
        if note:
            meta["note"] = note
        if strategy is not None:
            meta["num_replicas"] = strategy.num_replicas_in_sync
            meta["devices"] = list(strategy.extended.worker_devices)
        return meta

    def _network(self) -> dict[str, Any]:
        """What each server advertises and really listens on (``vizdist.topology`` reads it)."""
        from vizdist.instrument.observe.topology import service_network

        mine = os.getpid() if self._local is not None else None
        pids: dict[str, int | None] = {"dispatcher:0": mine if not self.external else None}
        if self._host is not None and not self.external:
            pids["dispatcher:0"] = self._host.main_pid if self._host.alive() else None
        for i in range(self.num_workers):
            child = self._workers[i] if i < len(self._workers) else None
            alive = i in self.alive_workers()
            pids[f"data_worker:{i}"] = (child.main_pid if child is not None else mine) if alive else None
        return service_network(self.address, self.worker_addresses, pids, isolated=self.isolated,
                               in_process=self._local is not None)
