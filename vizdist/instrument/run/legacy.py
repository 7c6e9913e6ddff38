"""The TF1 Strategy API (``tf.compat.v1.distribute``), traced eagerly and in graph mode (a ``Session``).

TF1 code fed a strategy through iterators, not distributed datasets:

* ``strategy.make_dataset_iterator(dataset)``: TF splits each *global* batch over the replicas
  (TF2 replacement: ``experimental_distribute_dataset``);
* ``strategy.make_input_fn_iterator(input_fn)``: TF calls ``input_fn(InputContext)`` once per
  worker, and the replicas take successive batches of that pipeline (TF2 replacement:
  ``distribute_datasets_from_function``);
* ``strategy.experimental_run(fn, iterator)``: one ``get_next()``, then ``fn`` on every replica
  (TF2 replacement: ``strategy.run(fn, args=(next(iterator),))``).

:func:`trace_tf1` makes those real calls on a ``tf.compat.v1.distribute`` strategy over vizdist's
tagged copy of the pipeline (:mod:`vizdist.instrument.ids.tagging`) and records what every replica got
with the same recorder as :func:`vizdist.trace_distribution`, so the two traces compare row by row.
The tag is stripped before ``step_fn`` sees a value: ``step_fn`` gets exactly what an untraced run
gives it. Eagerly each step is read as it comes. In graph mode
(``tf.compat.v1.disable_eager_execution()``) the graph is built once and run step by step in a
``tf.compat.v1.Session``; each replica's device is where TF placed the op that produced its batch
(read from the session's partition graphs on the first step).

``disable_eager_execution()`` is process-wide and cannot be undone, so a process (a notebook) that
stays eager runs a graph-mode trace in a child process: :func:`run_in_graph_mode`.

TF 2.21's ``tf.compat.v1`` strategies still have every method of the TF1 ``Strategy`` API
(:data:`TF1_METHODS`) except ``experimental_make_numpy_iterator`` and ``update``
(:data:`REMOVED_TF1_METHODS` says what to use instead; a call that needs them gets that message).
Its TF2 strategies (``tf.distribute.MirroredStrategy``, ...) still have ``make_dataset_iterator``,
``make_input_fn_iterator``, ``experimental_run`` and ``unwrap`` too (deprecated, undocumented, defined
on ``StrategyBase``), so :func:`trace_tf1` takes either kind.

Example:
    >>> import vizdist                                                    # doctest: +SKIP
    >>> vizdist.virtual_devices(2)                                        # doctest: +SKIP
    >>> import tensorflow as tf                                           # doctest: +SKIP
    >>> s = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])  # doctest: +SKIP
    >>> t = vizdist.trace_tf1(s, tf.data.Dataset.range(6).batch(4))       # doctest: +SKIP
    >>> t.ids(step=0, replica=1), t.meta["api"], t.meta["execution"]      # doctest: +SKIP
    ([2, 3], 'make_dataset_iterator', 'eager')
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist._files import write_file
from vizdist.errors import TracingError, release_frames
from vizdist.instrument.core import engine
from vizdist.instrument.core.codes import untag
from vizdist.instrument.core.rows import replica_devices
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.cluster import pickle_job
from vizdist.instrument.processes.documents import TaskError, TaskResult
from vizdist.instrument.processes.supervisor import DEFAULT_TIMEOUT, FolderJanitor, Supervisor, temp_folder
from vizdist.instrument.run.distribution import DEFAULT_MAX_STEPS, loop_trace
from vizdist.instrument.run.inputs import (
    Input,
    TaggingFn,
    base_meta,
    check_count,
    input_meta,
    tag_global,
    wrap_tf_error,
)
from vizdist.instrument.run.observers import observers_for
from vizdist.instrument.run.reader import Loop, StepReader, per_replica, result_json
from vizdist.instrument.tfapi import datasets as tfd
from vizdist.instrument.tfapi import runtime
from vizdist.trace import Trace

#: the graph-mode child's key in its job folder's file names (vizdist.instrument.processes.jobfiles)
_CHILD = "graph"

__all__ = ["REMOVED_TF1_METHODS", "TF1_METHODS", "run_in_graph_mode", "trace_tf1"]

#: The TF1 ``Strategy`` methods the reference documents (a .NET binding of the TF1 surface).
TF1_METHODS = ("make_dataset_iterator", "make_input_fn_iterator", "experimental_run",
               "experimental_make_numpy_iterator", "experimental_distribute_dataset", "reduce", "unwrap",
               "update", "scope")
#: TF1 methods a ``tf.compat.v1.distribute`` strategy no longer has in TF 2.21, and what to use instead.
REMOVED_TF1_METHODS = {
    "experimental_make_numpy_iterator": (
        "build the dataset yourself and use the iterator TF1 still has: strategy.make_dataset_iterator("
        "tf.data.Dataset.from_tensor_slices(arrays).batch(global_batch_size)) (TF2: "
        "strategy.experimental_distribute_dataset(the same dataset))"),
    "update": "use strategy.extended.update(var, fn, args=...) (it is still there, in TF1 and TF2)",
}


def _removed_note(name: str) -> str:
    return (f"TF {tf.__version__}'s strategies (the tf.compat.v1 ones too) no longer have {name} (the TF1 API "
            f"had it); {REMOVED_TF1_METHODS[name]}.")


# ---------------------------------------------------------------------------
# checking the arguments
# ---------------------------------------------------------------------------
def _check_strategy(strategy: Any) -> Any:
    """A strategy with TF1's iterator API: any ``tf.compat.v1.distribute`` strategy, and in TF 2.21 also the
    TF2 ones (``StrategyBase`` still defines ``make_dataset_iterator`` & co., deprecated and undocumented)."""
    strategies = (tf.compat.v1.distribute.Strategy, tf.distribute.Strategy)
    if not isinstance(strategy, strategies):
        raise TypeError(
            "strategy must be a tf.compat.v1.distribute.Strategy (e.g. tf.compat.v1.distribute.MirroredStrategy()); "
            f"got {type(strategy).__name__}."
        )
    missing = [m for m in ("make_dataset_iterator", "make_input_fn_iterator", "experimental_run")
               if not hasattr(strategy, m)]
    if missing:
        raise TypeError(
            f"this TensorFlow's {type(strategy).__name__} has no {', '.join(missing)}, which trace_tf1 calls. Use "
            "tf.compat.v1.distribute.MirroredStrategy(...), or trace the TF2 replacement with "
            "vizdist.trace_distribution(strategy, dataset) / (strategy, dataset_fn=...)."
        )
    return strategy


def _check_input(dataset: Any, input_fn: Any) -> None:
    if (dataset is None) == (input_fn is None):
        raise ValueError("give exactly one of dataset (for make_dataset_iterator) or input_fn= (for "
                         "make_input_fn_iterator).")
    if input_fn is not None and not callable(input_fn):
        raise TypeError(f"input_fn must be callable (InputContext -> Dataset); got {type(input_fn).__name__}.")
    leaves = tf.nest.flatten(dataset) if isinstance(dataset, (tuple, list, dict)) else [dataset]
    if dataset is not None and all(isinstance(x, np.ndarray) for x in leaves):
        raise TypeError(f"dataset is NumPy data. {_removed_note('experimental_make_numpy_iterator')}")


def _check_session(session: Any, graph_mode: bool) -> None:
    if session is None:
        return
    if not graph_mode:
        raise ValueError("session= is for graph mode (after tf.compat.v1.disable_eager_execution()); eagerly "
                         "there is no Session to run in. Leave it out.")
    if not isinstance(session, tf.compat.v1.Session):
        raise TypeError(f"session must be a tf.compat.v1.Session; got {type(session).__name__}.")


def _check_knobs(step_fn: Any, timeout: Any) -> None:
    if step_fn is not None and not callable(step_fn):
        raise TypeError(f"step_fn must be callable; got {type(step_fn).__name__}.")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
        raise ValueError(f"timeout must be a number of seconds above 0 (or None to wait for the data); got {timeout!r}.")


def _graph_of(dataset: Any, session: Any) -> tf.Graph | None:
    """The graph to build in (graph mode): the default graph, which must hold the dataset; None eagerly.

    vizdist re-traces the pipeline's functions where it is called, so it must be called in the graph
    context the dataset was built in: entering the graph again (``as_default()``) would change what
    some Python operators mean there (in graph mode ``tensor == 0`` is a tensor only while no graph
    is entered explicitly; inside ``with graph.as_default():`` it compares identity, a Python bool).
    """
    if tf.executing_eagerly():
        return None
    graph = tf.compat.v1.get_default_graph()
    if dataset is not None and tfd.field(dataset, "graph", graph) is not graph:
        raise ValueError("the dataset was built in another graph than the default graph here. Call trace_tf1 "
                         "where you built it (inside the same `with graph.as_default():` block).")
    if session is not None and session.graph is not graph:
        raise ValueError("session= runs another graph than the default graph here. Call trace_tf1 inside "
                         "`with session.graph.as_default():`, where the dataset is built.")
    return graph


# ---------------------------------------------------------------------------
# the iterator and one step of it
# ---------------------------------------------------------------------------
def _make_iterator(strategy: Any, dataset: Any, input_fn: Any, steps: int | None) -> Input:
    """TF1's iterator over the tagged pipeline (``Input.dist`` is the iterator)."""
    with warnings.catch_warnings():
        # graph mode: TF's own input code reads dataset.options() and warns that it does so the legacy way
        warnings.filterwarnings("ignore", message="To make it possible to preserve tf.data options")
        return _make_iterator_quietly(strategy, dataset, input_fn, steps)


def _make_iterator_quietly(strategy: Any, dataset: Any, input_fn: Any, steps: int | None) -> Input:
    if dataset is not None:
        ds, inp = tag_global(strategy, dataset, steps)
        try:
            inp.dist = strategy.make_dataset_iterator(ds)
        except (ValueError, TypeError, IndexError, tf.errors.OpError) as exc:
            raise wrap_tf_error(exc, strategy, "making the dataset iterator") from exc
        return inp
    fn = TaggingFn(input_fn, steps, "input_fn")
    try:
        it = strategy.make_input_fn_iterator(fn)
    except tf.errors.OpError as exc:
        raise wrap_tf_error(exc, strategy, "making the input_fn iterator") from exc
    info, meta, known = fn.summary(strategy)
    return Input(it, info, True, known, meta)


class _Feed:
    """One step at a time from a TF1 iterator: ``get_next()``, or ``experimental_run(step_fn, it)``."""

    def __init__(self, strategy: Any, iterator: Any, *, tagged: bool, step_fn: Callable[..., Any] | None) -> None:
        self.strategy, self.iterator, self.tagged, self.step_fn = strategy, iterator, tagged, step_fn
        self.failed_in = "data"

    def close(self) -> None:
        """Let go of the iterator (the loop that read it has ended)."""
        self.iterator = None

    def _replica_fn(self, element: Any) -> Any:
        """Runs on each replica inside ``experimental_run``: strip the tag, call the user's step."""
        tag, value = untag(element) if self.tagged else (None, element)
        try:
            out = self.step_fn(value)  # type: ignore[misc]  # step_fn is Optional on the class; this path runs only when it is set
        except AttributeError as exc:
            self.failed_in = "step_fn"
            for name in REMOVED_TF1_METHODS:
                if re.search(rf"Strategy\w*' object has no attribute '{name}'", str(exc)) and hasattr(exc, "add_note"):
                    exc.add_note("vizdist: " + _removed_note(name))
            raise
        except BaseException:
            self.failed_in = "step_fn"
            raise
        return (tag, value, out) if self.tagged else (value, out)

    def _outputs(self) -> tuple[Any, Any, Any]:
        """(tags, values, step results) of one step, as the strategy returns them (PerReplica)."""
        if self.step_fn is None:
            element = self.iterator.get_next()
            tags, values = untag(element) if self.tagged else (None, element)
            return tags, values, None
        out = self.strategy.experimental_run(self._replica_fn, self.iterator)
        tags, values, results = out if self.tagged else (None, *out)
        return tags, values, results


class _EagerFeed(_Feed):
    """Eagerly: each step's values are read as they arrive (the recorder of ``trace_distribution``)."""

    def start(self) -> None:
        """Eagerly the iterator is ready as made. (Its ``initialize()`` would *reset* it: a shuffle with
        ``reshuffle_each_iteration`` would then start in its second order, unlike an untraced loop.)"""

    def next_step(self) -> Any:
        try:
            tags, values, results = self._outputs()
        except (tf.errors.OutOfRangeError, StopIteration):
            return None
        return tags, values, None if self.step_fn is None else per_replica(self.strategy, results)

    def record(self, reader: StepReader, step: int, got: Any) -> None:
        reader.record_step(step, *got)


def _rows_fetch(t: Any) -> Any:
    """What to fetch for a replica's shape: the whole shape (dense) or the row count (ragged, sparse)."""
    if isinstance(t, tf.RaggedTensor):
        return t.nrows()
    if isinstance(t, tf.SparseTensor):
        return t.dense_shape
    return tf.shape(t)


def _shape_text(t: Any, fetched: Any) -> str:
    dims = np.atleast_1d(np.asarray(fetched)).tolist()
    if isinstance(t, tf.RaggedTensor):
        dims = [dims[0], *t.shape[1:]]  # ragged dimensions stay None, as eager shapes show them
    return str(tuple(dims))


class _GraphFeed(_Feed):
    """Graph mode: the step is built once; each ``Session.run`` fetches every replica's tags (or
    values), batch shape and step result."""

    def __init__(self, strategy: Any, iterator: Any, *, tagged: bool, step_fn: Callable[..., Any] | None,
                 session: Any) -> None:
        super().__init__(strategy, iterator, tagged=tagged, step_fn=step_fn)
        self.session = session
        tags, values, results = self._outputs()
        local = strategy.experimental_local_results
        leaves = tf.nest.flatten(values)
        self.firsts = list(local(leaves[0]))
        # the op that made each replica's batch (its first component, for ragged and sparse batches)
        self.makers = [tf.nest.flatten(t, expand_composites=True)[0] for t in self.firsts]
        self.devices = [t.device for t in self.makers]  # requested; TF's placement replaces them
        self.fetches: dict[str, Any] = {"rows": [_rows_fetch(t) for t in self.firsts]}
        if tagged:
            self.fetches["tags"] = list(local(tags))
        else:
            self.fetches["values"] = [[local(leaf)[r] for leaf in leaves] for r in range(len(self.firsts))]
        self.results = per_replica(strategy, results) if step_fn is not None else None
        if self.results is not None:
            self.fetches["results"] = [[x for x in tf.nest.flatten(r) if x is not None] for r in self.results]
            self.failed_in = "session"  # a failing op may be the data's or the step's: TF's error as itself
        self.init = iterator.initializer
        self._placed = False

    def start(self) -> None:
        self.session.run(self.init)

    def next_step(self) -> Any:
        opts = meta = None
        if not self._placed:  # once: where TF placed each replica's batch
            opts, meta = tf.compat.v1.RunOptions(output_partition_graphs=True), tf.compat.v1.RunMetadata()
        try:
            got = self.session.run(self.fetches, options=opts, run_metadata=meta)
        except tf.errors.OutOfRangeError:
            return None
        if meta is not None:
            placed = {n.name: n.device for g in meta.partition_graphs for n in g.node}
            self.devices = [placed.get(t.op.name) or d for t, d in zip(self.makers, self.devices, strict=True)]
            self._placed = True
        return got

    def _result(self, r: int, fetched: list[Any]) -> Any:
        assert self.results is not None
        it = iter(fetched)
        leaves = [None if x is None else next(it) for x in tf.nest.flatten(self.results[r])]
        return tf.nest.pack_sequence_as(self.results[r], leaves)

    def record(self, reader: StepReader, step: int, got: dict[str, Any]) -> None:
        for r, device in enumerate(self.devices):
            kw: dict[str, Any] = dict(
                device=device, replica_device=reader.devices[r] if r < len(reader.devices) else device,
                shape=_shape_text(self.firsts[r], got["rows"][r]), dtype=self.firsts[r].dtype.name,
                result=result_json(self._result(r, got["results"][r])) if "results" in got else "")
            if self.tagged:
                reader.rec.add(step, reader.replica_offset + r, tags=got["tags"][r], **kw)
            else:
                ids = reader.ids_by_content([np.asarray(v) for v in got["values"][r]])
                reader.rec.add(step, reader.replica_offset + r, ids=ids, **kw)


class _TF1Loop(Loop):
    """The bounded loop of ``trace_distribution`` (thread, ``timeout``, Ctrl-C) over a :class:`_Feed`."""

    def _run(self, feed: Any, bar: Any) -> None:
        try:
            self._feed_steps(feed, bar)
        except BaseException as exc:  # handed to the caller's thread
            self.error, self.stopped = exc, "error"
        finally:
            feed.close()  # TF's iterator goes here, in this thread (see vizdist.errors.release_frames)
            release_frames(self.error)

    def _feed_steps(self, feed: Any, bar: Any) -> None:
        try:
            with runtime.silence_deprecation():
                feed.start()
        except BaseException:
            self.error_in = "data"
            raise
        while not self.halt.is_set():
            try:
                with runtime.silence_deprecation():
                    got = feed.next_step()
            except BaseException:
                self.error_in = feed.failed_in
                raise
            if got is None or self.halt.is_set():
                return
            with self.lock:
                if self.halt.is_set():
                    return
                feed.record(self.reader, self.steps_run, got)
                self.steps_run += 1
            bar.update(1)
            if self.reached_end():
                return


def _canonical_devices(devices: list[str], session: Any) -> list[str]:
    """Graph mode names devices without the job (``/replica:0/task:0/device:CPU:0``); name them as
    the session lists them (``/job:localhost/replica:0/...``), as eager tensors report them."""
    names = [d.name for d in session.list_devices()]
    return [next((n for n in names if n.endswith(d)), d) for d in devices]


# ---------------------------------------------------------------------------
# the public entry points
# ---------------------------------------------------------------------------
def trace_tf1(
    strategy: Any,
    dataset: tf.data.Dataset | None = None,
    *,
    input_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset] | None = None,
    step_fn: Callable[[Any], Any] | None = None,
    steps: int | None = None,
    session: Any = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    progress: bool | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> Trace:
    """Trace a TF1 input loop: what each replica got from ``make_dataset_iterator`` / ``make_input_fn_iterator``.

    Runs the real TF1 calls on a ``tf.compat.v1.distribute`` strategy, eagerly or (after
    ``tf.compat.v1.disable_eager_execution()``) in graph mode in a ``tf.compat.v1.Session``, and
    records every element's replica, device and step like :func:`vizdist.trace_distribution`
    (``meta["api"]`` names the TF1 call, ``meta["execution"]`` is ``"eager"`` or ``"graph"``).

    Args:
        strategy: a ``tf.compat.v1.distribute`` strategy (``MirroredStrategy``,
            ``OneDeviceStrategy``, ``experimental.CentralStorageStrategy``, ...) or a TF2 one (TF 2.21's
            still have the TF1 iterator methods).
        dataset: the ``tf.data.Dataset`` batched with the *global* batch size, iterated with
            ``strategy.make_dataset_iterator(dataset)``.
        input_fn: instead of ``dataset``, a function of ``InputContext`` returning one pipeline's
            dataset (batched per replica), iterated with ``strategy.make_input_fn_iterator(input_fn)``;
            every ``InputContext`` is recorded in ``meta["input_contexts"]``.
        step_fn: optional ``fn(per_replica_batch)``; each step then runs
            ``strategy.experimental_run(step_fn, iterator)`` (without it: ``iterator.get_next()``).
            It gets the untagged batch; each replica's result goes to ``trace.batches["result"]``.
        steps: stop after this many steps.
        session: graph mode only: the ``tf.compat.v1.Session`` to run in (its graph must hold the
            dataset). None: a new session on the dataset's graph, closed at the end.
        max_steps: safety stop when ``steps`` is None and TF cannot tell where the data ends.
        progress: show a progress bar (None: only for runs known to take 200 steps or more).
        timeout: seconds to wait for the whole run (default ``DEFAULT_TIMEOUT``, 180 s; then the steps
            recorded so far are returned, ``meta["stopped"] == "timeout"``); None waits for the data.

    Returns:
        A :class:`~vizdist.trace.Trace` of kind ``distribution``.

    Raises:
        TypeError: not a strategy, or one without the TF1 iterator methods; NumPy data (TF 2.21 has
            no ``experimental_make_numpy_iterator``); arguments of the wrong kind.
        ValueError: both or neither of ``dataset`` / ``input_fn``; ``session`` eagerly; bad counts.
        TracingError: TensorFlow failed building or reading the iterator (TF's whole message;
            ``.partial_trace`` holds what was recorded), or ``max_steps`` was reached.

    Example:
        >>> s = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])   # doctest: +SKIP
        >>> def input_fn(ctx):                                                     # doctest: +SKIP
        ...     return tf.data.Dataset.range(8).batch(ctx.get_per_replica_batch_size(4))
        >>> t = vizdist.trace_tf1(s, input_fn=input_fn, step_fn=lambda x: tf.reduce_sum(x))  # doctest: +SKIP
        >>> t.ids(step=0, replica=1), t.meta["input_contexts"][0]["num_input_pipelines"]  # doctest: +SKIP
        ([2, 3], 1)
    """
    strategy = _check_strategy(strategy)
    _check_input(dataset, input_fn)
    _check_session(session, not tf.executing_eagerly())
    _check_knobs(step_fn, timeout)
    steps = check_count(steps, "steps", none="for all")
    max_steps = check_count(max_steps, "max_steps")  # type: ignore[assignment]  # check_count returns int | None, and never None for max_steps (no none= given)
    graph = _graph_of(dataset, session)
    with runtime.silence_deprecation():
        return _trace_tf1(strategy, dataset, input_fn, step_fn, steps, session, graph, max_steps=max_steps,
                          progress=progress, timeout=timeout)


def _trace_tf1(strategy: Any, dataset: Any, input_fn: Any, step_fn: Any, steps: int | None, session: Any,
               graph: tf.Graph | None, *, max_steps: int, progress: bool | None, timeout: float | None) -> Trace:
    api = "make_dataset_iterator" if dataset is not None else "make_input_fn_iterator"
    meta = base_meta(strategy, api)
    meta.update(iteration="experimental_run" if step_fn is not None else "get_next",
                execution="eager" if graph is None else "graph", options={}, steps_requested=steps)
    with engine.Run(strategy, api=api, observers=observers_for()) as run:
        inp = _make_iterator(strategy, dataset, input_fn, steps)
        meta.update(input_meta(inp, inp.dist))
        trace = _run_session(run, inp, meta, step_fn, steps, session, graph, max_steps=max_steps,
                             progress=progress, timeout=timeout)
    return run.finish(trace)


def _run_session(run: engine.Run, inp: Input, meta: dict[str, Any], step_fn: Any, steps: int | None, session: Any,
                 graph: tf.Graph | None, *, max_steps: int, progress: bool | None, timeout: float | None) -> Trace:
    """Read every step (in a ``Session`` when ``graph`` is given) and build the trace, or raise with it."""
    strategy = run.strategy
    own = graph is not None and session is None
    session = tf.compat.v1.Session(graph=graph) if own else session
    loop = None
    try:
        if graph is not None:
            feed: Any = _GraphFeed(strategy, inp.dist, tagged=inp.tagged, step_fn=step_fn, session=session)
            meta["devices"] = _canonical_devices(replica_devices(strategy), session)
        else:
            feed = _EagerFeed(strategy, inp.dist, tagged=inp.tagged, step_fn=step_fn)
        reader = run.attach(StepReader(strategy, info=inp.info, tagged=inp.tagged, devices=meta.get("devices")
                                       if graph is not None else None))
        cap = max_steps if steps is None and inp.known_steps is None else None
        loop = _TF1Loop(strategy, reader, steps=steps, cap=cap, step_fn=None, iteration="get_next")
        return loop_trace(run, loop, feed, meta, total=steps if steps is not None else inp.known_steps,
                          progress=progress, timeout=timeout)
    finally:
        if loop is None or loop.stopped not in ("timeout", "interrupted"):
            inp.dist = None  # the loop has ended: TF's iterator goes now, not in a later garbage collection
            if own:
                session.close()  # a run still blocked in TF after a timeout keeps its session


def run_in_graph_mode(fn: Callable[..., Any], *args: Any, devices: int = 4, timeout: float = DEFAULT_TIMEOUT,
                      **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` in a fresh process in TF1 graph mode; return its Trace (or JSON value).

    ``tf.compat.v1.disable_eager_execution()`` is process-wide and cannot be undone, so a notebook
    that stays eager shows a graph-mode run this way: the child splits its CPU into ``devices``
    logical devices (:func:`vizdist.virtual_devices`), turns eager execution off, then calls ``fn``,
    which builds its own strategy and dataset (typically ending in :func:`trace_tf1`). ``fn`` is
    shipped with cloudpickle, so a function defined in the notebook works. Only what ``fn`` returns
    comes back (as JSON): what it prints stays in the child's log.

    Args:
        fn: the function to run; returns a :class:`~vizdist.trace.Trace` or plain JSON data.
        devices: logical CPU devices in the child.
        timeout: seconds before the child is stopped (a :class:`TracingError`).

    Raises:
        TracingError: ``fn`` raised in the child (its type, message and traceback are in the
            message; ``partial_trace`` holds a partial trace it carried), or the timeout passed.

    Example:
        >>> def graph_trace():                                                  # doctest: +SKIP
        ...     s = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        ...     return vizdist.trace_tf1(s, tf.data.Dataset.range(6).batch(4))
        >>> vizdist.run_in_graph_mode(graph_trace).meta["execution"]           # doctest: +SKIP
        'graph'
    """
    from vizdist.instrument.processes.supervisor import check_count, check_seconds

    devices = check_count("devices", devices, minimum=1, owner="run_in_graph_mode")
    timeout = check_seconds("timeout", timeout)
    payload = pickle_job(fn, args, kwargs, takes="run_in_graph_mode takes a callable", to="the child process",
                         hint="Define it as a plain function that builds its own strategy and dataset; "
                              "pass data as arguments.")
    job = temp_folder("vizdist-graph-")
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    janitor = FolderJanitor()  # removes the job folder even if this process is killed
    with contextlib.ExitStack() as stack:
        stack.callback(janitor.close)
        sup = stack.enter_context(Supervisor(job, label="graph-mode", env=env, janitor=janitor))
        write_file(job / jobfiles.JOB, payload)
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        child = sup.spawn("graph", "vizdist.instrument.run._graph_child", [str(job), str(devices)], cwd=os.getcwd(),
                          python_path=paths)
        code = sup.wait_exit(child, timeout=timeout)
        if code is None:
            raise TracingError(f"the graph-mode child did not finish within {timeout:g} s and was stopped. "
                               f"Raise timeout= or trace fewer steps.\n{sup.failure_text(child)}")
        return _child_result(job, sup, child)


def _child_result(job: Path, sup: Supervisor, child: Any) -> Any:
    from vizdist.trace import load_trace

    if jobfiles.TRACE.path(job, _CHILD).exists():
        return load_trace(jobfiles.TRACE.path(job, _CHILD))
    result = jobfiles.RESULT.path(job, _CHILD)
    if result.exists():
        return TaskResult.from_json(result.read_text(encoding="utf-8"), source=str(result)).value
    error = jobfiles.ERROR.path(job, _CHILD)
    if error.exists():
        sup.keep()  # the folder stays for the user, also when the report itself is malformed
        err = TaskError.from_json(error.read_text(encoding="utf-8"), source=str(error))
        partial = Trace.from_dict(err.partial_trace) if err.partial_trace is not None else None
        raise TracingError(f"{err.type} in the graph-mode child: {err.message}\n\n{err.traceback}\n"
                           f"The child's log ({jobfiles.LOG.name(_CHILD)}) and error report "
                           f"({jobfiles.ERROR.name(_CHILD)}) are in {job} (kept for you; the pickled function is "
                           "removed). Delete the folder when you are done.", partial_trace=partial)
    raise TracingError(f"the graph-mode child failed before running fn.\n{sup.failure_text(child)}")


def child_main(job: Path, devices: int) -> int:
    """Body of the child :func:`run_in_graph_mode` starts (``vizdist.instrument.run._graph_child``)."""
    try:
        import cloudpickle

        from vizdist.instrument.core.devices import virtual_devices

        virtual_devices(devices)
        tf.compat.v1.disable_eager_execution()
        fn, args, kwargs = cloudpickle.loads((job / jobfiles.JOB).read_bytes())
        result = fn(*args, **kwargs)
        if isinstance(result, Trace):
            result.save(jobfiles.TRACE.path(job, _CHILD))
        else:
            write_file(jobfiles.RESULT.path(job, _CHILD), TaskResult(value=result).to_json())
        return 0
    except BaseException as exc:
        doc = TaskError.of(exc, task=_CHILD)
        write_file(jobfiles.ERROR.path(job, _CHILD), doc.to_json())
        sys.stderr.write(doc.traceback)
        return 1
