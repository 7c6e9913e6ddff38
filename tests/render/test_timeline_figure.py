"""plot_timeline and the timeline layout: lanes, stages, steps, scale, measured overlap."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

import vizdist
from vizdist.render.timeline_figure import (
    RASTER_THRESHOLD,
    STAGE_COLORS,
    idle_lanes,
    overlap_summary,
    plot_timeline,
    timeline_layout,
)


def _spans(n: int, *, workers: int = 2, lanes: int = 4, seed: int = 0) -> vizdist.Trace:
    """Many spans laid out like a real run: per lane, back to back with gaps."""
    rng = np.random.default_rng(seed)
    parts = []
    per = n // (workers * lanes)
    for w in range(workers):
        for k in range(lanes):
            d = rng.integers(1_000, 50_000, per)
            start = np.cumsum(d + rng.integers(100, 5_000, per)) - d
            parts.append(pd.DataFrame({
                "lane": f"w{w} tf.data thread {k}", "worker": w,
                "stage": np.array(list(STAGE_COLORS))[rng.integers(0, 6, per)],
                "step": start // 1_000_000, "t_start_ns": start, "t_end_ns": start + d}))
    return vizdist.Trace(events=pd.concat(parts))


def test_real_run_lanes_are_grouped_by_worker_host_first(real_trace):
    lay = timeline_layout(real_trace)
    assert lay.lanes[0] == "w0 host"
    assert lay.lanes[1:5] == [f"w0 replica {r}" for r in range(4)]
    assert any(lane.startswith("w0 tf.data") for lane in lay.lanes)
    assert len(lay) == len(real_trace.events)
    # steps recorded on the host become step boundaries, in order
    assert sorted(lay.step_starts_ms) == [0, 1, 2]
    assert list(lay.step_starts_ms.values()) == sorted(lay.step_starts_ms.values())


def _idle_by_hand(events: pd.DataFrame, lo_ns: int, hi_ns: int) -> set[str]:
    """Lanes with no span in [lo, hi], or profiler lanes whose outermost spans cover < 1% of it
    (the rule plot_timeline documents), computed from the events table with plain pandas."""
    events = events.assign(**{k: v for k, v in (("depth", 0), ("origin", "host")) if k not in events.columns})
    ev = events.assign(s=events["t_start_ns"].clip(lower=lo_ns), e=events["t_end_ns"].clip(upper=hi_ns))
    inside = ev[(ev["t_end_ns"] >= lo_ns) & (ev["t_start_ns"] <= hi_ns)]
    idle = set(events["lane"]) - set(inside["lane"])
    for lane, g in inside.groupby("lane"):
        if (events.loc[events["lane"] == lane, "origin"] == "xplane").all():
            busy = (g.loc[g["depth"] == 0, "e"] - g.loc[g["depth"] == 0, "s"]).sum()
            if busy < 0.01 * (hi_ns - lo_ns):
                idle.add(lane)
    return idle


def test_real_run_figure_shows_busy_lanes_and_a_buffer_strip(real_trace):
    ev = real_trace.events
    idle = _idle_by_hand(ev, int(ev["t_start_ns"].min()), int(ev["t_end_ns"].max()))
    lay = timeline_layout(real_trace)
    fig = plot_timeline(real_trace, highlight_step=1)
    ax, bax = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == [n for n in lay.lanes if n not in idle]
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    if idle:
        assert f"{len(idle)} idle lane(s) hidden:" in texts
    assert bax.get_ylabel() == "buffered"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"transfer", "consume", "prefetch"} <= set(legend)
    # the highlighted step is drawn once more, outlined: as many polygons as its spans on shown lanes
    outlined = [c for c in ax.collections if len(c.get_edgecolor()) and c.get_edgecolor()[0][:3].tolist() == [0, 0, 0]]
    assert len(outlined) == 1
    assert len(outlined[0].get_paths()) == int(((ev["step"] == 1) & ~ev["lane"].isin(idle)).sum())
    every = plot_timeline(real_trace, show_idle_lanes=True).axes[0]
    assert [t.get_text() for t in every.get_yticklabels()] == lay.lanes


def test_idle_lanes_are_hidden_and_listed_unless_asked_for():
    ms = 1_000_000
    t = vizdist.Trace.from_records(events=[
        *[dict(lane="w0 host", stage="consume", step=s, t_start_ns=s * 10 * ms, t_end_ns=s * 10 * ms + ms // 100,
               origin="host") for s in range(10)],  # host lane: 0.1% busy, but vizdist's own lane: kept
        dict(lane="w0 tf.data thread 0", stage="map", t_start_ns=0, t_end_ns=100 * ms, origin="xplane"),
        dict(lane="w0 tf.data thread 1", stage="map", t_start_ns=5 * ms, t_end_ns=5 * ms + 1000, origin="xplane"),
        dict(lane="w0 tf.data thread 2", stage="map", t_start_ns=95 * ms, t_end_ns=96 * ms, origin="xplane"),
    ])
    ev = t.events

    def lanes(fig):
        return [x.get_text() for x in fig.axes[0].get_yticklabels()]

    whole = _idle_by_hand(ev, 0, 100 * ms)
    assert whole == {"w0 tf.data thread 1"}  # the hand rule itself: 1 us of 100 ms
    assert lanes(plot_timeline(t, show_buffer=False)) == ["w0 host", "w0 tf.data thread 0", "w0 tf.data thread 2"]
    fig = plot_timeline(t, show_buffer=False, time_range_ms=(0.0, 50.0))
    hidden = _idle_by_hand(ev, 0, 50 * ms)
    assert hidden == {"w0 tf.data thread 1", "w0 tf.data thread 2"}
    assert lanes(fig) == [n for n in timeline_layout(t).lanes if n not in hidden]
    texts = [x.get_text() for x in fig.findobj(matplotlib.text.Text)]
    assert "2 idle lane(s) hidden:" in texts and "w0 tf.data thread 2" in texts
    assert lanes(plot_timeline(t, show_buffer=False, show_idle_lanes=True)) == timeline_layout(t).lanes
    lay = timeline_layout(t)
    assert [n for n, i in zip(lay.lanes, idle_lanes(lay, 0.0, 50.0), strict=True) if i] == sorted(hidden)


def _pixels(fig) -> np.ndarray:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # plot_timeline closes its figure: draw it on an Agg canvas
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())


def _lane_row_pixels(fig, lane_row: int) -> tuple[np.ndarray, float]:
    """RGB of the pixel row through the middle of ``lane_row``, and the pixel x of data x (a function)."""
    ax = fig.axes[0]
    img = _pixels(fig)
    _, y = ax.transData.transform((0, lane_row))
    row = img[round(float(img.shape[0] - y)), :, :3].astype(int)
    return row, lambda x: ax.transData.transform((x, lane_row))[0]


def test_many_spans_are_summarised_per_pixel_and_none_disappears():
    n = RASTER_THRESHOLD + 1000
    stage = np.where(np.arange(n) % 4 == 0, "consume", "map")  # 3 of 4 spans are map
    t = vizdist.Trace(events=pd.DataFrame({
        "lane": "a", "stage": stage, "t_start_ns": np.arange(n) * 1000, "t_end_ns": np.arange(n) * 1000 + 500}))
    t = vizdist.Trace(events=pd.concat([t.events, pd.DataFrame([  # one 1 us span at the very start of lane b
        dict(lane="b", stage="transfer", t_start_ns=0, t_end_ns=1000)])], ignore_index=True))
    fig = plot_timeline(t, show_buffer=False, show_idle_lanes=True)
    assert not fig.axes[0].collections  # no polygon per span: a summary
    texts = [x.get_text() for x in fig.findobj(matplotlib.text.Text)]
    assert f"{n + 1:,} spans, summarised" in texts
    lanes = timeline_layout(t).lanes
    mapc = (np.array(matplotlib.colors.to_rgb(STAGE_COLORS["map"])) * 255).round()
    row, px = _lane_row_pixels(fig, lanes.index("a"))
    x0, x1 = int(np.ceil(px(0.0))), int(px(n * 1000 / 1e6))
    painted = row[x0:x1 - 1]
    assert (np.abs(painted - mapc).max(axis=1) < 20).all()  # each pixel column: the stage most spans there have
    row, px = _lane_row_pixels(fig, lanes.index("b"))
    white = (row == 255).all(axis=1)
    x_span = int(px(0.0))
    assert not white[x_span] and white[x_span + 3:x1 - 1].all()  # the 1 us span keeps its pixel, and only it


def test_the_summary_is_painted_for_the_drawn_range():
    n = RASTER_THRESHOLD * 2
    start = np.arange(n) * 1000
    t = vizdist.Trace(events=pd.DataFrame({"lane": "a", "stage": "map", "t_start_ns": start, "t_end_ns": start + 100}))
    lo, hi = 5.0005, 5.0105  # ms: a 10 us window holding 10 spans of 0.1 us, 1 us apart
    fig = plot_timeline(t, show_buffer=False, time_range_ms=(lo, hi))
    row, px = _lane_row_pixels(fig, 0)
    painted = ~(row[int(np.ceil(px(lo))):int(px(hi))] == 255).all(axis=1)
    runs = int(painted[0]) + int((painted[1:] & ~painted[:-1]).sum())
    in_view = int(((start + 100) / 1e6 >= lo).sum() - (start / 1e6 > hi).sum())
    assert runs == in_view == 10  # one mark per span, the gaps between them left white
    assert painted.mean() < 0.5


def test_filters_and_errors():
    t = _spans(800)
    assert set(timeline_layout(t, workers=[1]).lane_worker) == {1}
    assert set(timeline_layout(t, steps=(0, 0)).step.tolist()) <= {0, -1}
    with pytest.raises(ValueError, match="timing=True"):
        timeline_layout(vizdist.Trace())
    with pytest.raises(ValueError, match="widen the filter"):
        timeline_layout(t, workers=[7])
    fig = plot_timeline(t, time_range_ms=(1.0, 2.0), show_buffer=False)
    lo, hi = fig.axes[0].get_xlim()
    assert lo < 1.0 < 2.0 < hi < 2.1


def test_overlap_summary_measures_interval_overlap_exactly():
    ms = 1_000_000
    t = vizdist.Trace.from_records(events=[
        dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0, t_end_ns=10 * ms, origin="host"),
        dict(lane="w0 host", stage="consume", step=0, t_start_ns=10 * ms, t_end_ns=30 * ms, origin="host"),
        dict(lane="w0 host", stage="transfer", step=1, t_start_ns=30 * ms, t_end_ns=31 * ms, origin="host"),
        dict(lane="w0 host", stage="consume", step=1, t_start_ns=31 * ms, t_end_ns=51 * ms, origin="host"),
        # producer: 8 ms before step 0's consume, 12 ms during it (two overlapping spans count once),
        # then 29-31 ms: 1 ms at the end of step 0, 1 ms in step 1's transfer while no step runs
        dict(lane="w0 t", stage="map", t_start_ns=2 * ms, t_end_ns=16 * ms, origin="xplane"),
        dict(lane="w0 t", stage="batch", t_start_ns=12 * ms, t_end_ns=22 * ms, origin="xplane"),
        dict(lane="w0 t", stage="map", t_start_ns=29 * ms, t_end_ns=31 * ms, origin="xplane"),
        dict(lane="w0 t", stage="prefetch", t_start_ns=0, t_end_ns=51 * ms, origin="xplane"),  # not production
    ])
    s = overlap_summary(t)
    assert s["producer_busy_ms"] == 22.0
    # 8 ms of it (2-10 ms) is warm-up, before the first step began; of the other 14, 13 ran during a step
    assert s["warmup_ms"] == 8.0
    assert s["overlap"] == pytest.approx(13 / 14)
    assert s["wait_ms"] == 5.5 and s["step_ms"] == 20.0 and s["bound"] == "step"
