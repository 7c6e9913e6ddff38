"""User strings that would break or stall a view: math markup, megabyte labels, megabyte results."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import vizdist
from vizdist.render.explorer import show
from vizdist.render.figures import plot_split
from vizdist.render.timeline_figure import plot_timeline
from vizdist.trace import Trace

HOSTILE = "part-$\\frac{a}{$.txt"


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


def _file_trace(name: str) -> Trace:
    return Trace.from_records(
        elements=[dict(step=0, replica=r, source_id=r, source_file=name, source_line=r, position=0) for r in range(2)],
        batches=[dict(step=0, replica=r, n_elements=1, result="x" * 1_000_000) for r in range(2)],
        meta={"kind": "distribution", "num_replicas": 2})


def test_a_file_name_with_math_markup_draws_as_plain_text():
    fig = plot_split(_file_trace(HOSTILE), title=HOSTILE)
    assert _png(fig).startswith(b"\x89PNG")
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    assert any("$\\frac{a}{$" in t for t in texts), "the user's text is shown as written"


def test_a_file_name_with_two_dollars_draws_in_the_split_and_the_explorer():
    """Two ``$`` make matplotlib measure a wrapped cell label as math, whatever parse_math says."""
    name = "draft ${v2$ final.txt"
    trace = _file_trace(name)
    fig = plot_split(trace)
    assert _png(fig).startswith(b"\x89PNG")
    assert any(name in t.get_text() for t in fig.findobj(matplotlib.text.Text)), "shown as written"
    bundle = show(trace)._repr_mimebundle_()
    assert bundle["image/png"] and "draft ${v2$ final.txt" in bundle["text/html"]


def test_the_explorer_shows_a_megabyte_result_cut_short_and_the_trace_keeps_it():
    trace = _file_trace("part-0.txt")
    explorer = show(trace)
    bundle = explorer._repr_mimebundle_()
    assert len(bundle["text/html"]) < 50_000
    assert len(trace.batches["result"].iloc[0]) == 1_000_000


def test_a_megabyte_lane_name_is_cut_in_the_timeline():
    lane = "L" * 1_000_000
    trace = Trace.from_records(events=[dict(lane=lane, stage="consume", step=s, t_start_ns=s * 10, t_end_ns=s * 10 + 5)
                                       for s in range(3)], meta={"kind": "distribution"})
    fig = plot_timeline(trace)
    assert max(len(t.get_text()) for t in fig.findobj(matplotlib.text.Text)) <= 120
    assert _png(fig).startswith(b"\x89PNG")


def test_an_in_memory_trace_with_10_mb_fields_makes_a_small_explorer_page():
    """Issue 36 item 6: 10 MB meta and table strings made a 90 MB explorer page; every shown string is cut."""
    big = "M" * 10_000_000
    trace = Trace.from_records(
        elements=[dict(step=0, replica=r, source_id=r, position=0, device=big, source_file=big) for r in range(2)],
        batches=[dict(step=0, replica=r, n_elements=1, device=big, result=big) for r in range(2)],
        meta={"kind": "distribution", "num_replicas": 2, "strategy": big, "api": big, "provenance": big,
              "provenance_note": big, "note": big})
    bundle = trace.show()._repr_mimebundle_()
    sizes = {k: len(v) for k, v in bundle.items() if isinstance(v, str)}
    assert max(sizes.values()) < 300_000, sizes
    assert "…" in bundle["text/html"] and "…" in bundle["text/plain"]
    assert len(repr(trace)) < 1_000
    findings = vizdist.diagnose(trace)
    assert findings["message"].str.len().max() <= 10_100 if len(findings) else True
