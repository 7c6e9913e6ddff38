"""What every tagging handler shares: the builder's state, and the steps several families of ops take.

A handler (one function per kind of ``tf.data`` dataset, in the modules beside this one) rebuilds one
dataset of the user's pipeline with a tag per element; it reads and extends the :class:`BuilderState` it is
given (the sources found so far, the pipeline's ops, its flags) and calls :meth:`BuilderState.build` on its
inputs. :class:`vizdist.instrument.ids.tagging.Builder` is the concrete builder, which dispatches each dataset
to its handler by TF's class (:data:`vizdist.instrument.ids.handlers.HANDLERS`).

Example:
    >>> bits(1000), bits(1), bits(-1)  # bits an index below a cardinality needs (-1: unknown, all local bits)
    (10, 0, 56)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.instrument.core.codes import SOURCE_SHIFT, const_value, tensor_value
from vizdist.instrument.ids import random_state
from vizdist.instrument.tfapi import datasets as tfd

__all__ = ["MAX_SOURCES", "BuilderState", "Handler", "Untaggable", "apply_fn", "bits", "cardinality",
           "deterministic", "is_counter", "is_generator", "offset", "parallel", "py_call", "upstream_has",
           "used_bits"]

MAX_SOURCES = 127
_COUNTER_STOP = int(np.iinfo(np.int64).max)


class Untaggable(Exception):
    """The pipeline holds a transformation vizdist cannot carry a tag through."""


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


def py_call(wrapper: Any, *args: Any) -> Any:
    """Call the user's Python function of a transformation on ``args`` (as tf.data does)."""
    ret = tfd.convert_variables_to_tensors(tfd.field(wrapper, "func")(*args))
    return tuple(ret) if isinstance(ret, list) else ret


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


def deterministic(code: str) -> bool | None:
    """An op's ``deterministic`` attribute (``"true"``, ``"false"``, ``"default"``) as True, False or None."""
    return {"true": True, "false": False}.get(code)


def upstream_has(ds: Any, kinds: frozenset[str], depth: int = 0) -> bool:
    """Whether ``ds`` or a dataset it reads from (at any depth up to 200) is of one of the classes ``kinds``."""
    if depth > 200:
        return False
    if type(ds).__name__ in kinds:
        return True
    return any(upstream_has(i, kinds, depth + 1) for i in tfd.inputs(ds))


def bits(cardinality: int) -> int:
    """Bits an index below ``cardinality`` needs (all local bits when unknown or infinite)."""
    return max(cardinality - 1, 0).bit_length() if cardinality >= 0 else SOURCE_SHIFT


def offset(x: tf.Tensor, off: int) -> tf.Tensor:
    """``x + off``, with no op for source 0 (tf.data runs each op of a map function per element:
    about 3% of a batch-256 ``range`` loop's CPU in ``benchmarks/overhead.py``'s shape)."""
    return x if off == 0 else x + off


def is_counter(ds: Any) -> bool:
    """The position counter ``enumerate`` zips in front of a dataset: ``range(start, int64 max)``
    (TF 2.21 wraps it in a ``replicate_on_split`` rewrite, which leaves a bare variant dataset)."""
    if type(ds).__name__ == tfd.VARIANT:
        return ds.element_spec == tf.TensorSpec([], tf.int64)
    return (type(ds).__name__ == tfd.RANGE and const_value(tfd.field(ds, "stop")) == _COUNTER_STOP
            and const_value(tfd.field(ds, "step")) == 1)


def is_generator(ds: Any) -> bool:
    """Whether ``ds`` is the flat_map ``Dataset.from_generator`` builds (its function is TF's generator reader)."""
    func = tfd.field(tfd.field(ds, "map_func", None), "func", None)
    return getattr(func, "__module__", "").endswith("from_generator_op")


def used_bits(source: dict[str, Any]) -> int:
    """Local bits a source's tags use so far (its id, parts and epoch fields)."""
    fields = [source.get("parts") or {}, source.get("service_worker") or {}, *source.get("epochs", [])]
    return max([source.get("id_bits", SOURCE_SHIFT)] + [f["shift"] + f["bits"] for f in fields if f])


def parallel(ds: Any) -> dict[str, Any]:
    """The ``num_parallel_calls`` and ``deterministic`` of a parallel map or batch (``{}`` for a serial one)."""
    if "Parallel" not in type(ds).__name__:
        return {}
    return {"num_parallel_calls": const_value(tfd.field(ds, "num_parallel_calls")),
            "deterministic": deterministic(tfd.field(ds, "deterministic"))}


class BuilderState:
    """What a walk of the user's dataset graph (sink to sources) has found so far, and the steps its handlers share.

    Subclasses say how one dataset is rebuilt (:meth:`build`).
    """

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

    def build(self, ds: Any) -> tf.data.Dataset:
        """``ds`` rebuilt with a tag per element: ``(tag, value)``."""
        raise NotImplementedError

    def new_source(self, kind: str, **extra: Any) -> int:
        """Register a source of ids (its description in ``info["sources"]``); its index."""
        idx = len(self.sources)
        if idx > MAX_SOURCES:
            raise Untaggable(f"the pipeline has more than {MAX_SOURCES} sources")
        self.sources.append({"index": idx, "kind": kind, **extra})
        return idx

    def enumerate_source(self, ds: tf.data.Dataset, kind: str, **extra: Any) -> tf.data.Dataset:
        """``ds`` as a new source whose ids are its elements' positions."""
        card = cardinality(ds)
        src = self.new_source(kind, id_is="index", cardinality=card, id_bits=bits(card), **extra)
        return ds.enumerate(start=src << SOURCE_SHIFT)

    @staticmethod
    def interleave(ds: tf.data.Dataset, fn: Any, order: dict[str, Any]) -> tf.data.Dataset:
        """``ds.flat_map(fn)`` or ``ds.interleave(fn, ...)``, as ``order`` (:meth:`interleave_order`) says."""
        if order.get("kind") == "flat_map":
            return ds.flat_map(fn)
        return ds.interleave(
            fn, cycle_length=order.get("cycle_length"), block_length=order.get("block_length"),
            num_parallel_calls=order.get("num_parallel_calls"), deterministic=order.get("deterministic"))

    def interleave_order(self, impl: Any) -> dict[str, Any]:
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
            order["deterministic"] = deterministic(tfd.field(impl, "deterministic", None)
                                                   or _op_attr(impl, "deterministic"))
        elif n == "ParallelInterleaveDataset":
            order["num_parallel_calls"] = tfd.field(impl, "cycle_length")
            order["deterministic"] = deterministic(tfd.field(impl, "deterministic", "true"))
        return order

    def mark(self) -> tuple[Any, ...]:
        """Where the builder stands (to :meth:`undo` a sub-build)."""
        return len(self.sources), len(self.ops), len(self.ambiguities), len(self.positional), dict(self.flags)

    def undo(self, mark: tuple[Any, ...]) -> None:
        """Forget what was found since ``mark``."""
        n_src, n_ops, n_amb, n_pos, flags = mark
        del self.sources[n_src:], self.ops[n_ops:], self.ambiguities[n_amb:], self.positional[n_pos:]
        self.flags.clear()
        self.flags.update(flags)


#: A handler: rebuilds one dataset (of the kind it is registered for) with a tag per element.
Handler = Callable[[BuilderState, Any], tf.data.Dataset]
