"""The files a launcher and its child processes exchange in a job folder: each name spelled once, here.

:class:`~vizdist.instrument.processes.cluster.LocalCluster` (the launcher) and
``vizdist.instrument.processes._worker_main`` (each task) talk through files in the run's job folder:

* the launcher writes :data:`SPEC` (the cluster and its timeouts), then :data:`JOB` (the pickled callable);
* each task writes :data:`TRACE` (its trace), :data:`RESULT` (a plain value) or :data:`ERROR` (what it raised);
* a task asks for another task to be killed with :data:`STOP_REQUEST`; the launcher answers with :data:`STOPPED`;
* the supervisor writes each child's output to :data:`LOG`.

:func:`~vizdist.instrument.processes.shards.record_worker_shard` writes the same :data:`TRACE` name into a shared folder
(:func:`vizdist.trace.shard_name`: ``worker-<type>-<5-digit index>.json``, the only names a folder merge reads).
The JSON ones among them are typed in :mod:`vizdist.instrument.processes.documents` (:data:`SPEC`: ``RunSpec``,
:data:`RESULT`: ``TaskResult``, :data:`ERROR`: ``TaskError``, :data:`STOPPED`: ``Stopped``), checked field by field
when read.

The data-service host (``service/host.py``) and its client (``service/remote.py``) use :data:`HOST_CONFIG`
and, per request, :data:`REQUEST` (+ :data:`REQUEST_GRAPH`, :data:`REQUEST_SPEC`), :data:`PROGRESS`,
:data:`RESPONSE` and :data:`SERVICE_ERROR`.

Example:
    >>> from pathlib import Path
    >>> TRACE.name("chief-0"), TRACE.path(Path("/job"), "ps-0").as_posix()
    ('worker-chief-0.json', '/job/worker-ps-0.json')
    >>> STOP_REQUEST.task(Path("/job/stop-worker-1.request"))
    'worker-1'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["ERROR", "HOST_CONFIG", "JOB", "LOG", "PROGRESS", "REQUEST", "REQUEST_GRAPH", "REQUEST_SPEC",
           "RESPONSE", "RESULT", "SERVICE_ERROR", "SPEC", "STOPPED", "STOP_REQUEST", "TRACE", "TaskFile"]


@dataclass(frozen=True)
class TaskFile:
    """A file kind named ``<prefix><key><suffix>``, one per task (or request) ``key``."""

    prefix: str
    suffix: str

    def name(self, key: str) -> str:
        """The file name for ``key``."""
        return f"{self.prefix}{key}{self.suffix}"

    def path(self, folder: Path, key: str) -> Path:
        """``folder / name(key)``."""
        return Path(folder) / self.name(key)

    def all(self, folder: Path) -> list[Path]:
        """Every file of this kind in ``folder``, sorted by name."""
        return sorted(Path(folder).glob(f"{self.prefix}*{self.suffix}"))

    def task(self, path: Path) -> str:
        """The key a file of this kind is named after (its name less prefix and suffix)."""
        return Path(path).name[len(self.prefix):-len(self.suffix)]


#: the launcher's run spec (JSON: mode, cluster, timeouts, deadline); read by every task.
SPEC: Final = "spec.json"
#: the cloudpickled ``(fn, args, kwargs)`` every task runs; written once all tasks are ready.
JOB: Final = "job.pkl"
#: a task's (or a recorded shard's) trace.
TRACE: Final = TaskFile("worker-", ".json")
#: a task's plain (non-trace) return value, as ``{"value": ...}``.
RESULT: Final = TaskFile("result-", ".json")
#: what a task raised: type, message, traceback and any partial trace.
ERROR: Final = TaskFile("error-", ".json")
#: a task's request that the launcher kill another task (the file holds the task's name).
STOP_REQUEST: Final = TaskFile("stop-", ".request")
#: the launcher's answer to a stop request (JSON: task, how, after_s).
STOPPED: Final = TaskFile("stopped-", ".json")
#: a supervised child's stdout and stderr.
LOG: Final = TaskFile("log-", ".txt")

#: the data-service host's configuration, written by ``LocalDataService``.
HOST_CONFIG: Final = "host.json"
#: a trace request to the data-service host (JSON), with its dataset graph and element spec.
REQUEST: Final = TaskFile("req-", ".json")
REQUEST_GRAPH: Final = TaskFile("req-", ".graph")
REQUEST_SPEC: Final = TaskFile("req-", ".spec")
#: the host's progress on a request (elements read so far).
PROGRESS: Final = TaskFile("prog-", ".txt")
#: the host's answer to a request: the trace.
RESPONSE: Final = TaskFile("res-", ".json")
#: what the host's run of a request raised.
SERVICE_ERROR: Final = TaskFile("err-", ".json")
