"""A real browser: JupyterLab on loopback, Debian's Chromium through Playwright.

Opens ``notebooks/01_batch_splitting.ipynb`` and ``notebooks/05_prefetch_and_timelines.ipynb``,
runs every cell, and checks that the widgets render and respond:

* predict, then reveal (01): typing a guess into the grid and pressing the button runs
  TensorFlow in the kernel and shows the answer beside the guess, every wrong cell marked;
* what-if knobs (01): moving a knob re-runs the real pipeline and redraws the split with the
  changed cells marked (the time from the click to the new picture goes to ``timings.json``);
* the step explorer (05): moving its step slider changes the step it shows;
* the timeline (05): zooming in narrows the visible time range, and the explorer's
  step slider highlights that step on the linked timeline;
* the live explorer (a notebook of its own, ``live_fit.ipynb``, written into the served copy): shown by
  ``rec.show()`` before a slow ``fit`` in the same cell, it advances through the steps while the cell
  runs, Keras's progress bar is the cell's text, and it ends on the block's last step.

Screenshots go to ``artifacts/browser/``. Needs ``/usr/bin/chromium`` (``bash
.ci/browser-deps`` installs it); without it the test skips locally and fails
under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.browser.lab import CHROMIUM, CHROMIUM_ARGS, ROOT, jupyter_lab, open_notebook

pytestmark = pytest.mark.browser

ARTIFACTS = ROOT / "artifacts" / "browser"
NOTEBOOK_RUN_S = 150


def _need_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    msg = (f"{CHROMIUM} is missing: install Debian's chromium (`bash .ci/browser-deps`, i.e. "
           "`apt-get install -y chromium`) to run the browser test.")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


def _open_and_run(page, base: str, token: str, notebook: str) -> None:  # type: ignore[no-untyped-def]
    open_notebook(page, base, token, notebook)
    # clear the committed outputs (and execution counts) first, so "done" means "ran here"
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    page.wait_for_function(
        """() => window.jupyterapp.shell.currentWidget.content.widgets
              .filter((c) => c.model.type === 'code').every((c) => !c.model.executionCount)""",
        timeout=15_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    # every code cell has run: no "[*]" prompt left, and the kernel is idle again
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            if (!w || !w.content) return false;
            const cells = w.content.widgets.filter((c) => c.model.type === 'code');
            const done = cells.every((c) => c.model.executionCount !== null && c.model.executionCount !== undefined);
            return done && w.sessionContext.session.kernel.status === 'idle';
        }""",
        timeout=NOTEBOOK_RUN_S * 1000, polling=500,
    )
    errors = page.evaluate(
        """() => window.jupyterapp.shell.currentWidget.content.widgets
              .filter((c) => c.model.type === 'code')
              .flatMap((c) => { const o = c.model.outputs; const out = [];
                  for (let i = 0; i < o.length; i++) { const m = o.get(i).toJSON();
                      if (m.output_type === 'error') out.push(m.ename + ': ' + m.evalue); }
                  return out; })"""
    )
    assert errors == [], f"{notebook} raised in the browser: {errors}"


def _step_shown(page, root) -> int:  # type: ignore[no-untyped-def]
    return int(root.locator(".vizdist-step-label [data-step]").first.get_attribute("data-step"))


def _move_slider(page, root) -> None:  # type: ignore[no-untyped-def]
    handle = root.locator(".vizdist-step .noUi-handle").first
    handle.scroll_into_view_if_needed()
    handle.focus()
    page.keyboard.press("ArrowRight")


def _predict_then_reveal(page) -> None:  # type: ignore[no-untyped-def]
    """Type a guess into the predict widget, press the button, see the answer beside it."""
    box = page.locator(".vizdist-predict").first
    box.wait_for(state="visible", timeout=30_000)
    box.scroll_into_view_if_needed()
    inputs = box.locator(".vizdist-predict-input input")
    n = inputs.count()
    assert n >= 4, f"the predict grid has {n} boxes"
    for i in range(n):  # the guess many people make: 3, 3, 2, 2 on every step
        inputs.nth(i).fill(str((3, 3, 2, 2)[i % 4]))
    box.locator("button.vizdist-predict-reveal").click()
    page.wait_for_function("(el) => !!el.querySelector('.vizdist-predict-result [data-revealed=\"1\"]')",
                           arg=box.element_handle(), timeout=60_000)
    revealed = box.locator(".vizdist-predict-result [data-revealed='1']")
    wrong = int(revealed.get_attribute("data-wrong"))
    cells = revealed.locator("td[data-right]")
    assert cells.count() == n and revealed.locator("td[data-right='0']").count() == wrong
    assert revealed.locator("td s").count() == wrong  # each wrong guess is shown struck through beside the run
    assert 0 < wrong < n, f"{wrong} of {n} guesses marked wrong"
    box.screenshot(path=str(ARTIFACTS / "01_predict_revealed.png"))


def _move_a_knob(page) -> float:  # type: ignore[no-untyped-def]
    """Toggle drop_remainder in the what-if widget; the split is redrawn with changed cells. Returns ms."""
    w = page.locator(".vizdist-whatif").first
    w.wait_for(state="visible", timeout=30_000)
    w.scroll_into_view_if_needed()
    picture = w.locator(".vizdist-whatif-picture [data-run]")
    run, html = int(picture.get_attribute("data-run")), picture.inner_html()
    t0 = time.monotonic()
    w.locator(".vizdist-knob-drop_remainder input[type=checkbox]").click()
    page.wait_for_function(
        "([el, r]) => { const p = el.querySelector('.vizdist-whatif-picture [data-run]');"
        " return p && Number(p.dataset.run) > r; }", arg=[w.element_handle(), run], timeout=60_000)
    ms = (time.monotonic() - t0) * 1000
    assert picture.inner_html() != html, "the what-if picture did not change after a knob move"
    assert w.locator(".vizdist-whatif-picture td[data-changed]").count() > 0, "no changed cell marked"
    assert "Changed since the last run" in picture.inner_text()
    w.screenshot(path=str(ARTIFACTS / "01_whatif_moved.png"))
    return ms


def _zoom_the_timeline(page):  # type: ignore[no-untyped-def]
    """Zoom notebook 05's timeline (button, then mouse wheel); returns it, its redraw ms and the spans it drew."""
    tl = page.locator(".vizdist-timeline").first
    tl.wait_for(state="visible", timeout=30_000)
    tl.scroll_into_view_if_needed()
    rng = tl.locator(".vizdist-tl-range")
    t0, t1 = float(rng.get_attribute("data-t0")), float(rng.get_attribute("data-t1"))
    assert t1 > t0
    drawn = int(tl.get_attribute("data-drawn"))
    assert drawn > 0, "the timeline canvas drew no spans"
    tl.screenshot(path=str(ARTIFACTS / "05_timeline.png"))
    tl.locator(".vizdist-tl-zoom-in").click()
    page.wait_for_function(
        "([el, w]) => { const r = el.querySelector('.vizdist-tl-range');"
        " return Number(r.dataset.t1) - Number(r.dataset.t0) < w * 0.75; }",
        arg=[tl.element_handle(), t1 - t0], timeout=15_000)
    z0, z1 = float(rng.get_attribute("data-t0")), float(rng.get_attribute("data-t1"))
    redraw_ms = float(tl.get_attribute("data-draw-ms"))
    assert (z1 - z0) < 0.75 * (t1 - t0), f"zoom in kept the range {t0}-{t1} as {z0}-{z1}"
    # mouse-wheel zoom on the canvas narrows it further
    box = tl.locator("canvas").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 30)
    page.mouse.wheel(0, -300)
    page.wait_for_function(
        "([el, w]) => { const r = el.querySelector('.vizdist-tl-range');"
        " return Number(r.dataset.t1) - Number(r.dataset.t0) < w * 0.95; }",
        arg=[tl.element_handle(), z1 - z0], timeout=15_000)
    tl.screenshot(path=str(ARTIFACTS / "05_timeline_zoomed.png"))
    return tl, redraw_ms, drawn


def _explorer_moves_the_timeline_step(page, tl) -> None:  # type: ignore[no-untyped-def]
    """Move notebook 05's explorer one step; the linked timeline highlights the step the explorer shows."""
    explorer = page.locator(".jp-OutputArea-output:has(.vizdist-step)").first
    step_before = int(tl.get_attribute("data-step"))
    _move_slider(page, explorer)
    page.wait_for_function(
        "([el, s]) => Number(el.dataset.step) !== s",
        arg=[tl.element_handle(), step_before], timeout=15_000)
    # the explorer's label is re-rendered by the kernel (a round trip); the link is in the browser
    page.wait_for_function(
        "([tl, ex]) => { const x = ex.querySelector('.vizdist-step-label [data-step]');"
        " return x && Number(x.dataset.step) === Number(tl.dataset.step); }",
        arg=[tl.element_handle(), explorer.element_handle()], timeout=15_000)
    assert int(tl.get_attribute("data-step")) == _step_shown(page, explorer) == step_before + 1


#: A notebook of its own (written into the served copy, not the course): a slow fit in a record() block whose
#: live explorer is shown before fit, in the same cell. Each step waits LIVE_STEP_S in a callback, so the fit
#: runs long enough for the browser to watch it (100 steps).
LIVE_STEP_S = 0.06
LIVE_CELLS = [
    "import time\nimport vizdist\ndevices = vizdist.virtual_devices(4)\nimport numpy as np, tensorflow as tf, keras\n"
    "strategy = tf.distribute.MirroredStrategy(devices)\nwith strategy.scope():\n"
    "    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])\n"
    "    model.compile('sgd', 'mse', jit_compile=False)\n"
    "x = np.arange(800, dtype='float32').reshape(-1, 1) / 800\nds = tf.data.Dataset.from_tensor_slices((x, x)).batch(16)\n"
    "class Slow(keras.callbacks.Callback):\n"
    f"    def on_train_batch_end(self, batch, logs=None): time.sleep({LIVE_STEP_S})",
    "with vizdist.record() as rec:\n    rec.show()\n    history = model.fit(ds, epochs=2, callbacks=[Slow()], verbose=1)",
    "print(len(rec.trace.steps), 'steps')",
]


def _write_live_notebook(root: Path) -> str:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in LIVE_CELLS]
    path = root / "notebooks" / "live_fit.ipynb"
    nbformat.write(nb, path)
    return "notebooks/live_fit.ipynb"


def _watch_the_live_explorer(page, base: str, token: str, notebook: str) -> list[int]:  # type: ignore[no-untyped-def]
    """Run the notebook; while its fit cell runs, read the step the live explorer shows, every 100 ms.

    "Runs" is read from the cells, not from the kernel's status: the set-up cell has its execution count and
    the fit cell not yet (JupyterLab's kernel status also flips to idle while a cell runs, whenever the kernel
    answers a control message)."""
    open_notebook(page, base, token, notebook)
    # not awaited: the command's promise resolves only once every cell has run
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    seen: list[tuple[bool, int]] = []
    deadline = time.monotonic() + NOTEBOOK_RUN_S
    while time.monotonic() < deadline:
        running, done, step = page.evaluate(
            """() => { const w = window.jupyterapp.shell.currentWidget;
                const ran = w.content.widgets.filter((c) => c.model.type === 'code')
                    .map((c) => c.model.executionCount !== null && c.model.executionCount !== undefined);
                const x = document.querySelector('.vizdist-live .vizdist-step-label [data-step]');
                return [ran[0] && !ran[1], ran.every((r) => r) && w.sessionContext.session.kernel.status === 'idle',
                        x ? Number(x.dataset.step) : -1]; }""")
        seen.append((running, step))
        if done:
            break
        time.sleep(0.1)
    return [step for running, step in seen if running and step >= 0]


def _live_outputs(page) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return page.evaluate(
        """() => { const cells = window.jupyterapp.shell.currentWidget.content.widgets
                   .filter((c) => c.model.type === 'code');
            const outs = (c) => { const o = c.model.outputs; const r = [];
                for (let i = 0; i < o.length; i++) r.push(o.get(i).toJSON()); return r; };
            const status = document.querySelector('.vizdist-live .vizdist-live-status');
            return {fit: outs(cells[1]), last: outs(cells[2]),
                    ended: status ? status.dataset.ended : null, steps: status ? Number(status.dataset.steps) : -1}; }""")


def _live_explorer_follows_a_running_fit(page, base: str, token: str, root: Path) -> int:  # type: ignore[no-untyped-def]
    notebook = _write_live_notebook(root)
    busy = _watch_the_live_explorer(page, base, token, notebook)
    # its thread's last refresh comes within its 0.5 s interval after the block ended
    page.wait_for_function("() => { const x = document.querySelector('.vizdist-live .vizdist-live-status');"
                           " return x && x.dataset.ended === '1'; }", timeout=15_000)
    page.screenshot(path=str(ARTIFACTS / "live_fit.png"))
    # while the fit cell ran, the explorer advanced on its own: several steps, in order
    assert len(set(busy)) >= 3 and busy == sorted(busy), f"the live explorer showed {busy} while the fit ran"
    out = _live_outputs(page)
    errors = [o for cell in (out["fit"], out["last"]) for o in cell if o["output_type"] == "error"]  # type: ignore[union-attr]
    assert errors == [], errors
    text = "".join(str(o.get("text", "")) for o in out["fit"])  # type: ignore[union-attr]
    assert "/step" in text and "vizdist" not in text, "Keras's progress bar (and only it) is the cell's text"
    total = int(str(out["last"][0]["text"]).split()[0])  # type: ignore[index]
    assert out["ended"] == "1" and out["steps"] == total, out  # the explorer's last word: every step
    return len(set(busy))


def test_notebooks_render_and_respond_in_chromium(tmp_path: Path) -> None:
    _need_chromium()
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    with jupyter_lab(tmp_path) as (base, token), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            # --- notebook 01: predict, then reveal; a what-if knob re-runs TensorFlow -------------------
            _open_and_run(page, base, token, "notebooks/01_batch_splitting.ipynb")
            _predict_then_reveal(page)
            knob_ms = _move_a_knob(page)
            page.close()
            page = browser.new_page(viewport={"width": 1400, "height": 1000})

            # --- notebook 05: the timeline renders, zooms, and follows the explorer's step ----------
            _open_and_run(page, base, token, "notebooks/05_prefetch_and_timelines.ipynb")
            tl, redraw_ms, drawn = _zoom_the_timeline(page)
            _explorer_moves_the_timeline_step(page, tl)
            tl.locator(".vizdist-tl-fit").click()
            tl.screenshot(path=str(ARTIFACTS / "05_timeline_step_highlight.png"))
            page.screenshot(path=str(ARTIFACTS / "05_prefetch_and_timelines.png"))
            page.close()

            # --- a record() block's live explorer follows a running fit ----------------------------
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            live_steps = _live_explorer_follows_a_running_fit(page, base, token, tmp_path / "root")
            page.close()
        finally:
            browser.close()
    elapsed = time.monotonic() - t_start
    print(f"browser test took {elapsed:.0f} s; timeline redraw after zoom {redraw_ms:.1f} ms ({drawn} spans drawn); "
          f"what-if knob click to new picture {knob_ms:.0f} ms; the live explorer showed {live_steps} steps "
          "while a fit ran")
    (ARTIFACTS / "timings.json").write_text(json.dumps(
        {"test_seconds": round(elapsed, 1), "timeline_redraw_ms": redraw_ms, "spans_drawn": drawn,
         "whatif_knob_to_picture_ms": round(knob_ms), "live_steps_seen_during_fit": live_steps}))
    shutil.rmtree(tmp_path / "runtime", ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover
    with tempfile.TemporaryDirectory() as d:
        test_notebooks_render_and_respond_in_chromium(Path(d))
