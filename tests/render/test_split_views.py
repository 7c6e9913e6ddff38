"""Split views (layout, HTML, figure, explorer) drawn from plain traces: no TensorFlow here."""

from __future__ import annotations

import base64

import matplotlib

matplotlib.use("Agg")

import pytest

import vizdist
from vizdist.render.explorer import show
from vizdist.render.figures import plot_split
from vizdist.render.html import split_html
from vizdist.render.layout import short_device, split_layout
from vizdist.trace import Trace


def trace_10_over_4() -> Trace:
    """The shape of Dataset.range(10).batch(4) over 4 replicas."""
    elements, batches = [], []
    ids = iter(range(10))
    for step, counts in enumerate([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]):
        for r, n in enumerate(counts):
            dev = f"/job:localhost/replica:0/task:0/device:CPU:{r}"
            for pos in range(n):
                elements.append(dict(step=step, replica=r, device=dev, source_id=next(ids), position=pos))
            batches.append(dict(step=step, replica=r, device=dev, n_elements=n, empty=n == 0,
                                partial=step == 2 and n > 0))
    return Trace.from_records(elements=elements, batches=batches,
                              meta={"strategy": "MirroredStrategy", "num_replicas": 4, "global_batch_size": 4,
                                    "api": "experimental_distribute_dataset"})


def test_layout_cells_and_devices():
    lay = split_layout(trace_10_over_4())
    assert lay["steps"] == [0, 1, 2]
    assert [r["device"] for r in lay["replicas"]] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    assert [c["labels"] for c in lay["cells"][2]] == [["8"], ["9"], [], []]
    assert [c["empty"] for c in lay["cells"][2]] == [False, False, True, True]
    assert split_layout(trace_10_over_4(), max_steps=2)["total_steps"] == 3


def test_short_device_keeps_task_of_other_workers():
    assert short_device("/job:worker/replica:0/task:1/device:CPU:0") == "task:1/CPU:0"
    assert short_device("/job:localhost/replica:0/task:0/device:GPU:3") == "GPU:3"


def test_html_is_escaped_and_marks_empty():
    t = trace_10_over_4()
    t.meta["strategy"] = "<script>alert(1)</script>"
    html = split_html(split_layout(t))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count(">empty<") == 2


def test_file_elements_are_labelled_by_file_and_line():
    t = Trace.from_records(elements=[dict(step=0, replica=0, source_id=5, source_file="/d/part-1.txt",
                                          source_line=3, position=0)])
    assert split_layout(t)["cells"][0][0]["labels"] == ["part-1.txt:3"]


def test_plot_split_draws_every_cell_and_marks_empties():
    fig = plot_split(trace_10_over_4())
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("empty") == 2
    assert "8\n(partial)" in texts and "0" in texts
    assert len(ax.patches) == 12
    assert [t.get_text() for t in ax.get_yticklabels()] == ["step 0", "step 1", "step 2"]


def test_plot_split_caps_steps_and_says_so():
    fig = plot_split(trace_10_over_4(), max_steps=2)
    assert "first 2 of 3 steps" in fig.axes[0].get_title()


def test_explorer_moves_between_steps_and_shows_findings():
    ex = show(trace_10_over_4())
    assert ex.step == 0 and 'data-step="0"' in ex.label.value
    ex.step = 2
    cards = [c.value for c in ex.cards.children]
    assert all('data-step="2"' in c for c in cards)
    assert ">empty<" in cards[3] and "replica 3" in cards[3]
    assert "empty-replica" in ex.findings.value
    ex.step = 0
    assert "empty-replica" not in ex.findings.value


def test_explorer_static_fallback_has_text_html_and_png():
    ex = show(trace_10_over_4())
    bundle = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].splitlines()[3] == "  step 2: r0 [8] | r1 [9] | r2 empty | r3 empty"
    assert "findings: 1 warning, 1 info" in bundle["text/plain"]
    assert "<table" in bundle["text/html"] and "empty-replica" in bundle["text/html"]
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_explorer_static_html_shows_its_title_once():
    t = trace_10_over_4()
    html = show(t)._repr_mimebundle_()["text/html"]
    title = split_layout(t)["title"]
    assert html.count(title) == 1, html[:300]


def test_show_rejects_non_traces():
    import pytest

    with pytest.raises(TypeError, match=r"takes a vizdist.Trace"):
        show({"not": "a trace"})
    with pytest.raises(TypeError, match=r"takes a vizdist.Trace"):
        plot_split([])


def test_ids_by_content_are_labelled_on_the_figure_itself():
    t = trace_10_over_4()
    exact = plot_split(t).axes[0].get_title()
    t.meta["provenance"] = "fingerprint"
    fig = plot_split(t)
    assert "ids by content" in fig.axes[0].get_title() and "ids by content" not in exact
    assert "ids by content" in split_layout(t)["title"]


def _record_trace():
    """A record()-shaped trace: Keras's build read, two train epochs, one validation epoch."""
    rows = [(0, "build", 0, 0), (1, "train", 0, 0), (2, "train", 0, 1), (3, "validation", 0, 0),
            (4, "train", 1, 0), (5, "train", 1, 1)]
    batches = [dict(step=s, replica=r, n_elements=1, phase=p, epoch=ep, epoch_step=k, dataset=0)
               for s, p, ep, k in rows for r in range(2)]
    elements = [dict(step=s, replica=r, source_id=2 * k + r, position=0, phase=p, epoch=ep, epoch_step=k, dataset=0)
                for s, p, ep, k in rows for r in range(2)]
    return vizdist.Trace.from_records(elements=elements, batches=batches, meta={"api": "record", "num_replicas": 2})


def test_record_steps_carry_their_phase_and_epoch_in_every_view():
    t = _record_trace()
    lay = split_layout(t)
    assert lay["step_labels"] == ["build (Keras)", "train epoch 0 · 0", "train epoch 0 · 1", "validation epoch 0 · 0",
                                  "train epoch 1 · 0", "train epoch 1 · 1"]
    fig = t.plot.split()
    assert fig.axes[0].get_yticklabels()[0].get_text() == "step 0\nbuild (Keras)"
    assert "train epoch 1 · 0" in split_html(lay)
    ex = show(t)
    assert "(build (Keras))" in repr(ex) and "build (Keras)" in ex.label.value


def test_split_picks_a_phase_and_epoch():
    t = _record_trace()
    assert split_layout(t, phase="train", epoch=1)["steps"] == [4, 5]
    assert split_layout(t, phase="train")["steps"] == [1, 2, 4, 5]
    fig = t.plot.split(phase="validation")
    assert [tick.get_text().split("\n")[0] for tick in fig.axes[0].get_yticklabels()] == ["step 3"]
    with pytest.raises(ValueError, match=r"it has: build \(Keras\), train epoch 0, validation epoch 0, train epoch 1"):
        split_layout(t, phase="predict")


def test_explorer_pass_picker_keeps_the_slider_to_one_epoch():
    ex = show(_record_trace())
    names = [label for label, _ in ex.pass_pick.options]
    assert names == ["all steps", "build (Keras)", "train epoch 0", "validation epoch 0", "train epoch 1"]
    ex.pass_pick.value = dict(ex.pass_pick.options)["train epoch 1"]
    assert (ex.slider.min, ex.slider.max, ex.step) == (4, 5, 4)
    assert 'data-step="4"' in ex.label.value and "train epoch 1" in ex.label.value
    ex.pass_pick.value = ()
    assert (ex.slider.min, ex.slider.max) == (0, 5)
