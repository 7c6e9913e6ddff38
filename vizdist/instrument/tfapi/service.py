"""The tf.data service's private side: the register/read functions vizdist wraps process-wide, how TF
parses a service address and a sharding policy, and stopping its servers.

``tf.data.experimental.service.distribute`` / ``register_dataset`` / ``from_dataset_id`` all go through
``data_service_ops._register_dataset`` and ``_from_dataset_id``; :func:`patch` replaces those two for the
process (:mod:`vizdist.instrument.service.registry` keeps what they were called with).

Example:
    >>> parse_service("grpc://localhost:5000")
    ('grpc', 'localhost:5000')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

__all__ = ["FUNCTIONS", "current", "deserialize", "parse_service", "patch", "policy_name", "processing_mode_policy",
           "serialize", "stop_server"]

#: vizdist's names for the two functions it wraps -> TF's private names in ``data_service_ops``.
FUNCTIONS = {"register": "_register_dataset", "read": "_from_dataset_id"}
Which = Literal["register", "read"]


def _ops() -> Any:
    from tensorflow.python.data.experimental.ops import data_service_ops

    return data_service_ops


def parse_service(service: str) -> tuple[str, str]:
    """``(protocol, address)`` of a service target, as TensorFlow parses it."""
    protocol, address = _ops()._parse_service(service)
    return str(protocol), str(address)


def current(which: Which) -> Callable[..., Any]:
    """TF's ``register`` or ``read`` function as it stands now (vizdist's wrapper while patched)."""
    return getattr(_ops(), FUNCTIONS[which])  # type: ignore[no-any-return]  # TF ships no types: its function is Any


def patch(which: Which, function: Callable[..., Any]) -> None:
    """Put ``function`` in place of TF's ``register`` or ``read`` function, for the whole process."""
    setattr(_ops(), FUNCTIONS[which], function)


def policy_name(processing_mode: Any) -> str:
    """The ``ShardingPolicy`` name (OFF, DYNAMIC, ...) of a ``processing_mode`` argument, as TF validates it."""
    return str(_ops()._get_validated_sharding_policy(processing_mode).name)


def processing_mode_policy(raw: bytes) -> str:
    """The ``ShardingPolicy`` name a serialized ``ProcessingModeDef`` (a service read's op input) holds."""
    from tensorflow.core.protobuf import data_service_pb2

    proto = data_service_pb2.ProcessingModeDef()
    proto.ParseFromString(raw)
    return str(_ops().ShardingPolicy(int(proto.sharding_policy)).name)


def stop_server(server: Any) -> None:
    """Stop a ``DispatchServer`` or ``WorkerServer`` now (TF's ``_stop``: its public API stops one only when
    it is garbage collected)."""
    server._stop()


def serialize(dataset: Any) -> tuple[bytes, bytes]:
    """``(graph, element_spec)`` of ``dataset`` as protocol-buffer bytes (what tf.data service ships)."""
    import tensorflow as tf
    from tensorflow.python.saved_model import nested_structure_coder

    graph = tf.raw_ops.DatasetToGraphV2(
        input_dataset=dataset._variant_tensor, external_state_policy=0, strip_device_assignment=True)
    spec = nested_structure_coder.encode_structure(dataset.element_spec).SerializeToString()
    return bytes(graph.numpy()), spec


def deserialize(graph: bytes, spec: bytes) -> Any:
    """The dataset :func:`serialize` described, rebuilt in this process."""
    import tensorflow as tf
    from tensorflow.core.protobuf import struct_pb2
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.saved_model import nested_structure_coder

    proto = struct_pb2.StructuredValue()
    proto.ParseFromString(spec)
    element_spec = nested_structure_coder.decode_proto(proto)
    return dataset_ops._VariantDataset(tf.raw_ops.DatasetFromGraph(graph_def=graph), element_spec)
