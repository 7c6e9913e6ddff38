"""The declared table of every private TensorFlow/Keras name vizdist uses (one :class:`Symbol` each).

The adapter modules beside this one are the only vizdist code that touches these names; the table says,
for each, where TF or Keras defines it, what vizdist uses it for and the versions it is known in.
:func:`present` checks one entry against the installed TensorFlow and Keras (``tests/instrument/test_tfapi.py``
runs it for every entry, on TF 2.21 and on the oldest supported TF of each Keras with ``make smoke``).

Kinds:

* ``module``: a private module (``tensorflow.python...``, ``keras.src...``), imported;
* ``attr``: a ``_``-prefixed module-level name or class member (a class, function or method), read off
  ``where`` (``"module"`` or ``"module:Class"``);
* ``member``: an instance attribute TF sets on objects of the class ``where`` names (``self._x = ...`` in
  its code or a base class's), read off such objects;
* ``name``: a private name vizdist matches by name only (a Python frame's function name).

Example:
    >>> entry = by_name("_RestructuredDataset")
    >>> entry.kind, entry.where
    ('attr', 'tensorflow.python.data.ops.dataset_ops')
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["KERAS3", "TABLE", "Symbol", "by_name", "present", "resolve"]

Kind = Literal["module", "attr", "member", "name"]

#: The versions a name is known in when it is everywhere vizdist supports.
ALL = "TF 2.15-2.21"
#: Keras 3 only (TF 2.16-2.21): TF 2.15's Keras 2 has no such name (vizdist then records what Keras 2 builds).
KERAS3 = "Keras 3 (TF 2.16-2.21)"


@dataclass(frozen=True)
class Symbol:
    """One private TF/Keras name: what it is, where it lives, what vizdist uses it for, in which versions.

    ``where`` may list several places (``"a | b"``): the name is found if any holds it (a name Keras 3 and
    Keras 2 keep in different modules).
    """

    name: str
    kind: Kind
    where: str
    use: str
    versions: str = ALL

    def places(self) -> list[str]:
        return [w.strip() for w in self.where.split("|")]


def _m(path: str, use: str, versions: str = ALL) -> Symbol:
    return Symbol(path, "module", path, use, versions)


def _a(name: str, where: str, use: str, versions: str = ALL) -> Symbol:
    return Symbol(name, "attr", where, use, versions)


def _f(name: str, where: str, use: str, versions: str = ALL) -> Symbol:
    return Symbol(name, "member", where, use, versions)


_D = "tensorflow.python.data.ops"
_DS = f"{_D}.dataset_ops:DatasetV2"
_SERVICE = "tensorflow.python.data.experimental.ops.data_service_ops"
_ADAPTERS = "keras.src.trainers.data_adapters"

#: Every private TF/Keras name vizdist uses, declared once.
TABLE: tuple[Symbol, ...] = (
    # -- private modules ------------------------------------------------------------------------------
    _m("tensorflow.python.data.ops.dataset_ops", "private dataset classes (_RestructuredDataset, _VariantDataset, "
       "UnaryUnchangedStructureDataset) vizdist builds"),
    _m("tensorflow.python.data.ops.readers", "the per-file reader classes a file dataset interleaves"),
    _m("tensorflow.python.data.ops.directed_interleave_op", "sample_from_datasets' dataset, rebuilt over tagged inputs"),
    _m("tensorflow.python.data.ops.iterator_ops", "OwnedIterator and IteratorSpec, re-classed by a recording"),
    _m("tensorflow.python.data.ops.optional_ops", "the Optional a distributed iterator returns, re-classed"),
    _m("tensorflow.python.data.util.structure", "flat tensor lists <-> nested values of a dataset's element"),
    _m("tensorflow.python.data.experimental.ops.data_service_ops", "tf.data service register/read functions "
       "(patched), sharding policies"),
    _m("tensorflow.python.distribute.input_lib", "TF's distributed datasets and iterators, re-classed by a recording"),
    _m("tensorflow.python.distribute.distribute_lib", "StrategyBase, whose distribute methods a recording patches"),
    _m("tensorflow.python.distribute.coordinator.values", "serialize a dataset to a graph for workers"),
    _m("tensorflow.python.distribute.coordinator.cluster_coordinator", "the closure error classes"),
    _m("tensorflow.python.eager.context", "the eager context: initialized?, op callbacks, NCCL config"),
    _m("tensorflow.python.framework.ops", "the default graph (create a resource constant), colocate_with"),
    _m("tensorflow.python.framework.op_callbacks", "add the debugger's op callback in another thread"),
    _m("tensorflow.python.framework.tensor_util", "constant_value of a graph tensor"),
    _m("tensorflow.python.ops.gen_dataset_ops", "shuffle_dataset_v3 with a shared seed generator, "
       "iterator_get_next_as_optional"),
    _m("tensorflow.python.util.variable_utils", "convert_variables_to_tensors, as Dataset.map does"),
    _m("tensorflow.python.util.deprecation", "silence TF1 deprecation warnings vizdist's own calls raise"),
    _m("tensorflow.python.util.tf_export", "the public name of a strategy class"),
    _m("tensorflow.python.debug.lib.dumping_callback", "the debugger's per-thread op callback"),
    _m("tensorflow.python.debug.lib.debug_events_reader", "DebugDataReader: read the debugger's dumps"),
    _m("tensorflow.python.saved_model.nested_structure_coder", "encode/decode an element_spec"),
    _m("tensorflow.core.framework.graph_pb2", "GraphDef of a serialized dataset"),
    _m("tensorflow.core.framework.attr_value_pb2", "the attributes of a resource Const op"),
    _m("tensorflow.core.framework.types_pb2", "DT_RESOURCE"),
    _m("tensorflow.core.protobuf.struct_pb2", "StructuredValue of an element_spec"),
    _m("tensorflow.core.protobuf.data_service_pb2", "ProcessingModeDef of a service read"),
    _m("keras.src.trainers.data_adapters.data_adapter_utils", "get_tensor_spec of a generator's first batches",
       KERAS3),
    # -- dataset classes, matched by TF's class name (type(ds).__name__) ---------------------------------
    *(_a(cls, f"{_D}.{mod}", f"the {what} a tagged copy is rebuilt from") for cls, mod, what in (
        ("_RangeDataset", "range_op", "range source"), ("_TensorSliceDataset", "from_tensor_slices_op", "slices source"),
        ("_TensorDataset", "from_tensors_op", "from_tensors source"), ("_ZipDataset", "zip_op", "zip (and enumerate)"),
        ("_ConcatenateDataset", "concatenate_op", "concatenate"),
        ("_DirectedInterleaveDataset", "directed_interleave_op", "sample_from_datasets/choose_from_datasets"),
        ("_FlatMapDataset", "flat_map_op", "flat_map"), ("_InterleaveDataset", "interleave_op", "interleave"),
        ("_ParallelInterleaveDataset", "interleave_op", "parallel interleave"), ("_MapDataset", "map_op", "map"),
        ("_ParallelMapDataset", "map_op", "parallel map"), ("_FilterDataset", "filter_op", "filter"),
        ("_TakeWhileDataset", "take_while_op", "take_while"), ("_ScanDataset", "scan_op", "scan"),
        ("_BatchDataset", "batch_op", "batch"), ("_ParallelBatchDataset", "batch_op", "parallel batch"),
        ("_PaddedBatchDataset", "padded_batch_op", "padded_batch"), ("_RebatchDataset", "rebatch_op", "rebatch"),
        ("_UnbatchDataset", "unbatch_op", "unbatch"), ("_DenseToRaggedDataset", "ragged_batch_op", "ragged_batch"),
        ("_DenseToSparseBatchDataset", "sparse_batch_op", "sparse_batch (refused above a batcher)"),
        ("_WindowDataset", "window_op", "window (refused)"), ("_GroupByWindowDataset", "group_by_window_op",
                                                               "group_by_window (refused)"),
        ("_ShuffleDataset", "shuffle_op", "shuffle"), ("_RepeatDataset", "repeat_op", "repeat"),
        ("_TakeDataset", "take_op", "take"), ("_SkipDataset", "skip_op", "skip"),
        ("_PrefetchDataset", "prefetch_op", "prefetch"),
        ("_ShardDataset", "shard_op", "shard"), ("_SnapshotDataset", "snapshot_op", "snapshot"),
        ("_RestructuredDataset", "dataset_ops", "restructured dataset (vizdist also builds one: keyed elements)"),
        ("_OptionsDataset", "dataset_ops", "with_options"),
        ("_VariantDataset", "dataset_ops", "dataset over a variant (vizdist also builds one from a service graph)"),
        ("_RandomDataset", "random_op", "Dataset.random"), ("_TextLineDataset", "readers", "per-file text reader"),
        ("_TFRecordDataset", "readers", "per-file TFRecord reader"),
        ("_FixedLengthRecordDataset", "readers", "per-file fixed-length reader"))),
    _a("_DataServiceDatasetV2", _SERVICE, "a read from the tf.data service"),
    # -- dataset methods and fields --------------------------------------------------------------------------
    _a("_inputs", _DS, "the datasets a dataset reads from (walk the pipeline)"),
    _a("_variant_tensor", _DS, "the dataset's variant, input of a dataset op vizdist makes"),
    _a("_as_serialized_graph", _DS, "the dataset's GraphDef (op attributes, seed generators, rebatch ops)"),
    _a("_common_args", _DS, "the common op arguments of a dataset vizdist builds (shuffle with shared seeds)"),
    _a("_graph", _DS, "the graph a dataset was built in (TF1 graph mode)"),
    _f("_options_attr", _DS, "the options of a with_options dataset"),
    _a("_batch", "tensorflow.python.framework.type_spec:BatchableTypeSpec", "the spec of stacked elements"),
    _a("_shape_tuple", "tensorflow.python.framework.ops:_EagerTensorBase", "an eager tensor's shape, fast"),
    _f("_input_dataset", f"{_D}.map_op:_MapDataset | {_D}.dataset_ops:UnaryDataset", "a transformation's input"),
    _f("_map_func", f"{_D}.map_op:_MapDataset | {_D}.flat_map_op:_FlatMapDataset", "the function of a map/flat_map"),
    _f("_predicate", f"{_D}.filter_op:_FilterDataset", "the function of a filter/take_while"),
    _f("_scan_func", f"{_D}.scan_op:_ScanDataset", "the function of a scan"),
    _f("_initial_state", f"{_D}.scan_op:_ScanDataset", "the initial state of a scan"),
    _f("_func", f"{_D}.structured_function:StructuredFunctionWrapper", "the user's Python function of a transformation"),
    _f("_input_structure", f"{_D}.structured_function:StructuredFunctionWrapper", "the input spec of a traced function"),
    _f("_start", f"{_D}.range_op:_RangeDataset", "range's start"),
    _f("_stop", f"{_D}.range_op:_RangeDataset", "range's stop"),
    _f("_step", f"{_D}.range_op:_RangeDataset", "range's step"),
    _f("_deterministic", f"{_D}.map_op:_ParallelMapDataset", "deterministic= of a parallel map/interleave/batch"),
    _f("_num_parallel_calls", f"{_D}.map_op:_ParallelMapDataset", "num_parallel_calls= of a parallel op"),
    _f("_structure", f"{_D}.from_tensor_slices_op:_TensorSliceDataset", "the element spec of from_tensor_slices"),
    _f("_tensors", f"{_D}.from_tensor_slices_op:_TensorSliceDataset", "the tensors of from_tensor_slices"),
    _f("_cycle_length", f"{_D}.interleave_op:_InterleaveDataset", "cycle_length= of an interleave"),
    _f("_block_length", f"{_D}.interleave_op:_InterleaveDataset", "block_length= of an interleave"),
    _f("_buffer_size", f"{_D}.shuffle_op:_ShuffleDataset | {_D}.prefetch_op:_PrefetchDataset",
       "buffer_size= of a shuffle, prefetch or file reader"),
    _f("_compression_type", f"{_D}.readers:TFRecordDatasetV2", "a file reader's compression"),
    _f("_filenames", f"{_D}.readers:TFRecordDatasetV2", "the dataset of file names a reader reads"),
    _f("_impl", f"{_D}.readers:TFRecordDatasetV2", "the interleave a file reader is made of"),
    _f("_datasets", f"{_D}.zip_op:_ZipDataset", "the datasets zipped"),
    _f("_path", f"{_D}.snapshot_op:_SnapshotDataset", "snapshot's path"),
    _f("_compression", f"{_D}.snapshot_op:_SnapshotDataset", "snapshot's compression"),
    _f("_batch_size", f"{_D}.batch_op:_BatchDataset", "batch_size= of a batch"),
    _f("_drop_remainder", f"{_D}.batch_op:_BatchDataset", "drop_remainder= of a batch"),
    _f("_padded_shapes", f"{_D}.padded_batch_op:_PaddedBatchDataset", "padded_shapes= of padded_batch"),
    _f("_padding_values", f"{_D}.padded_batch_op:_PaddedBatchDataset", "padding_values= of padded_batch"),
    _f("_batch_sizes", f"{_D}.rebatch_op:_RebatchDataset", "batch_sizes= of rebatch"),
    _f("_seed", f"{_D}.shuffle_op:_ShuffleDataset", "a shuffle's seed (copied to vizdist's shuffle)"),
    _f("_seed2", f"{_D}.shuffle_op:_ShuffleDataset", "a shuffle's op-level seed"),
    _f("_reshuffle_each_iteration", f"{_D}.shuffle_op:_ShuffleDataset", "whether a shuffle reshuffles"),
    _f("_rerandomize", f"{_D}.random_op:_RandomDataset", "Dataset.random's rerandomize_each_iteration"),
    _f("_count", f"{_D}.repeat_op:_RepeatDataset | {_D}.take_op:_TakeDataset", "count of repeat/take/skip"),
    _f("_filename", f"{_D}.cache_op:CacheDataset", "a cache's file name"),
    _f("_index", f"{_D}.shard_op:_ShardDataset", "shard's index"),
    _f("_num_shards", f"{_D}.shard_op:_ShardDataset", "shard's num_shards"),
    _f("_dataset_to_concatenate", f"{_D}.concatenate_op:_ConcatenateDataset", "concatenate's second dataset"),
    _f("_data_inputs", f"{_D}.directed_interleave_op:_DirectedInterleaveDataset", "sample_from_datasets' inputs"),
    _f("_selector_input", f"{_D}.directed_interleave_op:_DirectedInterleaveDataset", "its selector"),
    _f("_stop_on_empty_dataset", f"{_D}.directed_interleave_op:_DirectedInterleaveDataset", "its stop rule"),
    _f("_processing_mode", f"{_SERVICE}:_DataServiceDatasetV2", "a service read's processing mode"),
    _f("_address", f"{_SERVICE}:_DataServiceDatasetV2", "a service read's dispatcher address"),
    _f("_job_name", f"{_SERVICE}:_DataServiceDatasetV2", "a service read's job name"),
    # -- tf.distribute ---------------------------------------------------------------------------------------
    _f("_strategy", "tensorflow.python.distribute.input_lib:DistributedDataset", "a distributed dataset's strategy"),
    _f("_original_dataset", "tensorflow.python.distribute.input_lib:DistributedDataset",
       "the dataset a distributed dataset was made from (watch: its service reads)"),
    _f("_cloned_datasets", "tensorflow.python.distribute.input_lib:DistributedDataset",
       "the per-worker datasets (which rebatch op TF inserted)"),
    _a("_OptionalImpl", f"{_D}.optional_ops", "the optional get_next_as_optional returns, re-classed"),
    _a("_type_spec", "tensorflow.python.distribute.input_lib:DistributedDataset",
       "overridden by the recorded subclasses (rebuild the subclass in a tf.function)"),
    _a("_from_components", "tensorflow.python.distribute.input_lib:DistributedDatasetSpec",
       "overridden by the recorded specs"),
    _a("_serialize", "tensorflow.python.distribute.input_lib:DistributedDatasetSpec",
       "overridden by the recorded specs (recordings never compare equal)"),
    _a("_deserialize", "tensorflow.python.distribute.input_lib:DistributedDatasetSpec",
       "overridden by the recorded specs"),
    _a("_next_internal", f"{_D}.iterator_ops:OwnedIterator", "overridden by the recorded OwnedIterator"),
    _f("_element_spec", f"{_D}.iterator_ops:OwnedIterator", "the tagged spec of an OwnedIterator / optional"),
    _f("_iterator_resource", f"{_D}.iterator_ops:OwnedIterator", "an OwnedIterator's resource"),
    _a("_DefaultDistributionStrategy", "tensorflow.python.distribute.distribute_lib",
       "the default strategy's class, named 'default strategy'"),
    _f("_communication_options", "tensorflow.python.distribute.mirrored_strategy:MirroredExtended",
       "the CommunicationOptions a strategy was made with"),
    _a("_get_cross_device_ops", "tensorflow.python.distribute.mirrored_strategy:MirroredExtended",
       "the CrossDeviceOps a strategy picks for a value"),
    _f("_cross_device_ops", "tensorflow.python.distribute.mirrored_strategy:MirroredExtended",
       "the strategy's CrossDeviceOps (when it has no picker)"),
    _f("_reduce_sum_fns", "tensorflow.python.distribute.distribute_lib:StrategyBase",
       "a strategy's cache of traced reduce functions (emptied under the debugger)"),
    _f("_mean_reduce_helper_fns", "tensorflow.python.distribute.distribute_lib:StrategyBase",
       "a strategy's cache of traced mean helpers (emptied under the debugger)"),
    _f("_num_workers", "tensorflow.python.distribute.parameter_server_strategy_v2:ParameterServerStrategyV2Extended",
       "a parameter-server strategy's worker count"),
    _f("_num_ps", "tensorflow.python.distribute.parameter_server_strategy_v2:ParameterServerStrategyV2Extended",
       "a parameter-server strategy's ps count"),
    _f("_cluster", "tensorflow.python.distribute.coordinator.cluster_coordinator:ClusterCoordinator",
       "the coordinator's cluster (its workers)"),
    _a("_process_closure", "tensorflow.python.distribute.coordinator.cluster_coordinator:Worker",
       "wrapped per worker: when a closure runs, where"),
    _a("_on_closure_failure", "tensorflow.python.distribute.coordinator.cluster_coordinator:Worker",
       "wrapped per worker: a closure put back after a worker failure"),
    _f("_output_remote_value_ref", "tensorflow.python.distribute.coordinator.cluster_coordinator:Closure",
       "the RemoteValue a closure fills"),
    _f("_status", "tensorflow.python.distribute.coordinator.remote_value:RemoteValueImpl | "
       "tensorflow.python.distribute.coordinator.values:RemoteValueImpl", "a RemoteValue's status"),
    _f("_error", "tensorflow.python.distribute.coordinator.remote_value:RemoteValueImpl | "
       "tensorflow.python.distribute.coordinator.values:RemoteValueImpl", "a RemoteValue's error"),
    _f("_values", "tensorflow.python.distribute.coordinator.values:PerWorkerValues", "per-worker values"),
    # -- runtime ------------------------------------------------------------------------------------------
    _f("_context_handle", "tensorflow.python.eager.context:Context", "is the eager context initialized?"),
    _f("_functions", "tensorflow.python.framework.ops:Graph", "the functions a graph calls"),
    _f("_jit_compile", "tensorflow.python.eager.polymorphic_function.polymorphic_function:Function",
       "a tf.function's jit_compile (kept on its copy traced under the debugger)"),
    _a("_state", "tensorflow.python.debug.lib.dumping_callback", "the debugger's per-thread state (its callback)"),
    *(Symbol(n, "name", f"{_D}.multi_device_iterator_ops", "names of the host functions of TF's multi-device "
             "iterator: the stage of an op in the debugger's dumps") for n in (
        "_remote_next_func", "_remote_init_func", "_remote_finalize_func", "_next_func", "_init_func",
        "_finalize_func")),
    # -- tf.data service -----------------------------------------------------------------------------------
    _a("_register_dataset", _SERVICE, "patched for the process: which dataset each registration runs"),
    _a("_from_dataset_id", _SERVICE, "patched for the process: what each read asked for"),
    _a("_parse_service", _SERVICE, "(protocol, address) of a service target, as TF parses it"),
    _a("_get_validated_sharding_policy", _SERVICE, "the ShardingPolicy of a processing_mode argument"),
    _a("_stop", "tensorflow.python.data.experimental.service.server_lib:DispatchServer | "
       "tensorflow.python.data.experimental.service.server_lib:WorkerServer", "stop a service server now"),
    # -- Keras ------------------------------------------------------------------------------------------------
    Symbol("_maybe_symbolic_build", "name", "keras.src.backend.tensorflow.trainer",
           "the trainer method that reads one batch to build the model (phase 'build'), matched by frame name",
           KERAS3),
    _a("_standardize_batch", f"{_ADAPTERS}.py_dataset_adapter:PyDatasetAdapter",
       "wrapped per adapter: each PyDataset batch carries its index", KERAS3),
    _f("_inputs", f"{_ADAPTERS}.array_data_adapter:ArrayDataAdapter", "an array adapter's arrays", KERAS3),
    _f("_num_samples", f"{_ADAPTERS}.array_data_adapter:ArrayDataAdapter", "its row count", KERAS3),
    _f("_batch_size", f"{_ADAPTERS}.array_data_adapter:ArrayDataAdapter", "its batch size", KERAS3),
    _f("_size", f"{_ADAPTERS}.array_data_adapter:ArrayDataAdapter", "its batches per pass", KERAS3),
    _f("_shuffle", f"{_ADAPTERS}.array_data_adapter:ArrayDataAdapter", "its shuffle=", KERAS3),
    _f("_first_batches", f"{_ADAPTERS}.generator_data_adapter:GeneratorDataAdapter",
       "the batches Keras peeked at (numbered first)", KERAS3),
    _f("_output_signature", f"{_ADAPTERS}.generator_data_adapter:GeneratorDataAdapter | "
       f"{_ADAPTERS}.py_dataset_adapter:PyDatasetAdapter", "the spec of a generator's/PyDataset's batches", KERAS3),
    # -- the Keras functions a recording hooks (tfapi.keras.KERAS_NAMES), in Keras's private modules ------
    _a("CallbackList.on_epoch_begin", "keras.src.callbacks.callback_list | keras.src.callbacks",
       "hooked for the block: Keras's epoch number (Keras 3 | Keras 2)"),
    _a("CallbackList.on_train_end", "keras.src.callbacks.callback_list | keras.src.callbacks",
       "hooked for the block: fit ends (Keras 3 | Keras 2)"),
    _a("train_validation_split", f"{_ADAPTERS}.array_slicing", "hooked: validation rows keep their number", KERAS3),
    _a("ArrayDataAdapter.get_tf_dataset", f"{_ADAPTERS}.array_data_adapter", "hooked: arrays carry row ids", KERAS3),
    _a("PyDatasetAdapter.get_tf_dataset", f"{_ADAPTERS}.py_dataset_adapter", "hooked: PyDataset batches carry their "
       "index", KERAS3),
    _a("GeneratorDataAdapter.get_tf_dataset", f"{_ADAPTERS}.generator_data_adapter", "hooked: a generator's "
       "batches are numbered", KERAS3),
    _a("get_tensor_spec", f"{_ADAPTERS}.data_adapter_utils", "the spec of a generator's first batches", KERAS3),
)


def by_name(name: str, where: str | None = None) -> Symbol:
    """The table's entry for ``name`` (``where``: the one of several entries of that name whose places
    include it).

    Raises:
        KeyError: the name is not declared.
    """
    for entry in TABLE:
        if entry.name == name and (where is None or any(w.startswith(where) for w in entry.places())):
            return entry
    raise KeyError(f"{name!r} is not declared in vizdist/instrument/tfapi/table.py")


def resolve(place: str) -> Any:
    """The object ``"module"`` or ``"module:Class"`` names (ImportError / AttributeError when absent)."""
    module, _, qualname = place.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        obj = getattr(obj, part)
    return obj


def _sets(cls: type, name: str) -> bool:
    """Whether ``cls`` (or a base) defines ``name`` or assigns ``self.<name>`` in its code."""
    pattern = re.compile(rf"\bself\.{re.escape(name)}\b")
    for c in inspect.getmro(cls):
        if name in vars(c):
            return True
        try:
            if pattern.search(inspect.getsource(c)):
                return True
        except (OSError, TypeError):
            continue
    return False


def _found(entry: Symbol, place: str) -> bool:
    try:
        if entry.kind == "module":
            importlib.import_module(place)
            return True
        owner = resolve(place)
    except (ImportError, AttributeError):
        return False
    if entry.kind == "attr":  # a dotted name: a class's member
        try:
            for part in entry.name.split("."):
                owner = getattr(owner, part)
        except AttributeError:
            return False
        return True
    if entry.kind == "member":
        return isinstance(owner, type) and _sets(owner, entry.name)
    try:  # "name": the name appears in the module's code
        return re.search(rf"\b{re.escape(entry.name)}\b", inspect.getsource(owner)) is not None
    except (OSError, TypeError):
        return False


def present(entry: Symbol) -> bool:
    """Whether the installed TensorFlow/Keras has ``entry`` in one of its places.

    Example:
        >>> present(by_name("_RestructuredDataset"))
        True
    """
    return any(_found(entry, place) for place in entry.places())
