"""The topology view: one layout feeds the figure, the HTML and the widget; hostile text stays text."""

from __future__ import annotations

import io
import typing

import matplotlib

matplotlib.use("Agg")

import pytest

import vizdist
from vizdist.contract import KINDS
from vizdist.render.topology import TopologyView, plot_topology, topology_html, topology_layout
from vizdist.trace import Trace

SPEC = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"], "ps": ["127.0.0.1:4"]}


def test_one_layout_feeds_figure_and_html() -> None:
    topo = vizdist.topology(SPEC)
    lay = topology_layout(topo)
    assert [n["name"] for n in lay["nodes"]] == [t.name for t in topo.tasks]
    assert [(e["src"], e["dst"]) for e in lay["edges"]] == [(lk.src, lk.dst) for lk in topo.links]
    fig = plot_topology(topo)
    assert repr(fig) == f"<Figure: {lay['summary']}>"
    assert repr(fig).startswith("<Figure: topology (parameter_server): tasks chief:0, worker:0, worker:1, ps:0;")
    html = topology_html(topo)
    assert all(t.name in html and t.address in html for t in topo.tasks)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue().startswith(b"\x89PNG")


def test_rows_follow_the_roles() -> None:
    lay = topology_layout(SPEC)
    y = {n["name"]: n["y"] for n in lay["nodes"]}
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
    view = vizdist.show_topology(topo)
    assert isinstance(view, TopologyView) and repr(view) == repr(topo)
    box = view.widget()
    pick, image, card = box.children
    before = (image.value, card.value)
    pick.value = "ps:0"
    assert "ps:0" in card.value and "reads and updates variables" in card.value
    assert (image.value, card.value) != before


def test_highlight_dims_every_other_task() -> None:
    lay = topology_layout(SPEC, highlight="worker:1")
    assert [n["name"] for n in lay["nodes"] if not n["dim"]] == ["worker:1"]
    assert {(e["src"], e["dst"]) for e in lay["edges"] if not e["dim"]} == {("chief:0", "worker:1"),
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
