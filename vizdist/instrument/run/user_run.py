"""Record the run the user executes: ``with vizdist.record() as rec:`` around unchanged code.

Inside the block, every ``strategy.experimental_distribute_dataset(ds)`` and
``strategy.distribute_datasets_from_function(fn)`` (Keras ``fit`` / ``evaluate`` / ``predict``
call the first themselves) distributes a *tagged* copy of the dataset with TF's own code, and hands
back TF's own distributed dataset turned into a recording subclass
(:mod:`vizdist.instrument.run.recorded_input`): it strips the tag before the user's code sees a value
and reports what each replica got at each step, eagerly or from inside a ``tf.function``.

Keras's inputs that are not datasets (arrays, ``PyDataset``) are recorded in Keras's own pipeline
(:mod:`vizdist.instrument.run.keras_inputs`). Only the thread that opened the block is recorded: a
plain run in another thread goes through TF and Keras untouched.

Each ``iter()`` of a recorded dataset starts a *pass*. A pass belongs to a phase, read from where
it was started: ``train`` (inside Keras ``fit``), ``validation`` (``evaluate`` called by ``fit``),
``evaluate``, ``predict``, ``build`` (Keras 3's ``_maybe_symbolic_build``: before ``fit`` and each
``evaluate`` run their steps, Keras reads one batch from a fresh pass to learn the input shapes and
drops it; it is a real read, and it advances a reshuffling dataset's order), or ``loop`` (the user's
own code). ``epoch`` is the user's epoch (:mod:`vizdist.instrument.run.epochs`: Keras's epoch number in
``fit``, each dataset's own pass count in a loop); ``step`` numbers the steps of the whole block
(unique, in the order they ran) and ``epoch_step`` the steps within an epoch.

Example:
    >>> import vizdist                                                    # doctest: +SKIP
    >>> with vizdist.record() as rec:                                     # doctest: +SKIP
    ...     model.fit(train_ds, validation_data=val_ds, epochs=2)
    >>> rec.trace.elements[["phase", "epoch", "epoch_step", "replica", "source_id"]]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
import weakref
from types import FrameType
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

from vizdist._parts import concat_frames
from vizdist.errors import RecordingWarning, TracingError
from vizdist.instrument.core import engine, service_registry
from vizdist.instrument.run import recorded_input
from vizdist.instrument.run.dataset_record import PHASES, DatasetRecord, phase_now
from vizdist.instrument.run.epochs import Passes
from vizdist.instrument.run.feed import ELEMENT_COLUMNS, as_trace, per_batch, trace_columns
from vizdist.instrument.run.inputs import TaggingFn, base_meta, input_meta, tag_global
from vizdist.instrument.run.keras_inputs import KerasHooks, keras_source
from vizdist.instrument.run.observers import observers_for
from vizdist.instrument.run.stream import PART_ELEMENTS, PartStream
from vizdist.instrument.tfapi import runtime
from vizdist.trace import Trace

# DatasetRecord, phase_now and PHASES live in dataset_record.py; importable from here too.
__all__ = ["PHASES", "TIMING_NOTE", "DatasetRecord", "Recording", "RecordingWarning", "phase_now", "record"]

#: Steps the live explorer (``rec.show()``) holds: the newest ones.
RECENT_STEPS = 50
_active: Recording | None = None
_patch_lock = threading.Lock()


class Recording:
    """What :func:`record` returns: the block's datasets, passes and steps, and their ``.trace``.

    Use it as a context manager (``with vizdist.record() as rec:``); ``rec.trace`` is the
    :class:`~vizdist.trace.Trace` of everything distributed inside the block (inside it, the steps so far);
    ``rec.show()`` displays an explorer that follows the block as it runs; with ``path=`` the steps go to
    disk in parts as they are recorded (:mod:`vizdist.instrument.run.stream`).
    """

    def __init__(self, *, placement: bool | str = False, timing: bool = False, path: Any = None,
                 part_elements: int = PART_ELEMENTS) -> None:
        self.run = engine.Run(None, api="record", observers=observers_for(
            timing=timing, placement=placement, users_code=True, note=TIMING_NOTE))
        self.datasets: list[DatasetRecord] = []
        self.epochs = Passes()
        #: Held while a step is recorded, a part written or a snapshot taken: each sees whole steps.
        self.step_lock = threading.RLock()
        #: ``record(path=...)``: where the parts go (None: the recording stays in memory).
        self.stream = PartStream(path, part_elements=part_elements) if path is not None else None
        self._buffered = 0  # elements recorded since the last part
        self._recent: Trace | None = None  # the newest steps of the last part written (for the live view)
        #: How the block ended, if by an exception (``meta["ended_by"]``).
        self.error: str | None = None
        self.active = False
        self.ended = False
        self.thread: threading.Thread | None = None  # the thread that opened the block: the one recorded
        self.notes: list[str] = []  # what was not recorded, and why (goes to meta["note"])
        self.unrecorded: list[str] = []  # what the block read but could not record (meta["not_recorded"])
        self.hooks = KerasHooks(self)
        self._lock = threading.Lock()
        self._saved: dict[Any, Any] = {}
        self._handed_out: weakref.WeakSet[Any] = weakref.WeakSet()  # plain datasets the block itself gave out
        self._trace: Trace | None = None

    # -- the block --------------------------------------------------------------
    def __enter__(self) -> Recording:
        global _active
        with _patch_lock:
            if _active is not None:
                raise TracingError("vizdist.record() blocks do not nest: one is already recording in this process.")
            if not tf.executing_eagerly():
                raise TracingError(
                    "vizdist.record() needs eager execution (TF2's default); it is off in this process "
                    "(tf.compat.v1.disable_eager_execution()). Use vizdist.trace_tf1 for a Session program.")
            _active = self
            self.thread = threading.current_thread()
            self._patch()
        try:
            self.run.__enter__()  # placement: TF's debugger on for the whole block
        except BaseException:
            self._end()
            raise
        self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        with self.step_lock:  # a step being recorded in another thread finishes first
            self.active, self.ended = False, True
        if exc[0] is not None:
            self.error = f"{exc[0].__name__}: {str(exc[1]).splitlines()[0][:200] if str(exc[1]) else ''}"
        try:
            self.run.__exit__(*exc)
        finally:
            self._end()
            if self.stream is not None:
                self._last_part(failing=exc[0] is not None)
        if exc[0] is None:
            self._warn_unrecorded()

    def _last_part(self, *, failing: bool) -> None:
        """At block exit: the last part (the observers' rows too). Its failure does not hide the user's error."""
        try:
            with self.step_lock:
                self._write_part(ended=True)
        except Exception as err:
            if not failing:
                raise
            warnings.warn(f"vizdist.record(path=...): the block's last part could not be written ({err}); the parts "
                          "before it are whole.", RecordingWarning, stacklevel=3)

    def owns_thread(self) -> bool:
        """True in the thread that opened the block (the only one recorded)."""
        return self.active and threading.current_thread() is self.thread

    @property
    def timer(self) -> Any:
        """The block's timing recorder (None without ``timing=True``)."""
        return self.run.timer

    def _end(self) -> None:
        global _active
        with _patch_lock:
            self._unpatch()
            _active = None

    def _patch(self) -> None:
        base: Any = runtime.distribute_base()
        self._saved = {(base, "experimental_distribute_dataset"): base.experimental_distribute_dataset,
                       (base, "distribute_datasets_from_function"): base.distribute_datasets_from_function}
        original_ds, original_fn = self._saved.values()

        def experimental_distribute_dataset(strategy: Any, dataset: Any, options: Any = None) -> Any:
            if _from_vizdist() or not self.owns_thread():
                return original_ds(strategy, dataset, options)
            return self.distribute_dataset(original_ds, strategy, dataset, options)

        def distribute_datasets_from_function(strategy: Any, dataset_fn: Any, options: Any = None) -> Any:
            if _from_vizdist() or not self.owns_thread():
                return original_fn(strategy, dataset_fn, options)
            return self.distribute_function(original_fn, strategy, dataset_fn, options)

        base.experimental_distribute_dataset = experimental_distribute_dataset
        base.distribute_datasets_from_function = distribute_datasets_from_function
        for cls in recorded_input.TF_DISTRIBUTED_DATASETS:
            self._saved[(cls, "__iter__")] = cls.__iter__
            cls.__iter__ = self._iter_seen(cls, cls.__iter__)
        self.hooks.install()

    def _iter_seen(self, cls: type, original: Any) -> Any:
        """``__iter__`` of TF's distributed datasets: notes one that was distributed outside the block."""
        def __iter__(dist: Any) -> Any:
            if type(dist) is cls and self.owns_thread() and dist not in self._handed_out:
                self._not_recorded(f"a {cls.__name__} distributed before the block (or by another thread) was "
                                   "read in it: distribute (or build) the dataset inside `with vizdist.record():`")
            return original(dist)

        return __iter__

    def _unpatch(self) -> None:
        self.hooks.remove()
        for (owner, name), fn in self._saved.items():
            setattr(owner, name, fn)
        self._saved = {}

    def _not_recorded(self, what: str) -> None:
        with self._lock:
            if what not in self.unrecorded:
                self.unrecorded.append(what)

    def _warn_unrecorded(self) -> None:
        """At block exit: a warning naming what was read but not recorded (and an empty block)."""
        steps = self.epochs.n_steps
        what = list(self.unrecorded) + list(self.notes)
        if steps == 0 and not what:
            what = ["no dataset was distributed and read inside the block (TF's default strategy hands the "
                    "dataset to your loop as it is: iterate strategy.experimental_distribute_dataset(ds), or "
                    "run Keras fit / evaluate / predict inside the block)"]
        if what:
            head = "recorded nothing" if steps == 0 else f"recorded {steps} steps, but not everything it read"
            warnings.warn(f"vizdist.record(): the block {head}: " + "; ".join(what), RecordingWarning, stacklevel=3)

    # -- distributing -------------------------------------------------------------
    def distribute_dataset(self, original: Any, strategy: Any, dataset: Any, options: Any) -> Any:
        """``experimental_distribute_dataset`` of a tagged copy, as TF's own recorded subclass."""
        if not isinstance(dataset, tf.data.Dataset):
            return original(strategy, dataset, options)  # TF says what is wrong, unchanged
        keras_info = keras_source(dataset)
        if keras_info is not None:  # Keras's own pipeline, ids in it already
            return self._distribute_tagged(original, strategy, dataset, options, keras_info)
        try:
            ds, inp = tag_global(strategy, dataset, None, ids_in_values=True, endless_ok=True)
            dist = original(strategy, ds, options)
        except Exception as exc:  # the user's run goes on as written, unrecorded; TF's own errors stay TF's
            return self._unrecorded(exc, lambda: original(strategy, dataset, options))
        meta = base_meta(strategy, "experimental_distribute_dataset")
        meta.update(options=_options(options), steps_per_pass=inp.known_steps)
        sink = self._new_dataset(strategy, inp.info, meta, tagged=inp.tagged, ids_in_values=inp.ids_in_values,
                                 source=id(dataset))
        inp.dist = dist
        if isinstance(dist, tf.data.Dataset):  # the default strategy hands the dataset itself to its replica
            values = dataset if inp.ids_in_values or not inp.tagged else ds.map(lambda e: e["value"])
            meta.update(input_meta(inp, dataset))
            return recorded_input.plain(ds, values, sink)
        meta.update(input_meta(inp, dist))
        return recorded_input.recorded(dist, sink)

    def _distribute_tagged(self, original: Any, strategy: Any, dataset: Any, options: Any,
                           info: dict[str, Any]) -> Any:
        """Distribute a dataset whose elements are ``{"tag", "value"}`` already (a Keras adapter's)."""
        from vizdist.instrument.run.inputs import Input

        try:
            dist = original(strategy, dataset, options)
        except Exception as exc:
            return self._unrecorded(exc, lambda: original(strategy, dataset, options))
        meta = base_meta(strategy, "experimental_distribute_dataset")
        meta.update(options=_options(options), steps_per_pass=info.get("steps_per_pass"))
        inp = Input(dist, info, True, None, {"global_batch_size": info.get("global_batch_size"),
                                             "input_contexts": [], "element_spec": str(dataset.element_spec)})
        sink = self._new_dataset(strategy, info, meta, tagged=True, ids_in_values=False, source=id(dataset))
        if isinstance(dist, tf.data.Dataset):
            meta.update(input_meta(inp, dataset))
            return recorded_input.plain(dataset, dataset.map(lambda e: e["value"]), sink)
        meta.update(input_meta(inp, dist))
        return recorded_input.recorded(dist, sink)

    def distribute_function(self, original: Any, strategy: Any, dataset_fn: Any, options: Any) -> Any:
        """``distribute_datasets_from_function`` with every pipeline tagged, as TF's own recorded subclass."""
        if not callable(dataset_fn):
            return original(strategy, dataset_fn, options)
        traced_fn = TaggingFn(dataset_fn, None, endless_ok=True)
        try:
            with service_registry.one_run():
                dist = original(strategy, traced_fn, options)
        except Exception as exc:
            return self._unrecorded(exc, lambda: original(strategy, dataset_fn, options))
        info, fn_meta, _ = traced_fn.summary(strategy)
        meta = base_meta(strategy, "distribute_datasets_from_function")
        meta.update(fn_meta, options=_options(options))
        sink = self._new_dataset(strategy, info, meta, tagged=True, ids_in_values=False, source=id(dataset_fn))
        if isinstance(dist, tf.data.Dataset):
            return recorded_input.plain(dist, dist.map(lambda e: e["value"]), sink)
        return recorded_input.recorded(dist, sink)

    def _unrecorded(self, exc: BaseException, plain: Any) -> Any:
        """vizdist could not distribute a tagged copy: do what the user's code asked, untouched, and say so.

        If TF refuses the user's own dataset too, that (TF's) error is what the user sees.
        """
        result = plain()
        with contextlib.suppress(TypeError):  # read in the block: not one distributed before it
            self._handed_out.add(result)
        self.notes.append(f"a dataset distributed in the block was not recorded: vizdist could not follow it "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                          "your code ran on it unchanged")
        return result

    def _new_dataset(self, strategy: Any, info: dict[str, Any], meta: dict[str, Any], *, tagged: bool,
                     ids_in_values: bool, source: Any = None) -> DatasetRecord:
        with self._lock:
            sink = DatasetRecord(self, strategy, info, meta, tagged=tagged, ids_in_values=ids_in_values,
                                 source=source)
            self.datasets.append(sink)
        self.run.attach(sink.reader)  # placement: each eager step's batches' devices, NaN/Inf rows
        return sink

    # -- passes and steps ---------------------------------------------------------
    def new_pass(self, sink: DatasetRecord, phase: str) -> None:
        self.epochs.new_pass(sink.index, phase, source=sink.source)

    def begin_step(self, sink: DatasetRecord) -> int:
        """The block's next step number, counted in the pass ``sink`` is reading."""
        return self.epochs.begin_step(sink.index)

    def step_done(self, n_elements: int) -> None:
        """After each step, the step lock held: with ``path=``, the steps held go into a part when one is due."""
        self._buffered += n_elements
        if self.stream is not None and self.stream.due(self._buffered):
            self._write_part(ended=False)

    def _write_part(self, *, ended: bool) -> None:
        """Every step held in memory into the next part on disk, then forget them (the step lock held)."""
        assert self.stream is not None
        first, steps = self.epochs.first_kept, self.epochs.n_steps
        part = build_trace(self, drain=True, finish=ended)
        keep = part.batches["step"].drop_duplicates().nlargest(RECENT_STEPS) if len(part.batches) else []
        self._recent = Trace(elements=part.elements[part.elements["step"].isin(keep)],
                             batches=part.batches[part.batches["step"].isin(keep)], meta=part.meta)
        self.stream.write(part, strategy=self.datasets[0].strategy if self.datasets else None, first_step=first,
                          steps=steps, ended=ended, error=self.error if ended else None)
        self.epochs.drop_before(steps)
        self._buffered = 0

    # -- the trace ----------------------------------------------------------------
    @property
    def trace(self) -> Trace:
        """The :class:`~vizdist.trace.Trace` of every step read inside the block.

        Inside the block, a consistent snapshot of the steps so far (each step whole, with its phase and
        epoch; the placement and timing observers add their rows once the block ends); after it, the whole
        block. With ``path=``, read from the parts on disk (and the steps not yet written).
        """
        if not self.ended:
            return self.snapshot()
        if self._trace is None:
            self._trace = build_trace(self) if self.stream is None else self.stream.load()
        return self._trace

    def snapshot(self) -> Trace:
        """The steps recorded so far, each whole (see :attr:`trace`)."""
        with self.step_lock:
            memory = build_trace(self, finish=False)
            parts = self.stream.parts if self.stream is not None else 0
        memory = Trace(elements=memory.elements, batches=memory.batches, events=memory.events,
                       meta={**memory.meta, "stopped": "running"})
        return memory if self.stream is None else self.stream.load(parts=parts, memory=memory)

    def recent(self, after: int = -1, max_steps: int = RECENT_STEPS) -> tuple[Trace | None, dict[str, Any]]:
        """The newest steps after step ``after`` (at most ``max_steps``), and the block's status. Reads only
        those steps, however long the run (the rows of :meth:`recent_steps`, as a trace).

        Returns:
            ``(trace of those steps, or None when there is none, {"steps": steps so far, "ended": bool,
            "error": how the block ended or None})``.
        """
        cols, status = self._newest(after, max_steps)
        return (None if cols is None else as_trace(cols, strategy=self._strategy_name())), status

    def recent_steps(self, after: int = -1, max_steps: int = RECENT_STEPS) -> tuple[dict[str, Any] | None,
                                                                                      dict[str, Any]]:
        """What the live explorer (:meth:`show`) follows: the rows of :meth:`recent` as plain per-batch lists,
        without building a trace (each refresh of a running ``fit`` costs well under a millisecond of pandas).

        Returns:
            ``({"step", "replica", "device", "n_elements", "phase", "epoch", "epoch_step": one value per
            batch; "ids", "sources", "files", "lines": each batch's source ids, their sources, files and lines
            (``""`` and -1: not a file's line), in batch order; "multi_source": a dataset of the block reads
            several sources}, or None; the status of :meth:`recent`)``.
        """
        cols, status = self._newest(after, max_steps)
        if cols is None:
            return None, status
        out = per_batch(cols)
        out["multi_source"] = any(len(d.info.get("sources") or ()) > 1 for d in self.datasets)
        return out, status

    def _newest(self, after: int, max_steps: int) -> tuple[dict[str, np.ndarray] | None, dict[str, Any]]:
        """The batches of the newest ``max_steps`` steps after ``after`` (one array per batch column, and
        ``source_id``: their elements one after another), and the block's status."""
        with self.step_lock:
            status: dict[str, Any] = {"steps": self.epochs.n_steps, "ended": self.ended, "error": self.error}
            if self.epochs.n_steps - 1 <= after:
                return None, status
            tails = [self._tail(d, after, max_steps) for d in self.datasets]
            recent = self._recent
        if recent is not None and len(recent.batches) and int(recent.batches["step"].max()) > after:
            tails.append(trace_columns(recent, after))
        frames = [f for f in tails if f is not None and len(f["step"])]
        if not frames:
            return None, status
        keep = np.sort(np.unique(np.concatenate([f["step"] for f in frames])))[-max_steps:]
        cols: dict[str, list[np.ndarray]] = {}
        for f in frames:
            b = np.isin(f["step"], keep)
            e = np.repeat(b, f["n_elements"])
            for k, v in f.items():
                cols.setdefault(k, []).append(v[e] if k in ELEMENT_COLUMNS else v[b])
        return {k: np.concatenate(v) for k, v in cols.items()}, status

    def _strategy_name(self) -> str:
        return str(self.datasets[0].meta.get("strategy", "")) if self.datasets else ""

    def _tail(self, d: DatasetRecord, after: int, max_steps: int) -> dict[str, np.ndarray] | None:
        """The newest batches of one dataset held in memory, after step ``after``, labelled (see
        :meth:`_newest`)."""
        t = d.reader.rec.tail(max_steps * max(len(d.reader.devices), 1))
        keep = t["step"] > after
        if not keep.any():
            return None
        n = t["n_elements"]
        serial, epoch, in_epoch = self.epochs.labels(t["step"])
        phase = np.array([self.epochs.passes[i]["phase"] for i in serial.tolist()], dtype=object)
        return {"step": t["step"][keep], "replica": t["replica"][keep],
                "device": np.asarray(t["device"], dtype=object)[keep], "n_elements": n[keep],
                "dataset": np.full(int(keep.sum()), d.index), "phase": phase[keep], "epoch": epoch[keep],
                "epoch_step": in_epoch[keep], **{k: t[k][np.repeat(keep, n)] for k in ELEMENT_COLUMNS}}

    def show(self, **kwargs: Any) -> Any:
        """Display the explorer following this block as it runs (JupyterLab): call it inside the block, or
        before ``fit`` in the same cell. New steps appear while ``fit`` runs, within a second; Keras's
        progress bar and your output are unchanged. It follows the newest steps only (it never rebuilds the
        whole trace), so it stays cheap at millions of steps; after the block, ``rec.trace.show()`` explores
        every step. Keyword options go to :func:`vizdist.render.live.show_live`.

        Example:
            >>> with vizdist.record() as rec:      # doctest: +SKIP
            ...     rec.show()
            ...     model.fit(ds, epochs=20)
        """
        from vizdist import views

        return views.live_explorer(self.recent_steps, **kwargs)


def _from_vizdist() -> bool:
    """True when vizdist's own code (trace_distribution, what_if, ...) asks TF to distribute a dataset."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(("tensorflow", "keras")):
            return name.startswith("vizdist.") and name != __name__
        frame = frame.f_back
    return False


def _options(options: Any) -> dict[str, Any] | None:
    from vizdist.instrument.run.inputs import options_dict

    return options_dict(options)


def record(*, placement: bool | str = False, timing: bool = False, path: str | os.PathLike[str] | None = None,
           part_elements: int = PART_ELEMENTS) -> Recording:
    """Record the run your own code executes, Keras ``fit`` / ``evaluate`` / ``predict`` or a loop.

    Wrap your unchanged code in ``with vizdist.record() as rec:``; every dataset distributed inside
    the block (by ``strategy.experimental_distribute_dataset`` or
    ``distribute_datasets_from_function``, which Keras calls for you under ``strategy.scope()``) is
    recorded: which source element (its exact id, as in :func:`vizdist.trace_distribution`) each
    replica got at each step, in which phase and epoch. Your code sees exactly the values it would
    see without vizdist. Build (or distribute) the dataset inside the block.

    Args:
        placement: also record where every op of the block ran (the input pipeline, the copies to the
            devices, Keras's or your step, the reductions) and NaN/Inf in what each replica got, with
            TF's debugger, as :func:`vizdist.trace_distribution` does (``meta["placement"]``).
            ``True`` means ``"CURT_HEALTH"``; ``"NO_TENSOR"`` is cheaper.
        timing: also record *when*, on the host: each step's read of the distributed dataset and the time
            between reads (your step), in ``trace.events`` for ``trace.plot.timeline()`` (see
            :data:`TIMING_NOTE`).
        path: a folder to write the recording into as it runs, in parts (Parquet; see
            :mod:`vizdist._parts`), so the memory it holds stays bounded however long the run: a local
            folder or a URL on one of TensorFlow's file systems (``gs://...``, ``hdfs://...``, ``ram://...``,
            through ``tf.io.gfile``). ``vizdist.load_trace(path)`` opens it while the run goes on and after
            it (then equal to ``rec.trace``). Every worker of a cluster may write into one shared folder.
        part_elements: elements per part with ``path=`` (a part is also written at least every
            :data:`~vizdist.instrument.run.stream.PART_SECONDS` seconds while steps come in).

    Returns:
        A :class:`Recording`; after the block, ``rec.trace`` is a :class:`~vizdist.trace.Trace`
        with ``phase``, ``epoch``, ``epoch_step`` and ``dataset`` columns beside the usual ones.

    Example:
        >>> with vizdist.record() as rec:                                 # doctest: +SKIP
        ...     with strategy.scope():
        ...         model = make_model()
        ...     model.fit(train_ds, validation_data=val_ds, epochs=2)
        >>> vizdist.diagnose(rec.trace)                                    # doctest: +SKIP
    """
    if placement not in (False, True, "NO_TENSOR", "CURT_HEALTH", "FULL_HEALTH"):
        raise ValueError(f"placement must be False, True or a TF debug mode ('NO_TENSOR', 'CURT_HEALTH', "
                         f"'FULL_HEALTH'); got {placement!r}.")
    if not isinstance(timing, bool):
        raise ValueError(f"timing must be True or False; got {timing!r}.")
    return Recording(placement=placement, timing=timing, path=path, part_elements=part_elements)


def _label(df: pd.DataFrame, rec: Recording, dataset: int) -> pd.DataFrame:
    """Add ``dataset``, ``phase``, ``epoch`` and ``epoch_step`` by step (TF's repeat count becomes ``repetition``)."""
    ep = rec.epochs
    df = df.rename(columns={"epoch": "repetition"})
    step_pass, epoch, in_epoch = ep.labels(df["step"].to_numpy())
    phase_codes = np.array([PHASES.index(p["phase"]) for p in ep.passes] or [0], dtype=np.int8)
    df["dataset"] = np.full(len(df), dataset, dtype=np.int32)  # int32: a few bytes less per element row
    df["phase"] = pd.Categorical.from_codes(phase_codes[step_pass], categories=PHASES)  # no per-row lookup
    df["epoch"] = epoch.astype(np.int32, copy=False)
    df["epoch_step"] = in_epoch.astype(np.int32, copy=False)
    return df


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    df = concat_frames(frames)  # text columns stay categorical (devices: a few strings, many rows)
    return df.sort_values(["step", "replica"], kind="stable").reset_index(drop=True) if len(df) else df


def build_trace(rec: Recording, *, drain: bool = False, finish: bool = True) -> Trace:
    """One trace of every dataset recorded in the block (``meta["datasets"]``: each one's own meta).

    ``drain``: only the steps held in memory, which the recorders then forget (a part on disk);
    ``finish``: with what the observers (placement, timing) recorded, once the block has ended.
    """
    elements, batches, metas = [], [], []
    passes = rec.epochs.passes
    for d in rec.datasets:
        e, b = d.tables(drain=drain)
        elements.append(_label(e, rec, d.index))
        batches.append(_label(b, rec, d.index))
        phases = sorted({p["phase"] for p in passes if p["dataset"] == d.index and p["steps"]})
        metas.append({**d.meta, "phases": phases, "steps_run": int(sum(
            p["steps"] for p in passes if p["dataset"] == d.index))})
    meta = _block_meta(rec, metas, rec.epochs.rows())
    trace = Trace(elements=_concat(elements), batches=_concat(batches), meta=meta)
    return rec.run.finish(trace) if finish else trace


#: What record(timing=True) measures (``meta["timing"]["notes"]``).
TIMING_NOTE = (
    "record(timing=True) measures host spans only: 'transfer' is a read of the distributed iterator (get_next, or "
    "get_next_as_optional until its value is read), and 'consume' is the time from the end of one step's read to the "
    "start of the next read of the same dataset: your step, and whatever else your loop (or Keras) does between "
    "reads. In a tf.function both ends are taken where the function runs them. No TF profiler spans.")


def _block_meta(rec: Recording, metas: list[dict[str, Any]], passes: list[dict[str, Any]]) -> dict[str, Any]:
    if not rec.datasets:
        note = ("nothing was distributed inside the block: build or distribute the dataset inside "
                "`with vizdist.record():` (Keras fit/evaluate/predict do it for you)")
        return {"kind": "distribution", "api": "record", "datasets": [], "passes": [], "steps_run": 0,
                "note": "; ".join([note, *rec.notes]), "not_recorded": [*rec.unrecorded, *rec.notes] or [note]}
    meta: dict[str, Any] = dict(metas[0]) if len(metas) == 1 else {k: metas[0][k] for k in (
        "kind", "strategy", "num_replicas", "devices", "tf_version", "host", "gpus", "num_workers") if k in metas[0]}
    meta.update(api="record", datasets=metas, passes=passes, steps_run=rec.epochs.n_steps, stopped="end_of_block",
                worker=rec.datasets[0].reader.worker)
    if any(not d.tagged for d in rec.datasets):
        meta["provenance"] = "fingerprint"
    if rec.notes:
        meta["note"] = "; ".join([str(meta["note"])] * bool(meta.get("note")) + rec.notes)
    if rec.unrecorded or rec.notes:
        meta["not_recorded"] = [*rec.unrecorded, *rec.notes]
    if rec.error:
        meta["ended_by"] = rec.error
    return meta

