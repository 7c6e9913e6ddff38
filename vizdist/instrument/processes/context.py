"""What a callable run by :class:`vizdist.LocalCluster` learns about its process: a :class:`WorkerContext`.

The context names the task (``worker-1``), its cluster's size, the launcher's deadline, and gives the strategy
of the cluster (collectives that time out) and a way to stop another task as a crash would
(:meth:`WorkerContext.stop_task`). It is built in each task by ``_worker_main.py`` from the launcher's spec;
importable from :mod:`vizdist.instrument.processes.cluster` too.

Example:
    >>> ctx = WorkerContext("chief", 0, num_workers=2, num_ps=1)
    >>> ctx.task, ctx.time_left(), USER_TASK_MODES["ps"]
    ('chief-0', inf, ('chief',))
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vizdist._files import write_file
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.documents import Stopped

__all__ = ["USER_TASK_MODES", "WorkerContext"]


#: Cluster mode -> the task types that run the user's callable (the others serve: workers of a parameter-server
#: cluster, the parameter servers).
USER_TASK_MODES = {"mwms": ("worker",), "ps": ("chief",)}


@dataclass
class WorkerContext:
    """What a callable run by :class:`vizdist.LocalCluster` learns about its process.

    Attributes:
        task_type: ``"worker"`` (multi-worker clusters) or ``"chief"`` (the
            coordinator of a parameter-server cluster).
        task_index: index of this task in its job.
        num_workers: number of worker tasks in the cluster.
        num_ps: number of parameter-server tasks.
        collective_timeout: seconds a collective may wait for a peer before
            failing (used by :meth:`multi_worker_strategy`).
        job_dir: the launcher's folder for this run (logs, shards).
        deadline: wall-clock time (``time.time()``) by which the launcher
            stops the run (0: none); see :meth:`time_left`.

    Example:
        >>> ctx = WorkerContext("worker", 1, num_workers=2)
        >>> ctx.task
        'worker-1'
    """

    task_type: str
    task_index: int
    num_workers: int = 1
    num_ps: int = 0
    collective_timeout: float = 30.0
    job_dir: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    deadline: float = 0.0

    @property
    def task(self) -> str:
        """``"<type>-<index>"``, e.g. ``"worker-0"``."""
        return f"{self.task_type}-{self.task_index}"

    def time_left(self) -> float:
        """Seconds until the launcher stops this run (``inf`` when it set no deadline)."""
        return self.deadline - time.time() if self.deadline else float("inf")

    def stop_task(self, task: str, *, timeout: float = 60.0) -> dict[str, Any]:
        """Ask the launcher to kill ``task`` (e.g. ``"worker-1"``) now, as a crash or preemption would.

        The launcher kills the task's process tree (SIGTERM, then SIGKILL), records it in the
        merged trace's ``meta["lost_tasks"]`` and answers; this waits at most
        ``timeout`` seconds for that answer and returns it
        (``{"task", "how", "after_s"}``).
        """
        if task == self.task or not re.fullmatch(r"(worker|ps|chief)-\d+", str(task)):
            raise ValueError(f"stop_task takes another task of this cluster, such as 'worker-1' or 'ps-0'; "
                             f"got {task!r} (this process is {self.task}).")
        if not self.job_dir:
            raise RuntimeError("stop_task works inside a LocalCluster run (its launcher does the killing); "
                               "this WorkerContext has no job folder.")
        job = Path(self.job_dir)
        answer = jobfiles.STOPPED.path(job, task)
        write_file(jobfiles.STOP_REQUEST.path(job, task), task)
        end = time.monotonic() + timeout
        while not answer.exists():
            if time.monotonic() > end:
                raise TimeoutError(f"the launcher did not stop {task} within {timeout:g}s.")
            time.sleep(0.05)
        return Stopped.from_json(answer.read_text(encoding="utf-8"), source=str(answer)).to_dict()

    def multi_worker_strategy(self) -> Any:
        """A ``MultiWorkerMirroredStrategy`` whose collectives time out.

        A dead or missing peer then fails the next collective after
        ``collective_timeout`` seconds instead of blocking forever.
        """
        import tensorflow as tf

        opts = tf.distribute.experimental.CommunicationOptions(timeout_seconds=self.collective_timeout)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)

    def parameter_server_strategy(self, *, variable_partitioner: Any = None) -> Any:
        """A ``ParameterServerStrategy`` over this cluster (call it on the chief)."""
        import tensorflow as tf

        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=variable_partitioner)
