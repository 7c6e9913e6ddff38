"""The collective ops a reduction ran, and the implementation TensorFlow picks for them.

``MultiWorkerMirroredStrategy`` (and ``CollectiveAllReduce``) combine values
with TF's collective ops (``CollectiveReduceV2``, ``CollectiveGatherV2``).
Each op carries the ``communication_hint`` asked for with
``tf.distribute.experimental.CommunicationOptions(implementation=RING | AUTO |
NCCL)``; read here from the op in the graph TF built for the recorded run.
Which implementation then runs is decided by TF's C++ runtime
(``CollectiveParamResolverLocal::AssignCollectiveType`` in
``tensorflow/core/common_runtime/collective_param_resolver_local.cc``): NCCL
(``NcclReduce`` / ``NcclGather``) only for a group of GPUs whose op asks for
``"nccl"`` (or whose session config sets ``collective_nccl``) in a build with
NCCL; otherwise ``RingReduce`` / ``RingGather``. :func:`implementation_of`
applies that rule to what was recorded; TF exposes the choice through no API,
so the trace labels it as the rule's answer.

Example:
    >>> implementation_of("CollectiveReduceV2", hint="auto", device="worker:1/CPU:0")
    'RingReduce'
    >>> implementation_of("CollectiveGatherV2", hint="nccl", device="GPU:0", nccl_built=True)
    'NcclGather'
"""

from __future__ import annotations

from typing import Any

from vizdist.instrument.tfapi import runtime

__all__ = ["RULE", "collective_ops", "communication", "implementation_of"]

RULE = ("TF's rule (CollectiveParamResolverLocal::AssignCollectiveType, collective_param_resolver_local.cc): "
        "NcclReduce/NcclGather only for a group of GPUs whose op asks for 'nccl' (or whose config sets "
        "collective_nccl) in a build with NCCL; otherwise RingReduce/RingGather")

_KINDS = {"CollectiveReduce": "Reduce", "CollectiveGather": "Gather", "CollectiveBcast": "Broadcast"}


def implementation_of(op_type: str, *, hint: str, device: str, nccl_config: bool = False,
                      nccl_built: bool = False) -> str:
    """The collective implementation TF's rule picks for one op (see the module docs).

    Example:
        >>> implementation_of("CollectiveReduceV2", hint="ring", device="CPU:0")
        'RingReduce'
    """
    kind = next((v for k, v in _KINDS.items() if op_type.startswith(k)), "")
    gpu = "GPU:" in device
    nccl = gpu and nccl_built and (hint == "nccl" or nccl_config)
    if kind == "Broadcast":
        return "NcclBroadcast" if nccl else "HierarchicalTreeBroadcast"
    if not kind:
        return ""
    return ("Nccl" if nccl else "Ring") + kind


def _static(tensor: Any) -> int | None:
    import tensorflow as tf

    value = tf.get_static_value(tensor)
    return None if value is None else int(value)


def _graphs(graph: Any) -> list[Any]:
    """``graph`` and the graphs of the functions it calls (collectives may sit in either)."""
    out, todo = [], [graph]
    while todo:
        g = todo.pop()
        out.append(g)
        for f in runtime.function_graphs(g):
            inner = getattr(f, "graph", None)
            if inner is not None and inner not in out:
                todo.append(inner)
    return out


def collective_ops(graph: Any) -> list[dict[str, Any]]:
    """One row per collective op in ``graph``: type, name, device, ``communication_hint``, group size, implementation.

    Example:
        >>> import tensorflow as tf  # doctest: +SKIP
        >>> collective_ops(tf.function(lambda: tf.constant(1.0)).get_concrete_function().graph)  # doctest: +SKIP
        []
    """
    import tensorflow as tf

    from vizdist.instrument.observe.stages import short_device

    nccl_config = bool(_nccl_config())
    built = bool(tf.sysconfig.get_build_info().get("is_cuda_build", False))
    rows = []
    for g in _graphs(graph):
        for op in g.get_operations():
            if not op.type.startswith(tuple(_KINDS)):
                continue
            hint = op.get_attr("communication_hint").decode() if "communication_hint" in op.node_def.attr else ""
            device = short_device(op.device)
            rows.append({"op_type": op.type, "op_name": op.name, "device": device, "communication_hint": hint,
                         "group_size": _static(op.inputs[1]) if len(op.inputs) > 1 else None,
                         "implementation": implementation_of(op.type, hint=hint, device=device,
                                                             nccl_config=nccl_config, nccl_built=built)})
    return rows


def _nccl_config() -> bool:
    return runtime.nccl_config()


def communication(strategy: Any) -> dict[str, Any]:
    """The strategy's ``CommunicationOptions`` (as asked) and how the implementation is known.

    Example:
        >>> communication(object())["requested"]
        ''
    """
    opts = runtime.communication_options(strategy)
    impl = getattr(opts, "implementation", None)
    return {"requested": getattr(impl, "name", "") or "", "timeout_seconds": getattr(opts, "timeout_seconds", None),
            "rule": RULE}
