"""The pipeline vizdist runs on the service: your dataset, tagged, plus one step reading the worker id.

Also how that pipeline travels to the consumer process (its graph and element
spec, plain protocol buffers: no pickle) and the reference pass that says which
source ids one epoch yields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vizdist.errors import TracingError
from vizdist.instrument.ids.own_service import worker_id_tensor

_MAX_EXPECTED = 200_000
_STATIC = ("FILE", "DATA", "FILE_OR_DATA", "HINT")


@dataclass
class Pipeline:
    """The instrumented dataset and what tagging learnt about it."""

    dataset: Any
    info: dict[str, Any]
    expected: list[int] | None


def _refuse_enumerated_under_dynamic(policy: str, info: dict[str, Any]) -> None:
    # from_tensor_slices carries its ids inside the source tensor (safe); enumerated sources do not.
    indexed = [s for s in info.get("sources", []) if s.get("id_is") == "index" and s.get("kind") != "slices"]
    if policy == "DYNAMIC" and indexed:
        kinds = sorted({str(s.get("kind")) for s in indexed})
        raise TracingError(
            f"vizdist cannot yet follow elements of {', '.join(kinds)} sources under distributed_epoch "
            "(ShardingPolicy.DYNAMIC): it numbers those elements with enumerate(), and the dispatcher "
            "would hand out splits of the numbering and of the data separately, so ids would not match "
            "elements. Use Dataset.range, from_tensor_slices or file sources (TextLineDataset/TFRecordDataset), "
            "or parallel_epochs / a static policy (DATA, FILE) for this pipeline.")


def instrument(dataset: Any, policy: str, *, in_process: bool) -> Pipeline:
    """Tag ``dataset`` and append the worker-id step; compute the reference ids."""
    import tensorflow as tf

    from vizdist.instrument.core.codes import decode_tags
    from vizdist.instrument.ids.tagging import Untaggable, tag_dataset

    try:
        tagged = tag_dataset(dataset)
    except Untaggable as exc:
        raise TracingError(f"vizdist cannot tag this pipeline's elements: {exc}") from exc
    _refuse_enumerated_under_dynamic(policy, tagged.info)

    def stamp(tag: Any, value: Any) -> Any:
        wid = tf.constant(-1, tf.int64) if in_process else worker_id_tensor(tf)
        return tag, value, tf.fill(tf.shape(tag), wid)

    expected = expected_ids(tagged.dataset, tagged.info, decode_tags)
    return Pipeline(tagged.dataset.map(stamp), tagged.info, expected)


def expected_ids(tagged_ds: Any, info: dict[str, Any], decode: Any) -> list[int] | None:
    """Source ids one pass of the pipeline yields, from a local (not service) run."""
    import tensorflow as tf

    card = int(tagged_ds.cardinality())
    if card == tf.data.INFINITE_CARDINALITY or card > _MAX_EXPECTED:
        return None
    ids: list[int] = []
    try:
        for tag in tagged_ds.map(lambda t, v: t).take(_MAX_EXPECTED + 1):
            ids.extend(decode(np.asarray(tag.numpy()), info)["source_id"].tolist())
            if len(ids) > _MAX_EXPECTED:
                return None
    except tf.errors.OpError:
        # e.g. shard(SHARD_HINT, ...) runs only inside the service: no local reference pass.
        return None
    return sorted(int(i) for i in ids)


def static_note(policy: str, external: bool) -> str:
    """A note for static policies on a dispatcher vizdist did not start."""
    if policy in _STATIC and external:
        return "static sharding needs your dispatcher's DispatcherConfig(worker_addresses=...)"
    return ""


def serialize(dataset: Any) -> tuple[bytes, bytes]:
    """``(graph, element_spec)`` of ``dataset`` as protocol-buffer bytes (what tf.data service ships)."""
    from vizdist.instrument.tfapi import service

    return service.serialize(dataset)


def deserialize(graph: bytes, spec: bytes) -> Any:
    """The dataset :func:`serialize` described, rebuilt in this process."""
    from vizdist.instrument.tfapi import service

    return service.deserialize(graph, spec)


def strategy_spec(strategy: Any) -> dict[str, Any] | None:
    """What the consumer process needs to rebuild ``strategy`` (Mirrored / OneDevice only)."""
    if strategy is None:
        return None
    name = type(strategy).__name__
    if name not in ("MirroredStrategy", "OneDeviceStrategy"):
        raise TracingError(
            f"strategy={name} cannot be rebuilt in the service's consumer process (vizdist rebuilds "
            "MirroredStrategy and OneDeviceStrategy over this machine's devices). Use one of those, or "
            "LocalDataService(in_process=True) to consume in this process.")
    return {"type": name, "devices": [str(d) for d in strategy.extended.worker_devices]}


def rebuild_strategy(spec: dict[str, Any] | None) -> Any:
    """The strategy :func:`strategy_spec` described."""
    if spec is None:
        return None
    import tensorflow as tf

    if spec["type"] == "OneDeviceStrategy":
        return tf.distribute.OneDeviceStrategy(spec["devices"][0])
    return tf.distribute.MirroredStrategy(devices=spec["devices"])
