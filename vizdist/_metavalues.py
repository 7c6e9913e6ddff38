"""The structured values inside a trace's meta: the rows and records its keys hold.

:mod:`vizdist.contract` types each kind of meta with a ``TypedDict`` (which keys, of which types); where a
key holds more than a number, a string or a plain list, its value is one of these: a placement op, a stall,
a failed step, a reduction, a TPU host... :func:`vizdist.contract.validate_meta` checks them key by key (in a
class whose required keys come from a ``_...Required`` base, those keys must be present). Every name here is
importable from :mod:`vizdist.contract`, where the keys that hold them are documented.

Example:
    >>> sorted(Stall.__required_keys__), sorted(Stall.__optional_keys__)
    (['after_s', 'consumers', 'elements_received'], ['alive_workers'])
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = [
    "BadResult", "BadRow", "ClosureRecord", "ClusterMeta", "CollectiveOp", "DistributedValuesMeta",
    "FailedElement", "FailedReplica", "FailedStep", "LossScalingRow", "LostTask", "NetworkMeta", "NonfiniteOp",
    "NumericsMeta", "PlacementCopy", "PlacementMeta", "PlacementOp", "ReductionMeta", "ServiceRead",
    "SkippedFile", "Stall", "StoppedWorker", "TPUCore", "TPUHost", "TPUMeta", "TimingMeta"
]


class ClusterMeta(TypedDict, total=False):
    """``meta["cluster"]``: the ``LocalCluster`` that ran the tasks."""

    mode: str
    workers: int
    ps: int
    chief: int


class TimingMeta(TypedDict, total=False):
    """``meta["timing"]``: how the ``events`` times were measured.

    ``clock``, ``anchor`` (the process's perf_counter -> Unix epoch anchor), ``worker``, ``notes``;
    ``xplane`` (TF profiler spans are in ``events``), ``xplane_error`` (why not), ``xplane_clock``;
    ``profile_start_time`` / ``profile_stop_time`` (int: the profiler's window, Unix epoch ns, from
    its ``Task Environment`` plane) and ``profiled_steps`` (int: the steps the profiler window covered,
    from step 0).
    """

    clock: str
    anchor: dict[str, Any]
    worker: int
    notes: list[str]
    xplane: bool
    xplane_error: str
    xplane_clock: str
    profile_start_time: int
    profile_stop_time: int
    profiled_steps: int


class _StoppedWorkerRequired(TypedDict):
    worker: int
    after_elements: int


class StoppedWorker(_StoppedWorkerRequired, total=False):
    """One entry of ``meta["stopped_workers"]``: a service worker vizdist stopped on purpose."""

    t_ns: int


class _StallRequired(TypedDict):
    consumers: list[int]
    after_s: float
    elements_received: int


class Stall(_StallRequired, total=False):
    """``meta["stall"]``: consumers that waited ``after_s`` seconds for an element that never came."""

    alive_workers: list[int]


class SkippedFile(TypedDict):
    """One entry of ``meta["skipped"]``: a file of a shard folder that was not merged."""

    path: str
    reason: str


class PlacementOp(TypedDict, total=False):
    """One row of ``meta["placement"]["ops"]``: an op that ran on one device."""

    stage: str
    kind: str
    op_type: str
    op_name: str
    graph: str
    device: str
    count: int
    first_step: int
    last_step: int
    nonfinite: int


class PlacementCopy(TypedDict, total=False):
    """One entry of ``meta["placement"]["copies"]``: data moved from ``src`` to ``dst``."""

    src: str
    dst: str
    via: str
    count: int


class BadRow(TypedDict, total=False):
    """One row of a per-replica batch that held a NaN or an Inf."""

    step: int
    replica: int
    position: int
    device: str
    leaf: int


class BadResult(TypedDict, total=False):
    """A replica whose step result held a NaN or an Inf."""

    step: int
    replica: int


class NonfiniteOp(TypedDict, total=False):
    """The earliest op whose output held a NaN or an Inf (TF's debugger)."""

    op_type: str
    op_name: str
    graph: str
    device: str
    stage: str
    kind: str
    step: int


class FailedReplica(TypedDict, total=False):
    """One replica's batch of the step that raised."""

    replica: int
    device: str
    source_ids: list[int]
    nonfinite_positions: list[int]


class FailedStep(TypedDict, total=False):
    """The step that raised (``arrived``: its batch had reached the replicas)."""

    step: int
    arrived: bool
    replicas: list[FailedReplica]


class FailedElement(TypedDict, total=False):
    """The element a ``map`` or ``filter`` of the input pipeline raised on (``vizdist.instrument.ids.map_failure``)."""

    function: str
    map_index: int
    source_ids: list[int]
    source_files: list[str]
    source_lines: list[int]
    epochs: list[int]
    op_name: str
    op_type: str
    devices: list[str]
    message: str
    checked: int
    how: str


class NumericsMeta(TypedDict, total=False):
    """``meta["placement"]["numerics"]``: NaN/Inf seen in the run."""

    bad_rows: list[BadRow]
    bad_results: list[BadResult]
    first_nonfinite_op: NonfiniteOp | None
    error: str | None
    failed_step: FailedStep | None
    failed_element: FailedElement | None


class LossScalingRow(TypedDict, total=False):
    """One step of ``meta["loss_scaling"]`` (:func:`vizdist.trace_loss_scaling`)."""

    step: int
    n: list[int]
    compute_average_loss: list[float]
    per_replica_mean: list[float | None]
    reduced_compute_average_loss: float
    reduced_per_replica_mean: float | None
    expected: float | None
    global_batch_size: int | None


class DistributedValuesMeta(TypedDict, total=False):
    """One entry of ``meta["distributed_values"]``: a ``DistributedValues`` and its components."""

    type: str
    components: list[dict[str, Any]]


class PlacementMeta(TypedDict, total=False):
    """``meta["placement"]``: where every op of the run executed (TF's debugger)."""

    mode: str
    source: str
    ops: list[PlacementOp]
    copies: list[PlacementCopy]
    host: str
    devices: list[str]
    batch_devices: list[str]
    step_names: list[str]
    steps_marked: int
    notes: list[str]
    cost_s: dict[str, float]
    numerics: NumericsMeta


class CollectiveOp(TypedDict, total=False):
    """One collective op a reduction ran (``CollectiveReduceV2`` ...), read from the graph TF built."""

    op_type: str
    op_name: str
    device: str
    communication_hint: str
    group_size: int | None
    implementation: str


class ReductionMeta(TypedDict, total=False):
    """One entry of ``meta["reductions"]``: one reduction, input per device to result per destination."""

    call: str
    reduce_op: str
    axis: int | None
    cross_device_ops: str
    inputs: list[dict[str, Any]]
    destinations: list[str]
    results: list[dict[str, Any]]
    expected: Any
    ops: list[PlacementOp]
    note: str
    workers: list[int]
    collectives: list[CollectiveOp]
    communication: dict[str, Any]


class ServiceRead(TypedDict, total=False):
    """One entry of ``meta["services"]``: a read from the tf.data service inside the traced pipeline."""

    sharding_policy: str
    processing_mode: str
    address: str
    job_name: str
    traced_job_name: str
    num_workers: int | None
    worker_attribution: str
    exact: bool
    note: str


class NetworkMeta(TypedDict, total=False):
    """``meta["network"]``: addresses advertised per job, listened on per task, and isolation."""

    addresses: dict[str, list[str]]
    listening: dict[str, list[str]]
    connections: dict[str, list[str]]
    isolated: bool
    resolver: str
    rpc_layer: str


class TPUCore(TypedDict, total=False):
    """One TPU core of a host (``meta["tpu"]["hosts"][i]["cores"]``)."""

    core: int
    device: str
    coordinates: list[int]


class TPUHost(TypedDict, total=False):
    """One TPU host (a ``worker`` task) and its cores."""

    task: int
    address: str
    cpu_device: str
    cores: list[TPUCore]


class TPUMeta(TypedDict, total=False):
    """``meta["tpu"]``: the hosts and cores of a TPU run (from ``tf.tpu.experimental.Topology``)."""

    job: str
    accelerator: str
    mesh_shape: list[int]
    num_hosts: int
    cores_per_host: int
    num_cores: int
    hosts: list[TPUHost]


class _LostTaskRequired(TypedDict):
    task: str
    how: str
    after_s: float


class LostTask(_LostTaskRequired, total=False):
    """One entry of ``meta["lost_tasks"]``: a cluster task that died while the run went on."""


class _ClosureRequired(TypedDict):
    closure: int
    worker: int
    status: str


class ClosureRecord(_ClosureRequired, total=False):
    """One entry of ``meta["closures"]``: a function scheduled on a ``ClusterCoordinator``."""

    error: str
    result: Any
    attempts: list[dict[str, Any]]
