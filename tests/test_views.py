"""Views hang off the objects they draw (``trace.plot.split()``, ``trace.show()``), through ``vizdist.views``."""

from __future__ import annotations

import subprocess
import sys

import matplotlib
import pytest

import vizdist
from vizdist import views
from vizdist.analysis.sharding import ShardComparison
from vizdist.trace import Trace

matplotlib.use("Agg")


def _trace() -> Trace:
    return Trace.from_records(elements=[dict(step=s, replica=r, source_id=2 * s + r) for s in range(3) for r in range(2)],
                              meta={"num_replicas": 2, "global_batch_size": 2})


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k, v in views.BUILTIN.items() for n in v])
def test_every_builtin_view_resolves_to_a_function(kind, name):
    assert callable(views.resolve(kind, name))


def test_a_trace_plot_is_the_top_level_function_with_the_trace_first():
    t = _trace()
    a, b = t.plot.split(title="x"), vizdist.plot_split(t, title="x")
    assert [ax.get_title() for ax in a.axes] == [ax.get_title() for ax in b.axes]
    assert [[txt.get_text() for txt in ax.texts] for ax in a.axes] == [[txt.get_text() for txt in ax.texts]
                                                                       for ax in b.axes]
    assert set(dir(t.plot)) == set(views.BUILTIN["Trace"])


def test_show_opens_the_explorer_by_default():
    assert type(_trace().show()).__name__ == "Explorer"


def test_an_unknown_view_names_the_ones_there_are():
    with pytest.raises(views.ViewError, match="has no view 'splitt'; its views are: closures, coverage"):
        _trace().plot.splitt()
    with pytest.raises(ValueError, match="module:function"):
        views.register("Trace", "bad", "no_colon_here")


def test_objects_of_the_analysis_layer_draw_through_the_registry():
    t = Trace.from_records(elements=[dict(step=0, worker=w, source_file="a.txt", source_line=w, value=str(w))
                                     for w in range(2)])
    cmp = ShardComparison({"DATA": t}, files=[], workers=2, global_batch_size=2)
    assert "<table" in cmp._repr_html_()
    bundle = vizdist.topology({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})._repr_mimebundle_()
    assert {"text/html", "image/png"} <= set(bundle)


def test_importing_a_renderer_registers_nothing():
    """Registration is explicit (vizdist/__init__.py): importing every renderer leaves the registry as it was."""
    code = ("import vizdist, vizdist.views as v, copy; before = copy.deepcopy(v._VIEWS)\n"
            "import vizdist.render.topology, vizdist.render.sharding, vizdist.render.figures\n"
            "print(before == v._VIEWS)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "True"


def test_import_vizdist_imports_no_renderer():
    code = "import sys, vizdist; print(any(m.startswith('vizdist.render') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_top_level_views_of_a_trace_are_deprecated_aliases():
    """``vizdist.plot_split(trace)`` still works for one release, says what to write instead, and left ``__all__``."""
    t = _trace()
    with pytest.warns(DeprecationWarning, match=r"vizdist.plot_split is deprecated: use trace.plot.split"):
        fig = vizdist.plot_split(t, title="x")
    assert [ax.get_title() for ax in fig.axes] == [ax.get_title() for ax in t.plot.split(title="x").axes]
    assert "plot_split" not in vizdist.__all__ and "show" not in vizdist.__all__
    assert {"plot_topology", "show_topology", "diagnose", "record", "trace_distribution"} <= set(vizdist.__all__)
