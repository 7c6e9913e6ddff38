"""The input of a run: the arguments checked, the dataset tagged and distributed with TF's own code,
and what vizdist learnt doing it (:class:`Input`, :func:`base_meta`, :func:`input_meta`).
"""

from __future__ import annotations

import contextlib
import platform
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.errors import TracingError
from vizdist.instrument.core import engine, service_registry
from vizdist.instrument.core.codes import keyed, tensor_value, untag, values_are_ids
from vizdist.instrument.core.rows import num_workers, replica_devices, strategy_name
from vizdist.instrument.ids import own_service as service_own
from vizdist.instrument.ids.tagging import Untaggable, cardinality, tag_batch_rows, tag_dataset
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["ITERATIONS", "REBATCH_OPS", "Input", "TaggingFn", "base_meta", "check_call", "check_count", "check_strategy",
           "distribute_dataset", "distribute_function", "input_meta", "options_dict", "rebatch_op", "tag_global",
           "wrap_tf_error"]

ITERATIONS = ("for", "get_next", "get_next_as_optional")


def check_strategy(strategy: Any) -> tf.distribute.Strategy:
    if strategy is None:
        return tf.distribute.get_strategy()
    if not isinstance(strategy, (tf.distribute.Strategy, tf.compat.v1.distribute.Strategy)):
        raise TypeError(
            f"strategy must be a tf.distribute.Strategy (e.g. tf.distribute.MirroredStrategy()); "
            f"got {type(strategy).__name__}. Pass None to use the default strategy."
        )
    if not tf.executing_eagerly():  # TF1 graph mode (disable_eager_execution) is process-wide
        raise TracingError(
            "trace_distribution reads each replica's batch eagerly, but eager execution is off "
            "(tf.compat.v1.disable_eager_execution() was called in this process), and in graph mode "
            "TensorFlow itself iterates a distributed dataset only inside a tf.function. To trace a "
            "Session program, use vizdist.trace_tf1(strategy, dataset) (or input_fn=...): TF1's "
            "make_dataset_iterator / make_input_fn_iterator, run in a Session; or trace in a process that "
            "keeps eager execution on."
        )
    return strategy


def _check_dataset(dataset: Any, what: str = "dataset") -> tf.data.Dataset:
    if isinstance(dataset, tf.data.Dataset):
        return dataset
    kind = type(dataset).__name__
    if "Distributed" in kind:
        raise TypeError(
            f"{what} is already distributed ({kind}). Pass the tf.data.Dataset you built (vizdist "
            "distributes it itself), or wrap your distributed dataset with vizdist.watch(...) instead."
        )
    raise TypeError(
        f"{what} must be a tf.data.Dataset; got {kind}. Build one with e.g. "
        "tf.data.Dataset.range(10).batch(4) or tf.data.Dataset.from_tensor_slices(...)."
    )


def check_count(value: Any, name: str, *, none: str = "") -> int | None:
    """A whole number of steps >= 1 (None allowed when ``none`` says what it means)."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        also = f" (or None {none})" if none else ""
        raise ValueError(f"{name} must be a whole number of steps, 1 or more{also}; got {value!r}.")
    return int(value)


def _check_finite(ds: tf.data.Dataset, steps: int | None) -> None:
    if steps is None and cardinality(ds) == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            "the dataset is infinite (it ends in .repeat() with no count, or similar) and steps=None, so "
            "tracing would never end. Pass steps=N to record the first N steps."
        )


def check_call(strategy: Any, dataset: Any, dataset_fn: Any, options: Any, step_fn: Any, iteration: Any,
                timing: Any, timeout: Any) -> tf.distribute.Strategy:
    """Check the arguments that need no TF work; return the strategy."""
    strategy = check_strategy(strategy)
    if iteration not in ITERATIONS:
        raise ValueError(f"iteration must be one of {ITERATIONS}; got {iteration!r}.")
    if (dataset is None) == (dataset_fn is None):
        raise ValueError(
            "give exactly one of dataset (for experimental_distribute_dataset) or dataset_fn= (for "
            "distribute_datasets_from_function)."
        )
    if dataset_fn is not None and not callable(dataset_fn):
        raise TypeError(f"dataset_fn must be callable (InputContext -> Dataset); got {type(dataset_fn).__name__}.")
    if step_fn is not None and not callable(step_fn):
        raise TypeError(f"step_fn must be callable; got {type(step_fn).__name__}.")
    if options is not None and not isinstance(options, tf.distribute.InputOptions):
        raise TypeError(f"options must be tf.distribute.InputOptions; got {type(options).__name__}.")
    if not isinstance(timing, bool) and (not isinstance(timing, (int, np.integer)) or timing < 0):
        raise ValueError(f"timing must be True/False or a number of steps to profile (0 or more); got {timing!r}.")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
        raise ValueError(f"timeout must be a number of seconds above 0 (or None to wait for the data); got {timeout!r}.")
    return strategy


@dataclass
class Input:
    """The distributed dataset and what vizdist learnt building it."""

    dist: Any
    info: dict[str, Any]
    tagged: bool
    known_steps: int | None  # steps TF knows the data has (None: endless or unknown)
    meta: dict[str, Any] = field(default_factory=dict)
    ids_in_values: bool = False  # tagged, but each value is its own tag: the user's dataset runs as built


def wrap_tf_error(exc: BaseException, strategy: tf.distribute.Strategy, what: str) -> TracingError:
    """A TF error while building or reading the distributed dataset, with TF's whole message."""
    from vizdist.instrument.observe.placement import explain_placement_error

    msg = str(exc).strip() or type(exc).__name__
    hint = explain_placement_error(exc, strategy_name(strategy))
    return TracingError(
        f"TensorFlow failed while {what} over {strategy.num_replicas_in_sync} replicas "
        f"({strategy_name(strategy)}): {type(exc).__name__}: {msg}" + (f"\n\nIn plain words: {hint}" if hint else "")
    )


def _is_unbatched(tagged_ds: tf.data.Dataset) -> bool:
    return tagged_ds.element_spec[0].shape.rank == 0


def _cardinality(ds: Any) -> int | None:
    try:
        n = cardinality(ds)
    except Exception:
        return None
    return n if n >= 0 else None


def tag_global(strategy: Any, dataset: Any, steps: int | None, *, ids_in_values: bool = False,
               endless_ok: bool = False) -> tuple[tf.data.Dataset, Input]:
    """The dataset to distribute (tagged, or as built when it cannot be tagged) and what vizdist learnt.

    ``ids_in_values``: where every value is its own tag (:func:`values_are_ids`), distribute the
    user's dataset as built and read the tags from the values (the caller's loop must know).
    """
    dataset = _check_dataset(dataset)
    if not endless_ok:  # vizdist.record follows the user's own loop, which knows when to stop
        _check_finite(dataset, steps)
    meta: dict[str, Any] = {}
    try:
        tagged = tag_dataset(dataset)
    except Untaggable as exc:
        tagged, meta["provenance_note"] = None, str(exc)
    if tagged is not None and strategy.num_replicas_in_sync > 1 and _is_unbatched(tagged.dataset):
        tagged = tag_batch_rows(tagged)  # elements that are batches themselves (a generator's): one tag a row
    if tagged is None and "provenance_note" not in meta:
        raise ValueError(
            f"the dataset is not batched, but {strategy_name(strategy)} splits each element across "
            f"{strategy.num_replicas_in_sync} replicas along its first (batch) dimension. Batch it with "
            f"the global batch size first, e.g. dataset.batch({strategy.num_replicas_in_sync * 2})."
        )
    info = tagged.info if tagged is not None else {"provenance": "fingerprint",
                                                    "services": service_own.services_in(dataset)}
    ds = keyed(tagged.dataset) if tagged is not None else dataset
    in_values = ids_in_values and tagged is not None and values_are_ids(dataset, tagged.info)
    if in_values:
        ds = dataset
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # graph mode: TF warns that options are read the legacy way
        meta["shard_policy"] = dataset.options().experimental_distribute.auto_shard_policy.name
    meta.update(global_batch_size=info.get("global_batch_size"), input_contexts=[],
                element_spec=str(dataset.element_spec))
    return ds, Input(None, info, tagged is not None, _cardinality(ds), meta, ids_in_values=in_values)


def distribute_dataset(strategy: tf.distribute.Strategy, dataset: Any, options: Any, steps: int | None) -> Input:
    """``experimental_distribute_dataset`` over the tagged dataset (content ids when it cannot be tagged)."""
    ds, inp = tag_global(strategy, dataset, steps, ids_in_values=True)
    try:
        inp.dist = strategy.experimental_distribute_dataset(ds, options)
    except (ValueError, TypeError, IndexError, tf.errors.OpError) as exc:
        raise wrap_tf_error(exc, strategy, "distributing the dataset") from exc
    return inp


class TaggingFn:
    """Wraps a ``dataset_fn`` (TF1: ``input_fn``): records each ``InputContext`` and tags each pipeline."""

    def __init__(self, dataset_fn: Callable[..., Any], steps: int | None, name: str = "dataset_fn", *,
                 endless_ok: bool = False) -> None:
        self.dataset_fn, self.steps, self.name, self.endless_ok = dataset_fn, steps, name, endless_ok
        self.contexts: list[dict[str, Any]] = []
        self.infos: list[dict[str, Any]] = []
        self.specs: list[Any] = []
        self.cards: list[int | None] = []

    def __call__(self, ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        self.contexts.append({"num_input_pipelines": int(ctx.num_input_pipelines),
                              "input_pipeline_id": int(ctx.input_pipeline_id),
                              "num_replicas_in_sync": int(ctx.num_replicas_in_sync)})
        ds = _check_dataset(self.dataset_fn(ctx), f"{self.name}'s return value")
        if not self.endless_ok:
            _check_finite(ds, self.steps)
        self.specs.append(ds.element_spec)
        self.cards.append(_cardinality(ds))
        try:
            t = tag_dataset(ds)
        except Untaggable as exc:
            raise TracingError(
                f"vizdist cannot tag the pipeline {self.name} builds ({exc}). Pass a dataset instead, or "
                "trace your loop with vizdist.watch(...)."
            ) from None
        self.infos.append(t.info)
        return keyed(t.dataset)

    def summary(self, strategy: Any) -> tuple[dict[str, Any], dict[str, Any], int | None]:
        """(tag info, meta, steps TF knows the data has) once every pipeline was built."""
        info = dict(self.infos[0]) if self.infos else {"provenance": "tagged"}  # every pipeline's sources are alike
        per_pipeline = info.get("global_batch_size")
        meta = {"per_replica_batch_size": per_pipeline, "input_contexts": self.contexts,
                "pipelines": [i.get("pipeline") for i in self.infos],
                "pipeline_shuffle_seeds": [i.get("shuffle_seeds", []) for i in self.infos],
                "element_spec": str(self.specs[0] if self.specs else None),
                "global_batch_size": per_pipeline * strategy.num_replicas_in_sync if per_pipeline else None}
        cards = self.cards
        known = min(cards) if cards and all(c is not None for c in cards) else None  # type: ignore[type-var]  # all(c is not None) narrows the list, which mypy cannot see
        return info, meta, known


def distribute_function(strategy: tf.distribute.Strategy, dataset_fn: Callable[..., Any], options: Any,
                         steps: int | None) -> Input:
    """``distribute_datasets_from_function`` with every pipeline tagged and its InputContext recorded."""
    traced_fn = TaggingFn(dataset_fn, steps)
    try:
        with service_registry.one_run():  # pipelines that share a tf.data service job share it traced
            dist = strategy.distribute_datasets_from_function(traced_fn, options)
    except tf.errors.OpError as exc:
        raise wrap_tf_error(exc, strategy, "distributing the dataset") from exc
    info, meta, known = traced_fn.summary(strategy)
    return Input(dist, info, True, known, meta)


def options_dict(options: tf.distribute.InputOptions | None) -> dict[str, Any]:
    if options is None:
        return {}
    out: dict[str, Any] = {}
    for key in ("experimental_fetch_to_device", "experimental_place_dataset_on_device",
                "experimental_per_replica_buffer_size", "experimental_replication_mode"):
        v = getattr(options, key, None)
        out[key] = getattr(v, "name", v)
    return out


def base_meta(strategy: tf.distribute.Strategy, api: str) -> dict[str, Any]:
    return {
        "kind": "distribution",
        "strategy": strategy_name(strategy),
        "num_replicas": int(strategy.num_replicas_in_sync),
        "devices": replica_devices(strategy),
        "api": api,
        "tf_version": tf.__version__,
        "host": platform.node(),
        "gpus": len(tf.config.list_physical_devices("GPU")),
        "num_workers": num_workers(strategy),
    }


def input_meta(inp: Input, dist: Any) -> dict[str, Any]:
    info = inp.info
    meta = dict(inp.meta)
    meta.update(
        provenance=info.get("provenance", "tagged"), pipeline=info.get("pipeline", []),
        **({"provenance_note": "; ".join(info["provenance_notes"])} if info.get("provenance_notes") else {}),
        sources=info.get("sources", []),
        **({"services": info["services"]} if info.get("services") else {}),
        pipeline_flags={k: info.get(k) for k in (
            "drop_remainder", "filter", "repeat", "take", "skip", "shard", "shuffle", "unbatch", "opaque")}
        | ({"shuffle_unseeded": True} if info.get("shuffle_unseeded") else {}))
    try:
        spec = dist.element_spec
        meta["distributed_element_spec"] = str(untag(spec)[1] if inp.tagged and not inp.ids_in_values else spec)
    except Exception:  # some strategies only know it after iteration starts
        meta["distributed_element_spec"] = ""
    meta["rebatch"] = rebatch_op(dist)
    return meta


#: TF's two ways to cut a global batch for the replicas (tf.data ops, as named in the dataset graph).
REBATCH_OPS = ("RebatchDatasetV2", "RebatchDataset")


def rebatch_op(dist: Any) -> str:
    """The op TF cuts each global batch with, read from the distributed dataset's graph after TF's
    auto-shard rewrite (sharding by DATA swaps ``RebatchDatasetV2`` for the legacy ``RebatchDataset``,
    ``auto_shard.cc``); ``""`` where TF rebatches nothing (one replica, ``distribute_datasets_from_function``)
    or the graph cannot be read (about 1 ms: one serialization of the first worker's dataset).

    Example:
        >>> import tensorflow as tf                                          # doctest: +SKIP
        >>> s = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])          # doctest: +SKIP
        >>> rebatch_op(s.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(4)))  # doctest: +SKIP
        'RebatchDataset'
    """
    run = engine.current()
    try:
        with run.own_work() if run is not None else contextlib.nullcontext():
            dataset = tfd.field(dist, "cloned_datasets")[0]
            graph = tfd.parse_graph(tensor_value(tfd.graph_tensor(dataset)))
    except Exception:
        return ""
    ops = {node.op for node in graph.node}
    return next((op for op in REBATCH_OPS if op in ops), "")

