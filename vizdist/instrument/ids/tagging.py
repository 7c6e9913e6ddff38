"""Tag every source element with an id that rides through the user's pipeline.

:func:`tag_dataset` rebuilds a ``tf.data`` pipeline with one extra int64
component per element, the *tag*: ``(tag, value)``. The value part is
computed by the user's own traced functions (the concrete functions TF built
for their ``map``/``filter``), so it is exactly what the untagged pipeline
yields; ``batch`` turns tags into a vector that the strategy splits across
replicas together with the data. vizdist strips the tag before a value
reaches the user's step. What a strategy distributes is :func:`keyed`:
the same tensors nested as ``{"tag": tag, "value": value}``, which TF
repacks per replica at each step more cheaply than a pair.

How a tag is made (``tag = source << 56 | local``):

* ``range`` with a non-negative start and positive step: the value itself
  (plus the source's offset), computed inside the user's own ``map`` when
  one follows, else in a map of its own; for source 0 it is the value as is
  (no op per element).
* ``from_tensor_slices``, ``from_tensors``, generators and other sources:
  the element's index (``enumerate``).
* Text/TFRecord files read through ``flat_map``/``interleave`` (which is how
  ``TextLineDataset(files)`` works): ``file index << 32 | line``, computed
  *inside* the per-file function, so the list of files and the reader stay as
  TF built them and FILE auto-sharding still applies. The file index is the
  file's position in the list of files, found exactly (by comparing the name
  with each listed one, up to ``SCAN_FILES`` files; beyond, a search over 63-bit
  fingerprints of the known names, confirmed by comparing the name), so two
  files never share an id however many there are.

Tag layout (one int64, ``source << 56 | local``; its constants and the reading back are in
:mod:`vizdist.instrument.core.codes`): the low ``id_bits`` of ``local`` are the id;
above them, per source, ``parts`` (the position of an output inside the dataset a
``flat_map``/``interleave`` function returned, decoded as ``source_line``) and one field per
``repeat`` holding the epoch (which repetition; ``scan`` over the position after ``repeat``, exact
whenever one pass has a known length), and, through a tf.data service read, ``service_worker``
(the worker's id + 1, read on the worker; 0: unknown). ``info["sources"]`` records the layout;
:func:`decode_tags` reads it back with numpy.

A read from the tf.data service (``distribute``, ``from_dataset_id``) keeps the real id too: the
dataset it serves (recorded by :mod:`vizdist.instrument.core.service_registry`) is tagged, registered with
the same dispatcher and read with the same arguments (:mod:`vizdist.instrument.ids.own_service`).

Every transformation of the ``tf.data.Dataset`` API keeps the real id
(see the README's generated table and ``tests/instrument/test_transformations.py``), except:
``unique`` and unknown transformations, whose outputs are numbered (``info["provenance"] ==
"positional"``); ``window``, ``group_by_window``/``bucket_by_sequence_length`` and opaque ops above
files or batches, which raise :class:`Untaggable` (vizdist then matches by content); and a
``repeat`` whose pass length is unknown (files, filters), whose epochs are ambiguous
(``"ambiguous"``). ``info["provenance_notes"]`` says why in each case.

Example:
    >>> import tensorflow as tf                      # doctest: +SKIP
    >>> t = tag_dataset(tf.data.Dataset.range(5).map(lambda x: x * 10).batch(2))  # doctest: +SKIP
    >>> [tuple(a.numpy().tolist() for a in e) for e in t.dataset]  # doctest: +SKIP
    [([0, 1], [0, 10]), ([2, 3], [20, 30]), ([4], [40])]
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.instrument.core import service_registry
from vizdist.instrument.core.codes import (
    FILE_UNKNOWN,
    FINGERPRINT_BUCKETS,
    LINE_BITS,
    SOURCE_SHIFT,
    const_value,
    tensor_value,
)
from vizdist.instrument.ids import own_service as service_own
from vizdist.instrument.ids import random_state
from vizdist.instrument.tfapi import datasets as tfd

# decode_tags, keyed, untag, values_are_ids and the layout's constants live in .codes (the read side)
__all__ = ["ROW_BITS", "Tagged", "Untaggable", "cardinality", "tag_batch_rows", "tag_dataset"]

#: Bits of a tag that tell the rows of one source element apart when that element is a batch
#: (:func:`tag_batch_rows`; decoded as ``source_line``).
ROW_BITS = 24
#: Up to this many files, a file's index is found by comparing names (files^2 comparisons in all).
SCAN_FILES = 1024
MAX_SOURCES = 127
_FILE_READERS = tfd.FILE_READERS
_BATCHERS = tfd.BATCHERS


class Untaggable(Exception):
    """The pipeline holds a transformation vizdist cannot carry a tag through."""


@dataclass
class Tagged:
    """A tagged pipeline: ``dataset`` yields ``(tag, value)``; ``info`` says how to read tags."""

    dataset: tf.data.Dataset
    info: dict[str, Any] = field(default_factory=dict)


def cardinality(ds: Any) -> int:
    """``ds.cardinality()`` as a Python int (negative: infinite or unknown), eagerly or in graph mode.

    Example:
        >>> import tensorflow as tf                                           # doctest: +SKIP
        >>> cardinality(tf.data.Dataset.range(10).batch(4)), cardinality(tf.data.Dataset.range(3).repeat())  # doctest: +SKIP
        (3, -1)
    """
    return int(tensor_value(ds.cardinality()))


def _call(wrapper: Any, value: Any) -> Any:
    """Call a dataset transformation's traced function on a (nested) value."""
    args = tfd.to_tensor_list(tfd.field(wrapper, "input_structure"), value)
    out = wrapper.function(*args)
    if not isinstance(out, (list, tuple)):
        out = [out]
    return tfd.from_tensor_list(wrapper.output_structure, list(out))


def apply_fn(wrapper: Any, value: Any) -> Any:
    """Re-trace the user's own Python function on ``value``, as ``Dataset.map`` does.

    Tracing the function inline (rather than calling TF's traced ConcreteFunction) builds the very
    same ops without a function-call op per element, which keeps tagging cheap. Falls back to the
    traced function when the Python function is not available, and calls it where the function holds a
    stateful random op: a random op's seeds come from the graph it was traced in (the global seed then,
    and its place among the graph's random ops), so only the user's own traced graph draws the user's
    numbers.
    """
    func = tfd.field(wrapper, "func", None)
    if func is None or random_state.random_in_function(wrapper):
        return _call(wrapper, value)
    args = value if type(value) is tuple else (value,)  # tf.data's _should_unpack
    ret = tfd.convert_variables_to_tensors(func(*args))
    return tuple(ret) if isinstance(ret, list) else ret  # tf.data's _should_pack


def _op_attr(ds: Any, name: str) -> str:
    """A string attribute of the op that made ``ds`` (``""`` when it cannot be read), from the dataset's
    serialized graph: the op the graph's ``_Retval`` reads."""
    try:
        # external state ignored (a random op in a map is no concern here)
        graph = tfd.parse_graph(tensor_value(tfd.graph_tensor(ds)))
    except Exception:
        return ""
    nodes = {n.name: n for n in graph.node}
    ret = [n for n in graph.node if n.op == "_Retval" and n.input]
    sink = nodes.get(ret[0].input[0].split(":")[0]) if ret else None
    return sink.attr[name].s.decode() if sink is not None and name in sink.attr else ""


def _deterministic(code: str) -> bool | None:
    return {"true": True, "false": False}.get(code)


def _upstream_has(ds: Any, kinds: frozenset[str], depth: int = 0) -> bool:
    if depth > 200:
        return False
    if type(ds).__name__ in kinds:
        return True
    return any(_upstream_has(i, kinds, depth + 1) for i in tfd.inputs(ds))


def _bits(cardinality: int) -> int:
    """Bits an index below ``cardinality`` needs (all local bits when unknown or infinite)."""
    return max(cardinality - 1, 0).bit_length() if cardinality >= 0 else SOURCE_SHIFT


#: Transformations that change neither which file names a list holds nor how many (only their order).
_SAME_NAMES = (tfd.SHUFFLE, tfd.PREFETCH, tfd.OPTIONS)


def _names_source(filenames: Any) -> Any:
    """A dataset holding the same file names as ``filenames`` that can be read without drawing from the
    user's random state (reading a reshuffling list would advance its sequence: the next epoch's file order
    would change), or None when there is none (e.g. ``take`` after a shuffle)."""
    ds = filenames
    while type(ds).__name__ in _SAME_NAMES:
        ds = tfd.field(ds, "input_dataset")
    return None if random_state.reshuffles(ds) else ds


def _known_files(filenames: Any) -> list[str] | None:
    """The list of file names a reader will open, when it can be read up front (else None)."""
    with contextlib.suppress(Exception):
        names_ds = _names_source(filenames)
        card = cardinality(names_ds) if names_ds is not None else -1
        if 0 <= card < FILE_UNKNOWN:  # read as one batch: works eagerly and in graph mode
            names = tensor_value(names_ds.batch(card).get_single_element()) if card else []
            return [f.decode() if isinstance(f, bytes) else str(f) for f in names]
    return None


def _fingerprints(names: Any) -> Any:
    return tf.strings.to_hash_bucket_fast(names, FINGERPRINT_BUCKETS)


def _scan_index_fn(files: list[str]) -> Any:
    """File name -> the position of its first occurrence in ``files``, or ``len(files)``: one comparison
    per listed name, a handful of ops (a traced file run's set-up is about 15 ms shorter than with the
    fingerprint search)."""
    names = tf.constant(files, tf.string, shape=[len(files)])

    @tf.autograph.experimental.do_not_convert
    def file_index(filename: tf.Tensor) -> tf.Tensor:
        hit = tf.where(tf.equal(names, filename))[:, 0]
        return tf.concat([hit, [len(files)]], 0)[0]

    return file_index


def file_index_fn(files: list[str] | None) -> Any:
    """A graph function: file name -> its index in ``files`` (``len(files)`` if absent).

    ``files`` None: a 24-bit hash bucket (may collide; the trace says so). Up to
    :data:`SCAN_FILES` files the name is compared with each listed name; beyond, found by a
    fingerprint search.
    """
    if files is None:
        return lambda f: tf.strings.to_hash_bucket_fast(f, FILE_UNKNOWN)
    if len(files) <= SCAN_FILES:
        return _scan_index_fn(files)
    fps = tensor_value(_fingerprints(files)) if files else np.zeros(0, np.int64)
    order = np.argsort(fps, kind="stable")
    sorted_fps = tf.constant(np.append(fps[order], np.iinfo(np.int64).max), tf.int64)
    sorted_names = tf.constant([files[i] for i in order] + [""], tf.string)
    unknown = len(files)  # decodes as "<file not in the list>"
    sorted_index = tf.constant(np.append(order, unknown).astype(np.int64), tf.int64)

    @tf.autograph.experimental.do_not_convert
    def file_index(filename: tf.Tensor) -> tf.Tensor:
        fp = _fingerprints(tf.reshape(filename, [1]))
        lo = tf.searchsorted(sorted_fps, fp, side="left", out_type=tf.int64)[0]
        hi = tf.searchsorted(sorted_fps, fp, side="right", out_type=tf.int64)[0]
        # Equal fingerprints (vanishingly rare) are resolved by comparing the names themselves; no
        # match at all picks the last entry, ``unknown``. (No tf.cond: its two branch functions made
        # every traced run's set-up about 15 ms slower, when TF optimizes the input graph.)
        hit = tf.where(tf.equal(sorted_names[lo:hi], filename))[:, 0] + lo
        return tf.gather(sorted_index, tf.concat([hit, [unknown]], 0)[0])

    return file_index


_COUNTER_STOP = int(np.iinfo(np.int64).max)
_BY_CONTENT = {
    tfd.GROUP_BY_WINDOW: "group_by_window (and bucket_by_sequence_length) hands each group to a function that "
                             "builds batches vizdist cannot follow element by element",
    tfd.WINDOW: "window yields datasets of elements; what the next function makes of them cannot be "
                      "followed element by element",
}


def _offset(x: tf.Tensor, off: int) -> tf.Tensor:
    """``x + off``, with no op for source 0 (tf.data runs each op of a map function per element:
    about 3% of a batch-256 ``range`` loop's CPU in ``benchmarks/overhead.py``'s shape)."""
    return x if off == 0 else x + off


def _is_counter(ds: Any) -> bool:
    """The position counter ``enumerate`` zips in front of a dataset: ``range(start, int64 max)``
    (TF 2.21 wraps it in a ``replicate_on_split`` rewrite, which leaves a bare variant dataset)."""
    if type(ds).__name__ == tfd.VARIANT:
        return ds.element_spec == tf.TensorSpec([], tf.int64)
    return (type(ds).__name__ == tfd.RANGE and const_value(tfd.field(ds, "stop")) == _COUNTER_STOP
            and const_value(tfd.field(ds, "step")) == 1)


def is_generator(ds: Any) -> bool:
    func = tfd.field(tfd.field(ds, "map_func", None), "func", None)
    return getattr(func, "__module__", "").endswith("from_generator_op")


def _used_bits(source: dict[str, Any]) -> int:
    """Local bits a source's tags use so far (its id, parts and epoch fields)."""
    fields = [source.get("parts") or {}, source.get("service_worker") or {}, *source.get("epochs", [])]
    return max([source.get("id_bits", SOURCE_SHIFT)] + [f["shift"] + f["bits"] for f in fields if f])


def _parallel(ds: Any) -> dict[str, Any]:
    if "Parallel" not in type(ds).__name__:
        return {}
    return {"num_parallel_calls": const_value(tfd.field(ds, "num_parallel_calls")), "deterministic": _deterministic(tfd.field(ds, "deterministic"))}


def py_call(wrapper: Any, *args: Any) -> Any:
    """Call the user's Python function of a transformation on ``args`` (as tf.data does)."""
    ret = tfd.convert_variables_to_tensors(tfd.field(wrapper, "func")(*args))
    return tuple(ret) if isinstance(ret, list) else ret


def _row_splits_dtype(ds: Any) -> Any:
    specs = [s for s in tf.nest.flatten(ds.element_spec) if isinstance(s, tf.RaggedTensorSpec)]
    return specs[0].row_splits_dtype if specs else tf.int64


class Builder:
    """Walks the user's dataset graph (sink to sources) and rebuilds it with a tag per element."""

    def __init__(self) -> None:
        self.sources: list[dict[str, Any]] = []
        self.ops: list[str] = []
        self.ambiguities: list[str] = []
        self.positional: list[str] = []
        self.services: list[dict[str, Any]] = []
        self.shuffle_seeds: list[list[Any]] = []  # each shuffle's (seed, seed2), source first
        self._orders: dict[int, dict[str, Any]] = {}  # id of a flat_map/interleave -> its order
        self.flags: dict[str, Any] = {
            "global_batch_size": None, "drop_remainder": None, "batched": False,
            "filter": False, "repeat": False, "take": False, "skip": False, "shard": False,
            "shuffle": False, "unbatch": False, "opaque": False,
        }

    # -- sources ---------------------------------------------------------
    def _new_source(self, kind: str, **extra: Any) -> int:
        idx = len(self.sources)
        if idx > MAX_SOURCES:
            raise Untaggable(f"the pipeline has more than {MAX_SOURCES} sources")
        self.sources.append({"index": idx, "kind": kind, **extra})
        return idx

    def _enumerate(self, ds: tf.data.Dataset, kind: str, **extra: Any) -> tf.data.Dataset:
        card = cardinality(ds)
        src = self._new_source(kind, id_is="index", cardinality=card, id_bits=_bits(card), **extra)
        return ds.enumerate(start=src << SOURCE_SHIFT)

    def _range_offset(self, ds: Any) -> int | None:
        """Register a ``range`` source whose values can be its ids; return the tag offset (or None)."""
        start, stop, step = const_value(tfd.field(ds, "start")), const_value(tfd.field(ds, "stop")), const_value(tfd.field(ds, "step"))
        label = f"range({start}, {stop}, {step})"
        self.ops.append(label)
        card = cardinality(ds)
        top = start + (card - 1) * step if isinstance(start, int) and isinstance(step, int) and card > 0 else 0
        if isinstance(start, int) and isinstance(step, int) and start >= 0 and step > 0 and top < 1 << SOURCE_SHIFT:
            src = self._new_source("range", id_is="value", label=label, start=start, stop=stop, step=step,
                                   cardinality=card, id_bits=max(top, 0).bit_length())
            return src << SOURCE_SHIFT
        return None

    def _range(self, ds: Any) -> tf.data.Dataset:
        off = self._range_offset(ds)
        if off is not None:
            # One source, tag computed from the value: a zip with a twin range would give the
            # tf.data service two split providers under DYNAMIC sharding (distributed_epoch), and
            # workers would pair tags and values from different splits.
            return ds.map(lambda x: (_offset(x, off), x))
        return self._enumerate(ds, "range", label=self.ops[-1])

    def _tensors(self, ds: Any) -> tf.data.Dataset:
        self.ops.append("from_tensors")
        return self._enumerate(ds, "tensors")

    def _slices(self, ds: Any) -> tf.data.Dataset:
        """``from_tensor_slices`` rebuilt with its ids as one more sliced tensor (no per-element op,
        and each element keeps its id however TF splits the source)."""
        n = cardinality(ds)
        self.ops.append("from_tensor_slices")
        try:
            batched = tf.nest.map_structure(lambda spec: tfd.spec_batched(spec, n), tfd.field(ds, "structure"))
            element = tfd.from_tensor_list(batched, tfd.field(ds, "tensors"))
        except Exception:
            return self._enumerate(ds, "slices")
        src = self._new_source("slices", id_is="index", cardinality=n, id_bits=_bits(n))
        ids = tf.range(n, dtype=tf.int64) + (src << SOURCE_SHIFT)
        return tf.data.Dataset.from_tensor_slices((ids, element))

    def _files(self, ds: Any, filenames: Any, reader: Any, order: dict[str, Any]) -> tf.data.Dataset:
        """Files read one per function call: tag = file index << 32 | line.

        The file index is the file's position in the known list of files, looked up exactly
        (:func:`file_index_fn`), so two files never share an id.
        """
        files = _known_files(filenames)
        exact = files is not None
        file_bits = len(files).bit_length() if files is not None else SOURCE_SHIFT - LINE_BITS
        src = self._new_source("files", id_is="file_line", files=files or [], id_bits=LINE_BITS + file_bits,
                               file_ids="index" if exact else "hash", reader=type(ds).__name__.lstrip("_"))
        if not exact:
            self.ambiguities.append(
                "the list of files could not be read up front, so files are told apart by a 24-bit hash of "
                "their path and two files may share an id")
        off = src << SOURCE_SHIFT
        file_index = file_index_fn(files)

        def read_tagged(filename: tf.Tensor) -> tf.data.Dataset:
            base = off + tf.bitwise.left_shift(file_index(filename), tf.constant(LINE_BITS, tf.int64))
            # zip with a range rather than enumerate().map(): no function call per line (about 7x cheaper)
            return tf.data.Dataset.zip((tf.data.Dataset.range(base, base + (1 << LINE_BITS)), reader(filename)))

        self.ops.append(f"{type(ds).__name__.lstrip('_')}({len(files) if files else '?'} files)")
        return self._interleave(filenames, read_tagged, order)

    @staticmethod
    def _interleave(ds: tf.data.Dataset, fn: Any, order: dict[str, Any]) -> tf.data.Dataset:
        if order.get("kind") == "flat_map":
            return ds.flat_map(fn)
        return ds.interleave(
            fn, cycle_length=order.get("cycle_length"), block_length=order.get("block_length"),
            num_parallel_calls=order.get("num_parallel_calls"), deterministic=order.get("deterministic"))

    def _interleave_order(self, impl: Any) -> dict[str, Any]:
        """How ``impl`` (flat_map or an interleave) orders its outputs; read once per dataset (an
        interleave's ``deterministic`` takes serializing its graph)."""
        if id(impl) not in self._orders:
            self._orders[id(impl)] = self._read_order(impl)
        return self._orders[id(impl)]

    @staticmethod
    def _read_order(impl: Any) -> dict[str, Any]:
        n = type(impl).__name__
        if n == tfd.FLAT_MAP:
            return {"kind": "flat_map"}
        order: dict[str, Any] = {"kind": "interleave", "cycle_length": tfd.field(impl, "cycle_length"),
                                 "block_length": tfd.field(impl, "block_length")}
        if n == tfd.PARALLEL_INTERLEAVE:
            order["num_parallel_calls"] = tfd.field(impl, "num_parallel_calls")
            # Dataset.interleave keeps ``deterministic`` only in its op
            order["deterministic"] = _deterministic(tfd.field(impl, "deterministic", None) or _op_attr(impl, "deterministic"))
        elif n == "ParallelInterleaveDataset":
            order["num_parallel_calls"] = tfd.field(impl, "cycle_length")
            order["deterministic"] = _deterministic(tfd.field(impl, "deterministic", "true"))
        return order

    # -- the walk ---------------------------------------------------------
    def build(self, ds: Any) -> tf.data.Dataset:
        name = type(ds).__name__
        if name in _BY_CONTENT:
            raise Untaggable(_BY_CONTENT[name])
        handler = _HANDLERS.get(name)
        if handler is None or (handler not in _SOURCES and not tfd.has_field(ds, "input_dataset")
                               and name not in _MULTI):
            return self._opaque(ds)
        return handler(self, ds)

    def _file_reader(self, ds: Any) -> tf.data.Dataset:
        cls = tfd.reader_class(type(ds).__name__)
        comp, buf = tfd.field(ds, "compression_type"), tfd.field(ds, "buffer_size")

        def reader(f: tf.Tensor) -> tf.data.Dataset:
            return cls(f, comp, buf)

        return self._files(ds, tfd.field(ds, "filenames"), reader, self._interleave_order(tfd.field(ds, "impl")))

    def _flat_map(self, ds: Any) -> tf.data.Dataset:
        """flat_map / interleave: files (string input) or any function of an element.

        Every output keeps the tag of the element its function was called on, plus its position in
        the dataset the function returned (``source_line``).
        """
        inp, fn, order = tfd.field(ds, "input_dataset"), tfd.field(ds, "map_func"), self._interleave_order(ds)
        if inp.element_spec == tf.TensorSpec([], tf.string):
            return self._files(ds, inp, lambda f: apply_fn(fn, f), order)
        if is_generator(ds):
            self.ops.append("from_generator")
            return self._enumerate(ds, "generator")
        if _upstream_has(inp, _FILE_READERS | _BATCHERS):
            raise Untaggable(f"{type(ds).__name__.lstrip('_')} expands elements that are files' lines or batches")
        first = len(self.sources)
        t = self.build(inp)
        shift = max((_used_bits(s) for s in self.sources[first:]), default=0)
        bits = min(LINE_BITS, SOURCE_SHIFT - shift)
        if bits <= 0:
            raise Untaggable("the source ids leave no room to number the outputs of flat_map/interleave")
        for s in self.sources[first:]:
            s["parts"] = {"shift": shift, "bits": bits}
        mask = (1 << bits) - 1
        self.ops.append(order["kind"])
        self.flags["filter"] = True  # an element may expand to nothing: not every id arrives

        def expand(tag: tf.Tensor, v: Any) -> tf.data.Dataset:
            part = lambda i, *x: (tag + tf.bitwise.left_shift(tf.bitwise.bitwise_and(i, mask), shift),  # noqa: E731
                                  x[0] if len(x) == 1 else x)
            return apply_fn(fn, v).enumerate().map(part)

        return self._interleave(t, expand, order)

    def _map(self, ds: Any) -> tf.data.Dataset:
        inner, fn, kw = tfd.field(ds, "input_dataset"), tfd.field(ds, "map_func"), _parallel(ds)
        if type(inner).__name__ == tfd.SNAPSHOT:
            return self._snapshot(inner)
        if type(inner).__name__ == tfd.RANGE:
            off = self._range_offset(inner)
            if off is not None:
                # Fuse: the tag is computed inside the user's own map, so tagging adds no op.
                self.ops.append("map")
                return inner.map(lambda x: (_offset(x, off), apply_fn(fn, x)), **kw)
            self.ops.pop()
        t = self.build(inner)
        self.ops.append("map")
        return t.map(lambda tag, v: (tag, apply_fn(fn, v)), **kw)

    def _snapshot(self, snap: Any) -> tf.data.Dataset:
        """``snapshot`` is enumerate -> _SnapshotDataset -> map; the tagged stream gets its own snapshot
        (TF keys snapshots by the dataset's fingerprint, so it never reads the user's files)."""
        zipped = tfd.field(snap, "input_dataset")
        if type(zipped).__name__ != tfd.ZIP or not _is_counter(tf.nest.flatten(tfd.field(zipped, "datasets"))[0]):
            return self._opaque(snap)
        t = self.build(tf.nest.flatten(tfd.field(zipped, "datasets"))[1])
        path = const_value(tfd.field(snap, "path"))
        comp = const_value(tfd.field(snap, "compression"))
        self.ops.append("snapshot")
        return t.snapshot(path.decode() if isinstance(path, bytes) else path,
                          compression=comp.decode() if isinstance(comp, bytes) else (comp or "AUTO"))

    def _filter(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        pred = tfd.field(ds, "predicate")
        self.ops.append("filter")
        self.flags["filter"] = True
        return t.filter(lambda tag, v: apply_fn(pred, v))

    def _take_while(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        pred = tfd.field(ds, "predicate")
        self.ops.append("take_while")
        self.flags["take"] = True
        return t.take_while(lambda tag, v: apply_fn(pred, v))

    def _scan(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        fn = tfd.field(ds, "scan_func")
        self.ops.append("scan")

        def step(state: Any, element: Any) -> Any:
            tag, v = element
            new_state, out = py_call(fn, state, v)
            return new_state, (tag, out)

        return t.scan(tfd.field(ds, "initial_state"), step)

    def _batch(self, ds: Any) -> tf.data.Dataset:
        inner, name = tfd.field(ds, "input_dataset"), type(ds).__name__
        bs, drop = const_value(tfd.field(ds, "batch_size")), const_value(tfd.field(ds, "drop_remainder"))
        if type(inner).__name__ == tfd.DENSE_TO_RAGGED:
            t = self.build(tfd.field(inner, "input_dataset"))
            self.flags.update(global_batch_size=bs, drop_remainder=drop, batched=True)
            self.ops.append(f"ragged_batch({bs}, drop_remainder={drop})")
            return t.ragged_batch(tfd.field(ds, "batch_size"), drop_remainder=tfd.field(ds, "drop_remainder"),
                                  row_splits_dtype=_row_splits_dtype(ds))
        t = self.build(inner)
        self.flags.update(global_batch_size=bs, drop_remainder=drop, batched=True)
        if name == tfd.PADDED_BATCH:
            self.ops.append(f"padded_batch({bs}, drop_remainder={drop})")
            return t.padded_batch(tfd.field(ds, "batch_size"), drop_remainder=tfd.field(ds, "drop_remainder"),
                                  padded_shapes=(tf.TensorShape([]), tfd.field(ds, "padded_shapes")),
                                  padding_values=(tf.constant(-1, tf.int64), tfd.field(ds, "padding_values")))
        self.ops.append(f"batch({bs}, drop_remainder={drop})")
        return t.batch(tfd.field(ds, "batch_size"), drop_remainder=tfd.field(ds, "drop_remainder"), **_parallel(ds))

    def _rebatch(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        sizes, drop = const_value(tfd.field(ds, "batch_sizes")), const_value(tfd.field(ds, "drop_remainder"))
        self.flags.update(global_batch_size=sizes if isinstance(sizes, int) else None, drop_remainder=drop)
        self.ops.append(f"rebatch({sizes})")
        return t.rebatch(tfd.field(ds, "batch_sizes"), drop_remainder=tfd.field(ds, "drop_remainder"))

    def _unbatch(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        self.ops.append("unbatch")
        self.flags.update(unbatch=True, batched=False, global_batch_size=None)
        return t.unbatch()

    def _shuffle(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        self.ops.append(f"shuffle({const_value(tfd.field(ds, 'buffer_size'))})")
        self.flags["shuffle"] = True
        # Seeds (0, 0) make TF's shuffle draw a random seed at run time (tensorflow/python/framework/
        # random_seed.py, get_seed: "the C++ ops interpret it as nondeterminism"): each process its own order.
        if const_value(tfd.field(ds, "seed")) == 0 and const_value(tfd.field(ds, "seed2")) == 0:
            self.flags["shuffle_unseeded"] = True
        self.shuffle_seeds.append([const_value(tfd.field(ds, "seed")), const_value(tfd.field(ds, "seed2"))])
        shuffled = random_state.shared_shuffle(t, ds)  # the user's seeds and reshuffle sequence
        if shuffled is None:
            raise Untaggable("a shuffle whose reshuffle sequence vizdist cannot share with its copy (TF made "
                             "it without a seed generator vizdist can read)")
        return shuffled

    def _repeat(self, ds: Any) -> tf.data.Dataset:
        first = len(self.sources)
        t = self.build(tfd.field(ds, "input_dataset"))
        count = const_value(tfd.field(ds, "count"))
        self.ops.append(f"repeat({count})")
        self.flags["repeat"] = True
        return self._epochs(t.repeat(tfd.field(ds, "count")), first, cardinality(t), count)

    def _epochs(self, repeated: tf.data.Dataset, first: int, card: int, count: Any) -> tf.data.Dataset:
        """Add the epoch (which repetition) to every tag: position after repeat // elements per epoch."""
        if count in (0, 1):
            return repeated
        srcs = self.sources[first:]
        shift = max((_used_bits(s) for s in srcs), default=0)
        bits = (count - 1).bit_length() if isinstance(count, int) and count > 1 else SOURCE_SHIFT - shift
        if card < 0 or bits <= 0 or shift + bits > SOURCE_SHIFT:
            why = ("the length of one pass is unknown" if card < 0 else "the ids leave no room for the epoch")
            self.ambiguities.append(
                f"repeat({count}): the trace cannot tell the repetitions of a source element apart ({why}); "
                "equal ids in different epochs are one source element seen again")
            return repeated
        for s in srcs:
            s.setdefault("epochs", []).append(
                {"shift": shift, "bits": bits, "count": count if isinstance(count, int) and count > 1 else None})
        mask, per_epoch = (1 << bits) - 1, max(card, 1)

        def add_epoch(n: tf.Tensor, element: Any) -> Any:
            tag, v = element
            epoch = tf.bitwise.bitwise_and(n // per_epoch, mask)
            return n + 1, (tag + tf.bitwise.left_shift(epoch, shift), v)

        return repeated.scan(tf.constant(0, tf.int64), add_epoch)

    def _count_op(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        kind = {tfd.TAKE: "take", tfd.SKIP: "skip"}[type(ds).__name__]
        self.ops.append(f"{kind}({const_value(tfd.field(ds, 'count'))})")
        self.flags[kind] = True
        return t.take(tfd.field(ds, "count")) if kind == "take" else t.skip(tfd.field(ds, "count"))

    def _prefetch(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        size = const_value(tfd.field(ds, "buffer_size"))
        self.ops.append(f"prefetch({size})")
        # A tensor buffer_size breaks TF's own `buffer_size == AUTOTUNE` check (legacy_autotune).
        return t.prefetch(int(size) if size is not None else tfd.field(ds, "buffer_size"))

    def _cache(self, ds: Any) -> tf.data.Dataset:
        if random_state.reshuffles(tfd.field(ds, "input_dataset")):
            # The user's cache keeps the first pass's random draws; a copy's cache would draw new ones.
            raise Untaggable("a cache over random data (a shuffle, Dataset.random or a random map): the "
                             "elements the user's cache holds cannot be shared with vizdist's copy")
        t = self.build(tfd.field(ds, "input_dataset"))
        fname = const_value(tfd.field(ds, "filename")) or ""
        if isinstance(fname, bytes):
            fname = fname.decode()
        self.ops.append("cache")
        return t.cache(fname + ".vizdist" if fname else "")

    def _shard(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        self.ops.append(f"shard({const_value(tfd.field(ds, 'num_shards'))}, {const_value(tfd.field(ds, 'index'))})")
        # shard(1, 0) keeps every element (an InputContext's shard over one input pipeline): no flag
        self.flags["shard"] = self.flags["shard"] or const_value(tfd.field(ds, "num_shards")) != 1
        return t.shard(tfd.field(ds, "num_shards"), tfd.field(ds, "index"))

    def _restructure(self, ds: Any) -> tf.data.Dataset:
        inner = tfd.field(ds, "input_dataset")
        t = self.build(inner)
        src_spec, dst_spec = inner.element_spec, ds.element_spec

        def restructure(tag: tf.Tensor, *v: Any) -> Any:
            value = v[0] if len(v) == 1 else v
            flat = tfd.to_tensor_list(src_spec, value)
            return tag, tfd.from_tensor_list(dst_spec, flat)

        return t.map(restructure)

    def _options(self, ds: Any) -> tf.data.Dataset:
        t = self.build(tfd.field(ds, "input_dataset"))
        return t.with_options(tfd.field(ds, "options_attr")) if tfd.field(ds, "options_attr") else t

    def _opaque(self, ds: Any) -> tf.data.Dataset:
        name = type(ds).__name__.lstrip("_")
        if _upstream_has(ds, _FILE_READERS):
            raise Untaggable(
                f"{name} sits above a file reader; numbering its output would change how TF shards files"
            )
        if _upstream_has(ds, _BATCHERS):
            raise Untaggable(f"{name} transforms batches; vizdist can only number whole elements")
        self.flags["opaque"] = True
        self.positional.append(name)
        self.ops.append(f"{name} (ids number its output)")
        return self._enumerate(ds, "opaque", op=name)

    def _service(self, ds: Any) -> tf.data.Dataset:
        """A read from the tf.data service: the dataset it serves, tagged, registered and read the same way
        (:mod:`vizdist.instrument.ids.own_service`); numbered by position, and labelled, where that cannot be."""
        read, entry = service_registry.read_of(ds), service_own.describe(ds)
        self.services.append(entry)
        if read is None or read.registration is None:
            return self._service_positional(ds, entry, service_own.NOT_SEEN)
        mark = self._mark()
        up = self.build(read.registration.dataset)
        srcs = self.sources[mark[0]:]
        enumerated = sorted({str(s["kind"]) for s in srcs if s.get("id_is") == "index" and s["kind"] != "slices"})
        if entry["sharding_policy"] == "DYNAMIC" and enumerated:
            self._undo(mark)
            return self._service_positional(ds, entry, service_own.dynamic_note(enumerated))
        where = service_own.worker_field(entry, max((_used_bits(s) for s in srcs), default=0), SOURCE_SHIFT)
        if where is not None and srcs:
            for s in srcs:
                s["service_worker"] = where
            up = service_own.stamp_worker(up, where)
        self.ops.append(f"tf.data service ({entry['processing_mode'] or 'ShardingPolicy.' + entry['sharding_policy']})")
        return service_own.reread(read, up, entry)

    def _mark(self) -> tuple[Any, ...]:
        """Where the builder stands (to :meth:`_undo` a sub-build)."""
        return len(self.sources), len(self.ops), len(self.ambiguities), len(self.positional), dict(self.flags)

    def _undo(self, mark: tuple[Any, ...]) -> None:
        n_src, n_ops, n_amb, n_pos, flags = mark
        del self.sources[n_src:], self.ops[n_ops:], self.ambiguities[n_amb:], self.positional[n_pos:]
        self.flags.clear()
        self.flags.update(flags)

    def _service_positional(self, ds: Any, entry: dict[str, Any], why: str) -> tf.data.Dataset:
        entry["note"] = why
        if not service_own.scalar_elements(ds):
            raise Untaggable(f"a tf.data service read whose elements are not scalars (they may be batches), and {why}")
        self.flags["opaque"] = True
        self.positional.append(f"tf.data service read ({why})")
        self.ops.append("tf.data service (ids number its output)")
        return self._enumerate(ds, "opaque", op="DataServiceDataset")

    # -- several inputs -----------------------------------------------------
    def _zip(self, ds: Any) -> tf.data.Dataset:
        """zip (and enumerate, which zips a counter in front): ids from the first non-counter dataset."""
        struct = tfd.field(ds, "datasets")
        flat = tf.nest.flatten(struct)
        counters = [_is_counter(d) for d in flat]
        if all(counters) or (any(counters) and not (len(flat) == 2 and counters == [True, False])):
            counters = [False] * len(flat)  # only enumerate's own counter is left untagged
        lead = counters.index(False)
        parts = []
        for i, (d, c) in enumerate(zip(flat, counters, strict=True)):
            first = len(self.sources)
            parts.append(d if c else self.build(d))
            for s in self.sources[first:] if i != lead else []:
                s["id_is"] = "not traced (zipped beside the dataset whose ids are traced)"
        self.ops.append("enumerate" if len(flat) == 2 and counters[0] else f"zip (ids from dataset {lead})")

        def pick(*elems: Any) -> Any:
            values = [e if c else e[1] for e, c in zip(elems, counters, strict=True)]
            return elems[lead][0], tf.nest.pack_sequence_as(struct, values)

        return tf.data.Dataset.zip(tuple(parts)).map(pick)

    def _concatenate(self, ds: Any) -> tf.data.Dataset:
        a = self.build(tfd.field(ds, "input_dataset"))
        b = self.build(tfd.field(ds, "dataset_to_concatenate"))
        self.ops.append("concatenate")
        return a.concatenate(b)

    def _directed(self, ds: Any) -> tf.data.Dataset:
        """sample_from_datasets / choose_from_datasets: the same selector over the tagged inputs."""
        parts = [self.build(d) for d in tfd.field(ds, "data_inputs")]
        self.ops.append("sample_from_datasets/choose_from_datasets")
        return tfd.directed_interleave(tfd.field(ds, "selector_input"), parts,
                                                                 tfd.field(ds, "stop_on_empty_dataset"))


_SOURCES = {Builder._range, Builder._slices, Builder._tensors, Builder._file_reader, Builder._service}
_MULTI = {tfd.ZIP, tfd.DIRECTED_INTERLEAVE}
_HANDLERS: dict[str, Any] = {
    tfd.RANGE: Builder._range, tfd.TENSOR_SLICES: Builder._slices,
    tfd.TENSORS: Builder._tensors,
    "TextLineDatasetV2": Builder._file_reader, "TFRecordDatasetV2": Builder._file_reader,
    tfd.ZIP: Builder._zip, tfd.CONCATENATE: Builder._concatenate,
    tfd.DIRECTED_INTERLEAVE: Builder._directed,
    **dict.fromkeys((tfd.FLAT_MAP, tfd.INTERLEAVE, tfd.PARALLEL_INTERLEAVE,
                     "ParallelInterleaveDataset"), Builder._flat_map),
    tfd.MAP: Builder._map, tfd.PARALLEL_MAP: Builder._map,
    tfd.FILTER: Builder._filter, tfd.TAKE_WHILE: Builder._take_while, tfd.SCAN: Builder._scan,
    **dict.fromkeys((tfd.BATCH, tfd.PARALLEL_BATCH, tfd.PADDED_BATCH), Builder._batch),
    tfd.REBATCH: Builder._rebatch, tfd.UNBATCH: Builder._unbatch,
    tfd.SHUFFLE: Builder._shuffle, tfd.REPEAT: Builder._repeat,
    tfd.TAKE: Builder._count_op, tfd.SKIP: Builder._count_op,
    tfd.PREFETCH: Builder._prefetch, "CacheDataset": Builder._cache,
    tfd.SHARD: Builder._shard, tfd.RESTRUCTURED: Builder._restructure,
    tfd.OPTIONS: Builder._options, tfd.DATA_SERVICE: Builder._service,
}


def tag_dataset(dataset: tf.data.Dataset) -> Tagged:
    """Rebuild ``dataset`` so each element is ``(tag, value)``.

    Args:
        dataset: the user's ``tf.data.Dataset``, as built (not distributed).

    Returns:
        :class:`Tagged` with the tagged dataset and an ``info`` dict
        (``sources``, ``pipeline``, ``global_batch_size``, ``drop_remainder``,
        and flags such as ``filter`` / ``repeat`` / ``shuffle``).

    Raises:
        Untaggable: a transformation vizdist cannot carry tags through sits
            above a file reader.

    Example:
        >>> import tensorflow as tf                                  # doctest: +SKIP
        >>> tag_dataset(tf.data.Dataset.range(3)).info["pipeline"]    # doctest: +SKIP
        ['range(0, 3, 1)']
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"tag_dataset takes a tf.data.Dataset; got {type(dataset).__name__}.")
    b = Builder()
    with service_registry.one_run():
        tagged = b.build(dataset)
    notes = [f"{op}: ids number its output elements (their position), not the source elements that made them"
             for op in b.positional] + b.ambiguities
    provenance = "positional" if b.positional else "ambiguous" if b.ambiguities else "tagged"
    info = {"provenance": provenance, "provenance_notes": notes, "sources": b.sources, "pipeline": b.ops, **b.flags,
            "shuffle_seeds": b.shuffle_seeds}
    if b.services:
        info["services"] = b.services
    return Tagged(dataset=tagged, info=info)




def tag_batch_rows(tagged: Tagged) -> Tagged | None:
    """Where each tagged element is a whole batch (one tag, values with a batch dimension: a generator of
    batches, as Keras makes of a Python generator), give each row a tag of its own: the element's tag plus
    the row's place in it (``source_line``), so a strategy splitting the batch splits the tags with it.
    None when the values have no batch dimension to split.

    Example:
        >>> import tensorflow as tf                                                       # doctest: +SKIP
        >>> gen = tf.data.Dataset.from_generator(lambda: iter([[1, 2], [3, 4]]), output_signature=
        ...     tf.TensorSpec([None], tf.int64))                                          # doctest: +SKIP
        >>> rows = tag_batch_rows(tag_dataset(gen))                                       # doctest: +SKIP
        >>> [t.numpy().tolist() for t, _ in rows.dataset]                                 # doctest: +SKIP
        [[0, 16777216], [1, 16777217]]
    """
    leaves = [s for s in tf.nest.flatten(tagged.dataset.element_spec[1]) if hasattr(s, "shape")]
    if not leaves or any(spec.shape.rank in (None, 0) for spec in leaves):
        return None
    sources = tagged.info.get("sources", [])
    if any(src.get("parts") or src.get("epochs") for src in sources):
        return None
    # An element count with no known end (an endless generator) keeps the low bits below the rows' field.
    shift = min(max((_used_bits(src) for src in sources), default=0), SOURCE_SHIFT - ROW_BITS)
    notes = ["each source element is a batch: its rows are told apart in source_line"]
    if any(src.get("id_bits", SOURCE_SHIFT) > shift for src in sources):
        notes.append(f"element numbers are counted modulo 2^{shift}")
    info = dict(tagged.info, sources=[dict(src, id_bits=min(src.get("id_bits", SOURCE_SHIFT), shift),
                                           parts={"shift": shift, "bits": ROW_BITS}) for src in sources])
    info["provenance_notes"] = [*info.get("provenance_notes", []), *notes]
    keep = (((1 << 7) - 1) << SOURCE_SHIFT) | ((1 << shift) - 1)  # the source (< 128) and the element number

    def rows(tag: tf.Tensor, value: Any) -> Any:
        n = tf.shape(tf.nest.flatten(value)[0], out_type=tf.int64)[0]
        row = tf.bitwise.left_shift(tf.range(n, dtype=tf.int64), shift)
        return tf.bitwise.bitwise_and(tag, keep) + row, value

    return Tagged(dataset=tagged.dataset.map(rows), info=info)
