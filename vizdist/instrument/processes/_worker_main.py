"""Entry point of one process started by :class:`vizdist.LocalCluster`.

The launcher starts it through :class:`vizdist.instrument.processes.supervisor.Supervisor`
(which joins the run's private network namespace, if any, and makes it exit
when the launcher dies) as ``-m vizdist.instrument.processes._worker_main JOB_DIR
TASK_TYPE TASK_INDEX`` with ``TF_CONFIG`` already set. It

* for a task that runs user code (every worker of a multi-worker cluster, or
  the chief of a parameter-server cluster) loads the cloudpickled callable
  from ``JOB_DIR/job.pkl``, calls it with a :class:`WorkerContext`, and writes
  the returned :class:`vizdist.Trace` to ``JOB_DIR/worker-<type>-<index>.json``
  (plain JSON, never pickle);
* for a server-only task (parameter servers and workers of a
  parameter-server cluster) starts a ``tf.distribute.Server`` and waits;
* reports its stage (``ready``, ``running``, ``done``, ``failed``) with
  :func:`vizdist.instrument.processes.supervisor.report`.

Any error is written to ``JOB_DIR/error-<type>-<index>.json`` with its
traceback (and the partial trace, if the error carried one) so that the
launcher can show it in the notebook. This module imports
:mod:`vizdist.instrument.processes.cluster`; the launcher never imports this module.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from vizdist._files import write_file
from vizdist.instrument.core import service_registry as registry
from vizdist.instrument.core.rows import task_number
from vizdist.instrument.observe.topology import write_listen_file
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.context import USER_TASK_MODES, WorkerContext
from vizdist.instrument.processes.documents import RunSpec, TaskError, TaskResult
from vizdist.instrument.processes.shards import stamp, task_from_tf_config
from vizdist.instrument.processes.supervisor import POLL_S, report, set_task_deadline
from vizdist.trace import Trace


def _check_layout(spec: RunSpec) -> None:
    _, _, cluster = task_from_tf_config()
    expected = {k: v for k, v in spec.layout.items() if v > 0}
    got = {k: len(v) for k, v in cluster.items()}
    if got != expected:
        raise ValueError(f"TF_CONFIG lists tasks {got} but the cluster was asked for {expected}.")


def _wait_for_job(job: Path, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    job_file = job / jobfiles.JOB
    while not job_file.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no job arrived from the launcher")
        time.sleep(POLL_S)
    import cloudpickle

    return cloudpickle.loads(job_file.read_bytes())


def run_task(ctx: WorkerContext, job: Path, spec: RunSpec) -> TaskResult | None:
    """Body of a cluster process: serve, or run the user's callable and save what it returns."""
    import tensorflow as tf  # noqa: F401  (import before the job arrives: start-up cost)

    _check_layout(spec)
    mode = spec.mode
    if ctx.task_type not in USER_TASK_MODES[mode]:
        serve(ctx)
        return None
    registry.install()  # the user's function may build a tf.data service pipeline: trace it with real ids
    report("ready")
    fn, args, kwargs = _wait_for_job(job, spec.timeout)
    report("running")
    result = fn(ctx, *args, **kwargs)
    write_listen_file(job, ctx.task)  # what its TF server (if fn started one) listens on and connected to
    if isinstance(result, Trace):
        worker = task_number(ctx.task_type, ctx.task_index, task_from_tf_config()[2]) if mode == "mwms" else None
        stamp(result, worker=worker, task=ctx.task).save(jobfiles.TRACE.path(job, ctx.task))
        return None
    try:
        json.dumps(result)
    except (TypeError, ValueError):
        raise TypeError(
            f"the callable returned a {type(result).__name__}, which is neither a vizdist.Trace nor "
            "JSON-able. Return a Trace (for example from vizdist.trace_distribution) or plain data."
        ) from None
    return TaskResult(value=result)


def serve(ctx: WorkerContext) -> None:
    """Run a ``tf.distribute.Server`` for a ps/worker task until killed."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=ctx.task_type, task_index=ctx.task_index,
        protocol="grpc", start=True,
    )
    report("ready")
    server.join()


def _report_error(job: Path, task: str, exc: BaseException) -> None:
    doc = TaskError.of(exc, task=task)
    try:
        write_file(jobfiles.ERROR.path(job, task), doc.to_json())
        report("failed")
    finally:
        sys.stderr.write(doc.traceback)
        sys.stderr.flush()


def main(argv: list[str]) -> int:
    """Run task ``argv = [JOB_DIR, TASK_TYPE, TASK_INDEX]``; 0 on success, 1 on error."""
    job = Path(argv[0])
    task_type, task_index = argv[1], int(argv[2])
    report("starting")
    try:
        spec = RunSpec.from_json((job / jobfiles.SPEC).read_text(encoding="utf-8"), source=str(job / jobfiles.SPEC))
        ctx = WorkerContext(
            task_type=task_type, task_index=task_index, num_workers=spec.workers, num_ps=spec.ps,
            collective_timeout=spec.collective_timeout, job_dir=str(job), deadline=spec.deadline,
        )
        set_task_deadline(ctx.deadline)  # bounded runs in this task end before the launcher stops it
        result = run_task(ctx, job, spec)
        if result is not None:
            write_file(jobfiles.RESULT.path(job, ctx.task), result.to_json())
        report("done")
        return 0
    except BaseException as exc:  # report everything, including SystemExit from user code
        _report_error(job, f"{task_type}-{task_index}", exc)
        return 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's C++ threads (collective executors, gRPC) can keep a clean exit waiting.
    os._exit(code)
