"""Views hang off the objects they draw (``trace.plot.split()``, ``trace.show()``, ``topology.plot()``), as real
classes (``vizdist.views``) whose methods declare every option and import their renderer when called."""

from __future__ import annotations

import inspect
import pydoc
import subprocess
import sys

import matplotlib
import pytest

import vizdist
from vizdist import views
from vizdist.analysis.sharding import ShardComparison
from vizdist.render import (
    explorer,
    export,
    figures,
    parameter_server,
    placement,
    reduction,
    service,
    timeline_figure,
    timeline_widget,
    topology,
)
from vizdist.trace import Trace

matplotlib.use("Agg")

#: Each view -> the renderer it calls with the trace first (the renderer's own signature is the reference).
RENDERERS = {
    (views.PlotAccessor, "split"): figures.plot_split,
    (views.PlotAccessor, "timeline"): timeline_figure.plot_timeline,
    (views.PlotAccessor, "coverage"): service.plot_coverage,
    (views.PlotAccessor, "streams"): service.plot_streams,
    (views.PlotAccessor, "placement"): placement.plot_placement,
    (views.PlotAccessor, "closures"): parameter_server.plot_closures,
    (views.PlotAccessor, "variable_shards"): parameter_server.plot_variable_shards,
    (views.PlotAccessor, "topology"): topology.plot_topology,
    (views.ShowAccessor, "explorer"): explorer.show,
    (views.ShowAccessor, "timeline"): timeline_widget.timeline,
    (views.ShowAccessor, "placement"): placement.show_placement,
    (views.ShowAccessor, "topology"): topology.show_topology,
    (views.ShowAccessor, "reduction"): reduction.show_reduction,
}


def _trace() -> Trace:
    return Trace.from_records(elements=[dict(step=s, replica=r, source_id=2 * s + r) for s in range(3) for r in range(2)],
                              meta={"num_replicas": 2, "global_batch_size": 2})


def _options(fn) -> list[tuple[str, object, object]]:
    """(name, kind, default) of every parameter after the first (the object drawn)."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    return [(p.name, p.kind, p.default) for p in params]


def test_every_view_is_listed_here():
    assert {(a, n) for a in (views.PlotAccessor, views.ShowAccessor) for n in a.views()} == set(RENDERERS)


@pytest.mark.parametrize(("accessor", "name"), sorted(RENDERERS, key=lambda k: (k[0].__name__, k[1])))
def test_a_view_declares_the_options_of_its_renderer(accessor, name):
    """Same names, kinds and defaults as the renderer it calls (minus the trace): nothing is lost or drifts."""
    view = getattr(accessor, name)
    assert _options(view) == _options(RENDERERS[accessor, name])
    assert view.__doc__ and "Example:" in view.__doc__


def test_help_shows_a_views_parameters():
    text = pydoc.render_doc(_trace().plot.split, renderer=pydoc.plaintext)
    assert "split(*, max_steps: 'int' = 12, max_replicas: 'int' = 16, phase: 'str | None' = None" in text
    assert "max_replicas: draw at most this many replicas" in text


def test_a_trace_plot_is_its_renderer_with_the_trace_first():
    t = _trace()
    a, b = t.plot.split(title="x"), figures.plot_split(t, title="x")
    assert [ax.get_title() for ax in a.axes] == [ax.get_title() for ax in b.axes]
    assert [[txt.get_text() for txt in ax.texts] for ax in a.axes] == [[txt.get_text() for txt in ax.texts]
                                                                       for ax in b.axes]


def test_show_opens_the_explorer_by_default_and_names_a_view():
    t = Trace.from_records(events=[dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=10**6)])
    assert type(t.show()).__name__ == "Explorer"
    assert t.show("timeline", step=0).step == t.show.timeline(step=0).step == 0


def test_an_unknown_view_names_the_ones_there_are():
    with pytest.raises(views.ViewError, match="has no view 'splitt'; its views are: closures, coverage"):
        _trace().plot.splitt()
    with pytest.raises(views.ViewError, match="has no view 'nonsense'; its views are: explorer, placement"):
        _trace().show("nonsense")
    with pytest.raises(AttributeError):
        _trace().plot._private  # noqa: B018  # private names are plain AttributeErrors


def test_a_registered_view_is_a_method_of_its_accessor(recwarn):
    def first_ids(trace: Trace, *, step: int = 0) -> list[int]:
        """Replica 0's ids at ``step``."""
        return trace.ids(step=step, replica=0)

    assert views.register_view(views.PlotAccessor, "first_ids")(first_ids) is first_ids
    try:
        t = _trace()
        assert t.plot.first_ids(step=2) == t.ids(step=2, replica=0) == [4]
        assert "first_ids" in dir(t.plot) and "first_ids" in views.PlotAccessor.views()
        assert str(inspect.signature(t.plot.first_ids)) == "(*, step: 'int' = 0) -> 'list[int]'"
        assert "Replica 0's ids" in pydoc.render_doc(t.plot.first_ids, renderer=pydoc.plaintext)
    finally:
        views.unregister_view(views.PlotAccessor, "first_ids")
    assert not hasattr(views.PlotAccessor, "first_ids") and not recwarn.list


def test_a_registered_view_that_takes_a_name_warns_and_can_be_undone():
    with pytest.warns(views.ViewNameWarning, match="'split' for PlotAccessor replaces"):
        views.register_view(views.PlotAccessor, "split")(lambda trace: "mine")
    try:
        assert _trace().plot.split() == "mine"
    finally:
        views.unregister_view(views.PlotAccessor, "split")
    assert views.PlotAccessor.split.__doc__.startswith("Draw steps × replicas")
    with pytest.raises(TypeError, match="accessor class"):
        views.register_view(Trace, "x")
    with pytest.raises(ValueError, match="public Python name"):
        views.register_view(views.PlotAccessor, "_x")


def test_a_registered_accessor_hangs_off_the_trace():
    @views.register_accessor(Trace, "counts")
    class Counts(views.Accessor):
        def elements(self) -> int:
            return len(self._obj.elements)

    try:
        assert _trace().counts.elements() == 6 and Trace.counts is Counts
    finally:
        del Trace.counts
    plot = Trace.__dict__["plot"]  # the property trace.py defines
    with pytest.warns(views.ViewNameWarning, match="'plot' for Trace replaces"):
        views.register_accessor(Trace, "plot")(Counts)
    try:
        assert isinstance(_trace().plot, Counts)
    finally:
        Trace.plot = plot
    assert isinstance(_trace().plot, views.PlotAccessor)


def test_results_of_the_analysis_layer_draw_themselves():
    t = Trace.from_records(elements=[dict(step=0, worker=w, source_file="a.txt", source_line=w, value=str(w))
                                     for w in range(2)])
    cmp = ShardComparison({"DATA": t}, files=[], workers=2, global_batch_size=2)
    assert "<table" in cmp._repr_html_()
    assert len(cmp.plot(width=4.0).axes) == 1
    topo = vizdist.topology({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
    bundle = topo._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "image/png"} and bundle["text/plain"] == repr(topo)
    assert repr(topo.plot(highlight="worker:1")).startswith("<Figure: topology (multi_worker)")
    assert topo.show().static_html() == topology.topology_html(topo)


def test_a_topologys_outputs_come_from_one_layout(monkeypatch):
    """HTML and PNG of one display: one layout built (as TimelineLayout is for the timeline)."""
    from vizdist.render import topology_layout

    built = []
    real = topology_layout.topology_layout

    def counted(source, **kwargs):
        lay = real(source, **kwargs)
        if lay is not source:
            built.append(lay)
        return lay

    monkeypatch.setattr(topology, "topology_layout", counted)
    bundle = vizdist.topology({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]})._repr_mimebundle_()
    assert len(built) == 1 and bundle["text/html"] == topology.topology_html(built[0])
    assert topology.topology_png(built[0]) == bundle["image/png"]


def test_import_vizdist_imports_no_renderer():
    code = "import sys, vizdist; vizdist.Trace().plot; print(any(m.startswith('vizdist.render') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_the_chrome_export_is_the_renderers(tmp_path):
    t = Trace.from_records(events=[dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=10)])
    a, b = t.to_chrome_trace(tmp_path / "a.json"), export.to_chrome_trace(t, tmp_path / "b.json")
    assert a.read_text() == b.read_text()
