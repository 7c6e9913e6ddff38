"""The user's random state, shared with vizdist's tagged copy of a pipeline (so recording changes no order).

A ``shuffle(..., reshuffle_each_iteration=True)`` (and ``Dataset.random(rerandomize_each_iteration=True)``)
keeps its reshuffle sequence in a *seed generator*, a TF resource that the dataset object makes when it is
built (``ShuffleDatasetV3`` in ``shuffle_dataset_op.cc``: given TF's ``DummySeedGenerator`` handle, the op
creates a generator of its own; given the handle of one that exists, it uses that one). Each new iterator
draws the seeds of its pass from it. A rebuilt copy of the dataset makes a *new* generator, so it starts
the sequence over (plain TF's first order), and the user's dataset does not advance while the copy is
read: recording would change what the model trains on.

TF serializes a dataset's graph with the generator's handle as a constant (that is how TF's own graph
rewrites, the default optimizations, keep the reshuffle order): :func:`seed_generator` reads it from the
user's dataset, and :func:`shared_shuffle` builds the tagged copy's shuffle on *that* generator, so the
user's dataset and every copy draw from one sequence and advance together, as plain TF's reads of one
dataset do.

:func:`reshuffles` and :func:`random_in_function` tell where a pipeline holds random state that a rebuilt
copy cannot share (e.g. under a ``cache``, whose filled buffer a copy does not see).

Example:
    >>> import tensorflow as tf                                          # doctest: +SKIP
    >>> user = tf.data.Dataset.range(6).shuffle(6, seed=1)              # doctest: +SKIP
    >>> copy = shared_shuffle(tf.data.Dataset.range(6), user)           # doctest: +SKIP
    >>> [list(d.as_numpy_iterator()) for d in (user, copy)]             # doctest: +SKIP
    [[4, 5, 1, 2, 3, 0], [4, 3, 1, 5, 0, 2]]
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import tensorflow as tf

from vizdist.instrument.core.codes import const_value, tensor_value
from vizdist.instrument.tfapi import datasets as tfd
from vizdist.instrument.tfapi import runtime

__all__ = ["SEEDED_OPS", "random_in_function", "reshuffles", "seed_generator", "shared_shuffle"]

#: Dataset ops whose random sequence lives in a seed generator: op -> the input that holds its handle.
SEEDED_OPS = {"ShuffleDatasetV3": 4, "RandomDatasetV2": 2}

#: Stateful random ops: a function holding one (in a ``map``) draws from that op's kernel.
_RANDOM_OPS = ("RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
               "ParameterizedTruncatedNormal", "RandomShuffle", "Multinomial", "RandomGamma",
               "RandomGammaGrad", "RandomPoisson", "RandomPoissonV2", "RandomCrop")

_handles: dict[int, tuple[Any, Any]] = {}  # id(dataset) -> (weakref to it, handle tensor)
_lock = threading.Lock()


def _graph(ds: Any) -> Any:
    """The dataset's graph as TF serializes it (external state ignored: only the structure is read)."""
    return tfd.parse_graph(tensor_value(tfd.graph_tensor(ds)))


def _handle_proto(graph: Any, op: str) -> Any:
    """The seed generator handle (a ``TensorProto``) of the dataset op the graph returns, or None."""
    nodes = {n.name: n for n in graph.node}
    ret = [n for n in graph.node if n.op == "_Retval" and n.input]
    sink = nodes.get(ret[0].input[0].split(":")[0]) if ret else None
    if sink is None or sink.op != op or len(sink.input) <= SEEDED_OPS[op]:
        return None
    const = nodes.get(sink.input[SEEDED_OPS[op]].split(":")[0])
    if const is None or const.op != "Const" or not tfd.is_resource_dtype(const.attr["dtype"].type):
        return None
    return const.attr["value"].tensor


def seed_generator(ds: Any, op: str = "ShuffleDatasetV3") -> Any:
    """The resource handle of the seed generator the user's dataset ``ds`` draws from, or None.

    ``ds`` is the user's shuffle (``op="ShuffleDatasetV3"``) or ``Dataset.random`` (``"RandomDatasetV2"``)
    dataset. None: not eager (a TF1 graph keeps its reshuffle state per iterator), or TF made the
    dataset another way. Read once per dataset (serializing its graph costs about 25 ms per MB of the
    constants it holds) and kept while the dataset lives.
    """
    if not tf.executing_eagerly():
        return None
    key = id(ds)
    with _lock:
        hit = _handles.get(key)
        if hit is not None and hit[0]() is ds:
            return hit[1]
    try:
        proto = _handle_proto(_graph(ds), op)
    except Exception:  # a dataset TF cannot serialize: no handle (the caller records by content)
        proto = None
    handle = tfd.resource_constant(proto) if proto is not None else None
    with _lock:
        _handles[key] = (weakref.ref(ds, _forgetter(key)), handle)
    return handle


def _forgetter(key: int) -> Any:
    """The weakref callback that drops a dataset's handle when the dataset goes."""
    def forget(_ref: Any) -> None:
        _forget(key)

    return forget


def _forget(key: int) -> None:
    with _lock:
        _handles.pop(key, None)


def shared_shuffle(input_dataset: Any, like: Any) -> tf.data.Dataset | None:
    """``input_dataset`` shuffled exactly as the user's shuffle ``like`` is: same buffer and seeds, and,
    when ``like`` reshuffles each iteration, the same seed generator (None: it cannot be shared)."""
    if not const_value(tfd.field(like, "reshuffle_each_iteration")):
        return tfd.shuffle_like(input_dataset, like, None)
    generator = seed_generator(like)
    return None if generator is None else tfd.shuffle_like(input_dataset, like, generator)


def reshuffles(ds: Any, depth: int = 0) -> bool:
    """True when ``ds`` or a dataset it reads from draws a new random sequence on every iteration: a
    reshuffling ``shuffle``, ``Dataset.random(rerandomize_each_iteration=True)``, or a ``map`` whose
    function holds a stateful random op."""
    if depth > 200:
        return True
    name = type(ds).__name__
    if name == tfd.SHUFFLE and const_value(tfd.field(ds, "reshuffle_each_iteration")):
        return True
    if name == tfd.RANDOM and tfd.field(ds, "rerandomize", None):
        return True
    fn = tfd.field(ds, "map_func", None) or tfd.field(ds, "predicate", None)
    if fn is not None and random_in_function(fn):
        return True
    return any(reshuffles(i, depth + 1) for i in tfd.inputs(ds))


def random_in_function(wrapper: Any) -> bool:
    """True when the traced function of a transformation (``ds._map_func``) holds a stateful random op."""
    try:
        graph = wrapper.function.graph
    except Exception:
        return False
    graphs = [graph, *runtime.function_graphs(graph)]
    for g in graphs:
        g = getattr(g, "graph", g)
        try:
            types = {op.type for op in g.get_operations()}
        except Exception:
            continue
        if types.intersection(_RANDOM_OPS):
            return True
    return False
