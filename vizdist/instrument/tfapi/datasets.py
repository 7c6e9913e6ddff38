"""tf.data's private side: dataset classes by TF's class name, the fields TF keeps on them, their graphs.

A ``tf.data.Dataset`` is a chain of TF's private classes (``_MapDataset``, ``_BatchDataset``, ...), each
keeping its input and arguments in ``_``-prefixed fields. vizdist reads that chain to rebuild a tagged copy
(:mod:`vizdist.instrument.ids.tagging`): here are the class names (the constants below, compared with
``type(ds).__name__``), :func:`field` for the fields (each declared in :mod:`.table`), and the few datasets
vizdist builds from TF's private classes.

Example:
    >>> import tensorflow as tf
    >>> ds = tf.data.Dataset.range(5).map(lambda x: x + 1)
    >>> type(ds).__name__ == MAP, type(field(ds, "input_dataset")).__name__ == RANGE
    (True, True)
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, graph_pb2, types_pb2
from tensorflow.python.data.ops import dataset_ops, directed_interleave_op, readers
from tensorflow.python.data.util import structure
from tensorflow.python.framework import ops, tensor_util
from tensorflow.python.ops import gen_dataset_ops
from tensorflow.python.util import variable_utils

__all__ = ["BATCHERS", "FIELDS", "FILE_READERS", "GraphDef", "constant_value", "convert_variables_to_tensors",
           "directed_interleave", "field", "flat_tensor_shapes", "flat_tensor_types", "from_tensor_list",
           "from_variant", "graph_tensor", "has_field", "inputs", "is_resource_dtype",
           "parse_graph", "reader_class", "resource_constant", "restructured", "shape_tuple", "shuffle_like", "spec_batched",
           "to_tensor_list", "variant_tensor"]

# -- TF's class names of its dataset ops (``type(ds).__name__``) ---------------------------------------------
RANGE, TENSOR_SLICES, TENSORS = "_RangeDataset", "_TensorSliceDataset", "_TensorDataset"
ZIP, CONCATENATE, DIRECTED_INTERLEAVE = "_ZipDataset", "_ConcatenateDataset", "_DirectedInterleaveDataset"
FLAT_MAP, INTERLEAVE, PARALLEL_INTERLEAVE = "_FlatMapDataset", "_InterleaveDataset", "_ParallelInterleaveDataset"
MAP, PARALLEL_MAP = "_MapDataset", "_ParallelMapDataset"
FILTER, TAKE_WHILE, SCAN = "_FilterDataset", "_TakeWhileDataset", "_ScanDataset"
BATCH, PARALLEL_BATCH, PADDED_BATCH = "_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset"
REBATCH, UNBATCH, DENSE_TO_RAGGED = "_RebatchDataset", "_UnbatchDataset", "_DenseToRaggedDataset"
DENSE_TO_SPARSE_BATCH, WINDOW, GROUP_BY_WINDOW = "_DenseToSparseBatchDataset", "_WindowDataset", "_GroupByWindowDataset"
SHUFFLE, REPEAT, TAKE, SKIP = "_ShuffleDataset", "_RepeatDataset", "_TakeDataset", "_SkipDataset"
PREFETCH, SHARD, SNAPSHOT = "_PrefetchDataset", "_ShardDataset", "_SnapshotDataset"
RESTRUCTURED, OPTIONS, VARIANT, RANDOM = "_RestructuredDataset", "_OptionsDataset", "_VariantDataset", "_RandomDataset"
DATA_SERVICE = "_DataServiceDatasetV2"
TEXT_LINE, TFRECORD, FIXED_LENGTH = "_TextLineDataset", "_TFRecordDataset", "_FixedLengthRecordDataset"

#: File readers (TF's public per-pattern classes and the private per-file ones they interleave).
FILE_READERS = frozenset({"TextLineDatasetV2", "TFRecordDatasetV2", TEXT_LINE, TFRECORD,
                          "FixedLengthRecordDatasetV2", FIXED_LENGTH})
#: Transformations whose outputs are batches (or windows) of their inputs.
BATCHERS = frozenset({BATCH, PARALLEL_BATCH, PADDED_BATCH, REBATCH, DENSE_TO_RAGGED, DENSE_TO_SPARSE_BATCH, WINDOW})

#: The fields vizdist reads off TF's datasets and traced functions: ``field(ds, "input_dataset")`` reads
#: ``ds._input_dataset`` (each declared in :mod:`.table`, with the classes that set it).
FIELDS = frozenset({
    "input_dataset", "map_func", "predicate", "scan_func", "initial_state", "func", "input_structure",
    "start", "stop", "step", "deterministic", "num_parallel_calls", "structure", "tensors", "cycle_length",
    "block_length", "buffer_size", "compression_type", "filenames", "impl", "datasets", "path", "compression",
    "batch_size", "drop_remainder", "padded_shapes", "padding_values", "batch_sizes", "seed", "seed2", "count",
    "filename", "index", "num_shards", "options_attr", "dataset_to_concatenate", "data_inputs", "selector_input",
    "stop_on_empty_dataset", "reshuffle_each_iteration", "rerandomize", "processing_mode", "address", "job_name",
    "graph", "strategy", "original_dataset", "cloned_datasets",
})
_MISSING = object()


def field(obj: Any, name: str, default: Any = _MISSING) -> Any:
    """TF's private field ``_<name>`` of a dataset (or of its traced function), ``default`` when absent.

    Raises:
        KeyError: ``name`` is not a declared field (:data:`FIELDS`): declare it in :mod:`.table` first.
        AttributeError: ``obj`` has no such field and no ``default`` was given.

    Example:
        >>> import tensorflow as tf
        >>> int(field(tf.data.Dataset.range(2).batch(2), "batch_size"))
        2
    """
    attr = _declared(name)
    return getattr(obj, attr) if default is _MISSING else getattr(obj, attr, default)


def has_field(obj: Any, name: str) -> bool:
    """Whether ``obj`` has TF's field ``_<name>`` (see :func:`field`)."""
    return hasattr(obj, _declared(name))


def _declared(name: str) -> str:
    if name not in FIELDS:
        raise KeyError(f"{name!r} is not a declared field of TF's datasets; declare _{name} in "
                       "vizdist/instrument/tfapi/table.py and add it to tfapi.datasets.FIELDS")
    return "_" + name


def inputs(ds: Any) -> list[Any]:
    """The datasets ``ds`` reads from (TF's ``_inputs()``; ``[]`` where TF cannot say)."""
    try:
        return list(ds._inputs())
    except Exception:
        return []


def shape_tuple(value: Any) -> tuple[Any, ...]:
    """A tensor's shape as a tuple: TF's fast ``_shape_tuple()`` of an eager tensor (no ``TensorShape`` made),
    else ``tuple(value.shape)``; ``()`` for a value without a shape."""
    fast = getattr(value, "_shape_tuple", None)
    if fast is not None:
        return tuple(fast())
    return tuple(value.shape) if hasattr(value, "shape") else ()


def variant_tensor(ds: Any) -> Any:
    """The dataset's variant tensor (what TF's dataset ops take as input)."""
    return ds._variant_tensor


def graph_tensor(ds: Any, *, external_state_policy: Any = "ignore") -> Any:
    """The dataset's serialized ``GraphDef`` as a string tensor (``"ignore"``: external state, such as a
    random op in a map, is no concern when only the structure is read; None: TF's default)."""
    if external_state_policy == "ignore":
        external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    if external_state_policy is None:
        return ds._as_serialized_graph()
    return ds._as_serialized_graph(external_state_policy=external_state_policy)


GraphDef = graph_pb2.GraphDef


def parse_graph(data: bytes) -> graph_pb2.GraphDef:
    """A ``GraphDef`` from its serialized bytes."""
    return graph_pb2.GraphDef.FromString(data)


def restructured(ds: Any, spec: Any) -> Any:
    """``ds`` with its element structure changed to ``spec`` (same flat tensors; no op per element)."""
    return dataset_ops._RestructuredDataset(ds, spec)


def from_variant(variant: Any, element_spec: Any) -> Any:
    """A dataset over a variant tensor (what ``DatasetFromGraph`` returns)."""
    return dataset_ops._VariantDataset(variant, element_spec)


def reader_class(public_name: str) -> Any:
    """TF's per-file reader behind a public file dataset class (``TextLineDatasetV2``, ``TFRecordDatasetV2``)."""
    return readers._TextLineDataset if public_name == "TextLineDatasetV2" else readers._TFRecordDataset


def directed_interleave(selector: Any, data_inputs: list[Any], stop_on_empty_dataset: Any) -> Any:
    """``sample_from_datasets``' dataset over other inputs, with the same selector."""
    return directed_interleave_op._DirectedInterleaveDataset(selector, data_inputs, stop_on_empty_dataset)


def to_tensor_list(spec: Any, value: Any) -> list[Any]:
    """The flat tensors of ``value`` (of structure ``spec``), as tf.data passes them."""
    tensors: list[Any] = structure.to_tensor_list(spec, value)  # TF ships no types: Any, held as a list
    return tensors


def from_tensor_list(spec: Any, tensors: list[Any]) -> Any:
    """The nested value of structure ``spec`` made of flat ``tensors``."""
    return structure.from_compatible_tensor_list(spec, tensors)


def flat_tensor_types(spec: Any) -> Any:
    return structure.get_flat_tensor_types(spec)


def flat_tensor_shapes(spec: Any) -> Any:
    return structure.get_flat_tensor_shapes(spec)


def spec_batched(spec: Any, n: int) -> Any:
    """The spec of ``n`` elements of ``spec`` stacked (TF's ``TypeSpec._batch``)."""
    return spec._batch(n)


def convert_variables_to_tensors(value: Any) -> Any:
    """What ``Dataset.map`` does to a function's return value: variables become tensors."""
    return variable_utils.convert_variables_to_tensors(value)


def constant_value(t: Any) -> Any:
    """A graph tensor's value when TF can compute it statically (None otherwise)."""
    return tensor_util.constant_value(t)


def is_resource_dtype(dtype_enum: int) -> bool:
    """Whether a ``DataType`` enum value (``attr["dtype"].type`` of a node) is ``DT_RESOURCE``."""
    return dtype_enum == types_pb2.DT_RESOURCE


def resource_constant(proto: Any) -> Any:
    """An eager resource tensor holding the handle a ``TensorProto`` describes (a ``Const`` run in a wrapped
    graph function: eager ``Const`` takes no tensor attribute)."""
    def handle() -> Any:
        attrs = {"value": attr_value_pb2.AttrValue(tensor=proto),
                 "dtype": attr_value_pb2.AttrValue(type=types_pb2.DT_RESOURCE)}
        return ops.get_default_graph().create_op("Const", [], [tf.resource], attrs=attrs).outputs[0]

    return tf.compat.v1.wrap_function(handle, [])()


class _SharedShuffleDataset(dataset_ops.UnaryUnchangedStructureDataset):
    """TF's shuffle over ``input_dataset``, with the buffer size, seeds and seed generator of ``like``."""

    def __init__(self, input_dataset: Any, like: Any, generator: Any) -> None:
        self._input_dataset = input_dataset
        self._buffer_size = like._buffer_size
        self._seed, self._seed2 = like._seed, like._seed2
        self._reshuffle_each_iteration = like._reshuffle_each_iteration
        self._name = None
        variant = gen_dataset_ops.shuffle_dataset_v3(
            input_dataset._variant_tensor, buffer_size=self._buffer_size, seed=self._seed, seed2=self._seed2,
            seed_generator=generator, reshuffle_each_iteration=self._reshuffle_each_iteration, **self._common_args)
        super().__init__(input_dataset, variant)


def shuffle_like(input_dataset: Any, like: Any, generator: Any | None) -> Any:
    """``input_dataset`` shuffled as the user's shuffle ``like`` is: same buffer and seeds, and the seed
    generator ``generator`` (None: a dummy one, for a shuffle that does not reshuffle each iteration)."""
    if generator is None:
        generator = gen_dataset_ops.dummy_seed_generator()
    return _SharedShuffleDataset(input_dataset, like, generator)
