"""Real multi-process TensorFlow clusters on one machine, traced and merged.

:class:`LocalCluster` starts real worker (and parameter-server) processes
with ``TF_CONFIG`` on loopback ports it picks, runs a callable you define (in
a notebook cell, say) in each process that runs user code, and joins the
trace each of them returns into one :class:`vizdist.Trace` with a ``worker``
column. Every wait is bounded and every process it starts is gone
afterwards, also on error, timeout and ``KeyboardInterrupt``.

Beyond one machine, every worker of your own cluster (``TF_CONFIG`` set by
Kubernetes, Slurm or a cluster resolver) records its trace the same way and
calls :func:`record_worker_shard` (``vizdist.record_worker_shard``) to write
it to a shared folder; ``vizdist.load_trace(folder)`` then merges the shards::

    # on every worker of the real cluster
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    trace = vizdist.trace_distribution(strategy, dataset)
    vizdist.record_worker_shard(trace, "/shared/run-42")

    # later, anywhere (no TensorFlow needed)
    trace = vizdist.load_trace("/shared/run-42")

Example:
    >>> import vizdist
    >>> def work(ctx):                                   # runs in every worker
    ...     strategy = ctx.multi_worker_strategy()
    ...     return vizdist.trace_distribution(strategy, make_dataset())
    >>> with vizdist.LocalCluster(workers=2) as cluster:  # doctest: +SKIP
    ...     trace = cluster.run(work)
"""

from __future__ import annotations

import contextlib
import json
import numbers
import os
import shutil
import sys
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vizdist._files import write_file
from vizdist.errors import TracingError
from vizdist.instrument.observe.topology import network_meta, read_listen_files, sockets
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.context import USER_TASK_MODES, WorkerContext
from vizdist.instrument.processes.documents import RunSpec, Stopped, TaskError, TaskResult
from vizdist.instrument.processes.isolation import (  # re-exported for old imports
    CLUSTER_OPT_OUT,
    ENABLE_USERNS,
    EXPOSURE,
    IsolationWarning,
    probe_namespace,
    start_namespace,
    warn_exposed,
)
from vizdist.instrument.processes.shards import (  # noqa: F401  (moved; re-exported for old imports)
    TASK_TYPES,
    record_worker_shard,
)
from vizdist.instrument.processes.supervisor import (
    DEFAULT_TIMEOUT,
    KEEP_FILE,
    Child,
    FolderJanitor,
    Namespace,
    Supervisor,
    check_count,
    check_seconds,
    free_ports,
    port_in_use,
    process_limit,
    prune_kept,
    temp_folder,
)
from vizdist.trace import Trace

# WorkerContext (context.py) and the isolation rules (isolation.py) live in modules of their own; their names stay
# importable from here.
__all__ = ["CLUSTER_OPT_OUT", "ENABLE_USERNS", "EXPOSURE", "USER_TASK_MODES", "IsolationWarning", "LocalCluster",
           "WorkerContext", "free_ports", "probe_namespace", "record_worker_shard", "start_namespace",
           "warn_exposed"]


@dataclass
class _Run:
    """The processes and folder of one :meth:`LocalCluster.run`."""

    job: Path
    sup: Supervisor
    namespace: Namespace | None
    tasks: dict[str, tuple[str, int]] = field(default_factory=dict)  # child name -> (type, index)
    addresses: dict[str, list[str]] = field(default_factory=dict)  # job -> advertised (TF_CONFIG)
    lost: dict[str, Stopped] = field(default_factory=dict)  # task -> how it was lost
    started: float = 0.0  # monotonic time the job was handed to the user tasks

    def close(self) -> None:
        self.sup.kill_all()
        if self.namespace is not None:
            self.namespace.close()
        if (self.job / KEEP_FILE).exists():
            prune_kept(self.job)  # kept for its logs: no pickled callable, no temporary files


class LocalCluster:
    """Real TensorFlow worker processes on loopback, as a context manager.

    ``workers`` worker processes run your callable under
    ``MultiWorkerMirroredStrategy`` (``ps=0``), or, with ``ps > 0``, a
    parameter-server cluster is formed: ``ps`` parameter servers and
    ``workers`` workers run ``tf.distribute.Server`` and one extra *chief*
    process runs your callable as the ``ClusterCoordinator``.

    Each run starts fresh processes (TensorFlow's collectives cannot be
    re-formed inside one process), waits for them with a progress bar, and
    kills them afterwards. The callable gets a :class:`WorkerContext` and
    returns a :class:`vizdist.Trace` (merged into the result, with the
    ``worker`` column set) or plain JSON-able data (kept in
    ``trace.meta["results"]``).

    TensorFlow's servers listen on every interface (``[::]:port``; TF has no
    option to bind one address). By default (``isolate=True``, Linux) every
    process of a run lives in a private network namespace that has only its
    own loopback, so nothing else can connect to them; results come back
    through files in the run's folder. Where the OS cannot make one (no
    unprivileged user namespaces), the constructor raises
    :class:`vizdist.IsolationError`, naming the cause, and nothing starts.

    Args:
        workers: number of worker tasks (at least 1; at most ``max_workers``).
        ps: number of parameter-server tasks; 0 means multi-worker mirrored.
        timeout: wall-clock seconds one run may take, start-up included.
            Past it every process is killed and :class:`vizdist.TracingError`
            is raised naming the tasks that had not finished.
        collective_timeout: seconds a collective waits for a missing peer
            (``CommunicationOptions(timeout_seconds=...)`` in
            :meth:`WorkerContext.multi_worker_strategy`).
        ports: ports to use instead of free ones picked at random: a list
            (workers first, then ps) or a ``{"worker": [...], "ps": [...]}``
            mapping (``"chief"`` too when ``ps > 0``).
        env: extra environment variables for the processes (for example
            ``{"TF_CPP_VMODULE": "auto_shard=2"}``).
        progress: show ``tqdm`` progress bars.
        isolate: run the processes in a private network namespace (default;
            refused with :class:`vizdist.IsolationError` where the OS cannot
            make one). ``False`` runs them exposed: anyone who can reach this
            machine can connect to the servers and run code in them while the
            run lasts. Use it only on a trusted network, or to join them by hand.
        max_workers: refuse more processes than this (default: 4 per core,
            at least 8); raise it to start a bigger cluster on purpose.

    Example:
        >>> def work(ctx):
        ...     import tensorflow as tf
        ...     strategy = ctx.multi_worker_strategy()
        ...     return {"replicas": strategy.num_replicas_in_sync}
        >>> with LocalCluster(workers=2, timeout=120) as cluster:   # doctest: +SKIP
        ...     trace = cluster.run(work)
        >>> trace.meta["results"]                                    # doctest: +SKIP
        {'worker-0': {'replicas': 2}, 'worker-1': {'replicas': 2}}
    """

    def __init__(
        self,
        workers: int = 2,
        ps: int = 0,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        collective_timeout: float = 30.0,
        ports: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
        env: Mapping[str, str] | None = None,
        progress: bool | None = None,
        isolate: bool = True,
        max_workers: int | None = None,
    ) -> None:
        limit = process_limit() if max_workers is None else check_count("max_workers", max_workers, minimum=1)
        self.workers = check_count("workers", workers, minimum=1)
        self.ps = check_count("ps", ps, minimum=0)
        check_count("workers + ps", workers + ps + (1 if ps else 0), minimum=1, limit=limit, owner="LocalCluster: ")
        self.mode = "ps" if ps else "mwms"
        self.timeout = check_seconds("timeout", timeout)
        self.collective_timeout = check_seconds("collective_timeout", collective_timeout)
        self.layout = {"chief": 1 if ps else 0, "worker": workers, "ps": ps}
        self._ports = self._check_ports(ports)
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.progress = True if progress is None else bool(progress)  # None: shown (starting takes seconds)
        self.isolate = bool(isolate)
        self.isolated: bool | None = None
        self._run: _Run | None = None
        self._dirs: list[Path] = []
        self._janitor: list[FolderJanitor] = []  # one, from the first run: removes the folders if we die
        # The job folders go when this object does, closed or not (by exact path; kept logs stay).
        self._remove_dirs = weakref.finalize(self, _remove_folders, self._dirs, self._janitor)
        self.job_dir: Path | None = None
        self.logs: dict[str, str] = {}
        if self.isolate:  # refuse now, where nothing has started yet, rather than at the first run
            probe_namespace("LocalCluster")
        else:
            warn_exposed("LocalCluster(isolate=False)")

    # -- set-up -----------------------------------------------------------
    def _check_ports(
        self, ports: Sequence[int] | Mapping[str, Sequence[int]] | None
    ) -> dict[str, list[int]] | None:
        if ports is None:
            return None
        given = [p for v in ports.values() for p in v] if isinstance(ports, Mapping) else list(ports)
        bad = [p for p in given if isinstance(p, bool) or not isinstance(p, numbers.Integral) or not 1 <= p <= 65535]
        if bad:
            raise ValueError(f"ports must be whole numbers from 1 to 65535; got {bad[:5]!r}. Give one free port per "
                             "task, or leave ports=None to pick free ones.")
        if isinstance(ports, Mapping):
            got = {k: len(v) for k, v in ports.items() if len(v)}
            want = {k: v for k, v in self.layout.items() if v}
            if got != want:
                raise ValueError(
                    f"the ports given describe a cluster of {got} tasks, but LocalCluster(workers="
                    f"{self.workers}, ps={self.ps}) needs {want}. Give one port per task, or none."
                )
            return {k: [int(p) for p in v] for k, v in ports.items()}
        ports = [int(p) for p in ports]
        n_tasks = sum(self.layout.values())
        if len(ports) != n_tasks:
            raise ValueError(
                f"{len(ports)} ports given for {n_tasks} tasks ({self.layout}); give one port per task "
                "(chief, workers, then ps) or leave ports=None to pick free ones."
            )
        return self._split(ports)

    def _split(self, ports: list[int]) -> dict[str, list[int]]:
        out, i = {}, 0
        for kind in ("chief", "worker", "ps"):
            out[kind] = ports[i : i + self.layout[kind]]
            i += self.layout[kind]
        return out

    def _pick_ports(self) -> dict[str, list[int]]:
        if self._ports is None:
            return self._split(free_ports(sum(self.layout.values())))
        busy = [p for v in self._ports.values() for p in v if port_in_use(p)]
        if busy:
            raise OSError(
                f"port(s) {busy} on 127.0.0.1 are already in use, so the cluster cannot bind them. "
                "Stop whatever holds them (`ss -ltnp`), choose other ports, or pass ports=None."
            )
        return {k: list(v) for k, v in self._ports.items()}

    @property
    def pids(self) -> list[int]:
        """Process ids of the processes of the current run (empty when none is alive)."""
        run = self._run
        return [c.pid for c in run.sup.children if c.alive()] if run is not None else []

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
        env.update(self.env)
        env["GRPC_FAIL_FAST"] = "use_caller"
        return env

    def _start(self, run: _Run) -> None:
        ports = self._pick_ports()
        cluster = run.addresses = {k: [f"127.0.0.1:{p}" for p in v] for k, v in ports.items() if v}
        spec = RunSpec(mode=self.mode, workers=self.workers, ps=self.ps, layout=dict(self.layout),
                       timeout=float(self.timeout), collective_timeout=float(self.collective_timeout),
                       cluster=cluster, deadline=time.time() + self.timeout)
        write_file(run.job / jobfiles.SPEC, spec.to_json())
        # The callable is shipped by reference where it can be: the workers import what this process can.
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        for kind in ("chief", "worker", "ps"):
            for i in range(len(ports[kind])):
                tf_config = json.dumps({"cluster": cluster, "task": {"type": kind, "index": i}})
                run.sup.spawn(f"{kind}-{i}", "vizdist.instrument.processes._worker_main", [str(run.job), kind, str(i)],
                              cwd=os.getcwd(), python_path=paths, env={"TF_CONFIG": tf_config})
                run.tasks[f"{kind}-{i}"] = (kind, i)

    # -- running ----------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Trace:
        """Run ``fn(ctx, *args, **kwargs)`` in the cluster and merge what it returns.

        Under multi-worker mirrored (``ps=0``) ``fn`` runs in every worker;
        with parameter servers it runs once, in the chief (the coordinator).

        Returns:
            One trace: the shards that ``fn`` returned, merged, with
            ``meta["cluster"]`` describing the layout.

        With parameter servers, a worker or ps that dies (or that ``fn``
        stops with :meth:`WorkerContext.stop_task`) does not end the run:
        TensorFlow's coordinator decides what happens, the launcher waits for
        the chief (up to ``timeout``) and names the task in
        ``meta["lost_tasks"]``.

        Raises:
            TracingError: a process failed, died, or the run passed
                ``timeout``. The message names the task and shows its
                traceback; ``partial_trace`` holds what was recorded (and
                ``lost_tasks``).
        """
        payload = pickle_job(fn, args, kwargs)
        self._stop_run()
        if not self._janitor:
            self._janitor.append(FolderJanitor())
        job = temp_folder("vizdist-cluster-")
        self._dirs.append(job)
        self._janitor[0].watch(job)
        self.job_dir = job
        deadline = time.monotonic() + self.timeout
        ns = start_namespace("LocalCluster", self.isolate)
        self.isolated = ns is not None
        run = self._run = _Run(job, Supervisor(job, label="cluster", namespace=ns, env=self._child_env()), ns)
        try:
            self._start(run)
            self._wait_ready(run, deadline)
            write_file(job / jobfiles.JOB, payload)
            run.started = time.monotonic()
            return self._wait_done(run, deadline)
        finally:
            self.logs.update({c.name: run.sup.log_tail(c, 200) for c in run.sup.children})
            self._stop_run()

    def _user_children(self, run: _Run) -> list[Child]:
        kinds = USER_TASK_MODES[self.mode]
        return [c for c in run.sup.children if run.tasks[c.name][0] in kinds]

    def _bar(self, total: int, desc: str) -> Any:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, disable=not self.progress, leave=False)

    def _wait_ready(self, run: _Run, deadline: float) -> None:
        children = run.sup.children
        bar = self._bar(len(children), f"starting {len(children)} TF processes")
        try:
            state, which = run.sup.wait(children, ("ready", "running", "done"), deadline=deadline, bar=bar)
        finally:
            bar.close()
        if state == "dead":
            raise self._failure(run, which, "while starting")
        if state == "timeout":
            raise self._timeout_error(run, "to start")

    def _wait_done(self, run: _Run, deadline: float) -> Trace:
        users = self._user_children(run)
        bar = self._bar(len(users), f"running on {len(users)} task(s)")
        first_failure: float | None = None
        try:
            while True:
                self._serve_stop_requests(run)
                done = [c for c in users if c.status() == "done"]
                bar.update(len(done) - bar.n)
                if len(done) == len(users):
                    return self._merge(run.job, run.lost)
                dead = [c for c in run.sup.children if c.status() == "failed" or
                        (not c.alive() and c.status() != "done")]
                dead = self._note_lost(run, dead)
                if dead and first_failure is None:
                    first_failure = time.monotonic()
                if first_failure is not None and self._give_up(users, dead, first_failure, deadline):
                    raise self._failure(run, dead, "while running")
                if first_failure is None and time.monotonic() > deadline:
                    raise self._timeout_error(run, "to finish")
                time.sleep(0.05)
        finally:
            bar.close()

    def _serve_stop_requests(self, run: _Run) -> None:
        """Kill the tasks a user task asked for (:meth:`WorkerContext.stop_task`) and answer it."""
        for req in jobfiles.STOP_REQUEST.all(run.job):
            name = jobfiles.STOP_REQUEST.task(req)
            child = next((c for c in run.sup.children if c.name == name), None)
            if child is not None and child.alive():
                run.sup.kill(child, grace=0.0)
                run.lost[name] = Stopped(task=name, how="killed on request with SIGTERM, then SIGKILL",
                                         after_s=round(time.monotonic() - run.started, 3))
            answer = run.lost.get(name) or Stopped(task=name, how="not running", after_s=-1.0)
            write_file(jobfiles.STOPPED.path(run.job, name), answer.to_json())
            req.unlink()

    def _note_lost(self, run: _Run, dead: list[Child]) -> list[Child]:
        """Record dead tasks in ``run.lost``; return those that fail the run.

        With parameter servers, only the chief's failure does: a lost worker or
        ps is TensorFlow's coordinator's to handle (it re-runs a lost worker's
        closures; a lost ps fails them), and the chief's trace shows what it did.
        """
        if self.mode != "ps":
            return dead
        for c in dead:
            if c.name not in run.lost:
                code = c.popen.poll()
                how = ("still running, reported failure" if code is None else
                       f"killed by signal {-code}" if code < 0 else f"exited with code {code}")
                run.lost[c.name] = Stopped(task=c.name, how=how, after_s=round(time.monotonic() - run.started, 3))
        return [c for c in dead if run.tasks[c.name][0] == "chief"]

    def _give_up(self, users: list[Child], dead: list[Child], since: float, deadline: float) -> bool:
        """After a failure, give the peers time to fail their collectives and write partial traces."""
        others = [c for c in users if c not in dead and c.status() != "done"]
        grace = min(self.collective_timeout + 5.0, 60.0)
        now = time.monotonic()
        return not others or now - since > grace or now > deadline

    # -- results and errors ---------------------------------------------------
    def _task_files(self, kind: jobfiles.TaskFile, job: Path) -> list[Path]:
        """The files of ``kind`` the run's own tasks wrote, by name (never others in the folder: a callable
        may write there too, say ``record_worker_shard(trace, ctx.job_dir)``)."""
        tasks = self._run.tasks if self._run is not None else {}
        return sorted(f for f in (kind.path(job, name) for name in tasks) if f.exists())

    def _shards(self, job: Path) -> list[Trace]:
        from vizdist.trace import load_trace

        return [load_trace(f) for f in self._task_files(jobfiles.TRACE, job)]

    def _partial(self, job: Path, lost: Mapping[str, Stopped] | None = None) -> Trace | None:
        shards = self._shards(job)
        for f in self._task_files(jobfiles.ERROR, job):
            err = TaskError.from_json(f.read_text(encoding="utf-8"), source=str(f))
            if err.partial_trace is not None:
                shards.append(Trace.from_dict(err.partial_trace))
        extra: dict[str, Any] = {**self._cluster_meta(job), "partial": True}
        if lost:
            extra["lost_tasks"] = [entry.to_dict() for entry in lost.values()]
        if not shards:
            return Trace(meta=extra) if lost else None  # nothing recorded, but who was lost is known
        return Trace.merge(shards, meta=extra)

    def _cluster_meta(self, job: Path) -> dict[str, Any]:
        """``cluster`` (the layout) and ``network`` (advertised, really listened on, isolated) meta."""
        run = self._run
        seen = read_listen_files(job)  # tasks that ran your function wrote theirs when it returned
        children, tasks = (run.sup.children, run.tasks) if run is not None else ([], {})
        for c in children:
            task = "{}:{}".format(*tasks[c.name])
            main = c.main_pid if c.alive() else None
            if main is not None and task not in seen:  # servers only: read them now
                seen[task] = sockets(main)
        return {"cluster": {"mode": self.mode, "workers": self.workers, "ps": self.ps, "chief": self.layout["chief"]},
                "network": network_meta(run.addresses if run else {}, seen=seen, isolated=bool(self.isolated),
                                        resolver="TF_CONFIG")}

    def _merge(self, job: Path, lost: Mapping[str, Stopped] | None = None) -> Trace:
        shards = self._shards(job)
        results = {}
        for f in self._task_files(jobfiles.RESULT, job):
            results[jobfiles.RESULT.task(f)] = TaskResult.from_json(f.read_text(encoding="utf-8"), source=str(f)).value
        extra: dict[str, Any] = self._cluster_meta(job)
        if results:
            extra["results"] = results
        if lost:
            extra["lost_tasks"] = [entry.to_dict() for entry in lost.values()]
        if not shards:
            return Trace(meta=extra)
        return Trace.merge(shards, meta=extra)

    def _failure(self, run: _Run, dead: list[Child], when: str) -> TracingError:
        parts = []
        for c in dead:
            err = jobfiles.ERROR.path(run.job, c.name)
            if err.exists():
                doc = TaskError.from_json(err.read_text(encoding="utf-8"), source=str(err))
                parts.append(f"{c.name} failed {when}: {doc.summary()}\n"
                             f"--- traceback from {c.name} ---\n{doc.traceback.rstrip()}")
            else:
                parts.append(f"{when}, before reporting a result: {run.sup.failure_text(c)}")
        hint = (
            "Fix the error in the callable (the traceback above is from the worker process). If a worker "
            "was killed, its peers fail their next collective after collective_timeout="
            f"{self.collective_timeout:g}s; the partial trace holds what was recorded before that."
        )
        names = ", ".join(c.name for c in dead)
        run.sup.keep()
        return TracingError(
            f"LocalCluster: {names} failed.\n" + "\n\n".join(parts) + "\n\n" + hint + f"\n\n{_kept(run.job)}",
            partial_trace=self._partial(run.job, run.lost),
        )

    def _timeout_error(self, run: _Run, what: str) -> TracingError:
        stuck = [f"{c.name} ({c.status()})" for c in run.sup.children if c.status() != "done"]
        run.sup.keep()
        return TracingError(
            f"LocalCluster: the cluster did not manage {what} within timeout={self.timeout:g}s; still "
            f"waiting on {', '.join(stuck)}. A worker that never starts blocks every peer's strategy "
            "constructor, and a collective waits for all workers: look for a worker that crashed or a "
            "step that only some workers run. All processes were stopped. Raise timeout= if the machine "
            f"is just slow. {_kept(run.job)}",
            partial_trace=self._partial(run.job, run.lost),
        )

    # -- clean-up -----------------------------------------------------------
    def _stop_run(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.close()

    def close(self) -> None:
        """Kill every process this cluster started and delete its temporary folders.

        A folder whose logs an error pointed at is kept (the error names it).
        """
        self._stop_run()
        _remove_folders(self._dirs, self._janitor)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._stop_run()

    def __repr__(self) -> str:
        return f"LocalCluster(workers={self.workers}, ps={self.ps}, timeout={self.timeout:g})"


def _kept(job: Path) -> str:
    """Where an error's logs are, and what of the job folder is kept."""
    return (f"Each task's log (log-<task>.txt), error report (error-<task>.json) and the run's spec.json are in {job} "
            "(kept for you; the pickled callable is removed). Delete the folder when you are done.")


def _remove_folders(folders: list[Path], janitors: list[FolderJanitor]) -> None:
    """Delete each folder (but those whose logs an error named: they hold :data:`KEEP_FILE`), empty the
    list, and end the janitors (which would have removed them had this process died first)."""
    for d in folders:
        if not (d / KEEP_FILE).exists():
            shutil.rmtree(d, ignore_errors=True)
        else:
            prune_kept(d)
    folders.clear()
    for janitor in janitors:
        janitor.close()
    janitors.clear()


def pickle_job(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *,
               takes: str = "run() takes a callable fn(ctx, ...)", to: str = "the workers",
               hint: str = "Define it as a plain function; pass data as arguments rather than open files or sessions.",
               ) -> bytes:
    """``(fn, args, kwargs)`` as cloudpickle bytes for a child process, or a TypeError that says what to do."""
    import cloudpickle

    if not callable(fn):
        raise TypeError(f"{takes}; got {type(fn).__name__}.")
    try:
        return cloudpickle.dumps((fn, args, kwargs))
    except Exception as exc:
        raise TypeError(f"could not ship {getattr(fn, '__name__', fn)!r} to {to} with cloudpickle ({exc}). {hint}") from exc
