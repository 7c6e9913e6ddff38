"""The views of a trace, as real classes: ``trace.plot``, ``trace.show`` and ``trace.timing``.

A :class:`~vizdist.trace.Trace` is plain data, yet ``trace.plot.split()`` draws it and ``trace.show()``
opens its explorer. As pandas hangs ``df.plot`` off a frame (``pandas/plotting/_core.py``'s
``PlotAccessor``), each of these is a class whose methods are the views, declared with their full
signatures and docstrings, so ``help(trace.plot.split)``, an IDE and mypy see every parameter:

- :class:`PlotAccessor` (``trace.plot``): the matplotlib figures;
- :class:`ShowAccessor` (``trace.show``): the interactive views; ``trace.show()`` is the explorer and
  ``trace.show("timeline", ...)`` calls ``trace.show.timeline(...)``;
- :class:`TimingAccessor` (``trace.timing``): the timing statistics of :mod:`vizdist.analysis.timeline`.

Each method imports its renderer (or its analysis) when it is called, so ``import vizdist`` loads no
renderer. This module sits in the trace layer (``trace.py`` imports it) and is the one module of that
layer that reaches up to ``analysis`` and ``render``, only ever inside a function:
``tests/test_layers.py`` (``LAZY_UP``) holds it to that and sees each of those arrows.

Your own views register with a decorator, as pandas' ``register_dataframe_accessor`` does:
:func:`register_view` adds a method to an accessor (``trace.plot.mine()``), :func:`register_accessor` a
whole accessor (``trace.mine.anything()``); either warns (:class:`ViewNameWarning`) when the name is
taken, and replaces it. The machinery is :mod:`vizdist.accessor`'s (here too, for your imports).

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(elements=[dict(step=0, replica=r, source_id=r) for r in range(2)])
    >>> @register_view(PlotAccessor, "ids")
    ... def ids(trace, *, step: int = 0) -> list[int]:
    ...     "The ids of replica 0 at ``step``."
    ...     return trace.ids(step=step, replica=0)
    >>> t.plot.ids(step=0)
    [0]
    >>> "ids" in dir(t.plot)
    True
    >>> unregister_view(PlotAccessor, "ids")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vizdist.accessor import (
    Accessor,
    ViewError,
    ViewNameWarning,
    register_accessor,
    register_view,
    unregister_view,
)

if TYPE_CHECKING:  # types only: nothing below is imported when this module is
    import os
    from collections.abc import Callable
    from pathlib import Path

    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from vizdist._loadcheck import Limits
    from vizdist.render.explorer import Explorer
    from vizdist.render.live import LiveExplorer
    from vizdist.render.placement import PlacementView
    from vizdist.render.reduction import ReductionView
    from vizdist.render.timeline_widget import Timeline
    from vizdist.render.topology import TopologyView
    from vizdist.trace import Trace

# the machinery (vizdist.accessor) is re-exported: what you register views with
__all__ = ["Accessor", "PlotAccessor", "ShowAccessor", "TimingAccessor", "ViewError", "ViewNameWarning",
           "coverage", "is_recording", "live_explorer", "load_recording", "register_accessor", "register_view",
           "to_chrome_trace", "unregister_view"]


# -- trace.plot ----------------------------------------------------------------------------------
class PlotAccessor(Accessor):
    """A trace's figures (matplotlib), one method per view: ``trace.plot.split()``, ``.timeline()``, ...

    Each draws with the renderer of the same name in :mod:`vizdist.render` (imported when called) and
    returns the matplotlib ``Figure``, whose repr says what it drew.

    Example:
        >>> import vizdist
        >>> PlotAccessor.views()
        ['closures', 'coverage', 'placement', 'split', 'streams', 'timeline', 'topology', 'variable_shards']
    """

    _obj: Trace

    def split(self, *, max_steps: int = 12, max_replicas: int = 16, phase: str | None = None,
              epoch: int | None = None, cmap: str = "viridis", title: str | None = None,
              ax: Axes | None = None) -> Figure:
        """Draw steps × replicas: each cell lists the element ids that replica got.

        Cells are coloured by the ids' position in source order (dark = early), empty batches are
        hatched and labelled, partial ones are marked.

        Args:
            max_steps: draw at most this many steps (the title says how many exist).
            max_replicas: draw at most this many replicas (the first ones; the title says how many exist).
            phase, epoch: for a ``vizdist.record()`` trace, draw only the steps of that phase (``"train"``,
                ``"validation"``, ``"evaluate"``, ``"predict"``, ``"build"``, ``"loop"``) and that epoch.
            cmap: matplotlib colormap for source order.
            title: figure title (default: strategy, replicas, global batch).
            ax: draw into this Axes instead of a new figure.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(
            ...     elements=[dict(step=0, replica=r, source_id=r, position=0) for r in range(2)])
            >>> len(t.plot.split().axes)
            1
        """
        from vizdist.render.figures import plot_split

        fig: Figure = plot_split(self._obj, max_steps=max_steps, max_replicas=max_replicas, phase=phase,
                                 epoch=epoch, cmap=cmap, title=title, ax=ax)
        return fig

    def timeline(self, *, steps: tuple[int, int] | None = None, workers: list[int] | None = None,
                 highlight_step: int | None = None, time_range_ms: tuple[float, float] | None = None,
                 show_buffer: bool = True, show_idle_lanes: bool = False, title: str | None = None,
                 ax: Axes | None = None, figsize: tuple[float, float] | None = None) -> Figure:
        """Draw the timed spans (a trace recorded with ``timing=True``) as a static timeline.

        Args:
            steps: only spans of steps ``lo..hi`` (inclusive).
            workers: only these workers.
            highlight_step: outline this step's spans (the others fade).
            time_range_ms: x limits in ms from the first span.
            show_buffer: add a strip with the measured prefetch buffer depth (when the trace holds
                profiler spans).
            show_idle_lanes: also draw lanes that carry nothing in the drawn time range (by default they
                are left out and the figure lists them).
            title: axes title (default: the strategy and the span count).
            ax: draw into this axes (then no buffer strip is added).
            figsize: figure size in inches.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(events=[
            ...     dict(lane="w0 host", stage="consume", step=s, t_start_ns=s * 10**6,
            ...          t_end_ns=s * 10**6 + 500_000) for s in range(3)])
            >>> len(t.plot.timeline(highlight_step=1).axes)
            1
        """
        from vizdist.render.timeline_figure import plot_timeline

        return plot_timeline(self._obj, steps=steps, workers=workers, highlight_step=highlight_step,
                             time_range_ms=time_range_ms, show_buffer=show_buffer, show_idle_lanes=show_idle_lanes,
                             title=title, ax=ax, figsize=figsize)

    def coverage(self, *, max_elements: int = 80, title: str | None = None, ax: Axes | None = None) -> Figure:
        """Draw workers × source elements of a tf.data service trace, each cell the copies delivered.

        Args:
            max_elements: draw at most this many source ids (the title says how many exist).
            title: figure title (default: the processing mode / sharding policy).
            ax: draw into this Axes instead of a new figure.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(elements=[dict(worker=w, source_id=0) for w in range(2)],
            ...                                meta={"sharding_policy": "OFF"})
            >>> len(t.plot.coverage().axes)
            1
        """
        from vizdist.render.service import plot_coverage

        fig: Figure = plot_coverage(self._obj, max_elements=max_elements, title=title, ax=ax)
        return fig

    def streams(self, *, max_elements: int = 400, title: str | None = None, ax: Axes | None = None) -> Figure:
        """Draw what each consumer (or replica) of a tf.data service received, in arrival order, by worker.

        Args:
            max_elements: draw at most this many elements per lane.
            title: figure title.
            ax: draw into this Axes instead of a new figure.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(elements=[dict(step=i, worker=i % 2, consumer=0, source_id=i,
            ...                                               order=i) for i in range(4)])
            >>> t.plot.streams().axes[0].get_xlabel()
            'arrival order in the stream'
        """
        from vizdist.render.service import plot_streams

        fig: Figure = plot_streams(self._obj, max_elements=max_elements, title=title, ax=ax)
        return fig

    def placement(self, *, step: int | None = None, max_rows: int = 40, ax: Axes | None = None) -> Figure:
        """Draw devices × ops (grouped by stage) of a trace recorded with ``placement=True``, copies as arrows.

        Args:
            step: show only what ran in this step (plus step-less pipeline/host ops).
            max_rows: draw at most this many op rows (the title says how many exist).
            ax: draw into this Axes instead of a new figure.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(meta={"placement": {"ops": [
            ...     dict(stage="step", op_type="Mul", graph="step", device="CPU:1", count=2)], "copies": []}})
            >>> len(t.plot.placement().axes)
            1
        """
        from vizdist.render.placement import plot_placement

        fig: Figure = plot_placement(self._obj, step=step, max_rows=max_rows, ax=ax)
        return fig

    def closures(self, *, width: float = 10.0, row_height: float = 0.6) -> Figure:
        """Draw which worker ran each closure of a parameter-server trace, attempt by attempt.

        Args:
            width: figure width in inches.
            row_height: height per worker, in inches.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace(meta={"kind": "parameter_server", "num_workers": 1, "closures": [
            ...     {"closure": 0, "worker": 0, "status": "done", "attempts": [
            ...         {"worker": 0, "outcome": "done", "t_start_ns": 1}]}]})
            >>> t.plot.closures()
            <Figure: 1 closure(s), 1 attempt(s) on worker(s) [0]; outcomes: done 1>
        """
        from vizdist.render.parameter_server import plot_closures

        fig: Figure = plot_closures(self._obj, width=width, row_height=row_height)
        return fig

    def variable_shards(self, *, width: float = 10.0, row_height: float = 0.7) -> Figure:
        """Draw how each variable of a parameter-server trace was cut into shards, and which ps holds each.

        Args:
            width: figure width in inches.
            row_height: height per variable, in inches.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace(meta={"kind": "parameter_server", "variables": [dict(
            ...     variable="v", shard=0, shards=1, shape=[8], rows="0:8", bytes=32, job="ps", task=0)]})
            >>> len(t.plot.variable_shards().axes)   # the shards, and the bytes per ps task
            2
        """
        from vizdist.render.parameter_server import plot_variable_shards

        fig: Figure = plot_variable_shards(self._obj, width=width, row_height=row_height)
        return fig

    def topology(self, *, highlight: str | None = None, title: str | None = None, ax: Axes | None = None) -> Figure:
        """Draw the run's tasks and who connects to whom (``vizdist.topology(trace).plot()``).

        Args:
            highlight: a task name (``"worker:1"``): its links stay bright, the rest fade.
            title: figure title (default: the mode and where it was read from).
            ax: draw into this Axes instead of a new figure.

        Example:
            >>> import vizdist
            >>> vizdist.Trace(meta={"devices": ["CPU:0", "CPU:1"]}).plot.topology()
            <Figure: topology (single): tasks localhost:0; links none; network not recorded>
        """
        from vizdist.render.topology import plot_topology

        fig: Figure = plot_topology(self._obj, highlight=highlight, title=title, ax=ax)
        return fig


# -- trace.show ----------------------------------------------------------------------------------
class ShowAccessor(Accessor):
    """A trace's interactive views (ipywidgets, each with a static fallback for GitHub and nbval).

    ``trace.show()`` opens the explorer; ``trace.show("timeline", step=3)`` is ``trace.show.timeline(step=3)``.

    Example:
        >>> ShowAccessor.views()
        ['explorer', 'placement', 'reduction', 'timeline', 'topology']
    """

    _obj: Trace

    def __call__(self, view: str = "explorer", **kwargs: Any) -> Any:
        """The view named ``view`` (default: the explorer), with ``kwargs`` as its options.

        Example:
            >>> import vizdist
            >>> vizdist.Trace().show("nonsense")
            Traceback (most recent call last):
            ...
            vizdist.accessor.ViewError: ShowAccessor has no view 'nonsense'; its views are: explorer, placement, reduction, timeline, topology.
        """
        if view.startswith("_") or view not in self.views():
            raise ViewError(f"{type(self).__name__} has no view {view!r}; its views are: {', '.join(self.views())}.")
        return getattr(self, view)(**kwargs)

    def explorer(self, *, max_steps: int = 50) -> Explorer:
        """The step explorer: a step slider over the split (a live widget with a static fallback).

        Args:
            max_steps: steps included in the static (GitHub/nbval) view.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(
            ...     elements=[dict(step=s, replica=r, source_id=2 * s + r, position=0)
            ...               for s in range(2) for r in range(2)])
            >>> ex = t.show.explorer()
            >>> ex.step = 1
            >>> "data-step=\\"1\\"" in ex.cards.children[0].value
            True
        """
        from vizdist.render.explorer import show

        return show(self._obj, max_steps=max_steps)

    def timeline(self, *, explorer: Any = None, step: int | None = None, show_idle_lanes: bool = False) -> Timeline:
        """The interactive timeline of a trace recorded with ``timing=True``.

        Args:
            explorer: a step explorer (``trace.show()``) whose step slider highlights that step's spans here.
            step: a step to highlight and zoom to at the start.
            show_idle_lanes: also draw lanes that carry nothing in view (hidden by default).

        Raises:
            ValueError: the trace has no timed spans.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(events=[
            ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=10**6)])
            >>> t.show.timeline(step=0).step
            0
        """
        from vizdist.render.timeline_widget import timeline

        return timeline(self._obj, explorer=explorer, step=step, show_idle_lanes=show_idle_lanes)

    def placement(self, *, step: int | None = None) -> PlacementView:
        """Where every op ran (a trace recorded with ``placement=True``); ``.widget()`` for the live view.

        Args:
            step: show only what ran in this step (plus step-less pipeline/host ops).

        Example:
            >>> import vizdist
            >>> vizdist.Trace(meta={"placement": {"ops": [], "copies": []}}).show.placement().layout["rows"]
            []
        """
        from vizdist.render.placement import show_placement

        return show_placement(self._obj, step=step)

    def topology(self) -> TopologyView:
        """The run's tasks and links, as text, HTML and PNG; ``.widget()`` picks a task.

        Example:
            >>> import vizdist
            >>> vizdist.Trace(meta={"devices": ["CPU:0"]}).show.topology().topology.mode
            'single'
        """
        from vizdist.render.topology import show_topology

        return show_topology(self._obj)

    def reduction(self, *, index: int = 0) -> ReductionView:
        """Reduction ``index`` of a ``vizdist.trace_reduction`` trace, step by step; ``.widget()`` plays it.

        Args:
            index: which of the trace's reductions.

        Example:
            >>> import vizdist
            >>> vizdist.Trace().show.reduction()
            Traceback (most recent call last):
            ...
            ValueError: this trace has no reductions: record one with vizdist.trace_reduction(strategy, values).
        """
        from vizdist.render.reduction import show_reduction

        return show_reduction(self._obj, index=index)


# -- trace.timing --------------------------------------------------------------------------------
class TimingAccessor(Accessor):
    """A trace's timing statistics, one method each (they read ``trace.events``: record with ``timing=True``).

    Each is the function of the same name in :mod:`vizdist.analysis.timeline` with this trace first;
    that function's docstring says more.

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=2_000_000),
        ...     dict(lane="w0 host", stage="consume", step=0, t_start_ns=2_000_000, t_end_ns=3_000_000)])
        >>> t.timing.overlap_summary()["bound"]
        'input'
        >>> dir(t.timing)
        ['empty_buffer_steps', 'map_threads', 'most_at_once', 'overlap_summary', 'prefetch_buffers', 'tf_data_iterators']
    """

    _obj: Trace

    def overlap_summary(self) -> dict[str, Any]:
        """How input production overlapped the steps: ``wait_ms``, ``step_ms``, ``producer_busy_ms``,
        ``warmup_ms``, ``overlap``, ``bound`` (``"input"`` or ``"step"``), ``buffer_fill``
        (:func:`vizdist.analysis.timeline.overlap_summary` defines each).

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(events=[
            ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=2),
            ...     dict(lane="w0 host", stage="consume", step=0, t_start_ns=2, t_end_ns=10),
            ...     dict(lane="w0 t", stage="map", step=1, t_start_ns=2, t_end_ns=8)])
            >>> s = t.timing.overlap_summary()
            >>> s["bound"], s["overlap"]
            ('step', 1.0)
        """
        from vizdist.analysis.timeline import overlap_summary

        return overlap_summary(self._obj)

    def most_at_once(self, *, lane: str | None = None) -> int:
        """The most spans that were running at the same moment; ``lane`` keeps only the events whose lane
        contains that text (``"replica"``: the replicas' step functions). Spans that touch do not overlap.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(events=[
            ...     dict(lane=f"w0 replica {r}", stage="consume", step=0, t_start_ns=r, t_end_ns=10)
            ...     for r in range(2)])
            >>> t.timing.most_at_once(lane="replica")
            2
        """
        from vizdist.analysis.timeline import most_at_once

        return most_at_once(self._obj, lane=lane)

    def tf_data_iterators(self) -> list[str]:
        """The tf.data iterators the profiler saw, by path (``Root`` is the one your loop calls).

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(events=[dict(
            ...     lane="w0 t", stage="map", step=0, t_start_ns=0, t_end_ns=1, op="Iterator::Root::Map")])
            >>> t.timing.tf_data_iterators()
            ['Root::Map']
        """
        from vizdist.analysis.timeline import tf_data_iterators

        return tf_data_iterators(self._obj)

    def map_threads(self) -> list[str]:
        """Where the ``map`` spans ran: ``"the caller's thread"`` and/or ``"tf.data threads"``.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(events=[
            ...     dict(lane="w0 tf.data thread 0", stage="map", step=0, t_start_ns=0, t_end_ns=1)])
            >>> t.timing.map_threads()
            ['tf.data threads']
        """
        from vizdist.analysis.timeline import map_threads

        return map_threads(self._obj)

    def prefetch_buffers(self) -> pd.DataFrame:
        """Each prefetch buffer the profiler saw (a table): one row per iterator path and lane, with the
        largest ``limit`` and ``max_buffered`` reported there.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(events=[dict(
            ...     lane="w0 tf.data (caller)", stage="prefetch", step=0, t_start_ns=0, t_end_ns=1,
            ...     op="Iterator::Root::Prefetch", buffered=1, buffer_limit=2)])
            >>> t.timing.prefetch_buffers().to_dict("index")
            {('Root::Prefetch', 'caller lane'): {'limit': 2, 'max_buffered': 1}}
        """
        from vizdist.analysis.timeline import prefetch_buffers

        return prefetch_buffers(self._obj)

    def empty_buffer_steps(self) -> dict[str, int]:
        """At how many steps a replica found the buffer on the caller lane empty:
        ``{"limit": its limit, "steps": steps seen, "empty": steps where it was empty}``.

        Example:
            >>> import vizdist
            >>> t = vizdist.Trace.from_records(events=[dict(
            ...     lane="w0 tf.data (caller)", stage="prefetch", step=s, t_start_ns=s, t_end_ns=s + 1,
            ...     op="Iterator::Root::Prefetch", buffered=s % 2, buffer_limit=1) for s in range(4)])
            >>> t.timing.empty_buffer_steps()
            {'limit': 1, 'steps': 4, 'empty': 2}
        """
        from vizdist.analysis.timeline import empty_buffer_steps

        return empty_buffer_steps(self._obj)


# -- export --------------------------------------------------------------------------------------
def to_chrome_trace(trace: Trace, path: str | os.PathLike[str]) -> Path:
    """Write ``trace``'s timed spans as a Chrome / Perfetto trace file (``Trace.to_chrome_trace`` calls this).

    Example:
        >>> import vizdist, tempfile, os
        >>> t = vizdist.Trace.from_records(events=[
        ...     dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=10)])
        >>> t.to_chrome_trace(os.path.join(tempfile.mkdtemp(), "t.json")).name
        't.json'
    """
    from vizdist.render.export import to_chrome_trace as export

    return export(trace, path)


# -- what the trace and the recorder reach through here (each imported when called) ----------------------
def coverage(trace: Trace) -> pd.DataFrame:
    """``trace.coverage()``: :func:`vizdist.analysis.coverage.coverage` of ``trace``.

    Example:
        >>> import vizdist
        >>> coverage(vizdist.Trace.from_records(elements=[dict(step=0, replica=0, source_id=3)]))["delivered"].tolist()
        [1]
    """
    from vizdist.analysis.coverage import coverage as table

    return table(trace)


def is_recording(path: Any) -> bool:
    """Whether ``load_trace(path)`` reads a folder ``vizdist.record(path=...)`` wrote (:mod:`vizdist._parts`).

    Example:
        >>> import tempfile
        >>> is_recording(tempfile.mkdtemp())
        False
    """
    from vizdist._parts import is_recording as check

    return check(path)


def load_recording(path: Any, *, limits: Limits | None = None) -> Trace:
    """The trace of the folder ``vizdist.record(path=...)`` wrote (:func:`vizdist._parts.load_recording`)."""
    from vizdist._parts import load_recording as load

    return load(path, limits=limits)


def live_explorer(feed: Callable[..., Any], **kwargs: Any) -> LiveExplorer | None:
    """``rec.show()`` inside a ``vizdist.record()`` block: :func:`vizdist.render.live.show_live` over the block's
    feed of its newest steps (the instrument layer reaches the renderer only through here)."""
    from vizdist.render.live import show_live

    return show_live(feed, **kwargs)
