"""Static figures of a tf.data service trace: worker × element coverage, consumer streams.

Both take a :class:`vizdist.Trace` recorded by ``LocalDataService.trace``
and never touch TensorFlow.

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(
    ...     elements=[dict(step=i, worker=w, consumer=0, source_id=i % 3, order=i)
    ...               for i, w in enumerate([0, 0, 0, 1, 1, 1])],
    ...     meta={"instrument": "tf.data service", "sharding_policy": "OFF", "num_workers": 2})
    >>> t.plot.coverage().axes[0].get_ylabel()
    'worker'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vizdist.contract import TraceMeta
from vizdist.render._text import described, plain_figure
from vizdist.trace import Trace

__all__ = ["STREAMS_MAX_WIDTH_IN", "coverage_table", "plot_coverage", "plot_streams"]

_WORKER_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
_UNKNOWN = "#BBBBBB"


def _check(trace: Any, name: str) -> Trace:
    if not isinstance(trace, Trace):
        raise TypeError(f"{name} takes a vizdist.Trace; got {type(trace).__name__}.")
    return trace


def _worker_color(w: int) -> str:
    return _UNKNOWN if w < 0 else _WORKER_COLORS[w % len(_WORKER_COLORS)]


def _mode_title(meta: TraceMeta) -> str:
    policy = str(meta.get("sharding_policy", "?"))
    mode = {"OFF": "parallel_epochs", "DYNAMIC": "distributed_epoch"}.get(policy)
    return f"{mode} (ShardingPolicy.{policy})" if mode else f"ShardingPolicy.{policy}"


#: Worker rows of the coverage figure, and lanes of the streams figure, at most (the first ones; the title
#: says how many there are).
MAX_ROWS = 32


def coverage_table(trace: Trace) -> Any:
    """Workers × source ids: how many times each worker delivered each element.

    Rows are workers (``-1`` = unknown worker), columns are source ids (every
    id the pipeline yields, also those that never arrived), values are counts.

    Example:
        >>> t = Trace.from_records(elements=[dict(worker=0, source_id=1), dict(worker=1, source_id=1)],
        ...                        meta={"expected_source_ids": [0, 1], "num_workers": 2})
        >>> coverage_table(t).values.tolist()
        [[0, 1], [0, 1]]
    """

    _check(trace, "coverage_table")
    return _coverage(trace, None, None)[0]


def _coverage(trace: Trace, max_ids: int | None, max_workers: int | None) -> tuple[Any, int, int]:
    """The coverage table of the first ``max_ids`` ids and ``max_workers`` workers (None: all), and how many
    ids and workers there are (the dense table is built for what is shown only)."""
    import pandas as pd

    e = trace.elements
    ids = set(int(i) for i in e["source_id"].tolist())
    ids |= set(int(i) for i in (trace.meta.get("expected_source_ids") or []))
    workers = set(int(w) for w in e["worker"].tolist())
    n = trace.meta.get("num_workers")
    if isinstance(n, int):
        workers |= set(range(min(n, 1 << 20)))
    shown_ids, shown_workers = sorted(ids)[:max_ids], sorted(workers)[:max_workers]
    e = e[e["source_id"].isin(shown_ids) & e["worker"].isin(shown_workers)]
    table = pd.crosstab(e["worker"], e["source_id"]) if len(e) else pd.DataFrame()
    table = table.reindex(index=shown_workers, columns=shown_ids, fill_value=0).astype("int64")
    table.index.name, table.columns.name = "worker", "source_id"
    return table, len(ids), len(workers)


def plot_coverage(
    trace: Trace,
    *,
    max_elements: int = 80,
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Draw workers × source elements, each cell the number of copies delivered.

    parallel_epochs fills every cell of every worker row with 1 (each worker
    processes the whole dataset); distributed_epoch puts each column's single
    1 in one worker's row. Columns that stayed empty (elements that never
    arrived) are marked with a red ``x``; a stopped worker's row is labelled.

    Args:
        trace: a trace from ``LocalDataService.trace``.
        max_elements: draw at most this many source ids (the title says how many exist).
        title: figure title (default: the processing mode / sharding policy).
        ax: draw into this Axes instead of a new figure.

    Returns:
        The matplotlib ``Figure``.

    Example:
        >>> t = Trace.from_records(elements=[dict(worker=w, source_id=0) for w in range(2)],
        ...                        meta={"sharding_policy": "OFF"})
        >>> len(plot_coverage(t).axes)
        1
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    _check(trace, "plot_coverage")
    table, n_ids, n_workers = _coverage(trace, max_elements, MAX_ROWS)
    counts = table.to_numpy()
    workers = [int(w) for w in table.index]
    ids = [int(i) for i in table.columns]
    if ax is None:
        fig, ax = plt.subplots(figsize=(min(2 + 0.32 * max(len(ids), 1), 16), 1.2 + 0.55 * max(len(workers), 1)))
        plt.close(fig)
    else:
        fig = ax.figure
    cmap = ListedColormap(["#FFFFFF", "#55A868", "#F0A830", "#C44E52"])
    shown = np.clip(counts, 0, 3) if counts.size else np.zeros((max(len(workers), 1), max(len(ids), 1)))
    ax.imshow(shown, cmap=cmap, vmin=0, vmax=3, aspect="auto", interpolation="nearest")
    for r in range(counts.shape[0]):
        for c in range(counts.shape[1]):
            if counts[r, c]:
                ax.text(c, r, str(counts[r, c]), ha="center", va="center", fontsize=7)
    lost = [c for c in range(counts.shape[1]) if counts[:, c].sum() == 0] if counts.size else []
    for c in lost:
        ax.text(c, -0.75, "x", ha="center", va="center", color="#C44E52", fontsize=9, fontweight="bold")
    stopped = {int(s["worker"]) for s in trace.meta.get("stopped_workers") or []}
    ax.set_yticks(range(len(workers)))
    ax.set_yticklabels(["unknown" if w < 0 else f"{w}{' (stopped)' if w in stopped else ''}" for w in workers])
    step = max(1, len(ids) // 40)
    ax.set_xticks(range(0, len(ids), step))
    ax.set_xticklabels([str(i) for i in ids[::step]], fontsize=7, rotation=90 if len(ids) > 30 else 0)
    ax.set_ylim(len(workers) - 0.5, -1.2)
    ax.set_xlabel("source element id")
    ax.set_ylabel("worker")
    more = f", first {len(ids)} of {n_ids} ids" if n_ids > len(ids) else ""
    more += f", first {len(workers)} of {n_workers} workers" if n_workers > len(workers) else ""
    lost_txt = f"; x = never arrived ({len(lost)})" if lost else ""
    ax.set_title(title or f"{_mode_title(trace.meta)}: copies per worker and element{more}{lost_txt}",
                 fontsize=10)
    plain_figure(fig).tight_layout()
    rows = ", ".join("unknown" if w < 0 else str(w) for w in workers)
    return described(plain_figure(fig), f"coverage, {_mode_title(trace.meta)}: worker rows {rows or 'none'}")


#: The widest stream figure, in inches: wider figures are scaled down in a notebook and their digits shrink.
STREAMS_MAX_WIDTH_IN = 9.5
_LABEL_PT = 8  # element labels: never smaller than this
_BOX_IN = 0.36  # preferred width of one element's box
_MIN_BOX_IN = 0.22  # boxes never get narrower: a lane that needs more room is cut, saying how much is left
_TAIL = 4.0  # room (in boxes) after a lane for "… N more" or "stalled"
_MERGE_ABOVE = 24  # a lane longer than this draws runs of consecutive ids from one worker as one box


@dataclass(frozen=True)
class _Box:
    """One box of a lane: ``n`` elements from arrival ``first`` on, drawn at ``x`` with width ``width``."""

    first: int
    n: int
    worker: int
    label: str
    x: float = 0.0
    width: float = 1.0


def _runs(ids: list[int], workers: list[int], merge: bool) -> list[_Box]:
    """The boxes of one lane: one per element, or one per run when ``merge``.

    A run is consecutive arrivals from one worker whose ids go up by one.

    Example:
        >>> [(b.first, b.n, b.label) for b in _runs([0, 1, 2, 0, 5], [0, 0, 0, 1, 1], True)]
        [(0, 3, '0–2'), (3, 1, '0'), (4, 1, '5')]
    """
    out: list[_Box] = []
    for x, (i, w) in enumerate(zip(ids, workers, strict=True)):
        last = out[-1] if out else None
        if merge and last is not None and last.worker == w and i == ids[x - 1] + 1:
            out[-1] = _Box(last.first, last.n + 1, w, f"{last.label.split('–')[0]}–{i}")
        else:
            out.append(_Box(x, 1, w, str(i)))
    return out


def _label_units(label: str) -> float:
    """Width of ``label`` at the label size, in boxes of :data:`_BOX_IN` inches."""
    return (len(label) * 0.62 * _LABEL_PT / 72 + 0.06) / _BOX_IN


def _place(boxes: list[_Box], budget: float) -> tuple[list[_Box], int]:
    """Give each box its x and width (a run: wide enough for its label); cut at ``budget`` units.

    Returns the placed boxes and how many elements did not fit.
    """
    placed: list[_Box] = []
    x = 0.0
    for b in boxes:
        width = 1.0 if b.n == 1 else max(2.0, min(float(b.n), _label_units(f"{b.label} ({b.n})") + 0.4))
        if x + width > budget:
            return placed, sum(c.n for c in boxes) - sum(c.n for c in placed)
        placed.append(_Box(b.first, b.n, b.worker, b.label if b.n == 1 else f"{b.label} ({b.n})", x, width))
        x += width
    return placed, 0


def plot_streams(
    trace: Trace,
    *,
    max_elements: int = 400,
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Draw what each consumer (or replica) received, in arrival order, coloured by worker.

    One lane per consumer (per replica when the trace went through a
    strategy); each box is one source element, labelled with its id and
    coloured by the worker that produced it. In a long lane, a run of
    consecutive ids from one worker is one box (``6–199 (194)``), so the
    arrival axis is then in boxes, not elements. The figure is at most
    :data:`STREAMS_MAX_WIDTH_IN` inches wide and its labels are never smaller
    than 8 pt: a lane that does not fit is cut (``… N more``). A stopped
    worker (dashed line) and a stalled consumer (a bar and ``stalled`` at the
    lane's end) are marked where they happened and explained in the legend,
    which sits under the axes.

    Args:
        trace: a trace from ``LocalDataService.trace``.
        max_elements: draw at most this many elements per lane.
        title: figure title.
        ax: draw into this Axes instead of a new figure.

    Returns:
        The matplotlib ``Figure``.

    Example:
        >>> t = Trace.from_records(elements=[dict(step=i, worker=i % 2, consumer=0, source_id=i,
        ...                                       order=i) for i in range(4)])
        >>> plot_streams(t).axes[0].get_xlabel()
        'arrival order in the stream'
    """
    _check(trace, "plot_streams")
    e = trace.elements.copy()
    if "order" not in e.columns:
        e["order"] = range(len(e))
    by_replica = bool((e["replica"] >= 0).any())
    lane_col = "replica" if by_replica else "consumer"
    all_lanes = sorted(int(v) for v in e[lane_col].unique()) or [0]
    lanes = all_lanes[:MAX_ROWS]  # the first ones; the title says how many there are
    stall: Mapping[str, Any] = trace.meta.get("stall") or {}
    stalled = [c for c in stall.get("consumers", []) if not by_replica and c in lanes]
    budget = (STREAMS_MAX_WIDTH_IN - 2.4) / _MIN_BOX_IN - _TAIL * (2 if stalled else 1)
    e = e[e[lane_col].isin(lanes)].sort_values([lane_col, "order"], kind="stable")
    streams = {int(lane): rows for lane, rows in e.groupby(lane_col, sort=True)}
    streams = {lane: streams.get(lane, e.iloc[:0]) for lane in lanes}
    merged = any(len(rows) > _MERGE_ABOVE for rows in streams.values())
    placed = {lane: _place(_runs([int(i) for i in rows["source_id"].head(max_elements)],
                                 [int(w) for w in rows["worker"].head(max_elements)],
                                 len(rows) > _MERGE_ABOVE), budget) for lane, rows in streams.items()}
    span = max([b.x + b.width for boxes, _ in placed.values() for b in boxes] + [1.0])
    cut = {lane: placed[lane][1] + max(len(streams[lane]) - max_elements, 0) for lane in lanes}
    right = span + 0.3 + _TAIL * (bool(stalled) + any(cut.values()))
    title = title or f"{_mode_title(trace.meta)}: what each {lane_col} received" + (
        f" (first {len(lanes)} of {len(all_lanes)} {lane_col}s)" if len(all_lanes) > len(lanes) else "")
    fig, ax = _streams_axes(ax, right, len(lanes), title)
    seen: set[int] = set()
    for y, lane in enumerate(lanes):
        _draw_lane(ax, y, placed[lane][0], cut[lane], lane in stalled, seen)
    stops = _draw_stops(ax, trace, streams, placed, lanes)
    ax.set_xlim(-0.2, right)
    ax.set_ylim(len(lanes) - 0.5, -1.1 if stops else -0.6)
    ax.set_yticks(range(len(lanes)), [f"{lane_col} {v}" for v in lanes])
    _streams_xaxis(ax, merged)
    _streams_legend(ax, seen, stops, stall if stalled else {}, stalled)
    ax.set_title(title, fontsize=10)
    if fig.get_layout_engine() is None:
        plain_figure(fig).tight_layout()
    summary = f"streams, {_mode_title(trace.meta)}: one lane per {lane_col} ({', '.join(map(str, lanes))})"
    return described(plain_figure(fig), summary)


def _streams_axes(ax: Any, right: float, n_lanes: int, title: str) -> tuple[Any, Any]:
    """The figure and Axes to draw into: ``ax`` and its figure, or a new one sized for the lanes and ``title``."""
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax
    width = max(2.4 + _BOX_IN * right, len(title) * 10 * 0.6 / 72 + 0.8)  # room for the title too
    fig, ax = plt.subplots(figsize=(min(width, STREAMS_MAX_WIDTH_IN), 1.9 + 0.55 * n_lanes), layout="constrained")
    plt.close(fig)
    return fig, ax


def _streams_xaxis(ax: Any, merged: bool) -> None:
    """Label the arrival axis (no ticks when runs are merged: it is then in boxes) and drop the top/right spines."""
    if merged:
        ax.set_xticks([])
        ax.set_xlabel("arrival order in the stream (one box per run of consecutive ids from one worker)")
    else:
        ax.set_xlabel("arrival order in the stream")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _draw_lane(ax: Any, y: int, boxes: list[_Box], cut: int, stalled: bool, seen: set[int]) -> None:
    """One lane's boxes (coloured by worker, labelled), what was cut, and a stall mark at its end."""
    from matplotlib.patches import Rectangle

    for b in boxes:
        seen.add(b.worker)
        ax.add_patch(Rectangle((b.x, y - 0.4), b.width - 0.1, 0.8, color=_worker_color(b.worker), alpha=0.85,
                               linewidth=0))
        if _label_units(b.label) <= b.width * _BOX_IN / _MIN_BOX_IN:
            ax.text(b.x + (b.width - 0.1) / 2, y, b.label, ha="center", va="center", fontsize=_LABEL_PT,
                    color="white")
    end = boxes[-1].x + boxes[-1].width if boxes else 0.0
    if cut > 0:
        ax.text(end + 0.1, y, f"… {cut} more", fontsize=_LABEL_PT, va="center", ha="left", color="#555555")
        end += _TAIL
    if stalled:
        ax.plot([end + 0.1] * 2, [y - 0.45, y + 0.45], color="#C44E52", lw=2.5)
        ax.text(end + 0.4, y, "stalled", color="#C44E52", fontsize=_LABEL_PT, va="center", ha="left")


def _draw_stops(ax: Any, trace: Trace, streams: dict[int, Any], placed: dict[int, tuple[list[_Box], int]],
                lanes: list[int]) -> list[str]:
    """A dashed mark in each lane where each stopped worker stopped; their legend labels."""
    labels = []
    for s in (trace.meta.get("stopped_workers") or [])[:8]:  # a hostile trace may list thousands
        w, ts = int(s["worker"]), int(s.get("t_ns", 0))
        for y, lane in enumerate(lanes):
            rows = streams[lane]
            k = int((rows["t_ns"] < ts).sum()) if "t_ns" in rows.columns else 0
            x = _arrival_x(placed[lane][0], k)
            ax.plot([x - 0.05] * 2, [y - 0.5 - (0.45 if y == 0 else 0), y + 0.5], color="#C44E52", lw=1.5, ls="--")
            if y == 0:
                ax.text(x + 0.25, -0.7, f"worker {w} stopped", color="#C44E52", fontsize=_LABEL_PT, va="center",
                        ha="left")
        after = s.get("after_elements")
        labels.append(f"worker {w} stopped" + (f" (after {after} elements)" if after is not None else ""))
    return labels


def _arrival_x(boxes: list[_Box], k: int) -> float:
    """The x of arrival ``k`` (its left edge) in a lane of placed boxes."""
    for b in boxes:
        if b.first <= k < b.first + b.n:
            return b.x + (k - b.first) / b.n * b.width
    return boxes[-1].x + boxes[-1].width if boxes else 0.0


def _streams_legend(ax: Any, workers: set[int], stops: list[str], stall: Mapping[str, Any],
                    stalled: list[int]) -> None:
    """Worker colours and what the red marks mean, under the axes (never over the lanes)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Patch(color=_worker_color(w), label="worker ?" if w < 0 else f"worker {w}")
                          for w in sorted(workers)]
    handles += [Line2D([], [], color="#C44E52", ls="--", lw=1.5, label=s) for s in stops]
    if stalled:
        who = ", ".join(str(c) for c in stalled)
        handles.append(Line2D([], [], color="#C44E52", lw=2.5, label=f"consumer {who} then stalled "
                              f"({stall.get('after_s')} s without an element)"))
    if not handles:
        return
    if ax.figure.get_layout_engine() is not None:  # our own figure: a legend row under the axes
        chars = sum(len(h.get_label()) + 6 for h in handles)
        one_row = chars * 0.6 * _LABEL_PT / 72 < ax.figure.get_size_inches()[0] - 0.3
        ax.figure.legend(handles=handles, loc="outside lower left", ncols=len(handles) if one_row else 2,
                         fontsize=_LABEL_PT, frameon=False, handlelength=1.5)
    else:  # the caller's axes: beside them
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=_LABEL_PT, frameon=False)
