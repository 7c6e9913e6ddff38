"""What-if knobs on live TensorFlow: the experiments behind ``vizdist.what_if``.

:func:`what_if` takes the elements of your dataset (before batching) and returns an
:class:`~vizdist.analysis.whatif.Experiment` (``vizdist.what_if`` shows it as a
:class:`~vizdist.render.whatif.WhatIf` widget) whose knobs (global batch size, replicas,
``drop_remainder``, the input API and ``InputReplicationMode``, and with a ``map_fn`` also
``num_parallel_calls`` and ``prefetch``) re-run the real pipeline through
:func:`~vizdist.instrument.run.distribution.trace_distribution` each time one moves. The widget
(in ``vizdist/render``) never imports TensorFlow: it calls the runner built here; and this module never
imports the widget (``vizdist/experiments.py`` joins the two).

**Replicas, honestly.** TensorFlow fixes its devices when it starts, so the number of logical
devices cannot change afterwards. The replicas knob builds a ``MirroredStrategy`` over the *first k*
of the N logical devices set up at the start (``vizdist.virtual_devices(N)``): k replicas, on real
devices, in this process.

:func:`what_if_cluster` (workers, auto-shard policy, global batch: a real
``MultiWorkerMirroredStrategy`` cluster per run) and :func:`what_if_service` (workers, sharding
policy / processing mode: a real tf.data service per run) start processes on every move; their
progress bars show while they run.

Example:
    >>> import vizdist                                                     # doctest: +SKIP
    >>> vizdist.virtual_devices(4)                                         # doctest: +SKIP
    >>> import tensorflow as tf                                            # doctest: +SKIP
    >>> w = vizdist.what_if(tf.data.Dataset.range(10), global_batch_size=4)   # doctest: +SKIP
    >>> w.controls["replicas"].value = 3   # runs TensorFlow again          # doctest: +SKIP
    >>> print(w.last_diff.summary())                                       # doctest: +SKIP
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from vizdist.analysis.whatif import Experiment, Knob
from vizdist.instrument.processes.supervisor import DEFAULT_TIMEOUT
from vizdist.instrument.run.distribution import trace_distribution
from vizdist.trace import Trace

__all__ = ["INPUT_APIS", "DistributionRunner", "what_if", "what_if_cluster", "what_if_service"]

#: The input API knob: how the dataset reaches the replicas.
INPUT_APIS = ("experimental_distribute_dataset", "from_function · PER_WORKER", "from_function · PER_REPLICA")
_PARALLEL = ("sequential", 2, 4, "AUTOTUNE")
_PREFETCH = ("none", 1, 2, "AUTOTUNE")
_RUN_TIMEOUT_S = 60.0


def _devices() -> list[str]:
    """The logical devices replicas can use: GPUs when TF sees any, else CPUs."""
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]


def _tf_value(value: Any) -> int | None:
    """A knob's ``"AUTOTUNE"`` / ``"none"`` / ``"sequential"`` / number as tf.data wants it."""
    if value == "AUTOTUNE":
        return tf.data.AUTOTUNE
    return None if value in ("none", "sequential", None) else int(value)


class DistributionRunner:
    """Runs one pipeline under the knobs of :func:`what_if` (strategies are made once per replica count).

    Args:
        dataset: the elements before batching (e.g. ``tf.data.Dataset.range(10)``).
        map_fn: optional per-element function (``num_parallel_calls`` applies to it).
        step_fn: optional per-replica step, run with ``strategy.run`` on each batch.
        devices: the logical devices replicas are taken from, in order.
    """

    def __init__(self, dataset: tf.data.Dataset, *, map_fn: Callable[..., Any] | None = None,
                 step_fn: Callable[..., Any] | None = None, devices: Sequence[str] | None = None) -> None:
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"what_if takes a tf.data.Dataset of single elements (before batching), e.g. "
                            f"tf.data.Dataset.range(10); got {type(dataset).__name__}.")
        self.dataset, self.map_fn, self.step_fn = dataset, map_fn, step_fn
        self.devices = list(devices) if devices is not None else _devices()
        self._strategies: dict[tuple[int, bool], tf.distribute.Strategy] = {}

    def strategy(self, replicas: int, *, per_replica: bool = False) -> tf.distribute.Strategy:
        """A ``MirroredStrategy`` over the first ``replicas`` devices (its own one for PER_REPLICA input).

        TF 2.21: a MirroredStrategy that has run a PER_REPLICA pipeline auto-shards later file datasets
        across its replicas, so PER_REPLICA runs get a strategy of their own.
        """
        if not 1 <= replicas <= len(self.devices):
            raise ValueError(f"replicas must be 1 to {len(self.devices)} (the logical devices TensorFlow started "
                             f"with); got {replicas}. Devices are fixed when TensorFlow starts: call "
                             f"vizdist.virtual_devices(N) first, in a fresh kernel, for more.")
        key = (replicas, per_replica)
        if key not in self._strategies:
            self._strategies[key] = tf.distribute.MirroredStrategy(self.devices[:replicas])
        return self._strategies[key]

    def _elements(self, ds: tf.data.Dataset, num_parallel_calls: Any) -> tf.data.Dataset:
        if self.map_fn is None:
            return ds
        return ds.map(self.map_fn, num_parallel_calls=_tf_value(num_parallel_calls))

    def __call__(self, *, global_batch_size: int, replicas: int, drop_remainder: bool = False,
                 input_api: str = INPUT_APIS[0], num_parallel_calls: Any = "sequential",
                 prefetch: Any = "none") -> Trace:
        """Run the pipeline with these knobs and return its trace."""
        if input_api not in INPUT_APIS:
            raise ValueError(f"input_api must be one of {INPUT_APIS}; got {input_api!r}.")
        per_replica = input_api.endswith("PER_REPLICA")
        strategy = self.strategy(replicas, per_replica=per_replica)
        depth = _tf_value(prefetch)
        timed = self.map_fn is not None
        common: dict[str, Any] = dict(step_fn=self.step_fn, timing=0 if timed else False, progress=False, timeout=_RUN_TIMEOUT_S)
        if input_api == INPUT_APIS[0]:
            ds = self._elements(self.dataset, num_parallel_calls).batch(global_batch_size, drop_remainder=drop_remainder)
            return trace_distribution(strategy, ds.prefetch(depth) if depth is not None else ds, **common)

        def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            ds = self._elements(self.dataset.shard(ctx.num_input_pipelines, ctx.input_pipeline_id), num_parallel_calls)
            ds = ds.batch(ctx.get_per_replica_batch_size(global_batch_size), drop_remainder=drop_remainder)
            return ds.prefetch(depth) if depth is not None else ds

        mode = tf.distribute.InputReplicationMode.PER_REPLICA if per_replica else \
            tf.distribute.InputReplicationMode.PER_WORKER
        # TF's docstring pairs PER_REPLICA with experimental_fetch_to_device=False.
        options = tf.distribute.InputOptions(experimental_replication_mode=mode,
                                             experimental_fetch_to_device=not per_replica)
        return trace_distribution(strategy, dataset_fn=dataset_fn, options=options, **common)


def what_if(
    dataset: tf.data.Dataset,
    *,
    global_batch_size: int = 4,
    replicas: int | None = None,
    drop_remainder: bool = False,
    input_api: str = INPUT_APIS[0],
    map_fn: Callable[..., Any] | None = None,
    num_parallel_calls: Any = "sequential",
    prefetch: Any = "none",
    step_fn: Callable[..., Any] | None = None,
    max_global_batch: int = 16,
    title: str | None = None,
) -> Experiment:
    """Knobs on a live single-process run: move one, TensorFlow runs again, the changes are marked.

    Args:
        dataset: the elements before batching (the knobs batch it), e.g. ``tf.data.Dataset.range(10)``.
        global_batch_size: the first global batch size (the slider goes from 1 to ``max_global_batch``).
        replicas: the first replica count (default: every logical device). The knob builds a
            ``MirroredStrategy`` over the first k of the N logical devices TensorFlow started with.
        drop_remainder: the first ``batch(..., drop_remainder=...)``.
        input_api: ``"experimental_distribute_dataset"`` (you batch globally, TF splits) or
            ``"from_function · PER_WORKER"`` / ``"from_function · PER_REPLICA"``
            (``distribute_datasets_from_function`` with that ``InputReplicationMode``; the
            ``dataset_fn`` shards by its ``InputContext`` and batches per replica).
        map_fn: a per-element function (say, a slow decode). With it, the knobs
            ``num_parallel_calls`` and ``prefetch`` appear and each run also records how long each step
            waited for its input.
        num_parallel_calls: the first ``map`` parallelism: ``"sequential"``, a number, or ``"AUTOTUNE"``.
        prefetch: the first ``prefetch`` after ``batch``: ``"none"``, a number, or ``"AUTOTUNE"``.
        step_fn: a per-replica step run on every batch (``strategy.run``).
        max_global_batch: the largest global batch the slider offers.
        title: the line above the knobs.

    Returns:
        An :class:`~vizdist.analysis.whatif.Experiment`; ``vizdist.what_if`` returns it as a
        :class:`~vizdist.render.whatif.WhatIf` widget (static view: the first run).

    Example:
        >>> w = vizdist.what_if(tf.data.Dataset.range(10), global_batch_size=4)   # doctest: +SKIP
        >>> w.controls["drop_remainder"].value = True                              # doctest: +SKIP
        >>> w.last_diff.gone["source_id"].tolist()                                 # doctest: +SKIP
        [8, 9]
    """
    runner = DistributionRunner(dataset, map_fn=map_fn, step_fn=step_fn)
    n = len(runner.devices)
    replicas = n if replicas is None else replicas
    runner.strategy(replicas)  # a clear error now for a replica count the devices cannot give
    knobs = [
        Knob("global_batch_size", "global batch", "int", global_batch_size, options=(1, max(max_global_batch,
                                                                                            global_batch_size))),
        Knob("replicas", "replicas", "int", replicas, options=(1, n),
             help=f"a MirroredStrategy over the first k of the {n} logical devices TensorFlow started with "
                  "(devices are fixed once TensorFlow starts)"),
        Knob("drop_remainder", "drop_remainder", "bool", drop_remainder),
        Knob("input_api", "input", "choice", input_api, options=INPUT_APIS,
             help="from_function: distribute_datasets_from_function with that InputReplicationMode; its "
                  "dataset_fn shards by InputContext and batches with get_per_replica_batch_size"),
    ]
    if map_fn is not None:
        knobs += [Knob("num_parallel_calls", "map parallelism", "choice", num_parallel_calls, options=_PARALLEL),
                  Knob("prefetch", "prefetch", "choice", prefetch, options=_PREFETCH)]
    return Experiment(runner, knobs, title=title or "What if? The knobs re-run this pipeline on real TensorFlow",
                      note="Cells marked yellow changed since the last run.")


def what_if_cluster(
    files: Sequence[str] | None = None,
    *,
    workers: int = 2,
    shard_policy: str = "AUTO",
    global_batch_size: int = 4,
    max_workers: int = 3,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool | None = None,
    isolate: bool = True,
) -> Experiment:
    """Cluster knobs: workers, auto-shard policy and global batch on a real multi-worker cluster.

    Every move starts a :class:`~vizdist.instrument.processes.cluster.LocalCluster` of ``workers`` processes
    (``MultiWorkerMirroredStrategy``, one replica per worker on CPU) and reads ``files`` through
    ``TextLineDataset(files).batch(global_batch)`` under the policy, through
    :func:`~vizdist.instrument.experiments.sharding.compare_shard_policies`; its progress bars show while it runs
    (about 10–20 s on 2 cores). The picture is the split: replica ``r`` is worker ``r``. Returns an
    :class:`~vizdist.analysis.whatif.Experiment` (``vizdist.what_if_cluster``: a WhatIf widget).

    Args:
        files: text files (default: 4 files of 4 numbered lines).
        workers: the first number of workers (1 to ``max_workers``).
        shard_policy: the first policy: AUTO, FILE, DATA, HINT or OFF.
        global_batch_size: the first global batch size (1 to 8).
        max_workers: the most workers the knob offers.
        timeout: wall-clock limit of each cluster run.
        progress: the cluster's progress bars (None: shown, as every run starts processes; False hides them).
        isolate: run the workers in a private network namespace (default; :class:`vizdist.IsolationError`
            where the OS cannot make one). ``False`` runs them exposed: anyone who can reach this machine
            can connect to their servers and run code in them while they run.

    Example:
        >>> w = vizdist.what_if_cluster(workers=2, shard_policy="FILE")   # doctest: +SKIP
        >>> w.controls["shard_policy"].value = "OFF"                       # doctest: +SKIP
    """
    from vizdist.analysis.sharding import POLICIES
    from vizdist.errors import TracingError
    from vizdist.instrument.experiments.sharding import compare_shard_policies, write_text_files
    from vizdist.instrument.processes.isolation import probe_namespace

    if isolate:  # refuse now rather than at the first move of a knob
        probe_namespace("what_if_cluster", opt_out="what_if_cluster(..., isolate=False)")
    own = None
    if files is None:  # written here, so removed (by exact path) when the experiment's widget goes
        import tempfile

        own = tempfile.mkdtemp(prefix="vizdist-whatif-")
        files = write_text_files(own, n_files=4, lines_per_file=4)

    def run(*, workers: int, shard_policy: str, global_batch_size: int) -> Trace:
        cmp = compare_shard_policies(files, workers=workers, global_batch_size=global_batch_size,
                                     policies=[shard_policy], timeout=timeout, progress=progress,
                                     isolate=isolate)
        if shard_policy in cmp.notes and shard_policy not in cmp.traces:
            raise ValueError(cmp.notes[shard_policy])
        if cmp.errors.get(shard_policy):
            raise TracingError("; ".join(f"{k}: {v}" for k, v in sorted(cmp.errors[shard_policy].items())))
        return cmp.traces[shard_policy]

    knobs = [Knob("workers", "workers", "int", workers, options=(1, max(max_workers, workers)), slow=True),
             Knob("shard_policy", "auto-shard policy", "choice", shard_policy, options=POLICIES, slow=True),
             Knob("global_batch_size", "global batch", "int", global_batch_size, options=(1, 8), slow=True)]
    return Experiment(run, knobs, title="What if? Cluster knobs (each move starts real worker processes)",
                      note=f"{len(files)} text files; replica r is worker r (one replica per worker on CPU).",
                      cleanup=functools.partial(_remove, own) if own is not None else None)


def _remove(folder: str | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


#: The tf.data service knob: a sharding policy, named with its processing mode where it has one.
SERVICE_POLICIES = ("OFF (parallel_epochs)", "DYNAMIC (distributed_epoch)", "DATA", "FILE_OR_DATA", "HINT")


def what_if_service(
    dataset: tf.data.Dataset,
    *,
    workers: int = 2,
    sharding_policy: str = SERVICE_POLICIES[0],
    max_workers: int = 3,
    isolate: bool = True,
) -> Experiment:
    """tf.data service knobs: workers and sharding policy (processing mode), on a real service per run.

    Every move starts a :class:`~vizdist.instrument.service.LocalDataService` of ``workers`` worker
    processes, traces ``dataset`` through it and stops it. The picture is the split of the one
    consumer's stream; each element is labelled with the worker that made it (``5@w1``).
    ``isolate`` is passed to the service (``False``: anyone who can reach this machine can connect to
    its servers and run code in them while they run). Returns an
    :class:`~vizdist.analysis.whatif.Experiment` (``vizdist.what_if_service``: a WhatIf widget).

    Example:
        >>> w = vizdist.what_if_service(tf.data.Dataset.range(8))        # doctest: +SKIP
        >>> w.controls["sharding_policy"].value = "DATA"                  # doctest: +SKIP
    """
    from vizdist.instrument.processes.isolation import probe_namespace
    from vizdist.instrument.service import LocalDataService

    if isolate:  # refuse now rather than at the first move of a knob
        probe_namespace("what_if_service", opt_out="what_if_service(..., isolate=False)")
    def run(*, workers: int, sharding_policy: str) -> Trace:
        with LocalDataService(workers=workers, progress=True, isolate=isolate) as service:
            return service.trace(dataset, sharding_policy=sharding_policy.split()[0], progress=False)

    knobs = [Knob("workers", "workers", "int", workers, options=(1, max(max_workers, workers)), slow=True),
             Knob("sharding_policy", "sharding policy", "choice", sharding_policy, options=SERVICE_POLICIES,
                  slow=True)]
    return Experiment(run, knobs, title="What if? tf.data service knobs (each move starts a real service)",
                      note="One consumer; each element is labelled with the service worker that made it (5@w1).")
