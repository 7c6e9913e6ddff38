"""The topology view: one layout feeds the figure, the HTML and the widget; hostile text stays text."""

from __future__ import annotations

import io
import typing

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path

import vizdist
from vizdist.contract import KINDS
from vizdist.render.topology import TopologyView, plot_topology, show_topology, topology_html
from vizdist.render.topology_layout import topology_layout
from vizdist.trace import Trace

SPEC = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "ps": ["127.0.0.1:4"]}


def test_one_layout_feeds_figure_and_html() -> None:
    topo = vizdist.topology(SPEC)
    lay = topology_layout(topo)
    assert [n["name"] for n in lay.nodes] == [t.name for t in topo.tasks]
    assert [(e["src"], e["dst"]) for e in lay.edges] == [(lk.src, lk.dst) for lk in topo.links]
    fig = plot_topology(topo)
    assert repr(fig) == f"<Figure: {lay.summary}>"
    assert repr(fig).startswith("<Figure: topology (parameter_server): tasks chief:0, worker:0, worker:1, ps:0;")
    html = topology_html(topo)
    assert all(t.name in html and t.address in html for t in topo.tasks)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue().startswith(b"\x89PNG")


def test_rows_follow_the_roles() -> None:
    lay = topology_layout(SPEC)
    y = {n["name"]: n["y"] for n in lay.nodes}
    assert y["chief:0"] > y["worker:0"] == y["worker:1"] > y["ps:0"]


def test_hostile_addresses_are_escaped_and_drawn_as_plain_text() -> None:
    bad = {"worker": ["<script>alert(1)</script>:1", "$\\frac{a}{$:2"]}
    html = topology_html(bad)
    assert "<script>" not in html and "&lt;script&gt;" in html
    buf = io.BytesIO()
    plot_topology(bad).savefig(buf, format="png")  # no mathtext error
    assert buf.getvalue().startswith(b"\x89PNG")


def test_a_topology_displays_itself_and_the_view_has_a_widget() -> None:
    topo = vizdist.topology(SPEC)
    bundle = topo._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "image/png"}
    view = show_topology(topo)
    assert isinstance(view, TopologyView) and repr(view) == repr(topo)
    box = view.widget()
    pick, image, card = box.children
    before = (image.value, card.value)
    pick.value = "ps:0"
    assert "ps:0" in card.value and "reads and updates variables" in card.value
    assert (image.value, card.value) != before


def test_highlight_dims_every_other_task() -> None:
    lay = topology_layout(SPEC, highlight="worker:1")
    assert [n["name"] for n in lay.nodes if not n["dim"]] == ["worker:1"]
    assert {(e["src"], e["dst"]) for e in lay.edges if not e["dim"]} == {("chief:0", "worker:1"),
                                                                          ("worker:1", "ps:0")}


def _example(tp, variant):
    from tests.test_contract import _example as example

    return example(tp, variant)


@pytest.mark.parametrize("variant", [0, 1, 2])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_any_meta_the_contract_accepts_has_a_topology(kind, variant) -> None:
    meta = {k: _example(tp, variant) for k, tp in typing.get_type_hints(KINDS[kind]).items()}
    meta.update(kind=kind, shards=[])
    trace = Trace(meta=meta)
    topo = vizdist.topology(trace)
    assert topology_html(topo) and repr(plot_topology(topo)).startswith("<Figure: topology")


def _spec(workers: int, ps: int, chief: bool) -> dict[str, list[str]]:
    jobs = {"chief": int(chief), "worker": workers, "ps": ps}
    return {j: [f"127.0.0.1:{2000 + 100 * k + i}" for i in range(n)] for k, (j, n) in enumerate(jobs.items()) if n}


def _nearest(point, boxes):
    """The box nearest ``point`` (display coordinates): where a link's line starts or ends."""
    (x, y) = point
    return min(boxes, key=lambda b: max(b.x0 - x, 0, x - b.x1) ** 2 + max(b.y0 - y, 0, y - b.y1) ** 2)


def _crossings(fig) -> list[tuple[int, int]]:
    """(link, box) pairs where a link's drawn path enters a task box that is not one of its two ends.

    Reads the figure's own artists in display coordinates: the task boxes (the one box that holds
    the others is the network) and each arrow's path, its curves flattened.
    """
    renderer = fig._get_renderer()
    ax = fig.axes[0]
    drawn = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, FancyBboxPatch)]
    boxes = [b for b in drawn if not any(o is not b and b.contains(*o.p0) for o in drawn)]
    out = []
    for i, arrow in enumerate(p for p in ax.patches if isinstance(p, FancyArrowPatch)):
        lines = arrow.get_transform().transform_path(arrow.get_path()).to_polygons(closed_only=False)
        ends = {id(_nearest(lines[0][0], boxes)), id(_nearest(lines[0][-1], boxes))}
        out += [(i, j) for j, box in enumerate(boxes) if id(box) not in ends
                and any(Path(line).intersects_bbox(box.padded(-1), filled=False) for line in lines)]
    return out


@pytest.mark.parametrize("chief", [True, False])
@pytest.mark.parametrize("ps", [0, 1, 2])
@pytest.mark.parametrize("workers", range(1, 13))
def test_no_link_passes_through_a_box_it_does_not_connect(workers, ps, chief) -> None:
    topo = vizdist.topology(_spec(workers, ps, chief))
    fig = plot_topology(topo)
    assert sum(isinstance(p, FancyArrowPatch) for p in fig.axes[0].patches) == len(topo.links)
    assert not _crossings(fig)


def _run(workers: int, ps: int, chief: bool) -> Trace:
    """A LocalCluster-like trace: its tasks in a private network, a launcher outside that gets files."""
    return Trace(meta={"kind": "parameter_server" if ps else "multi_worker", "network": {
        "addresses": _spec(workers, ps, chief), "isolated": True}, "cluster": {
        "mode": "ps" if ps else "mw", "workers": workers, "ps": ps}})


def _data_service(workers: int, consumers: int) -> Trace:
    addrs = {"dispatcher": ["127.0.0.1:5050"], "data_worker": [f"127.0.0.1:{5051 + i}" for i in range(workers)]}
    return Trace(meta={"kind": "data_service", "consumers": consumers,
                       "network": {"addresses": addrs, "isolated": True}})


def _tpu(hosts: int) -> Trace:
    return Trace(meta={"tpu": {"hosts": [{"address": f"10.0.0.{i}:8470", "task": i} for i in range(hosts)],
                               "num_hosts": hosts, "cores_per_host": 4}})


RUNS = {**{f"run, {w} workers, {ps} ps, chief {c}": (lambda w=w, ps=ps, c=c: _run(w, ps, c))
           for w in (1, 5, 12) for ps in (0, 3) for c in (True, False)},
        **{f"data service, {w} workers, {c} consumers": (lambda w=w, c=c: _data_service(w, c))
           for w in (1, 6) for c in (1, 3)},
        "7 workers and an evaluator": lambda: {**_spec(7, 0, True), "evaluator": ["127.0.0.1:9"]},
        "6 TPU hosts": lambda: _tpu(6)}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_no_link_passes_through_a_box_in_a_run_a_service_or_with_an_evaluator(name) -> None:
    topo = vizdist.topology(RUNS[name]())
    for highlight in (None, topo.tasks[-1].name):
        assert not _crossings(plot_topology(topo, highlight=highlight))
