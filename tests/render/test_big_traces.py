"""Issue 36 item 7: every view of a loaded trace answers in seconds, drawing a summary beyond what a figure
can show and saying so. The traces here are small files a loader accepts (within load_trace's bounds) that
drew for minutes before: 8,000 replicas, 10,000 lanes, 100,000 distinct stage names, a megabyte address."""

from __future__ import annotations

import io
import json
import time

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd

import vizdist
from vizdist.render.topology import plot_topology
from vizdist.trace import Trace, load_trace

GUARD_S = 120  # far above what a bounded view takes (seconds, also on a loaded machine); unbounded: minutes


def _timed(fn):
    t0 = time.monotonic()
    out = fn()
    assert time.monotonic() - t0 < GUARD_S
    return out


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


def test_8000_replicas_in_a_small_file_draw_a_bounded_split(tmp_path):
    n = 8000
    t = Trace.from_records(elements=[dict(step=0, replica=r, source_id=r, position=0) for r in range(n)],
                           batches=[dict(step=0, replica=r, n_elements=1) for r in range(n)], meta={"num_replicas": n})
    p = t.save(tmp_path / "wide.json.gz")
    assert p.stat().st_size < 100_000
    loaded = load_trace(p)
    fig = _timed(loaded.plot.split)
    assert repr(fig).startswith(f"<Figure: split of 1 of 1 step(s) x 16 of {n} replica(s)")
    assert fig.get_size_inches()[0] < 40 and _png(fig).startswith(b"\x89PNG")
    assert any(f"first 16 of {n} replicas" in t.get_text() for t in fig.findobj(matplotlib.text.Text))
    explorer = _timed(loaded.show)
    assert len(explorer.cards.children) == 64
    bundle = _timed(explorer._repr_mimebundle_)
    assert len(bundle["text/html"]) < 200_000 and f"first 64 of {n} replicas" in bundle["text/html"]
    assert f"first 16 of {n} replicas" in bundle["text/plain"] and len(bundle["text/plain"]) < 5_000


def test_the_summary_command_prints_a_bounded_split_of_8000_replicas(tmp_path, capsys):
    from vizdist.cli import main

    n = 8000
    t = Trace.from_records(elements=[dict(step=s, replica=r, source_id=r, position=0) for s in range(2)
                                     for r in range(n)], meta={"num_replicas": n})
    assert main(["summary", str(t.save(tmp_path / "wide.json"))]) == 0
    out = capsys.readouterr().out
    assert len(out) < 5_000 and f"({n - 16} more replicas not shown)" in out


def _events(n: int, **cols) -> Trace:
    ar = np.arange(n)
    ev = pd.DataFrame({"lane": np.where(ar % 2, "w0 host", "w0 step"), "stage": np.where(ar % 2, "transfer", "consume"),
                       "step": ar // 2, "t_start_ns": ar * 10, "t_end_ns": ar * 10 + 5, **cols})
    return Trace(events=ev, meta={"kind": "distribution"})


def test_10000_lanes_draw_a_bounded_timeline():
    n = 10_000
    t = Trace(events=pd.DataFrame({"lane": [f"lane {i}" for i in range(n)], "stage": "consume", "step": 0,
                                   "t_start_ns": np.arange(n), "t_end_ns": np.arange(n) + 5}),
              meta={"kind": "distribution"})
    fig = _timed(t.plot.timeline)
    labels = [x.get_text() for x in fig.axes[0].get_yticklabels()]
    assert len(labels) == 48 and _png(fig).startswith(b"\x89PNG")
    assert any(f"{n - 48:,} more lanes not drawn" in x.get_text() for x in fig.findobj(matplotlib.text.Text))
    widget = _timed(lambda: t.show("timeline"))
    assert len(json.dumps(widget.spec)) < 2_000_000


def test_100000_stage_and_op_names_and_huge_depths_draw_in_seconds():
    n = 100_000
    t = _events(n, stage=[f"stage {i}" for i in range(n)], op=[f"op {i}" for i in range(n)],
                depth=np.random.default_rng(0).integers(0, 2**40, n), buffered=np.arange(n) % 3)
    from vizdist.analysis.timeline_layout import MAX_NAMES, timeline_layout

    lay = _timed(lambda: timeline_layout(t))
    assert len(lay.stage_names) <= MAX_NAMES + 1 and len(lay.op_names) <= MAX_NAMES + 1
    assert lay.stage_names[-1] == f"other ({n - MAX_NAMES + 6:,} stage names)" or len(lay.stage_names) <= MAX_NAMES + 1
    fig = _timed(t.plot.timeline)
    assert _png(fig).startswith(b"\x89PNG")
    assert len(fig.axes[-1].get_lines()) <= 9  # buffer lines: at most 8, and one says how many were left out
    widget = _timed(lambda: t.show("timeline"))
    assert len(json.dumps(widget.spec)) < 2_000_000


def test_to_chrome_trace_streams_its_events(tmp_path):
    """A 3 million event trace held 3.3 GB to export: the events are written as they are made."""
    import tracemalloc

    t = _events(100_000, elements="[1, 2]")
    tracemalloc.start()
    try:
        path = t.to_chrome_trace(tmp_path / "run.trace.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40_000_000, peak  # holding every event (about 1 KB each) needs over 100 MB
    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 100_000 and spans[0]["args"]["elements"] == [1, 2]


def test_a_megabyte_network_address_draws_cut():
    from vizdist.render.topology_layout import topology_layout

    big = "h" * 1_000_000 + ":1"
    t = Trace.from_records(elements=[dict(step=0, replica=0, source_id=0)],
                           meta={"network": {"addresses": {"worker": [big, "h:2"]}, "listening": {"worker:0": [big]},
                                             "connections": {"worker:0": [big]}}})
    lay = _timed(lambda: topology_layout(t))
    assert sum(len(line) for node in lay.nodes for line in node["lines"]) < 2_000
    fig = _timed(lambda: plot_topology(t))
    assert max(len(x.get_text()) for x in fig.findobj(matplotlib.text.Text)) <= 120
    assert _png(fig).startswith(b"\x89PNG")
    from vizdist.render.topology import topology_html

    assert len(_timed(lambda: topology_html(t))) < 50_000
    assert len(repr(vizdist.topology(t))) < 5_000  # the table() keeps the whole value: it is data


def test_10000_workers_in_a_topology_draw_a_bounded_figure():
    from vizdist.render.topology_layout import topology_layout

    n = 10_000
    spec = {"worker": [f"h{i}:1" for i in range(n)]}
    lay = _timed(lambda: topology_layout(spec))
    assert len(lay.nodes) <= 65 and any(f"{n - 64:,} more tasks" in note for note in lay.notes)
    assert _png(_timed(lambda: plot_topology(spec))).startswith(b"\x89PNG")


def _meta_trace(kind: str, n: int) -> Trace:
    """A trace whose meta (or elements) hold ``n`` entries of what one view draws."""
    el = [dict(step=0, replica=0, source_id=0, position=0)]
    if kind == "placement":
        ops = [dict(stage=("pipeline", "step", "host")[i % 3], kind="graph", op_type=f"Op{i}", op_name=f"n{i}",
                    graph="g", device=f"/device:CPU:{i % (n // 10)}", count=1, first_step=0, last_step=0)
               for i in range(n)]
        copies = [dict(src=f"/device:CPU:{i}", dst=f"/device:CPU:{i + 1}", via="x", count=1) for i in range(n // 10)]
        return Trace.from_records(elements=el, meta={"placement": {"ops": ops, "copies": copies, "steps_marked": 10**12}})
    if kind == "closures":
        cl = [dict(closure=i, worker=i % (n // 10), status="done", attempts=[
            dict(worker=i % (n // 10), outcome="done", t_start_ns=i, t_end_ns=i + 1)]) for i in range(n)]
        return Trace.from_records(elements=el, meta={"kind": "parameter_server", "closures": cl, "num_workers": 10_000})
    if kind == "variables":
        rows = [dict(variable=f"v{i // 4}", shard=i % 4, shards=4, shape=[4], rows=f"{i % 4 * 4}:{i % 4 * 4 + 4}",
                     bytes=16, job="ps", task=i % 1000) for i in range(n)]
        return Trace.from_records(elements=el, meta={"kind": "parameter_server", "variables": rows})
    if kind == "service":
        return Trace.from_records(elements=[dict(step=i // 4, source_id=i, worker=i % 1000, consumer=i % 1000,
                                                 order=i) for i in range(n)],
                                  meta={"kind": "data_service", "num_workers": 1000, "sharding_policy": "OFF"})
    inputs = [dict(replica=i, device=f"CPU:{i}", value=[float(i)] * 8, type="float") for i in range(n)]
    return Trace.from_records(elements=el, meta={"reductions": [dict(
        call="reduce", reduce_op="SUM", inputs=inputs, results=inputs, expected=1.0, ops=[], workers=[0])]})


def test_views_of_long_meta_lists_draw_the_first_ones_and_say_so():
    n = 20_000
    placement = _meta_trace("placement", n)
    fig = _timed(placement.plot.placement)
    assert any("(first 40 of 100 rows)" in x.get_text() for x in fig.findobj(matplotlib.text.Text))
    view = _timed(lambda: placement.show("placement"))
    assert "first 32 of 2,001 devices shown" in repr(view) and len(view.layout["steps"]) == 100_000
    assert len(_timed(view._repr_mimebundle_)["text/html"]) < 600_000
    closures = _meta_trace("closures", n)
    fig = _timed(closures.plot.closures)
    assert "(first 32 of 10,000 workers, 320 of 20,000 attempts drawn)" in fig.axes[0].get_title(loc="left")
    assert repr(fig).startswith(f"<Figure: {n} closure(s), {n} attempt(s)") and len(repr(fig)) < 1_000
    fig = _timed(_meta_trace("variables", n).plot.variable_shards)
    assert "(first 40 of 5,000 variables)" in fig.axes[0].get_title(loc="left") and len(repr(fig)) < 10_000
    service = _meta_trace("service", n)
    assert "first 32 of 1000 workers" in _timed(service.plot.coverage).axes[0].get_title()
    assert "(first 32 of 1000 consumers)" in _timed(service.plot.streams).axes[0].get_title()
    reduction = _timed(lambda: _meta_trace("reduction", n).show("reduction"))
    assert "first 32 of 20000 inputs" in reduction.layout["note"] and len(repr(reduction)) < 5_000
    assert _timed(reduction._repr_mimebundle_)["image/png"]


def test_timing_statistics_of_a_trace_without_profiler_columns_are_empty_not_a_key_error():
    t = Trace.from_records(events=[dict(lane="w0 host", stage="consume", step=0, t_start_ns=0, t_end_ns=1)])
    assert t.timing.prefetch_buffers().empty


def _every_step_empty(steps: int) -> Trace:
    """``steps`` steps over 4 replicas, replica 3 empty at each (a finding per step)."""
    b = pd.DataFrame({"step": np.repeat(np.arange(steps), 4), "replica": np.tile(np.arange(4), steps),
                      "n_elements": np.tile([1, 1, 1, 0], steps)})
    b["empty"] = b["n_elements"] == 0
    e = b[b["n_elements"] > 0][["step", "replica"]].assign(source_id=lambda d: np.arange(len(d)), position=0)
    return Trace(elements=e, batches=b, meta={"kind": "distribution", "num_replicas": 4, "global_batch_size": 3})


def test_a_finding_at_each_of_20000_steps_is_listed_to_a_bound_and_counted(tmp_path, capsys):
    from vizdist.cli import main
    from vizdist.diagnose import MAX_PER_CODE

    n = 20_000
    t = _every_step_empty(n)
    f = _timed(lambda: vizdist.diagnose(t))
    empty = f[f["code"] == "empty-replica"]
    assert len(empty) == MAX_PER_CODE + 1 and empty["step"].tolist()[1:MAX_PER_CODE + 1] == list(range(MAX_PER_CODE))
    assert empty["message"].iloc[0] == (f"And {n - MAX_PER_CODE:,} more findings like these (steps {MAX_PER_CODE}.."
                                        f"{n - 1}): diagnose lists the first {MAX_PER_CODE:,} of each kind.")
    bundle = _timed(lambda: t.show()._repr_mimebundle_())
    assert len(bundle["text/html"]) < 300_000 and "more findings (vizdist.diagnose(trace) lists them all)" in \
        bundle["text/html"]
    assert main(["summary", str(t.save(tmp_path / "t.json"))]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 260 and "more findings (vizdist.diagnose(trace) lists them all)" in out
    part = vizdist.diagnose(t, max_cells=4_000)
    note = part[part["code"] == "diagnose-partial"]["message"].iloc[0]
    assert note.startswith(f"This trace has {n:,} steps of 4 replicas; diagnose read the first 1,000 steps")
    assert part[part["code"] == "empty-replica"]["step"].max() == 999


def test_a_sparse_table_of_100000_steps_and_10000_replicas_is_diagnosed_in_a_bound():
    """Each row its own step and one of 10,000 replicas: a steps x replicas table would hold a billion cells."""
    n = 100_000
    t = Trace(elements=pd.DataFrame({"step": np.arange(n), "replica": np.arange(n) % 10_000, "source_id": np.arange(n),
                                     "position": 0}), meta={"kind": "distribution", "num_replicas": 10_000})
    f = _timed(lambda: vizdist.diagnose(t))
    assert "diagnose-partial" in f["code"].tolist()
    assert len(_timed(lambda: t.show()._repr_mimebundle_())["text/html"]) < 1_000_000
