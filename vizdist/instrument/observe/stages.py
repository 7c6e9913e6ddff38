"""What each op of a run was for, and the data moved between devices: the reading of TF's debugger rows.

:func:`stage_of` puts an op in one of :data:`STAGES` (the input pipeline, the iterator, the copy to a replica's
device, a variable, the step, a reduction, the host) by its type and the graphs it ran in; :func:`copies` reads
the copies between devices from the aggregated op rows; :func:`short_device` names a device as the views do.
:class:`~vizdist.instrument.observe.placement.PlacementRecorder` uses them on what TF's debugger reported; they
are importable from :mod:`vizdist.instrument.observe.placement` too.

Example:
    >>> stage_of("graph", "RealDiv", ["Dataset_map_lambda"], step_names=("step",))
    'pipeline'
    >>> short_device("/job:worker/replica:0/task:1/device:GPU:0")
    'worker:1/GPU:0'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from vizdist.instrument.tfapi import runtime

__all__ = ["NOISE", "PIPELINE", "STAGES", "copies", "device_key", "short_device", "stage_of"]

#: Row order of the placement view.
STAGES = ("pipeline", "iterator", "transfer", "variable", "step", "reduce", "host")


#: Op types left out of the placement rows (bookkeeping, no work).
NOISE = frozenset({"Const", "Placeholder", "NoOp", "Identity", "IdentityN", "_Arg", "_Retval"})


_ITERATOR = re.compile(r"^(Anonymous\w*Iterator\w*|Iterator\w*|MultiDeviceIterator\w*|MakeIterator|"
                       r"Optional\w*|DeleteIterator|DeleteMultiDeviceIterator)$")


#: Op types of the input pipeline (dataset ops and their helpers), wherever they ran.
PIPELINE = re.compile(r"(Dataset(V\d)?$|^DatasetCardinality|^GetOptions$|^ComputeBatchSize$|"
                       r"^DatasetToGraph|^WrapDatasetVariant$|^UnwrapDatasetVariant$)")


_VARIABLE = re.compile(r"(VariableOp|^VarHandleOp$|^ResourceApply\w+|^ResourceScatter\w+|^ResourceGather$|"
                       r"^VarIsInitializedOp$|^DestroyResourceOp$)")


_REDUCE = re.compile(r"^(Collective\w*|Nccl\w*|AddN|_HostSend|_HostRecv|_Send|_Recv)$")


_TRANSFER_GRAPHS = runtime.TRANSFER_GRAPHS


_HOST_GRAPHS = runtime.HOST_GRAPHS


def short_device(device: str) -> str:
    """``'/job:localhost/replica:0/task:0/device:CPU:1'`` -> ``'CPU:1'`` (other jobs keep their task).

    Example:
        >>> short_device("/job:localhost/replica:0/task:0/device:CPU:1")
        'CPU:1'
        >>> short_device("/job:worker/replica:0/task:1/device:GPU:0")
        'worker:1/GPU:0'
    """
    if not device:
        return ""
    m = re.search(r"device:([A-Za-z_]+:\d+)", device)
    dev = m.group(1) if m else device
    job = re.search(r"/job:([^/]+)", device)
    task = re.search(r"/task:(\d+)", device)
    if job and job.group(1) != "localhost":
        return f"{job.group(1)}:{task.group(1) if task else 0}/{dev}"
    return dev


def stage_of(kind: str, op_type: str, graphs: Sequence[str], *, step_names: Sequence[str] = (),
             in_reduce: bool = False) -> str:
    """Which part of the run an op belongs to (one of :data:`STAGES`).

    ``graphs`` are the names of the graphs the op ran in, outermost first
    (empty for an eager op).
    """
    if _VARIABLE.search(op_type):
        return "variable"
    names = [g for g in graphs if g]
    if any(n.startswith("Dataset_") for n in names) or PIPELINE.search(op_type):
        return "pipeline"
    if any(n.startswith(_TRANSFER_GRAPHS) for n in names):
        return "transfer"
    if any(n.startswith(_HOST_GRAPHS) for n in names) or _ITERATOR.match(op_type):
        return "iterator"
    if any(n in step_names for n in names) or (kind == "eager" and _is_call_of(op_type, step_names)):
        return "step"
    if in_reduce or _REDUCE.match(op_type):
        return "reduce"
    return "host"


def _is_call_of(op_type: str, names: Sequence[str]) -> bool:
    return any(re.match(rf"^__inference_{re.escape(n)}_\d+$", op_type) for n in names)


def device_key(d: str) -> tuple[str, int]:
    """Sort key of a short device name: ``"CPU:10"`` after ``"CPU:9"``."""
    m = re.match(r"^(.*?)(\d+)$", d)
    return (m.group(1), int(m.group(2))) if m else (d, -1)


_TRANSFER_VIA = "input batch: the MultiDeviceIterator copies it to the replica's device"


def copies(ops: list[dict[str, Any]], batch_devices: dict[int, str], *, host: str = "CPU:0") -> list[dict[str, Any]]:
    """Data moved between devices, read from the op rows.

    * a ``MultiDeviceIterator`` (``experimental_fetch_to_device=True``) keeps
      a buffer and an iterator on each replica's device (``transfer`` rows),
      fed from the host iterator's device: a copy host -> device per batch;
    * a batch left on the host (``fetch_to_device=False``) is copied into the
      step when the step's ops run elsewhere;
    * a variable read on one device by a step running on another
      (``CentralStorageStrategy``).

    Example:
        >>> ops = [dict(stage="transfer", op_type="OptionalGetValue", graph="", device="CPU:1", count=2)]
        >>> [(c["src"], c["dst"], c["count"]) for c in copies(ops, {}, host="CPU:0")]
        [('CPU:0', 'CPU:1', 2)]
    """
    out: dict[tuple[str, str, str], int] = {}
    for o in ops:
        if o["stage"] == "transfer" and o["device"] and o["device"] != host:
            key = (host, o["device"], _TRANSFER_VIA)
            gets = o["count"] if o["op_type"] in ("IteratorGetNext", "OptionalGetValue") else 0
            out[key] = max(out.get(key, 0), gets)
    step_devices = sorted({o["device"] for o in ops if o["stage"] == "step" and o["device"]
                           and o.get("kind", "graph") == "graph"}, key=device_key)
    for r, dev in sorted(batch_devices.items()):
        target = step_devices[r] if r < len(step_devices) else dev
        if dev and target and dev != target and (host, target, _TRANSFER_VIA) not in out:
            out[(dev, target, "input batch: left on the host, copied into the step when it runs")] = 1
    reads: dict[str, int] = {}
    for o in ops:
        if o["stage"] == "variable" and o["op_type"] == "ReadVariableOp" and o["device"]:
            reads[o["device"]] = reads.get(o["device"], 0) + int(o["count"])
    for v, n in sorted(reads.items(), key=lambda kv: device_key(kv[0])):
        for d in step_devices:
            if d != v:
                out[(v, d, "variable value read by the step on another device")] = max(1, n // len(step_devices))
    return [dict(src=s, dst=d, via=via, count=n) for (s, d, via), n in out.items()]


