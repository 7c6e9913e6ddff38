"""How per-replica values become one: real reductions, recorded input by input.

:func:`trace_reduction` runs one real reduction on a strategy (``Strategy.reduce``,
``ReplicaContext.all_reduce`` / ``all_gather`` / ``merge_call``) over real
``DistributedValues`` and records, in ``trace.meta["reductions"]`` (see
:class:`vizdist.contract.ReductionMeta`): the value on each replica's device,
the ``CrossDeviceOps`` that ran, the destination device(s), the result on each
destination as TF returned it, the value the documented rule gives
(``expected``), and the ops the reduction ran with their devices (TF's
debugger, as for ``placement=True``).

:func:`trace_values` records any ``DistributedValues`` (per-replica results,
``experimental_distribute_values_from_function``, a ``Mirrored`` variable's
copies) with the device of each component.

:func:`trace_loss_scaling` runs a real input pipeline and shows, step by step,
what each replica contributes to the loss with
``tf.nn.compute_average_loss(..., global_batch_size=)`` and with a per-replica
mean, what TF's reduce makes of it, and the mean over the elements that
really arrived (what a user expects).

Example:
    >>> import vizdist; vizdist.virtual_devices(4)          # doctest: +SKIP
    >>> import tensorflow as tf                             # doctest: +SKIP
    >>> s = tf.distribute.MirroredStrategy()                # doctest: +SKIP
    >>> t = vizdist.trace_reduction(s, lambda ctx: float(ctx.replica_id_in_sync_group), reduce_op="SUM")  # doctest: +SKIP
    >>> t.meta["reductions"][0]["results"][0]["value"]      # doctest: +SKIP
    6.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.contract import ReductionMeta
from vizdist.instrument.core.rows import num_workers, worker_position
from vizdist.instrument.observe.collectives import collective_ops, communication
from vizdist.instrument.observe.placement import (
    PlacementRecorder,
    fresh_function_caches,
    quiet_tf_logger,
    short_device,
)
from vizdist.instrument.observe.values import json_value, reduction_meta, trace_values, value_rows
from vizdist.instrument.tfapi import runtime
from vizdist.trace import Trace

__all__ = ["HOW", "expected_reduction", "trace_loss_scaling", "trace_reduction", "trace_values", "value_rows"]

HOW = ("reduce", "all_reduce", "all_gather", "merge_call")
_OPS = ("SUM", "MEAN")


def _cross_device_ops(strategy: tf.distribute.Strategy, value: Any) -> str:
    ext = strategy.extended
    chosen = runtime.cross_device_ops(strategy, value)
    if chosen is None:
        return "none (one device: nothing to combine across devices)" if strategy.num_replicas_in_sync == 1 \
            else f"{type(ext).__name__} (built in)"
    return type(chosen).__name__


def expected_reduction(inputs: list[Any], how: str, reduce_op: str, axis: int | None) -> Any:
    """What TF's documented rule gives for these per-replica inputs (numpy).

    ``SUM`` adds the replicas' values; ``MEAN`` divides by the number of
    replicas (``axis=None``) or by the total length along ``axis``
    (``Strategy.reduce(..., axis=0)`` reduces inside each value too);
    ``all_gather`` concatenates along ``axis`` (0 by default).

    Example:
        >>> expected_reduction([[1.0, 2.0], [3.0, 4.0]], "reduce", "MEAN", 0)
        2.5
        >>> expected_reduction([[1.0], [3.0]], "all_reduce", "SUM", None)
        [4.0]
    """
    arrs = [np.asarray(v, dtype=np.float64) for v in inputs]
    if how == "all_gather":
        return np.concatenate([np.atleast_1d(a) for a in arrs], axis=axis or 0).tolist()
    if axis is not None:
        joined = np.concatenate([np.atleast_1d(a) for a in arrs], axis=axis)
        out = joined.sum(axis=axis) if reduce_op == "SUM" else joined.mean(axis=axis)
    else:
        stacked = np.stack(arrs)
        out = stacked.sum(axis=0) if reduce_op == "SUM" else stacked.mean(axis=0)
    return np.asarray(out).tolist()


def _distributed(strategy: tf.distribute.Strategy, values: Any) -> Any:
    if callable(values) and not isinstance(values, tf.Variable):
        fn = values
        return strategy.experimental_distribute_values_from_function(lambda ctx: tf.convert_to_tensor(fn(ctx)))
    if isinstance(values, (list, tuple)):
        if len(values) != strategy.num_replicas_in_sync:
            raise ValueError(f"give one value per replica ({strategy.num_replicas_in_sync}); got {len(values)}.")
        items = list(values)
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.convert_to_tensor(items[ctx.replica_id_in_sync_group]))
    return values


def _replica_fn(how: str, reduce_op: str, axis: int | None, destinations: str | None,
                place: bool) -> Callable[[Any], Any]:
    def replica_fn(x: Any) -> Any:
        ctx = tf.distribute.get_replica_context()
        if place:  # a tf.function's inputs have no device, and MWMS needs one to reduce to: the replica's
            x = tf.nest.map_structure(tf.identity, x)
        if how == "all_reduce":
            return ctx.all_reduce(reduce_op, x)
        if how == "all_gather":
            return ctx.all_gather(x, axis=axis or 0)
        return ctx.merge_call(lambda s, y: s.extended.reduce_to(reduce_op, y, destinations=destinations or y),
                              args=(x,))

    return replica_fn


def _reduction_fn(strategy: tf.distribute.Strategy, how: str, reduce_op: str, axis: int | None,
                  destinations: str | None, *, place: bool = False) -> Callable[[Any], Any]:
    """The reduction as a function of the per-replica value (cross-replica ``reduce``, or ``strategy.run``)."""
    if how == "reduce":
        return lambda x: strategy.reduce(reduce_op, x, axis=axis)
    replica_fn = _replica_fn(how, reduce_op, axis, destinations, place)
    return lambda x: strategy.run(replica_fn, args=(x,))


def _run_eagerly(fn: Callable[[Any], Any], value: Any) -> Any:
    """Eagerly, each result keeps the device TF put it on (a tf.function's outputs all report CPU:0)."""
    with quiet_tf_logger():  # "Using MirroredStrategy eagerly has significant overhead"
        return fn(value)


def _local_arrays(strategy: tf.distribute.Strategy, value: Any) -> list[np.ndarray]:
    return [np.asarray(v.read_value() if isinstance(v, tf.Variable) else v, dtype=np.float64)
            for v in strategy.experimental_local_results(value)]


def _every_value(strategy: tf.distribute.Strategy, value: Any) -> list[np.ndarray]:
    """Every replica's value, also the other workers' (TF's own all-gather, in replica order).

    Each replica sends its values flattened behind a leading 0, and its size: never an empty tensor
    (TF 2.21's collective gather of an empty tensor killed the worker process here). Shapes are rebuilt
    from the sizes and this worker's own shape beyond the first axis (the values may differ along it).
    """
    flat = strategy.run(lambda x: tf.concat([[0.0], tf.reshape(tf.cast(x, tf.float64), [-1])], 0), args=(value,))
    sizes = strategy.run(lambda x: tf.reshape(tf.size(x), [1]), args=(value,))
    values = np.asarray(strategy.gather(flat, axis=0))
    mine = _local_arrays(strategy, value)[0]
    out, at = [], 0
    for n in np.asarray(strategy.gather(sizes, axis=0)).tolist():
        chunk = values[at + 1:at + 1 + n]
        at += n + 1
        out.append(chunk.reshape([-1, *mine.shape[1:]]) if mine.ndim else chunk.reshape(()))
    return out


def trace_reduction(
    strategy: tf.distribute.Strategy,
    values: Any,
    *,
    how: str = "reduce",
    reduce_op: str = "SUM",
    axis: int | None = None,
    destinations: str | None = None,
    into: Trace | None = None,
) -> Trace:
    """Run one real reduction and record every input, the result on each destination, and its ops.

    Under ``MultiWorkerMirroredStrategy`` call it in every worker (e.g. in
    :meth:`vizdist.LocalCluster.run`): each worker records its own replicas'
    inputs and results, the collective ops it ran (``CollectiveReduceV2`` /
    ``CollectiveGatherV2`` with their ``communication_hint``) and the
    implementation TF picks for them; merging the workers' traces
    (:meth:`vizdist.Trace.merge`, ``load_trace(folder)``) joins them into
    one reduction.

    Args:
        strategy: the strategy (its ``cross_device_ops`` decide how it combines).
        values: a ``DistributedValues`` (e.g. ``strategy.run`` results), a
            function ``ctx -> value`` (run with
            ``experimental_distribute_values_from_function``), or a list with
            one value per replica.
        how: ``"reduce"`` (``Strategy.reduce``, cross-replica),
            ``"all_reduce"`` / ``"all_gather"`` (``ReplicaContext``, in
            ``strategy.run``) or ``"merge_call"`` (a ``reduce_to`` inside
            ``merge_call`` to ``destinations``).
        reduce_op: ``"SUM"`` or ``"MEAN"``.
        axis: ``None`` (combine across replicas only) or ``0`` (also reduce
            along that axis of each value; gather axis for ``all_gather``).
        destinations: device for ``merge_call``'s ``reduce_to`` (default:
            where each value lives, i.e. every replica).
        into: a trace from an earlier ``trace_reduction`` to add this one to
            (several reductions in one trace, e.g. ``reduce`` then
            ``all_gather``; each worker of a cluster must record the same ones
            in the same order). Keep to one ``MultiWorkerMirroredStrategy``
            per process: a second one in TF 2.21 reuses the first one's
            collective group and instance keys, and their collectives collide.

    Returns:
        A trace whose ``meta["reductions"]`` has one entry per reduction
        (and ``meta["placement"]`` the ops of the last one; each entry keeps
        its own in ``ops``).

    Example:
        >>> t = vizdist.trace_reduction(s, [1.0, 2.0, 3.0, 4.0], reduce_op="MEAN")  # doctest: +SKIP
        >>> t.meta["reductions"][0]["results"][0]["value"], t.meta["reductions"][0]["expected"]  # doctest: +SKIP
        (2.5, 2.5)
    """
    how, reduce_op = _checked(how, reduce_op, axis)
    value = _distributed(strategy, values)
    worker, offset = worker_position(strategy)
    multi = num_workers(strategy) > 1
    inputs = value_rows(strategy, value, offset=offset)
    every = _every_value(strategy, value) if multi else _local_arrays(strategy, value)
    fn = _reduction_fn(strategy, how, reduce_op, axis, destinations, place=multi)
    # MWMS launches eager collectives from a thread pool, where TF's debugger (per thread) sees nothing:
    # record a run inside one tf.function, where every part runs in this thread
    traced = how != "reduce" or multi
    rec = PlacementRecorder(mode="NO_TENSOR")
    with rec, rec.reduce_window(), fresh_function_caches(strategy), quiet_tf_logger():
        graph_fn: Any = tf.function(fn) if traced else fn
        result = graph_fn(value)
        collectives = collective_ops(graph_fn.get_concrete_function(value).graph) if traced else []
    if traced:
        result = _run_eagerly(fn, value)
    results = value_rows(strategy, result, offset=offset) if how != "reduce" else [
        {"replica": -1, "device": short_device(result.device), "value": json_value(result), "type": type(result).__name__}]
    entry = {
        "call": _CALLS[how], "reduce_op": reduce_op if how != "all_gather" else "GATHER", "axis": axis,
        "cross_device_ops": _cross_device_ops(strategy, value), "workers": [worker],
        "inputs": inputs, "destinations": sorted({r["device"] for r in results}), "results": results,
        "expected": json_value(np.asarray(expected_reduction(every, how, reduce_op, axis))),
        "ops": [o for o in rec.ops() if o["stage"] in ("reduce", "step", "host", "transfer")],
        "collectives": collectives, "note": _note(traced, multi),
    }
    if collectives:
        entry["communication"] = communication(strategy)
    meta = reduction_meta(strategy)
    meta["reductions"] = [*_earlier(into), entry]
    meta["placement"] = rec.placement()
    return Trace(meta=meta)


def _earlier(into: Trace | None) -> list[ReductionMeta]:
    if into is None:
        return []
    if not isinstance(into, Trace) or "reductions" not in into.meta:
        raise TypeError(f"into= takes a trace from an earlier trace_reduction; got {type(into).__name__} without "
                        "meta['reductions'].")
    return list(into.meta["reductions"])


_CALLS = {"reduce": "Strategy.reduce", "all_reduce": "ReplicaContext.all_reduce",
          "all_gather": "ReplicaContext.all_gather", "merge_call": "ReplicaContext.merge_call + reduce_to"}


def _checked(how: str, reduce_op: Any, axis: int | None) -> tuple[str, str]:
    if how not in HOW:
        raise ValueError(f"how must be one of {HOW}; got {how!r}.")
    op = str(getattr(reduce_op, "name", reduce_op)).upper()
    if op not in _OPS:
        raise ValueError(f"reduce_op must be 'SUM' or 'MEAN' (or tf.distribute.ReduceOp); got {reduce_op!r}.")
    if axis not in (None, 0):
        raise ValueError(f"axis must be None or 0; got {axis!r}.")
    return how, op


def _note(traced: bool, multi: bool) -> str:
    if not traced:
        return ""
    why = ("MultiWorkerMirroredStrategy launches eager collectives from a thread pool, where TF's debugger does "
           "not look" if multi else "TF's debugger sees every replica's part there")
    note = (f"ops: from one run inside a tf.function ({why}); results and their devices: from a second, eager "
            "run (a tf.function's outputs all report CPU:0)")
    if multi:
        note += ("; each worker recorded its own replicas and ops; expected: TF's documented rule applied to every "
                 "replica's input, gathered from all workers with strategy.gather")
    return note


def _loss_fn_default(batch: Any) -> Any:
    return tf.cast(tf.reshape(batch, [-1]), tf.float32)


def trace_loss_scaling(
    strategy: tf.distribute.Strategy,
    dataset: tf.data.Dataset,
    *,
    global_batch_size: int | None = None,
    per_example_loss: Callable[[Any], Any] | None = None,
    steps: int | None = None,
) -> Trace:
    """Run the pipeline and compare two ways of averaging a loss across replicas, step by step.

    Each step, each replica computes its per-example losses
    (``per_example_loss(batch)``, default: the batch's values as floats) and
    returns (a) ``tf.nn.compute_average_loss(losses,
    global_batch_size=global_batch_size)`` and (b) ``tf.reduce_mean(losses)``.
    TF then reduces them as a training loop would: (a) with ``SUM``, (b) with
    ``MEAN``. ``meta["loss_scaling"]`` holds, per step, each replica's batch
    size and contributions, both reduced values and the mean over the
    elements that really arrived.

    Example:
        >>> t = vizdist.trace_loss_scaling(s, tf.data.Dataset.range(10).batch(4))  # doctest: +SKIP
        >>> [row["expected"] for row in t.meta["loss_scaling"]]  # doctest: +SKIP
        [1.5, 5.5, 8.5]
    """
    from vizdist.instrument.run.distribution import trace_distribution

    loss = per_example_loss or _loss_fn_default
    gbs = global_batch_size

    def step_fn(batch: Any) -> Any:
        losses = loss(batch)
        n = tf.shape(losses)[0]
        size = gbs if gbs is not None else n * strategy.num_replicas_in_sync
        return {"n": n, "sum": tf.reduce_sum(losses),
                "compute_average_loss": tf.nn.compute_average_loss(losses, global_batch_size=size),
                "per_replica_mean": tf.reduce_mean(losses)}

    trace = trace_distribution(strategy, dataset, step_fn=step_fn, steps=steps)
    rows = []
    for s in trace.steps:
        b = trace.batches[trace.batches["step"] == s].sort_values("replica")
        res = [_load(r) for r in b["result"].tolist()]
        rows.append(_loss_row(strategy, s, res, gbs))
    meta = dict(trace.meta)
    meta["loss_scaling"] = rows
    meta["loss_scaling_global_batch_size"] = gbs
    return Trace(elements=trace.elements, batches=trace.batches, events=trace.events, meta=meta)


def _load(text: str) -> dict[str, Any]:
    import json

    return json.loads(text) if text else {}


def _reduce_list(strategy: tf.distribute.Strategy, values: list[float], op: str) -> float:
    """TF's own reduce of one float per replica (``experimental_distribute_values_from_function``)."""
    dv = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(values[ctx.replica_id_in_sync_group], tf.float32))
    return float(strategy.reduce(op, dv, axis=None).numpy())


def _loss_row(strategy: tf.distribute.Strategy, step: int, res: list[dict[str, Any]], gbs: int | None) -> dict[str, Any]:
    n = [int(r.get("n", 0)) for r in res]
    cal = [float(r.get("compute_average_loss", 0.0)) for r in res]
    mean = [float(r["per_replica_mean"]) if r.get("per_replica_mean") is not None else float("nan") for r in res]
    total = sum(float(r.get("sum", 0.0)) for r in res)
    arrived = sum(n)
    row = {"step": step, "n": n, "compute_average_loss": cal, "per_replica_mean": [_num(m) for m in mean],
           "reduced_compute_average_loss": _reduce_list(strategy, cal, "SUM"),
           "reduced_per_replica_mean": _num(_reduce_list(strategy, mean, "MEAN")),
           "expected": total / arrived if arrived else None, "global_batch_size": gbs}
    return row


def _num(x: float) -> float | None:
    return None if x != x else x  # NaN (an empty batch's mean) is stored as null
