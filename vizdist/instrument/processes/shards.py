"""One worker's trace as a shard of a cluster-wide trace: which task am I, and a safe write.

Every worker of a real cluster records its own trace and calls
:func:`record_worker_shard` to write it into a shared folder;
``vizdist.load_trace(folder)`` merges the shards anywhere (no TensorFlow
needed). The task (``chief``, ``worker``, ``ps`` or ``evaluator`` and its
index) comes from ``TF_CONFIG``, from any TensorFlow ``ClusterResolver``
you pass (``resolver=``), or from ``task_type=``/``task_index=``.

Cluster resolvers (``tf.distribute.cluster_resolver``, TF 2.21, each tried on a machine
without GPUs, cloud or cluster; ``tests/instrument/test_shards.py``):

- ``TFConfigClusterResolver``, ``SimpleClusterResolver``, ``UnionResolver``:
  work as they are.
- ``SlurmClusterResolver``: reads Slurm's variables (``SLURM_PROCID``,
  ``SLURM_STEP_NUM_TASKS``, ``SLURM_STEP_NODELIST``,
  ``SLURM_STEP_TASKS_PER_NODE``); Slurm sets no ``TF_CONFIG``. Plain
  ``SlurmClusterResolver()`` counts GPUs with ``nvidia-smi`` (unless
  ``CUDA_VISIBLE_DEVICES`` is set) and, on a machine without it, fails in its
  constructor with ``FileNotFoundError: 'nvidia-smi'`` (before vizdist sees
  it). Pass ``auto_set_gpu=False`` and ``gpus_per_node`` at least the tasks
  per node: fewer, ``0`` included, makes ``cluster_spec()`` fail inside TF
  with ``range() arg 3 must not be zero`` (vizdist says what to pass). Its
  ports start at 8888, JupyterLab's default port.
- ``KubernetesClusterResolver``: without the ``kubernetes`` package its
  constructor raises ``ImportError``; with it, it needs a cluster's API. Built
  with ``override_client=`` (a Kubernetes API client) it works here too, but
  it never sets ``task_type``/``task_id`` (TF's docstring): set them.
- ``GCEClusterResolver`` needs ``googleapiclient`` (``ImportError``) or a
  ``service=`` object, and the GCE API behind it.
- ``TPUClusterResolver``: ``tpu="local"`` and ``tpu="grpc://host:port"``
  build anywhere (task ``worker:0``, although the process holding it is the
  TPU's *client*); a TPU name needs ``cloud-tpu-client`` and Google Cloud;
  ``TPUClusterResolver()`` without a name raises ``ValueError`` off Cloud.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Any

from vizdist.analysis.topology import resolver_spec
from vizdist.contract import TASK_TYPES
from vizdist.instrument.core.rows import task_number
from vizdist.instrument.observe.topology import network_meta, sockets
from vizdist.trace import Trace, shard_name

__all__ = ["TASK_TYPES", "record_worker_shard", "task_from_resolver"]


def stamp(trace: Trace, *, worker: int | None, task: str) -> Trace:
    """Set the ``worker`` column (multi-worker tasks) and ``meta['task']``."""
    tables = {}
    for name in ("elements", "batches", "events"):
        df = getattr(trace, name).copy()
        if worker is not None:
            df["worker"] = worker
        tables[name] = df
    meta = dict(trace.meta)
    meta["task"] = task
    return Trace(**tables, meta=meta)


def task_from_tf_config() -> tuple[str, int, dict[str, Any]]:
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        raise ValueError(
            "TF_CONFIG is not set, so vizdist cannot tell which worker this is. Pass task_type= and "
            "task_index= to record_worker_shard, or set TF_CONFIG as your cluster launcher does."
        )
    try:
        cfg = json.loads(raw)
        task = cfg["task"]
        ttype, tindex = str(task["type"]), int(task["index"])
        cluster = cfg.get("cluster", {})
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"TF_CONFIG is not valid ({exc!r}); expected JSON like "
            '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}.'
        ) from None
    if ttype not in cluster or tindex >= len(cluster[ttype]):
        raise ValueError(
            f"TF_CONFIG names task {ttype}:{tindex} but its cluster has "
            f"{ {k: len(v) for k, v in cluster.items()} } tasks: the task must be one of the cluster's."
        )
    return ttype, tindex, cluster




def checked_task(task_type: Any, task_index: Any) -> tuple[str, int]:
    """Only TensorFlow's task types and whole, non-negative indexes name a shard file."""
    if task_type not in TASK_TYPES:
        raise ValueError(
            f"task_type must be one of TensorFlow's task types {', '.join(TASK_TYPES)}; got {task_type!r}. "
            "It names the shard file, so nothing else is accepted."
        )
    if isinstance(task_index, bool) or not isinstance(task_index, int) or task_index < 0:
        raise ValueError(f"task_index must be a whole number, 0 or more; got {task_index!r}.")
    return task_type, task_index


def record_worker_shard(
    trace: Trace,
    directory: str | os.PathLike[str],
    *,
    task_type: str | None = None,
    task_index: int | None = None,
    resolver: Any = None,
    overwrite: bool = False,
) -> Path:
    """Write this worker's trace as one shard of a cluster-wide trace.

    Call it on every worker of a real cluster after recording; the task is
    read from ``resolver`` (any TensorFlow ``ClusterResolver``: Slurm's sets
    no ``TF_CONFIG``) if given, else from ``TF_CONFIG`` (as set by Kubernetes
    or your launcher), unless ``task_type``/``task_index`` say otherwise. The ``worker`` column is set to the task's number in the
    cluster (:func:`vizdist.instrument.core.rows.task_number`: the chief is 0,
    ``worker:i`` comes after the chief tasks, as TensorFlow numbers them) and the
    shard is written to ``<directory>/worker-<type>-<index>.json``. Merge all
    shards anywhere with ``vizdist.load_trace(directory)``.

    A shard already there for the same task is never replaced unless ``overwrite=True``: two
    processes that both think they are ``worker:0`` (a launcher that gives two workers one
    ``TF_CONFIG``), or a second run into the same folder, get a ``FileExistsError`` naming the task
    and the file, and the first shard stays whole (the check and the write are one atomic step).

    Args:
        trace: what this worker recorded.
        directory: a folder every worker can write (a shared file system).
        task_type: override the task type read from ``TF_CONFIG``.
        task_index: override the task index read from ``TF_CONFIG``.
        resolver: a ``tf.distribute.cluster_resolver.ClusterResolver`` to read the task and cluster
            from instead of ``TF_CONFIG`` (see this module's notes on each resolver).
        overwrite: replace a shard this task already has in ``directory`` (default: refuse).

    Returns:
        The path of the shard written.

    Raises:
        ValueError: the task is not one of TensorFlow's task types (``chief``, ``worker``, ``ps``,
            ``evaluator``) with a whole index of 0 or more, or ``TF_CONFIG`` is missing or invalid.
        FileExistsError: ``directory`` already holds a shard for this task (and ``overwrite`` is false).

    Example:
        >>> import tempfile, vizdist
        >>> d = tempfile.mkdtemp()
        >>> for w in range(2):
        ...     t = vizdist.Trace.from_records(elements=[dict(step=0, source_id=w)])
        ...     _ = record_worker_shard(t, d, task_type="worker", task_index=w)
        >>> vizdist.load_trace(d).elements["worker"].tolist()
        [0, 1]
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"record_worker_shard takes a vizdist.Trace; got {type(trace).__name__}.")
    task_type, task_index, cluster, source = _resolve_task(task_type, task_index, resolver)
    # one numbering everywhere (chief 0, then workers, then evaluators), as the recorder numbers them
    worker = task_number(task_type, task_index, cluster) if task_type in ("chief", "worker", "evaluator") else None
    stamped = stamp(trace, worker=worker, task=f"{task_type}-{task_index}")
    # what this process advertised (its cluster) and really listens on, for vizdist.topology
    net = network_meta(cluster, seen={f"{task_type}:{task_index}": sockets()}, resolver=source)
    stamped = Trace(elements=stamped.elements, batches=stamped.batches, events=stamped.events,
                    meta={**stamped.meta, "network": net})
    out = Path(directory) / shard_name(task_type, task_index)  # the name a folder merge reads
    try:
        return stamped.save(out, overwrite=overwrite)
    except FileExistsError:
        raise FileExistsError(
            errno.EEXIST, f"a shard for task {task_type}:{task_index} is already in {str(out.parent)!r}: {out.name} "
            f"(another process whose task is also {task_type}:{task_index}, say two workers given one TF_CONFIG, or an "
            "earlier run into the same folder, wrote it). It was kept, and this trace not written. Give every "
            "process its own task, write each run to a new folder, or pass overwrite=True to replace it.",
            str(out)) from None


def _resolve_task(task_type: Any, task_index: Any, resolver: Any) -> tuple[str, int, dict[str, Any], str]:
    """(type, index, cluster, where they came from): the resolver, else TF_CONFIG, with overrides."""
    cluster: dict[str, Any] = {}
    source = ""
    if resolver is not None:
        ttype, tindex, cluster = task_from_resolver(resolver)
        source = type(resolver).__name__
    elif task_type is None or task_index is None:
        ttype, tindex, cluster = task_from_tf_config()
        source = "TF_CONFIG"
    else:
        ttype, tindex = task_type, task_index
        if os.environ.get("TF_CONFIG"):
            with contextlib.suppress(ValueError):
                cluster, source = task_from_tf_config()[2], "TF_CONFIG"
    task_type = task_type if task_type is not None else ttype
    task_index = task_index if task_index is not None else tindex
    return (*checked_task(task_type, task_index), cluster, source)


def task_from_resolver(resolver: Any) -> tuple[str, int, dict[str, list[str]]]:
    """This process's ``(task_type, task_id, cluster)`` as a TensorFlow ``ClusterResolver`` reports it.

    ``cluster_spec()`` is read first: ``SlurmClusterResolver`` sets its task there
    (:func:`vizdist.analysis.topology.resolver_spec`, which also turns Slurm's
    ``range() arg 3 must not be zero`` into what to pass instead).

    Args:
        resolver: any ``tf.distribute.cluster_resolver.ClusterResolver``.

    Raises:
        ValueError: the resolver names no task, or cannot build its cluster (the reason in words).

    Example:
        >>> import tensorflow as tf  # doctest: +SKIP
        >>> r = tf.distribute.cluster_resolver.SimpleClusterResolver(
        ...     tf.train.ClusterSpec({"worker": ["h:1", "h:2"]}), task_type="worker", task_id=1)  # doctest: +SKIP
        >>> task_from_resolver(r)  # doctest: +SKIP
        ('worker', 1, {'worker': ['h:1', 'h:2']})
    """
    cluster, ttype, tid = resolver_spec(resolver)
    if ttype is None or tid is None:
        hint = (" KubernetesClusterResolver never sets them (TF's docstring): set resolver.task_type and "
                "resolver.task_id." if "Kubernetes" in type(resolver).__name__ else "")
        raise ValueError(
            f"{type(resolver).__name__} names no task (task_type={ttype!r}, task_id={tid!r}). Give the "
            f"resolver task_type= and task_id=, or pass them to record_worker_shard.{hint}"
        )
    return ttype, tid, cluster
