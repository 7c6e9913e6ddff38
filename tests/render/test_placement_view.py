"""The placement view over a real placement=True trace."""

from __future__ import annotations

import pytest

import vizdist
from vizdist.render.placement import placement_layout


@pytest.fixture(scope="module")
def placed(tf, mirrored):
    @tf.function
    def step(x):
        return tf.reduce_sum(x * 2.0)

    ds = tf.data.Dataset.range(16).map(lambda x: 1.0 / tf.cast(x - 5, tf.float32)).batch(8)
    return vizdist.trace_distribution(mirrored, ds, step_fn=step, placement=True)


def test_every_recorded_op_is_drawn_once_per_device(placed):
    lay = placement_layout(placed)
    drawn = sum(sum(r["cells"].values()) for r in lay["rows"])
    assert drawn == sum(o["count"] for o in placed.meta["placement"]["ops"] if o["device"])
    assert lay["devices"] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    bad = [r["label"] for r in lay["rows"] if r["nonfinite"].get("CPU:0")]
    assert any(label.startswith("RealDiv") for label in bad)  # 1/(5-5) is inf in the map


def test_static_outputs_and_text_line(placed):
    view = placed.show.placement()
    bundle = view._repr_mimebundle_()
    assert bundle["text/plain"].startswith("placement: 4 devices (CPU:0, CPU:1, CPU:2, CPU:3)")
    assert "copies: CPU:0→CPU:1 ×2 (input batch)" in bundle["text/plain"]
    assert "<script" not in bundle["text/html"] and "copy to device" in bundle["text/html"]
    assert len(bundle["image/png"]) > 1000


def test_step_filter_and_widget_follow_the_explorer(placed):
    one = placement_layout(placed, step=1)
    assert all(r["steps"] == [] or r["steps"][0] <= 1 <= r["steps"][-1] for r in one["rows"])
    ex = placed.show()
    w = placed.show.placement().widget(explorer=ex)
    slider, html = w.children[0].children[1], w.children[1]
    slider.value = 1
    assert "(step 1)" in html.value
