"""Coverage and stream figures from plain traces (no TensorFlow)."""

from __future__ import annotations

import pytest

from vizdist.render.service import coverage_table, plot_coverage, plot_streams
from vizdist.trace import Trace


def trace(policy: str = "OFF", **meta) -> Trace:
    rows = [dict(step=i, worker=w, consumer=0, source_id=i, order=n, t_ns=n)
            for n, (w, i) in enumerate((w, i) for w in (0, 1) for i in range(4))]
    base = {"instrument": "tf.data service", "sharding_policy": policy, "num_workers": 2,
            "expected_source_ids": list(range(5))}
    base.update(meta)
    return Trace.from_records(elements=rows, meta=base)


def test_coverage_table_counts_and_keeps_missing_ids():
    tab = coverage_table(trace())
    assert tab.index.tolist() == [0, 1] and tab.columns.tolist() == [0, 1, 2, 3, 4]
    assert tab.values.tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 0]]


def test_plot_coverage_marks_lost_and_stopped():
    t = trace(stopped_workers=[{"worker": 1, "after_elements": 4, "t_ns": 4}])
    fig = plot_coverage(t)
    ax = fig.axes[0]
    labels = [tk.get_text() for tk in ax.get_yticklabels()]
    assert labels == ["0", "1 (stopped)"]
    texts = [tx.get_text() for tx in ax.texts]
    assert texts.count("1") == 8 and texts.count("x") == 1
    assert "never arrived (1)" in ax.get_title() and "parallel_epochs" in ax.get_title()


def test_plot_streams_lanes_colours_and_markers():
    t = trace(stopped_workers=[{"worker": 1, "after_elements": 4, "t_ns": 4}],
              stall={"consumers": [0], "after_s": 3, "elements_received": 8})
    fig = plot_streams(t)
    ax = fig.axes[0]
    assert [tk.get_text() for tk in ax.get_yticklabels()] == ["consumer 0"]
    texts = [tx.get_text() for tx in ax.texts]
    assert "worker 1 stopped" in texts and "stalled" in texts
    assert [tx.get_text() for tx in fig.legends[0].get_texts()] == [
        "worker 0", "worker 1", "worker 1 stopped (after 4 elements)", "consumer 0 then stalled (3 s without an element)"]
    assert len(ax.patches) == 8


def test_streams_use_replica_lanes_for_strategy_traces():
    rows = [dict(step=0, replica=r, worker=0, source_id=r, order=r) for r in range(2)]
    fig = plot_streams(Trace.from_records(elements=rows, meta={"sharding_policy": "DYNAMIC"}))
    assert [tk.get_text() for tk in fig.axes[0].get_yticklabels()] == ["replica 0", "replica 1"]


def test_public_names_and_type_errors():
    t = Trace.from_records(elements=[dict(step=0, worker=0, source_id=0)])
    for view, renderer in ((t.plot.coverage, plot_coverage), (t.plot.streams, plot_streams)):  # the trace's own views
        assert repr(view(title="x")) == repr(renderer(t, title="x"))
    with pytest.raises(TypeError, match=r"vizdist\.Trace"):
        plot_coverage({"elements": []})
    with pytest.raises(TypeError, match=r"vizdist\.Trace"):
        plot_streams(None)


def test_explorer_layout_names_the_service_worker_of_each_element():
    from vizdist.render.layout import split_layout

    rows = [dict(step=0, replica=r, worker=w, source_id=i, position=0)
            for r, w, i in ((0, 1, 4), (1, 0, 5))]
    meta = {"instrument": "tf.data service", "sharding_policy": "OFF"}
    lay = split_layout(Trace.from_records(elements=rows, meta=meta))
    assert [c["labels"] for c in lay["cells"][0]] == [["4@w1"], ["5@w0"]]
    plain = split_layout(Trace.from_records(elements=rows))
    assert [c["labels"] for c in plain["cells"][0]] == [["4"], ["5"]]


def _long_stream(n: int = 200) -> Trace:
    """Notebook 04's stopped worker: both workers' copies interleave, worker 1 dies after 6, then only worker 0."""
    rows, k = [], 0
    for i in range(n):
        for w in (0, 1) if i < 3 else (0,):
            rows.append(dict(step=k, worker=w, consumer=0, source_id=i, order=k, t_ns=k))
            k += 1
    return Trace.from_records(elements=rows, meta={
        "sharding_policy": "OFF", "num_workers": 2, "stopped_workers": [{"worker": 1, "after_elements": 6, "t_ns": 6}],
        "stall": {"consumers": [0], "after_s": 5.0, "elements_received": k}})


def _boxes(ax):
    return sorted(((p.get_x(), p.get_x() + p.get_width()) for p in ax.patches), key=lambda b: b[0])


def test_long_stream_is_readable_capped_and_labels_stay_inside():
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from vizdist.render.service import STREAMS_MAX_WIDTH_IN

    t = _long_stream()
    fig = plot_streams(t)
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    assert fig.get_size_inches()[0] <= STREAMS_MAX_WIDTH_IN
    assert all(tx.get_fontsize() >= 8 for tx in fig.findobj(plt.Text) if tx.get_text())
    frame = ax.get_window_extent(renderer)
    legend = fig.legends[0].get_window_extent(renderer)
    whole = fig.bbox
    for tx in ax.texts:  # every label inside the axes, none under the legend, none off the figure
        box = tx.get_window_extent(renderer)
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1, tx.get_text()
        assert not box.overlaps(legend), tx.get_text()
    assert whole.x0 <= legend.x0 and legend.x1 <= whole.x1 and not legend.overlaps(frame)
    # every element label sits inside the box it names (labels that would not fit are not drawn)
    boxes = _boxes(ax)
    for tx in ax.texts:
        if tx.get_color() == "white":
            x0, x1 = (ax.transData.inverted().transform(p)[0] for p in tx.get_window_extent(renderer).get_points())
            assert any(b0 <= x0 and x1 <= b1 for b0, b1 in boxes), tx.get_text()
    # nothing lost: the boxes (runs of consecutive ids from one worker) hold every arrival of the trace
    labels = [tx.get_text() for tx in ax.texts if tx.get_color() == "white"]
    counted = sum(int(lb.split("(")[1].rstrip(")")) if "(" in lb else 1 for lb in labels)
    assert counted == len(t.elements) and f"{t.elements['source_id'].max() - 2}" not in labels
    plt.close(fig)


def test_long_alternating_stream_is_cut_and_says_how_much():
    rows = [dict(step=k, worker=k % 2, consumer=0, source_id=k // 2, order=k, t_ns=k) for k in range(400)]
    fig = plot_streams(Trace.from_records(elements=rows, meta={"sharding_policy": "OFF"}))
    ax = fig.axes[0]
    more = [tx.get_text() for tx in ax.texts if tx.get_text().startswith("… ")]
    assert more == [f"… {400 - len(ax.patches)} more"] and len(ax.patches) >= 20
    assert fig.get_size_inches()[0] <= 9.5
