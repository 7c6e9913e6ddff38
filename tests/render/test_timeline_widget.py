"""The timeline widget: binary column sync, zoom, idle lanes, step highlight linked to the explorer, fallbacks.

The ``browser`` tests run the widget's own ES module in Debian's Chromium with the state ipywidgets
would send (each binary buffer as a DataView), and read back what it drew.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from ipywidgets.widgets.widget import _remove_buffers

import vizdist
from vizdist.render.timeline_figure import timeline_layout
from vizdist.render.timeline_widget import SUMMARY_ABOVE, Timeline, timeline

CHROMIUM = "/usr/bin/chromium"


def _wire(tl: Timeline) -> tuple[dict, list[list[str]], list[memoryview]]:
    """What ipywidgets sends: the JSON state, and the binary buffers taken out of it (with their paths)."""
    return _remove_buffers(tl.get_state())


def _decode(tl: Timeline) -> pd.DataFrame:
    """The synced span columns, decoded from the binary buffers the way the browser reads them."""
    state, paths, buffers = _wire(tl)
    cols = state["columns"]
    out = {p[1]: np.frombuffer(bytes(b), dtype="<" + np.dtype(cols["dtypes"][p[1]]).str[1:])
           for p, b in zip(paths, buffers, strict=True)}
    assert all(len(v) == cols["n"] for v in out.values())
    return pd.DataFrame(out)


def _rows_from_events(ev: pd.DataFrame) -> pd.DataFrame:
    """Each span as (lane, stage, step, start, end, depth), ms from the first span: from the events table."""
    t0 = ev["t_start_ns"].min()
    return pd.DataFrame({
        "lane": ev["lane"].astype(str).to_numpy(), "stage": ev["stage"].astype(str).to_numpy(),
        "step": ev["step"].to_numpy(), "start": (ev["t_start_ns"].to_numpy() - t0) / 1e6,
        "end": (ev["t_end_ns"].to_numpy() - t0) / 1e6,
        "depth": ev["depth"].to_numpy() if "depth" in ev.columns else 0,
    }).sort_values(["depth", "start", "lane", "stage", "end"], kind="stable").reset_index(drop=True)


def test_span_columns_are_binary_buffers_that_decode_to_the_trace_spans(real_trace):
    tl = timeline(real_trace)
    state, paths, buffers = _wire(tl)
    assert all(isinstance(b, memoryview) for b in buffers)
    assert sorted(p[1] for p in paths) == sorted(["start", "end", "lane", "stage", "step", "depth", "op"])
    assert all(p[0] == "columns" for p in paths)
    json.dumps(state)  # the rest of the state is plain JSON
    cols = _decode(tl)
    got = pd.DataFrame({
        "lane": [tl.spec["lanes"][i] for i in cols["lane"]], "stage": [tl.spec["stages"][i] for i in cols["stage"]],
        "step": cols["step"].astype(np.int64), "start": cols["start"], "end": cols["end"],
        "depth": cols["depth"].astype(np.int64)})
    # sorted by depth, then start, as the browser's binary searches need
    assert (np.diff(got["depth"]) >= 0).all()
    same_depth = np.diff(got["depth"]) == 0
    assert (np.diff(got["start"])[same_depth] >= 0).all()
    got = got.sort_values(["depth", "start", "lane", "stage", "end"], kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, _rows_from_events(real_trace.events), check_dtype=False)
    ops = [tl.spec["ops"][i] for i in cols["op"]]
    assert sorted(ops) == sorted(real_trace.events["op"].astype(str))


def test_hover_data_holds_the_element_ids_raw_tf_delivered(tf, mirrored, real_trace):
    tl = timeline(real_trace)
    raw = []
    ds = tf.data.Dataset.range(24).batch(8)
    for x in mirrored.experimental_distribute_dataset(ds):
        raw.append([int(v) for r in mirrored.experimental_local_results(x) for v in np.atleast_1d(r.numpy())])
    for step, ids in enumerate(raw):
        assert tl.spec["step_elements"][f"0:{step}"] == ", ".join(map(str, ids))


def test_zoom_and_show_step_change_the_visible_range(real_trace):
    tl = timeline(real_trace)
    lo, hi = tl.visible_range
    n_all = tl.visible_spans()
    assert n_all == len(real_trace.events)
    tl.zoom(0.25)
    zlo, zhi = tl.visible_range
    assert zhi - zlo == pytest.approx((hi - lo) / 4)
    assert tl.visible_spans() < n_all
    tl.show_step(2)
    assert tl.step == 2
    lay = timeline_layout(real_trace)
    m = lay.step == 2
    slo, shi = tl.visible_range
    assert slo < lay.start_ms[m].min() and shi > lay.end_ms[m].max()
    with pytest.raises(ValueError, match="zoom factor"):
        tl.zoom(0)
    with pytest.raises(ValueError, match="no spans are tied to step 99"):
        tl.show_step(99)


def test_explorer_step_highlights_the_timeline(real_trace):
    ex = real_trace.show()
    tl = timeline(real_trace, explorer=ex)
    assert tl.step == ex.step
    ex.step = 2
    assert tl.step == 2


def test_static_fallback_is_a_png_and_a_stable_text(real_trace):
    tl = timeline(real_trace)
    data = tl._repr_mimebundle_()
    data = data[0] if isinstance(data, tuple) else data
    png = base64.b64decode(data["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "application/vnd.jupyter.widget-view+json" in data
    # the text nbval compares depends on steps and workers only, not on timings or thread counts
    assert data["text/plain"] == ("<vizdist timeline: 3 steps, 1 worker(s); lanes grouped by worker; "
                                  "live (zoom, pan, hover) in JupyterLab>")


def test_lane_names_reach_the_page_as_synced_text_not_markup():
    """Hostile lane names travel as JSON strings in the spec (the browser test below shows they reach the
    page as text)."""
    lane = '<img src=x onerror="alert(1)">'
    t = vizdist.Trace.from_records(events=[dict(lane=lane, stage="consume", step=s, t_start_ns=10 * s,
                                                t_end_ns=10 * s + 5) for s in range(2)])
    tl = timeline(t)
    assert lane in tl.spec["lanes"]
    data = tl._repr_mimebundle_()
    data = data[0] if isinstance(data, tuple) else data
    assert lane not in data.get("text/html", "")


def _many(n: int, *, idle: bool = False) -> vizdist.Trace:
    """``n`` spans on two lanes of two workers (and, with ``idle``, a profiler lane busy 1 us in all)."""
    start = np.arange(n, dtype=np.int64) * 1_000
    ev = pd.DataFrame({"lane": np.where(np.arange(n) % 2, "w1 b", "w0 a"), "worker": np.arange(n) % 2,
                       "stage": np.where(np.arange(n) % 3, "map", "batch"), "step": start // 10**6,
                       "t_start_ns": start, "t_end_ns": start + 800, "origin": "xplane"})
    if idle:
        ev = pd.concat([ev, pd.DataFrame([dict(lane="w0 tf.data thread 9", worker=0, stage="map", step=-1,
                                               t_start_ns=n * 500, t_end_ns=n * 500 + 1000, origin="xplane")])])
    return vizdist.Trace(events=ev)


def test_the_widget_holds_every_span_of_a_large_trace():
    n = 20_000
    t = _many(n)
    tl = timeline(t)
    cols = _decode(tl)
    np.testing.assert_array_equal(np.sort(cols["start"].to_numpy()), np.arange(n) * 1_000 / 1e6)
    tl.zoom(0.5)
    assert 0 < tl.visible_spans() < n  # how fast is measured by benchmarks/render_scale.py, not here


def test_idle_lanes_are_hidden_in_view_unless_asked_for():
    n = 4_000
    tl = timeline(_many(n, idle=True))
    assert tl.hidden_lanes() == ["w0 tf.data thread 9"]  # 1 us of 4 ms: under 1% of the view
    tl.view = [n * 0.5e-3 - 0.002, n * 0.5e-3 + 0.004]  # 6 us around it: 1 us is 17% of the view
    assert tl.hidden_lanes() == []
    tl.view = [0.0, 1.0]  # before it: no span of it in view
    assert tl.hidden_lanes() == ["w0 tf.data thread 9"]
    tl.show_idle_lanes = True
    assert tl.hidden_lanes() == []
    assert timeline(_many(n, idle=True), show_idle_lanes=True).hidden_lanes() == []


# -- in Chromium: the widget's ES module with the buffers ipywidgets sends ---------------------------------
_MOUNT = """async ([esm, state, buffers, detached]) => {
  const mod = await import(URL.createObjectURL(new Blob([esm], { type: "text/javascript" })));
  for (const [path, b64] of buffers) {  // what ipywidgets' put_buffers does: a DataView at each path
    const bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    let o = state; for (const k of path.slice(0, -1)) o = o[k];
    o[path[path.length - 1]] = new DataView(bytes.buffer);
  }
  window.alerts = []; window.alert = (m) => window.alerts.push(String(m));
  const handlers = {};
  window.model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); },
    save_changes() {}, on(ev, f) { (handlers[ev] = handlers[ev] || []).push(f); },
  };
  document.body.innerHTML = '<div id="root" style="width:1100px"></div>';
  window.host = document.getElementById("root");
  if (detached) window.host.remove();  // as JupyterLab renders a view whose model is ready before its output is placed
  mod.default.render({ model: window.model, el: window.host });
}"""


@pytest.fixture(scope="module")
def page():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (`bash .ci/browser-deps` installs it)")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"])
        try:
            yield browser.new_page(viewport={"width": 1200, "height": 800})
        finally:
            browser.close()


def _mount(page, tl: Timeline, *, detached: bool = False) -> None:
    state, paths, buffers = _wire(tl)
    esm = Path(vizdist.render.timeline_widget.__file__).with_name("timeline_widget.js").read_text()
    page.evaluate(_MOUNT, [esm, state, [[p, base64.b64encode(bytes(b)).decode()] for p, b in zip(paths, buffers,
                                                                                                   strict=True)],
                           detached])


def _root(page) -> dict:
    return page.evaluate("() => Object.assign({}, document.querySelector('.vizdist-timeline').dataset)")


def _hover(page, t_ms: float, row_y: float) -> str:
    """Move the mouse to time ``t_ms`` on the lane drawn at ``row_y`` (px from the canvas top); return the tip."""
    box = page.locator("canvas").bounding_box()
    lo, hi = (float(page.get_attribute(".vizdist-tl-range", k)) for k in ("data-t0", "data-t1"))
    plot_w = box["width"] - 170 - 8
    page.mouse.move(box["x"] + 170 + (t_ms - lo) / (hi - lo) * plot_w, box["y"] + row_y)
    return page.evaluate("() => { const t = document.querySelector('.vizdist-tl-tip');"
                         " return t.style.display === 'none' ? '' : t.textContent; }")


@pytest.mark.browser
def test_in_chromium_the_hover_shows_the_synced_values_of_the_span(page, real_trace):
    tl = timeline(real_trace)
    tl.show_step(1)
    _mount(page, tl)
    root = _root(page)
    assert root["mode"] == "spans" and int(root["inView"]) == tl.visible_spans()
    # the host lane's consume span of step 1, from the events table
    ev = real_trace.events
    host = ev[(ev["lane"] == "w0 host") & (ev["stage"] == "consume") & (ev["step"] == 1)].iloc[0]
    t0 = ev["t_start_ns"].min()
    mid = ((host["t_start_ns"] + host["t_end_ns"]) / 2 - t0) / 1e6
    tip = _hover(page, mid, 18 + 22 / 2)  # worker header, then the first lane
    assert tip.startswith("consume — w0 host")
    assert "step: 1" in tip
    dur = (host["t_end_ns"] - host["t_start_ns"]) / 1e6
    assert f"{float(f'{dur:.4g}'):g} ms at" in tip


@pytest.mark.browser
def test_in_chromium_many_spans_are_summarised_and_counted_as_python_counts(page):
    tl = timeline(_many(SUMMARY_ABOVE * 3, idle=True))
    _mount(page, tl)
    root = _root(page)
    assert root["mode"] == "summary" and tl.summarised
    assert int(root["inView"]) == tl.visible_spans()
    assert int(root["hidden"]) == len(tl.hidden_lanes()) == 1
    assert "summarised per pixel" in page.text_content(".vizdist-tl-mode")
    for _ in range(3):  # zoom in until each span is drawn; the browser agrees with Python at every view
        page.click(".vizdist-tl-zoom-in")
        tl.view = page.evaluate("() => window.model.get('view')")
        root = _root(page)
        assert int(root["inView"]) == tl.visible_spans()
        assert root["mode"] == ("summary" if tl.summarised else "spans")
    assert root["mode"] == "spans"
    page.click(".vizdist-tl-idle input")  # the checkbox shows idle lanes
    assert page.evaluate("() => window.model.get('show_idle_lanes')") is True
    assert _root(page)["hidden"] == "0"


@pytest.mark.browser
def test_in_chromium_hostile_lane_names_stay_text(page):
    lane = '<img src=x onerror="alert(1)">'
    t = vizdist.Trace.from_records(events=[
        *[dict(lane=lane, stage="consume", step=s, t_start_ns=10**6 * s, t_end_ns=10**6 * s + 900_000)
          for s in range(3)],
        dict(lane=lane + " idle", stage="map", t_start_ns=0, t_end_ns=10, origin="xplane")])
    _mount(page, timeline(t))
    tip = _hover(page, 1.45, 18 + 22 / 2)
    assert tip.startswith(f"consume — {lane}")
    assert page.evaluate("() => document.querySelectorAll('img').length") == 0
    assert lane + " idle" in page.get_attribute(".vizdist-tl-idle", "title")
    page.wait_for_timeout(100)
    assert page.evaluate("() => window.alerts") == []


@pytest.mark.browser
def test_in_chromium_a_view_rendered_before_it_is_placed_draws_once_it_has_a_width(page):
    # JupyterLab renders a view into a detached node when its model is already there (measured by
    # benchmarks/widget_in_lab.py): a draw then would be at a guessed width, and wasted.
    _mount(page, timeline(_many(SUMMARY_ABOVE * 3)), detached=True)
    got = page.evaluate("""async () => {
      const root = window.host.querySelector(".vizdist-timeline");
      const early = root.dataset.drawMs !== undefined;
      let draws = 0;
      new MutationObserver((rs) => { draws += rs.length; }).observe(root, { attributeFilter: ["data-draw-ms"] });
      document.body.appendChild(window.host);
      for (let i = 0; i < 3; i++) await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      return { early, draws, wrap: root.querySelector(".vizdist-tl-canvas-wrap").clientWidth,
               canvas: parseFloat(root.querySelector("canvas").style.width) };
    }""")
    assert not got["early"], "the widget drew before it was in the page"
    assert got["draws"] == 1 and got["canvas"] == got["wrap"] > 0, got
