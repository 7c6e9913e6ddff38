"""The ``trace.meta`` contract: what every instrument writes and every check or view may read.

A :class:`~vizdist.trace.Trace` holds three tables (see ``vizdist.trace.SCHEMA``)
and one JSON-able dict, ``trace.meta``. This module is the one place that says
what may be in that dict. Every meta has a ``kind`` (which instrument made it);
each kind has a ``TypedDict`` below naming its keys and their types
(:class:`TraceMeta`, the type of ``Trace.meta``, is all of them together). Every key
is optional (hand-built traces carry few), but a key that is present must have
its documented type: :func:`validate_meta` checks that whenever a trace is
built or loaded, so a wrong value is a :class:`TraceFormatError` naming the
file and the key, not a crash later in ``diagnose()`` or ``show()``.
Inside the few structured values (``stall``, ``stopped_workers``, ``skipped``)
the keys checks read are required. Keys not listed here are allowed and kept as written (instruments may add
their own); nothing in vizdist's checks or views relies on them.

Kinds (``meta["kind"]``) and who writes them:

``distribution``
    ``trace_distribution`` / ``watch`` / ``trace_tf1``: one process, one
    ``tf.distribute`` (or ``tf.compat.v1.distribute``) strategy (:class:`DistributionMeta`).
``multi_worker``
    ``distribution`` traces of several worker processes merged into one
    (``load_trace(folder)``, ``LocalCluster.run``); the per-process metas stay
    under ``shards`` (:class:`MultiWorkerMeta`).
``parameter_server``
    ``trace_parameter_server`` / ``record_parameter_server``
    (:class:`ParameterServerMeta`).
``data_service``
    ``LocalDataService.trace`` (:class:`DataServiceMeta`).
``shard_comparison``
    one auto-shard policy of ``compare_shard_policies`` (and the per-worker
    shards it merges) (:class:`ShardComparisonMeta`).

Keys of every kind (:class:`CommonMeta`):

- ``kind`` (str): one of :data:`KINDS`.
- ``strategy`` (str): the strategy's class name (``"tf.data service"`` when
  a service trace ran without one).
- ``api`` (str): the TF API that fed the data, e.g.
  ``"experimental_distribute_dataset"`` (TF1: ``"make_dataset_iterator"``,
  ``"make_input_fn_iterator"``).
- ``num_replicas`` (int): replicas in sync (all workers).
- ``num_workers`` (int or null): worker processes (service: service workers).
- ``devices`` (list of str): the replicas' devices, in replica order.
- ``tf_version`` (str): TensorFlow's version at recording time.
- ``global_batch_size`` (int or null): elements per global step.
- ``provenance`` (str): how source ids were read: ``"tagged"`` (exact tag
  carried through the pipeline), ``"content"`` (the element's own value) or
  ``"fingerprint"`` (matched by value; approximate).
- ``provenance_note`` / ``note`` (str): why provenance is approximate, or any
  other caveat the instrument wants shown.
- ``errors`` (dict, or list of str for ``parameter_server``): what failed,
  keyed by task or policy.
- ``task`` (str): ``"<type>-<index>"`` of the process that wrote this shard.
- ``shards`` (list of dict): the metas of the traces merged into this one.
- ``cluster`` (dict, :class:`ClusterMeta`): ``LocalCluster`` layout.
- ``results`` (dict): task -> JSON value returned by a ``LocalCluster.run`` callable.
- ``partial`` (bool): true when a run failed and this is what was recorded.
- ``timing`` (dict, :class:`TimingMeta`): the clock of the ``events`` table.
- ``skipped`` (list of dict): files ``load_trace(folder)`` did not merge,
  each ``{"path": str, "reason": str}``.
- ``network`` (dict, :class:`NetworkMeta`): where the run's TensorFlow servers
  were: ``addresses`` (dict: job -> list of the ``host:port`` each task
  advertised, as in the cluster spec; ``dispatcher`` / ``data_worker`` for a
  tf.data service), ``listening`` (dict: ``"<job>:<index>"`` -> list of the
  addresses that process really listened on, read from ``/proc``),
  ``connections`` (dict: ``"<job>:<index>"``, or a job for all its tasks ->
  list of the ``host:port`` that process had opened connections to),
  ``isolated`` (bool: inside vizdist's private network namespace),
  ``resolver`` (str: where the task came from, a resolver's class or
  ``TF_CONFIG``), ``rpc_layer`` (str). Read by ``vizdist.topology``.
- ``lost_tasks`` (list of :class:`LostTask`): parameter-server cluster tasks
  (workers, ps) that died while the run went on, written by ``LocalCluster``:
  ``task`` (``"worker-1"``), ``how`` (stopped on request, killed by a
  signal, exited), ``after_s`` (seconds after the job started).

``distribution`` / ``multi_worker`` keys (:class:`DistributionMeta`):

- ``host`` (str), ``gpus`` (int): where it ran.
- ``iteration`` (str): ``"for"``, ``"get_next"`` or ``"get_next_as_optional"``
  (:func:`vizdist.trace_tf1`: ``"get_next"`` or ``"experimental_run"``).
- ``execution`` (str): ``"eager"`` or ``"graph"`` (TF1 graph mode, a ``Session``;
  :func:`vizdist.trace_tf1` only).
- ``options`` (dict): the ``tf.distribute.InputOptions`` given.
- ``steps_requested`` / ``steps_run`` (int or null / int): steps asked for and run.
- ``shard_policy`` (str): the dataset's ``AutoShardPolicy`` name (``"AUTO"``, ``"FILE"``, ...).
- ``per_replica_batch_size`` (int or null): batch of each pipeline
  (``distribute_datasets_from_function``).
- ``input_contexts`` (list of dict): the ``InputContext`` of every
  ``dataset_fn`` call.
- ``pipeline`` (list), ``pipelines`` (list), ``sources`` (list),
  ``pipeline_flags`` (dict): the pipeline's transformations as vizdist read them
  (``shuffle_unseeded``: present and true when a ``shuffle`` had neither its own nor a
  global seed, so each process shuffles in its own random order);
  ``pipeline_shuffle_seeds`` (list): for each pipeline a ``dataset_fn`` built, its shuffles'
  ``[seed, seed2]`` as TF set them.
- ``element_spec`` / ``distributed_element_spec`` (str): the specs, as text.
- ``rebatch`` (str): the op TF cut each global batch with, read from the distributed
  dataset's graph: ``"RebatchDataset"`` (its legacy rebatch, which TF takes when it
  shards by DATA or cannot read a fixed batch size from the pipeline, say after a ``map``
  that follows the ``batch``: every batch, a short one too, into pieces of
  ceil(n / replicas)),
  ``"RebatchDatasetV2"`` (fixed per-replica sizes that differ by at most one, filled in
  replica order) or ``""`` (no rebatch: one replica, ``distribute_datasets_from_function``).
- ``stopped`` (str): why iteration ended (``"end_of_data"``, ``"steps"``,
  ``"max_steps"``, ``"error"``, ``"timeout"``, ``"interrupted"`` (Ctrl-C); a
  ``vizdist.record()`` trace: ``"end_of_block"``).
- ``worker`` (int): the recording process's worker number.
- ``services`` (list of :class:`ServiceRead`): the pipeline's reads from the
  tf.data service (``distribute`` / ``from_dataset_id``): ``sharding_policy``,
  ``processing_mode``, ``address``, ``job_name`` (and ``traced_job_name``,
  the job the traced run read), ``num_workers`` (int or null: unknown),
  ``worker_attribution`` (how the ``service_worker`` column of ``elements``
  is known, or ``"unknown: ..."``), ``exact`` (bool: the ids went through
  the service) and ``note``.
- ``tpu`` (dict, :class:`TPUMeta`): a TPU run's shape (``TPUStrategy``; not
  recordable here, see the README): ``job`` (str: the TPU hosts' job),
  ``accelerator`` (str, e.g. ``"v3-8"``), ``mesh_shape`` (list of int),
  ``num_hosts`` / ``cores_per_host`` / ``num_cores`` (int), ``hosts`` (list
  of :class:`TPUHost`: ``task`` (int), ``address`` (str), ``cpu_device``
  (str), ``cores`` (list of :class:`TPUCore`: ``core`` (int, the ordinal on
  its host), ``device`` (str), ``coordinates`` (list of int))). Built from
  TF's ``tf.tpu.experimental.Topology`` by
  ``vizdist.instrument.observe.topology.tpu_meta``.

Placement keys (``distribution`` / ``multi_worker``; written only when asked,
``trace_distribution(..., placement=True)``):

- ``placement`` (dict, :class:`PlacementMeta`): where every op ran, read from
  TF's debugger (``enable_dump_debug_info`` + ``DebugDataReader``): ``mode``
  (the debugger's ``tensor_debug_mode``), ``source`` (str), ``ops`` (list of
  :class:`PlacementOp`: one row per stage, op, graph and device, with a
  ``count`` and the ``first_step``/``last_step`` it ran in), ``copies`` (list
  of :class:`PlacementCopy`: data moved between devices, ``src`` -> ``dst``,
  and how), ``host`` (str: the device of the input pipeline's host iterator,
  where batches are made), ``devices`` (list of str), ``batch_devices`` (list
  of str: the device each replica's batch arrived on), ``step_names`` (list of str: the
  step functions' graph names), ``steps_marked`` (int), ``notes`` (list of
  str), ``cost_s`` (dict: seconds the debugger added to the run / took to
  read), and with ``CURT_HEALTH``/``FULL_HEALTH`` ``numerics`` (dict,
  :class:`NumericsMeta`): ``bad_rows`` (list of dict ``{step, replica,
  position, device, leaf}``: rows of a per-replica batch holding a NaN/Inf;
  join with ``elements`` on step/replica/position for the source element),
  ``bad_results`` (list of dict ``{step, replica}``), ``first_nonfinite_op``
  (dict or null: the earliest op whose output held a NaN/Inf: ``op_type``,
  ``op_name``, ``graph``, ``device``, ``stage``, ``step``), ``error`` (str or
  null: TF's whole message when the run failed, e.g. ``check_numerics``),
  ``failed_step`` (dict or null: the step that raised, ``{step, arrived,
  replicas: [{replica, device, source_ids, nonfinite_positions}]}``; the
  ids are known when the step's batch had arrived), ``failed_element``
  (dict or null, :class:`FailedElement`: when a ``map``, ``filter``, ``scan``,
  ``flat_map`` or ``interleave`` of the input pipeline raised, the element it
  raised on, found by re-running its function element by element:
  ``source_ids`` / ``source_files`` / ``source_lines`` / ``epochs``,
  ``function`` (``"map"``, ``"filter"``, ``"scan"``, ``"flat_map"`` or
  ``"interleave"``),
  ``map_index`` (which one of that kind, source first),
  ``op_name`` / ``op_type`` / ``devices`` of the failing op, TF's
  ``message`` from that call, ``checked`` elements, ``how``).
- ``reductions`` (list of :class:`ReductionMeta`): reductions recorded by
  :func:`vizdist.trace_reduction`: ``call``, ``reduce_op``, ``axis``,
  ``cross_device_ops`` (the class that combined the values), ``inputs`` /
  ``results`` (list of dict ``{replica, device, value, type}``),
  ``destinations`` (list of str), ``expected`` (TF's documented rule applied
  to the inputs), ``ops`` (placement rows of the reduction), ``note``,
  ``workers`` (list of int: the processes that recorded it; a multi-worker
  reduction is joined across them by ``Trace.merge``), ``collectives`` (list
  of :class:`CollectiveOp`: each collective op with its device,
  ``communication_hint``, ``group_size`` and the ``implementation`` TF's rule
  picks) and ``communication`` (dict: ``requested``, the
  ``CommunicationOptions`` implementation; ``timeout_seconds``; ``rule``).
- ``loss_scaling`` (list of :class:`LossScalingRow`) and
  ``loss_scaling_global_batch_size`` (int or null):
  :func:`vizdist.trace_loss_scaling`, one row per step.
- ``datasets`` (list of dict) and ``passes`` (list of dict): a ``vizdist.record()`` block
  (``api == "record"``). ``datasets`` holds each distributed dataset's own meta (the keys above,
  plus ``phases``: the phases that read it); ``passes`` one row per pass that delivered data:
  ``dataset``, ``phase``, ``epoch``, ``steps`` and ``first_step`` (the block's step number of its
  first step). Its tables carry ``dataset``, ``phase``, ``epoch`` and ``epoch_step`` columns
  (``vizdist.analysis.passes`` reads one pass at a time, each with ``phase`` (str) in its meta).
  ``epoch`` is the user's: Keras's epoch number for ``train`` and ``validation``, each dataset's own
  pass count in a ``loop``, the pass count of its phase otherwise. ``not_recorded`` (list of str):
  what the block read but could not record, and why (the ``not-recorded`` finding). Each dataset's
  ``steps_per_pass`` (int or null): the global batches one whole pass of it holds, where TF knows.
  ``ended_by`` (str): the exception the block ended by (``"RuntimeError: ..."``), if it did;
  ``stopped`` is ``"running"`` for ``rec.trace`` read inside the block. ``recording`` (dict):
  ``record(path=...)``'s part (``run``, ``part``, ``first_step``, ``steps``, ``ended``, ``error``;
  :mod:`vizdist._parts`), or, for several runs of one task loaded together, ``runs``: each run's
  ``run``, ``error``, ``first_step`` and ``first_dataset`` (where its steps and datasets begin).
- ``distributed_values`` (list of :class:`DistributedValuesMeta`):
  ``vizdist.trace_distribution`` given a ``DistributedValues``
  (:func:`vizdist.instrument.observe.values.trace_values`): each component's ``replica``, ``device``, ``value``.

``parameter_server`` keys (:class:`ParameterServerMeta`):
``num_ps`` (int or null), ``steps_requested`` (int: closures asked for),
``steps_scheduled`` (int: fewer when ``schedule`` raised an earlier closure's
error, after which none is scheduled), ``steps_run`` (int: closures that finished), ``step_workers`` (list of int: the worker whose run
of each scheduled closure counted, -1 for none), ``closures`` (list of
:class:`ClosureRecord`, one per ``schedule`` call in order: ``closure``,
``worker``, ``status`` (``done``, ``failed``, ``cancelled``, ``pending``),
``error``, ``result`` (what ``RemoteValue.fetch()`` gave for the step
function, or null) and ``attempts`` (list of dict ``{worker, outcome,
error, t_start_ns, t_end_ns}``; ``outcome`` is ``done``, ``failed``,
``rescheduled`` (its worker was lost; TF put the closure back),
``retried`` (TF took the error for a transient ps failure and put it back),
``aborted`` or ``running``)), ``attempts_recorded`` (bool),
``per_worker_values`` (dict: the per-worker dataset/iterator types and one
``{worker, type, status}`` per worker's iterator ``RemoteValue``),
``remote_values`` (dict: type names of the coordinator's remote objects),
``input_contexts`` (list of dict), ``pipeline`` (list), ``stopped`` (str:
``done``, ``error`` (``join`` or ``schedule`` raised), ``timeout``), ``timeout_s`` (number),
``interventions`` (list of dict: what the caller did part-way, e.g.
``{stopped_task, after_closures, t_ns}``), ``variables`` (list of dict: one
per variable shard: ``variable``, ``partitioner``, ``shard``, ``shards``,
``shape``, ``rows``, ``bytes``, ``device``, ``job``, ``task``, and when the
closures updated them ``updates`` (times the shard was updated, read back
after the run; -1 when it could not be read) and ``read_error``),
``variable_shape`` (list of int). The ``events`` table holds one ``closure``
span per attempt (extra column ``outcome``).

``data_service`` keys (:class:`DataServiceMeta`):
``instrument`` (str), ``processing_mode`` / ``sharding_policy`` (str),
``workers_in_process`` / ``fault_tolerant_mode`` / ``coordinated_reads`` /
``complete`` (bool), ``worker_attribution`` (str or null), ``job_name``
(str), ``consumers`` (int), ``num_consumers`` (int or null), ``steps`` (int
or null), ``timeout_s`` (number), ``tagging`` (dict), ``expected_source_ids``
(list of int or null: ids one pass of the pipeline yields),
``stopped_workers`` (list of :class:`StoppedWorker`), ``stall`` (dict,
:class:`Stall`), ``abandoned_consumer_threads`` (int).

``shard_comparison`` keys (:class:`ShardComparisonMeta`):
``shard_policy`` (str), ``files`` (list of str), ``replicas_per_worker``
(int), ``pipeline`` (list), ``pipelines`` (dict: policy -> list),
``auto_shard_log`` (list of str: TF's log lines about auto-sharding).

Format versions: version 1 files (vizdist before the contract) have no
``kind``; loading infers it from their keys (:func:`infer_kind`).

Example:
    >>> meta = validate_meta({"num_replicas": 4})
    >>> meta["kind"]
    'distribution'
    >>> validate_meta({"num_replicas": "four"})
    Traceback (most recent call last):
    ...
    vizdist.errors.TraceFormatError: trace meta: key 'num_replicas' must be int; got 'four' (str).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from vizdist._jsontypes import MISSING, describe, misfit, short, type_hints
from vizdist._metavalues import (
    BadResult,
    BadRow,
    ClosureRecord,
    ClusterMeta,
    CollectiveOp,
    DistributedValuesMeta,
    FailedElement,
    FailedReplica,
    FailedStep,
    LossScalingRow,
    LostTask,
    NetworkMeta,
    NonfiniteOp,
    NumericsMeta,
    PlacementCopy,
    PlacementMeta,
    PlacementOp,
    ReductionMeta,
    ServiceRead,
    SkippedFile,
    Stall,
    StoppedWorker,
    TimingMeta,
    TPUCore,
    TPUHost,
    TPUMeta,
)
from vizdist.errors import TraceFormatError

# The structured values inside the meta's keys live in vizdist/_metavalues.py, the checking of a value against its
# type in vizdist/_jsontypes.py; the values are importable from here, as before.
__all__ = [
    "JOINS",
    "KINDS", "BadResult", "BadRow", "ClosureRecord", "ClusterMeta", "CollectiveOp", "CommonMeta", "DataServiceMeta",
    "DistributedValuesMeta", "DistributionMeta", "FailedElement", "FailedReplica", "FailedStep", "LossScalingRow",
    "LostTask", "MultiWorkerMeta", "NetworkMeta", "NonfiniteOp", "NumericsMeta", "ParameterServerMeta",
    "PlacementCopy", "PlacementMeta", "PlacementOp", "ReductionMeta", "ServiceRead", "ShardComparisonMeta", "Stall",
    "StoppedWorker", "TPUCore", "TPUHost", "TPUMeta", "TimingMeta", "TraceFormatError", "TraceMeta", "infer_kind",
    "join_reductions",
    "recording_call",
    "validate_meta",
]


class CommonMeta(TypedDict, total=False):
    """Keys any kind may carry."""

    kind: str
    strategy: str
    api: str
    num_replicas: int
    num_workers: int | None
    devices: list[str]
    tf_version: str
    global_batch_size: int | None
    provenance: str
    provenance_note: str
    note: str
    errors: dict[str, Any] | list[Any]
    task: str
    shards: list[dict[str, Any]]
    cluster: ClusterMeta
    results: dict[str, Any]
    partial: bool
    timing: TimingMeta
    skipped: list[SkippedFile]
    network: NetworkMeta
    lost_tasks: list[LostTask]


class _DistributionKeys(TypedDict, total=False):
    """The keys of ``distribution`` whose type no other kind contradicts (shared with :class:`TraceMeta`)."""

    host: str
    gpus: int
    iteration: str
    execution: str
    options: dict[str, Any]
    steps_run: int
    shard_policy: str
    per_replica_batch_size: int | None
    input_contexts: list[dict[str, Any]]
    pipeline: list[Any]
    sources: list[Any]
    pipeline_flags: dict[str, Any]
    element_spec: str
    distributed_element_spec: str
    rebatch: str
    stopped: str
    worker: int
    placement: PlacementMeta
    reductions: list[ReductionMeta]
    loss_scaling: list[LossScalingRow]
    loss_scaling_global_batch_size: int | None
    distributed_values: list[DistributedValuesMeta]
    services: list[ServiceRead]
    datasets: list[dict[str, Any]]
    passes: list[dict[str, Any]]
    not_recorded: list[str]
    ended_by: str
    recording: dict[str, Any]
    steps_per_pass: int | None
    pipeline_shuffle_seeds: list[Any]
    phases: list[str]
    phase: str
    tpu: TPUMeta


class DistributionMeta(CommonMeta, _DistributionKeys, total=False):
    """``kind == "distribution"``: ``trace_distribution`` / ``watch`` / ``trace_tf1`` in one process."""

    steps_requested: int | None
    pipelines: list[Any]


class MultiWorkerMeta(DistributionMeta, total=False):
    """``kind == "multi_worker"``: distribution traces of several processes, merged."""


class _ParameterServerKeys(TypedDict, total=False):
    """The keys of ``parameter_server`` whose type no other kind contradicts (shared with :class:`TraceMeta`)."""

    num_ps: int | None
    steps_scheduled: int
    steps_run: int
    step_workers: list[int]
    closures: list[ClosureRecord]
    attempts_recorded: bool
    per_worker_values: dict[str, Any]
    remote_values: dict[str, str]
    input_contexts: list[dict[str, Any]]
    pipeline: list[Any]
    stopped: str
    timeout_s: float
    interventions: list[dict[str, Any]]
    variables: list[dict[str, Any]]
    variable_shape: list[int]


class ParameterServerMeta(CommonMeta, _ParameterServerKeys, total=False):
    """``kind == "parameter_server"``: steps scheduled by a ``ClusterCoordinator``."""

    steps_requested: int


class DataServiceMeta(CommonMeta, total=False):
    """``kind == "data_service"``: consumers reading from a real tf.data service."""

    instrument: str
    processing_mode: str
    sharding_policy: str
    workers_in_process: bool
    worker_attribution: str | None
    fault_tolerant_mode: bool
    job_name: str
    consumers: int
    num_consumers: int | None
    coordinated_reads: bool
    steps: int | None
    timeout_s: float
    tagging: dict[str, Any]
    expected_source_ids: list[int] | None
    stopped_workers: list[StoppedWorker]
    complete: bool
    stall: Stall
    abandoned_consumer_threads: int


class _ShardComparisonKeys(TypedDict, total=False):
    """The keys of ``shard_comparison`` whose type no other kind contradicts (shared with :class:`TraceMeta`)."""

    shard_policy: str
    files: list[str]
    replicas_per_worker: int
    pipeline: list[Any]
    auto_shard_log: list[str]


class ShardComparisonMeta(CommonMeta, _ShardComparisonKeys, total=False):
    """``kind == "shard_comparison"``: one auto-shard policy of ``compare_shard_policies``."""

    pipelines: dict[str, Any]


class TraceMeta(_DistributionKeys, _ParameterServerKeys, DataServiceMeta, _ShardComparisonKeys, total=False):
    """``trace.meta`` of any kind: every key of every kind's ``TypedDict`` (the type ``Trace.meta`` has).

    Built from the kinds' own key sets, so a key is written once. A key two kinds type differently
    has both types here (``steps_requested``: int or null for ``distribution``, int for
    ``parameter_server``; ``pipelines``: a list, or for ``shard_comparison`` a dict).
    :func:`validate_meta` checks a meta against its own kind's ``TypedDict`` (:data:`KINDS`), which is
    narrower; ``tests/test_contract.py`` keeps this union in step with them.
    """

    steps_requested: int | None
    pipelines: list[Any] | dict[str, Any]


def join_reductions(metas: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """One multi-worker reduction per index: every worker's inputs, results, ops and collectives together.

    Each worker of a ``MultiWorkerMirroredStrategy`` run records the same
    reductions (``meta["reductions"]``) for its own replicas; the join keeps
    the keys they agree on (``expected``, ``call``, ...) and concatenates the
    per-worker lists. Metas of one process each (distinct ``workers``) only; None when they do not join.

    Example:
        >>> a = {"reductions": [dict(workers=[0], inputs=[dict(replica=0)], expected=3)]}
        >>> b = {"reductions": [dict(workers=[1], inputs=[dict(replica=1)], expected=3)]}
        >>> r = join_reductions([a, b])[0]
        >>> r["workers"], [i["replica"] for i in r["inputs"]], r["expected"]
        ([0, 1], [0, 1], 3)
    """
    lists = [m.get("reductions") or [] for m in metas]  # missing or empty: nothing to join
    if len(metas) < 2 or not all(lists) or len({len(x) for x in lists}) != 1:
        return None
    joined = []
    for parts in zip(*lists, strict=True):
        workers = [w for p in parts for w in p.get("workers", [])]
        if len(workers) != len(parts) or len(set(workers)) != len(workers):
            return None
        entry = {k: v for k, v in parts[0].items() if all(p.get(k) == v for p in parts[1:])}
        for key in ("workers", "inputs", "results", "ops", "collectives"):
            entry[key] = [row for p in parts for row in p.get(key, [])]
        entry["destinations"] = sorted({d for p in parts for d in p.get("destinations", [])})
        joined.append(entry)
    return joined


#: Meta keys whose values differ per shard by design and *join* when ``Trace.merge`` joins the shards
#: (every other key is kept only where all shards agree): key -> ``join(metas) -> value or None``.
JOINS: dict[str, Callable[[Sequence[Mapping[str, Any]]], Any]] = {"reductions": join_reductions}


#: TensorFlow's task types (``TF_CONFIG``'s ``task.type``), the only ones that name a shard file.
TASK_TYPES = ("chief", "worker", "ps", "evaluator")


#: kind -> the TypedDict of its keys.
KINDS: dict[str, type] = {
    "distribution": DistributionMeta,
    "multi_worker": MultiWorkerMeta,
    "parameter_server": ParameterServerMeta,
    "data_service": DataServiceMeta,
    "shard_comparison": ShardComparisonMeta,
}


def recording_call(meta: Mapping[str, Any], option: str) -> str:
    """How to record a trace like this one with ``option`` on (``"timing=True"``, ``"placement=True"``): the
    call that made it, so an error tells a ``vizdist.record()`` user to use ``record``.

    Example:
        >>> recording_call({"api": "record"}, "timing=True")
        'vizdist.record(timing=True)'
        >>> recording_call({"api": "experimental_distribute_dataset"}, "placement=True")
        'vizdist.trace_distribution(..., placement=True)'
    """
    if meta.get("api") == "record":
        return f"vizdist.record({option})"
    return f"vizdist.trace_distribution(..., {option})"


def infer_kind(meta: Mapping[str, Any]) -> str:
    """The kind of a meta written without one (format version 1, or built by hand).

    Example:
        >>> infer_kind({"instrument": "tf.data service"}), infer_kind({"shards": [{}, {}]})
        ('data_service', 'multi_worker')
    """
    if meta.get("instrument") == "tf.data service":
        return "data_service"
    if "auto_shard_log" in meta or ("shard_policy" in meta and "files" in meta):
        return "shard_comparison"
    if "ParameterServer" in str(meta.get("strategy", "")) or "step_workers" in meta:
        return "parameter_server"
    if "shards" in meta or "cluster" in meta:
        return "multi_worker"
    return "distribution"


def validate_meta(meta: Mapping[str, Any], *, source: str = "trace meta") -> TraceMeta:
    """Check ``meta`` against the contract; return it (a new dict) with ``kind`` set.

    A missing ``kind`` is inferred (:func:`infer_kind`). Raises
    :class:`TraceFormatError` naming ``source`` and the key when the kind is
    unknown or a documented key has the wrong type; unknown keys are kept.

    Example:
        >>> validate_meta({"kind": "data_service", "stall": {"consumers": [0]}})
        Traceback (most recent call last):
        ...
        vizdist.errors.TraceFormatError: trace meta: key 'stall.after_s' must be a number; got nothing (the key is missing).
    """
    if not isinstance(meta, Mapping):
        raise TraceFormatError(f"{source}: meta must be an object (a dict); got {type(meta).__name__}.")
    kind = meta["kind"] if "kind" in meta else infer_kind(meta)
    out = {"kind": kind, **{k: v for k, v in meta.items() if k != "kind"}}
    if not isinstance(kind, str) or kind not in KINDS:
        raise TraceFormatError(
            f"{source}: key 'kind' is {short(kind)}; vizdist knows {sorted(KINDS)}. "
            "Is the trace from a newer vizdist? Upgrade vizdist, or re-record it.")
    hints = type_hints(KINDS[kind])
    for key, value in out.items():
        problem = misfit(value, hints[key], key) if key in hints else None
        if problem is not None:
            where, bad, tp = problem
            raise TraceFormatError(
                f"{source}: key {short(where)} must be {describe(tp)}; got "
                + ("nothing (the key is missing)." if bad is MISSING else f"{short(bad)} ({type(bad).__name__})."))
    for i, shard in enumerate(out.get("shards") or []):
        validate_meta(shard, source=f"{source} (shards[{i}])")
    return typing.cast(TraceMeta, out)  # checked above against its kind's keys, each a TraceMeta key
