"""Placement, topology and parameter-server figures are readable at a notebook's width (issue #27).

Every check reads the figure's own artists: each text is at least ``MIN_TEXT_PT`` points, the figure
is at most ``MAX_WIDTH_IN`` wide, what is drawn lies inside it and fills most of it, and no two texts
cover each other.
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.text import Text

from vizdist.render._text import MAX_WIDTH_IN, MIN_TEXT_PT
from vizdist.render.parameter_server import plot_closures, plot_variable_shards
from vizdist.render.placement import plot_placement
from vizdist.render.topology import plot_topology
from vizdist.trace import Trace

STAGES = ("pipeline", "iterator", "transfer", "variable", "step", "reduce", "host")


def _placement(n_devices: int, n_ops: int) -> Trace:
    ops = [dict(stage=STAGES[i % 7], op_type=f"Op{i}", graph="Dataset_map_f" if i % 7 == 0 else "step_fn",
                device=f"CPU:{d}", count=3 + i, nonfinite=int(i == 2), first_step=0, last_step=1)
           for i in range(n_ops) for d in range(n_devices if STAGES[i % 7] in ("variable", "step") else 1)]
    copies = [dict(src="CPU:0", dst=f"CPU:{d}", via="input batch", count=2) for d in range(1, n_devices)]
    return Trace.from_records(meta={"strategy": "MirroredStrategy", "placement": {
        "ops": ops, "copies": copies, "host": "CPU:0", "steps_marked": 2}})


def _cluster(kind: str, workers: int, ps: int = 0) -> Trace:
    jobs = {"chief": 1, "worker": workers, "ps": ps} if ps else {"worker": workers}
    addrs = {j: [f"127.0.0.1:{20000 + 100 * k + i}" for i in range(n)] for k, (j, n) in enumerate(jobs.items())}
    return Trace(meta={"kind": kind, "cluster": {"mode": "ps" if ps else "mw", "workers": workers, "ps": ps},
                       "network": {"addresses": addrs, "isolated": True}})


def _service(workers: int, consumers: int) -> Trace:
    addrs = {"dispatcher": ["127.0.0.1:5050"], "data_worker": [f"127.0.0.1:{5051 + i}" for i in range(workers)]}
    return Trace(meta={"kind": "data_service", "consumers": consumers, "network": {"addresses": addrs,
                                                                                   "isolated": True}})


def _shards(ps: int, shards: int) -> list[dict]:
    return [dict(variable=f"v{n}", partitioner=f"Fixed({n})", shard=s, shards=n, shape=[8, 4], rows=f"{8 * s}:{8 * s + 8}",
                 bytes=128, job="ps", task=s % ps) for n in (1, shards) for s in range(n)]


def _closures(workers: int, n: int) -> dict:
    return {"num_workers": workers, "lost_tasks": [{"task": "worker-1"}], "closures": [
        {"closure": c, "worker": c % workers, "status": "done", "attempts": [
            {"worker": c % workers, "outcome": "rescheduled" if c == 1 else "done", "t_start_ns": c}]}
        for c in range(n)]}


FIGURES = {
    "placement, 2 devices": lambda: plot_placement(_placement(2, 3)),
    "placement, 8 devices x 40 rows": lambda: plot_placement(_placement(8, 60)),
    "placement, 16 devices": lambda: plot_placement(_placement(16, 8)),
    "topology, 2-worker spec": lambda: plot_topology({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}),
    "topology, chief/workers/ps spec": lambda: plot_topology(
        {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]}),
    "topology, 4 workers + 2 ps": lambda: plot_topology(_cluster("parameter_server", 4, 2)),
    "topology, 8 workers": lambda: plot_topology(_cluster("multi_worker", 8)),
    "topology, data service": lambda: plot_topology(_service(4, 2)),
    "topology, one process": lambda: plot_topology(Trace(meta={"devices": ["CPU:0", "CPU:1"]})),
    "variable shards": lambda: plot_variable_shards(_shards(4, 16)),
    "closures, 6 workers": lambda: plot_closures(_closures(6, 60)),
    "closures, 2 workers x 300": lambda: plot_closures(_closures(2, 300)),
}


@pytest.fixture(scope="module", params=sorted(FIGURES))
def drawn(request):
    fig = FIGURES[request.param]()
    fig.set_dpi(72)  # the dpi the views save PNGs at (text is widest there)
    fig.draw_without_rendering()  # lays out tick and axis labels, as a savefig would
    return fig, fig._get_renderer()


def _drawn_texts(ax) -> list[Text]:
    """The texts an Axes draws: its own, titles, legend, and tick and axis labels where its axes are on."""
    out = [*ax.texts, ax.title, ax._left_title, ax._right_title]
    if ax.get_legend() is not None:
        out += [*ax.get_legend().get_texts(), ax.get_legend().get_title()]
    if ax.axison:
        out += [*ax.get_xticklabels(), *ax.get_yticklabels(), ax.xaxis.label, ax.yaxis.label]
    return out


def _texts(fig) -> list[Text]:
    every = [*fig.texts, *(t for ax in fig.axes for t in _drawn_texts(ax))]
    assert {id(t) for t in every} <= {id(t) for t in fig.findobj(Text)}
    return [t for t in every if t.get_visible() and t.get_text().strip()]


def test_every_text_is_at_least_min_text_pt(drawn) -> None:
    fig, _ = drawn
    small = {(t.get_text()[:30], t.get_fontsize()) for t in _texts(fig) if t.get_fontsize() < MIN_TEXT_PT}
    assert not small
    assert len(_texts(fig)) >= 3


def test_fits_a_notebook_and_nothing_is_clipped(drawn) -> None:
    fig, renderer = drawn
    assert fig.get_size_inches()[0] <= MAX_WIDTH_IN + 1e-6
    box = fig.bbox.padded(1)
    for t in _texts(fig):
        ext = t.get_window_extent(renderer)
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1 and box.y0 <= ext.y0 and ext.y1 <= box.y1, t.get_text()[:40]


def test_content_fills_the_figure(drawn) -> None:
    fig, renderer = drawn
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes] + [t.get_window_extent(renderer) for t in fig.texts]
    x0, x1 = min(b.x0 for b in boxes), max(b.x1 for b in boxes)
    y0, y1 = min(b.y0 for b in boxes), max(b.y1 for b in boxes)
    for filled, whole in ((y1 - y0, fig.bbox.height), (x1 - x0, fig.bbox.width)):
        empty_in = (whole - filled) / fig.dpi  # a small figure keeps its fixed margins
        assert filled / whole > 0.85 or empty_in < 0.3, (filled / whole, empty_in)


def test_no_text_covers_another(drawn) -> None:
    fig, renderer = drawn
    exts = [(t.get_text()[:30], t.get_window_extent(renderer).padded(-1.5)) for t in _texts(fig)]  # 1.5 px: line gaps
    assert not [(a, b) for (a, ea), (b, eb) in itertools.combinations(exts, 2) if ea.overlaps(eb)]


def test_a_highlighted_topology_keeps_the_sizes() -> None:
    fig = plot_topology({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, highlight="ps:0")
    assert min(t.get_fontsize() for t in _texts(fig)) >= MIN_TEXT_PT
