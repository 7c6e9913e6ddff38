"""The run engine: one recorded run, whichever front end drives it.

Three front ends record runs: :func:`~vizdist.instrument.run.distribution.trace_distribution` (vizdist
drives the loop), :func:`~vizdist.instrument.run.legacy.trace_tf1` (a TF1 ``Session`` loop) and
:func:`~vizdist.instrument.run.user_run.record` (the user's own code drives it: Keras ``fit``, a loop).
Each opens a :class:`Run`, makes its input inside it, asks the run for a
:class:`~vizdist.instrument.run.reader.StepReader` per distributed dataset, reads steps into it,
and hands the finished :class:`~vizdist.trace.Trace` to :meth:`Run.finish`.

The engine is generic: it knows no recorder and no tf.data service. What a run records beside where
each element went plugs in through one protocol, :class:`Observer` (the tf.data service's run token,
:class:`vizdist.instrument.service.observer.ServiceObserver`; the timing recorder; the placement
recorder with its NaN/Inf checks), and each front end hands its run the observers it needs
(:func:`vizdist.instrument.run.observers.observers_for`). The engine calls, in order:

===================================  ===========================================================
``start(run)``                       the run opens, before any pipeline is tagged or distributed
``attach(run, reader, source)``      a reader exists for one distributed dataset
``wrap_input(dist)``                 the distributed dataset a loop of vizdist's will iterate
``wrap_step(step_fn)``               the user's step function, before the loop runs it
``loop()``                           a context around vizdist's own loop (a profiler's window)
``on_step(reader, step, ...)``       each step, before its elements are recorded
``close(exc)``                       the run ends (``exc``: what stopped it, or None)
``finish(trace) -> trace``           the finished trace, after the run ended well
===================================  ===========================================================

:func:`vizdist.instrument.run.observers.observers_for` makes the observers a run's ``timing=`` and
``placement=`` options ask for. No front end calls another or re-lists its arguments, and no observer is reached into from
outside: a front end talks to the run, the run to its observers.

Example:
    >>> Run(None, api="demo").observers
    []
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Observer", "Run", "current"]

#: The user's pipeline as a front end knows it: ``(dataset, dataset_fn, input_contexts)``; the contexts are
#: None where none were recorded.
Source = tuple[Any, Any, list[dict[str, int]] | None]


class Observer:
    """One recorder that plugs into a :class:`Run`; every hook does nothing unless overridden.

    Example:
        >>> class Steps(Observer):
        ...     def __init__(self): self.seen = []
        ...     def on_step(self, reader, step, values, results): self.seen.append(step)
        >>> o = Steps(); o.on_step(None, 0, None, None); o.seen
        [0]
    """

    #: The timing recorder (:class:`~vizdist.instrument.observe.timing.TimingRecorder`) of a timing observer.
    timer: Any = None

    def start(self, run: Run) -> None:
        """The run opens (before the pipeline is tagged and distributed)."""

    def attach(self, run: Run, reader: Any, source: Source | None = None) -> None:
        """``reader`` will record one distributed dataset of the run, made from ``source``.

        ``source`` is ``(dataset, dataset_fn, input_contexts)`` where the front end knows it (the
        pipeline as the user built it, to re-run it when a function of it failed).
        """

    def wrap_input(self, dist: Any) -> Any:
        """The distributed dataset vizdist's loop iterates (returned as is by default)."""
        return dist

    def wrap_step(self, step_fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
        """The user's step function, as vizdist's loop will run it."""
        return step_fn

    def loop(self, run: Run) -> contextlib.AbstractContextManager[Any]:
        """A context around vizdist's own loop."""
        return contextlib.nullcontext()

    def on_step(self, reader: Any, step: int, values: Any, results: list[Any] | None) -> None:
        """``reader`` read (and ran) one step, before its elements are recorded."""

    def own_work(self) -> contextlib.AbstractContextManager[Any]:
        """A context around TF work vizdist does for itself (not the user's run)."""
        return contextlib.nullcontext()

    def close(self, exc: BaseException | None) -> None:
        """The run ended; ``exc`` is what stopped it (its ``partial_trace`` may be completed here)."""

    def finish(self, trace: Any) -> Any:
        """The run's trace, completed with what this observer recorded."""
        return trace


_CURRENT: contextvars.ContextVar[Run | None] = contextvars.ContextVar("vizdist_run", default=None)


def current() -> Run | None:
    """The :class:`Run` open in this context (None outside one)."""
    return _CURRENT.get()


class Run:
    """One recorded run: its strategy, its observers, the readers of its datasets.

    Use it as a context manager; :meth:`finish` completes the trace after the block.

    Example:
        >>> with Run(None, api="demo") as run:
        ...     current() is run
        True
        >>> current() is None
        True
    """

    def __init__(self, strategy: Any, *, api: str, observers: list[Observer] | None = None) -> None:
        self.strategy, self.api = strategy, api
        self.observers: list[Observer] = list(observers or [])
        self.readers: list[Any] = []
        self._started: list[Observer] = []
        self._token: contextvars.Token[Run | None] | None = None

    @property
    def timer(self) -> Any:
        """The run's timing recorder (None when the run is not timed)."""
        return next((o.timer for o in self.observers if o.timer is not None), None)

    def __enter__(self) -> Run:
        self._token = _CURRENT.set(self)
        try:
            for o in self.observers:
                o.start(self)
                self._started.append(o)
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            _close_all(self._started[::-1], exc)
        finally:
            self._started = []
            if self._token is not None:
                _CURRENT.reset(self._token)
                self._token = None

    def attach(self, reader: Any, *, source: Source | None = None) -> Any:
        """Register ``reader`` (a StepReader) with every observer; return it. ``source``: see :meth:`Observer.attach`."""
        self.readers.append(reader)
        for o in self.observers:
            reader.step_hooks.append(functools.partial(o.on_step, reader))
            o.attach(self, reader, source)
        return reader

    def wrap_input(self, dist: Any) -> Any:
        for o in self.observers:
            dist = o.wrap_input(dist)
        return dist

    def wrap_step(self, step_fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
        for o in self.observers:
            step_fn = o.wrap_step(step_fn)
        return step_fn

    @contextlib.contextmanager
    def loop(self) -> Iterator[None]:
        """Every observer's context around vizdist's loop."""
        with contextlib.ExitStack() as stack:
            for o in self.observers:
                stack.enter_context(o.loop(self))
            yield

    @contextlib.contextmanager
    def own_work(self) -> Iterator[None]:
        """Mark TF work vizdist does for itself (reading a graph), which no observer should record."""
        with contextlib.ExitStack() as stack:
            for o in self.observers:
                stack.enter_context(o.own_work())
            yield

    def finish(self, trace: Any) -> Any:
        """The trace, completed by every observer (after the run ended well)."""
        for o in self.observers:
            trace = o.finish(trace)
        return trace


def _close_all(observers: list[Observer], exc: BaseException | None) -> None:
    """Close every observer, even when one fails; the first failure is raised after all were closed."""
    first: BaseException | None = None
    for o in observers:
        try:
            o.close(exc)
        except BaseException as err:  # the others still close
            first = first or err
    if first is not None and exc is None:
        raise first
