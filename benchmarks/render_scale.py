"""How far do the renderers scale? Static timelines, the timeline widget in Chromium, and trace files.

Measured in one run and printed with the aims beside them (issue 14):

* ``plot_timeline`` of 10^5, 10^6 and 10^7 spans, drawn to a PNG (aims: 10^6
  <= 1 s, 10^7 <= 5 s);
* the timeline widget at 10^6 and 10^7 spans, the way a notebook sends it:
  the kernel builds the widget and serializes its state as ipywidgets does
  (``_remove_buffers``: each span column becomes one binary buffer), a
  loopback HTTP server hands those bytes to Debian's Chromium (as Jupyter's
  websocket would), the page splits them into one buffer per column (as
  JupyterLab's deserializer does) and runs the widget's own ES module
  (``timeline_widget.js``) to its first painted frame. Aim at 10^6: <= 0.5 s
  from the kernel to the first frame. Then 12 zooms (6 in, 6 out, 2x each),
  each timed from the button click to the redrawn canvas (aim: <= 50 ms at
  10^6); at 10^7 the aim is only that it opens and zooms. What this plain page leaves out (the
  static PNG fallback built on ``display``, Jupyter's server and websocket, JupyterLab's widget
  manager) is measured by ``widget_in_lab.py``;
* ``Trace.save`` / ``load_trace`` of 10^6 element rows as ``.json.gz`` and
  ``.parquet``.

Each figure is the min and median of ``--repeats`` runs, wall time with the
process CPU time (``time.process_time``) beside it: on a shared machine CPU
time is the steadier measure. Browser times are measured in the page
(``performance.now``). The spans are laid out like a real run (per lane back
to back, several workers, nested depths, text columns of the same dtype
real traces hold); renderers never see TensorFlow, so no TF is needed here.

Run: ``python benchmarks/render_scale.py`` (under a minute on 2 quiet cores, a few under load);
``--no-big`` leaves out the 10^7 rows.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd

import vizdist
from vizdist.render.timeline_figure import STAGE_COLORS

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ZOOMS = 6


def spans(n: int, *, workers: int = 2, lanes_per_worker: int = 8, seed: int = 0) -> vizdist.Trace:
    """``n`` spans laid out like a real run: per lane back to back with gaps, three nesting depths."""
    rng = np.random.default_rng(seed)
    k = workers * lanes_per_worker
    per = n // k
    d = rng.integers(2_000, 80_000, (k, per))
    start = (np.cumsum(d + rng.integers(500, 20_000, (k, per)), axis=1) - d).reshape(-1)
    lane = np.repeat(np.arange(k), per)
    names = [f"w{w} tf.data thread {i}" for w in range(workers) for i in range(lanes_per_worker)]
    stages = list(STAGE_COLORS)
    events = pd.DataFrame({
        "lane": pd.Categorical.from_codes(lane, names).astype("str"),
        "worker": lane // lanes_per_worker,
        "stage": pd.Categorical.from_codes(rng.integers(0, len(stages), n - n % k), stages).astype("str"),
        "step": start // 2_000_000, "t_start_ns": start, "t_end_ns": start + d.reshape(-1),
        "depth": rng.integers(0, 3, n - n % k)})
    return vizdist.Trace(events=events)


def elements(n: int, *, replicas: int = 8, batch: int = 64) -> vizdist.Trace:
    i = np.arange(n)
    step = i // (replicas * batch)
    return vizdist.Trace(elements=pd.DataFrame({
        "step": step, "replica": (i // batch) % replicas, "worker": ((i // batch) % replicas) // 4,
        "device": pd.Series([f"/job:worker/replica:0/task:0/device:CPU:{r}" for r in range(replicas)])[
            (i // batch) % replicas].to_numpy(),
        "source_id": i, "position": i % batch}), meta={"strategy": "synthetic"})


def measure(fn: Callable[[], Any], repeats: int) -> tuple[list[float], list[float], Any]:
    """Wall and process-CPU seconds of ``repeats`` runs of ``fn`` (and its last result)."""
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return walls, cpus, out


def fmt(values: list[float], unit: str = "s") -> str:
    scale = 1000 if unit == "ms" else 1
    return f"{min(values) * scale:7.{0 if unit == 'ms' else 2}f} / {statistics.median(values) * scale:<7.{0 if unit == 'ms' else 2}f}"


# -- the widget in Chromium ---------------------------------------------------------------
_PAGE = b'<!doctype html><html><body style="margin:0"><div id="root" style="width:1200px"></div></body></html>'

_OPEN = """async ([meta]) => {
  const t0 = performance.now();
  const blob = await (await fetch("/columns.bin")).arrayBuffer();
  const tFetched = performance.now();
  const columns = { n: meta.n, dtypes: meta.dtypes };  // JupyterLab hands each buffer over as its own DataView
  for (const [path, a, b] of meta.parts) columns[path] = new DataView(blob.slice(a, b));
  const tSplit = performance.now();
  const mod = await import("/widget.js");
  const state = { spec: meta.spec, columns, view: [], step: -1, show_idle_lanes: false };
  const handlers = {};
  const model = {  // what anywidget's model does: get, set (firing change:<name>), on, save_changes
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); },
    save_changes() {},
    on(ev, f) { (handlers[ev] = handlers[ev] || []).push(f); },
  };
  const tr = performance.now();
  mod.default.render({ model, el: document.getElementById("root") });
  const rendered = performance.now();
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));  // the frame is painted
  const root = document.querySelector(".vizdist-timeline");
  return { fetch_ms: tFetched - t0, split_ms: tSplit - tFetched, render_ms: rendered - tr,
           painted_ms: performance.now() - tr, draw_ms: Number(root.dataset.drawMs),
           mode: root.dataset.mode, in_view: Number(root.dataset.inView) };
}"""

_ZOOM = """async ([n]) => {
  const root = document.querySelector(".vizdist-timeline");
  const out = [];
  for (const cls of [...Array(n).fill(".vizdist-tl-zoom-in"), ...Array(n).fill(".vizdist-tl-zoom-out")]) {
    const t = performance.now();
    root.querySelector(cls).click();  // the widget redraws on the view change, synchronously
    out.push({ ms: performance.now() - t, draw_ms: Number(root.dataset.drawMs), mode: root.dataset.mode,
               in_view: Number(root.dataset.inView) });
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  }
  return out;
}"""


@contextlib.contextmanager
def serve(files: dict[str, tuple[bytes, str]]) -> Iterator[str]:
    """Serve ``path -> (bytes, content type)`` on 127.0.0.1; yield the base URL; always stop."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, kind = files.get(self.path, (b"", ""))
            self.send_response(200 if kind else 404)
            self.send_header("Content-Type", kind or "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def kernel_side(trace: vizdist.Trace) -> tuple[dict[str, Any], bytes]:
    """Build the widget and serialize its state as ipywidgets does: (page meta, buffer bytes)."""
    from ipywidgets.widgets.widget import _remove_buffers

    tl = trace.show.timeline()
    state, paths, buffers = _remove_buffers(tl.get_state())
    parts, at = [], 0
    for path, buf in zip(paths, buffers, strict=True):
        assert path[0] == "columns", path
        parts.append([path[1], at, at + len(buf)])
        at += len(buf)
    meta = {"n": state["columns"]["n"], "dtypes": state["columns"]["dtypes"], "parts": parts, "spec": state["spec"]}
    return meta, b"".join(bytes(b) for b in buffers)


def browser(trace: vizdist.Trace, repeats: int) -> dict[str, Any] | None:
    """Kernel build + serialize, then first frame and zooms in Chromium, ``repeats`` fresh pages."""
    if not Path(CHROMIUM).exists():
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    import vizdist.render.timeline_widget as w

    esm = Path(w.__file__).with_name("timeline_widget.js").read_bytes()
    res: dict[str, Any] = {"kernel": [], "kernel_cpu": [], "open": [], "zoom": []}
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for _ in range(repeats):
                c0, t0 = time.process_time(), time.perf_counter()
                meta, blob = kernel_side(trace)
                res["kernel"].append(time.perf_counter() - t0)
                res["kernel_cpu"].append(time.process_time() - c0)
                res["bytes"] = len(blob) + len(json.dumps(meta["spec"]))
                with serve({"/": (_PAGE, "text/html"), "/widget.js": (esm, "text/javascript"),
                            "/columns.bin": (blob, "application/octet-stream")}) as base:
                    page = chromium.new_page(viewport={"width": 1300, "height": 900})
                    page.goto(base + "/")
                    res["open"].append(page.evaluate(_OPEN, [meta]))
                    res["zoom"] += page.evaluate(_ZOOM, [ZOOMS])
                    page.close()
                del meta, blob
        finally:
            chromium.close()
    return res


def widget_rows(n: int, res: dict[str, Any] | None, aim_first: str, aim_zoom: str) -> list[tuple[str, str, str]]:
    if res is None:
        return [(f"widget, {n:,} spans", "skipped", f"no {CHROMIUM} or playwright")]
    o = res["open"]
    transfer = [(x["fetch_ms"] + x["split_ms"]) / 1000 for x in o]
    painted = [x["painted_ms"] / 1000 for x in o]
    first = [k + t + p for k, t, p in zip(res["kernel"], transfer, painted, strict=True)]
    z = res["zoom"]
    modes = sorted({x["mode"] for x in z})
    return [
        (f"widget {n:,} spans: kernel build + serialize", fmt(res["kernel"], "ms") + " ms",
         f"cpu {fmt(res['kernel_cpu'], 'ms')} ms; {res['bytes'] / 1e6:.0f} MB synced (binary)"),
        ("  loopback transfer + split into columns", fmt(transfer, "ms") + " ms", ""),
        ("  widget render to first painted frame", fmt(painted, "ms") + " ms",
         f"render() {fmt([x['render_ms'] / 1000 for x in o], 'ms')} ms, of which draw "
         f"{fmt([x['draw_ms'] / 1000 for x in o], 'ms')} ms ({o[0]['mode']} of {o[0]['in_view']:,} spans)"),
        ("  = kernel to first frame", fmt(first, "ms") + " ms", aim_first),
        (f"  zoom (click to redrawn), {len(z)} zooms", fmt([x["ms"] / 1000 for x in z], "ms") + " ms",
         f"{aim_zoom}; max {max(x['ms'] for x in z):.0f} ms; drawn as {'/'.join(modes)}"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-big", action="store_true", help="leave out the 10^7-span rows")
    args = ap.parse_args()
    rows: list[tuple[str, str, str]] = []
    tmp = Path(tempfile.mkdtemp(prefix="vizdist-bench-"))
    print(f"vizdist {vizdist.__version__}, {os.cpu_count()} CPUs; min / median of {args.repeats} runs", flush=True)
    try:
        spans(30_000).plot.timeline().savefig(tmp / "warm.png", dpi=80)  # imports, fonts
        sizes = [(100_000, ""), (1_000_000, "<= 1 s")] + ([] if args.no_big else [(10_000_000, "<= 5 s")])
        for n, aim in sizes:
            t = spans(n)
            walls, cpus, _ = measure(lambda t=t, n=n: t.plot.timeline().savefig(tmp / f"t{n}.png", dpi=80),
                                     args.repeats)
            rows.append((f"plot_timeline, {n:,} spans -> PNG", fmt(walls) + " s", f"cpu {fmt(cpus)} s  {aim}"))
            print(*rows[-1], flush=True)
            del t
        spans(1_000).show.timeline()  # imports, first widget
        for n, aim_first, aim_zoom in [(1_000_000, "aim <= 500 ms", "aim <= 50 ms")] + (
                [] if args.no_big else [(10_000_000, "aim: opens", "aim: zooms")]):
            rows += widget_rows(n, browser(spans(n), args.repeats if n <= 1_000_000 else 1), aim_first, aim_zoom)
            print(*rows[-1], flush=True)
        big = elements(1_000_000)
        for name in ("run.json.gz", "run.parquet"):
            p = tmp / name
            s_save, _, _ = measure(lambda p=p: big.save(p), args.repeats)
            s_load, _, back = measure(lambda p=p: vizdist.load_trace(p), args.repeats)
            assert len(back.elements) == len(big.elements)
            size = sum(f.stat().st_size for f in p.rglob("*")) if p.is_dir() else p.stat().st_size
            rows.append((f"save / load 1,000,000 element rows, {name.split('.', 1)[1]}",
                         f"{min(s_save):.2f} s / {min(s_load):.2f} s", f"{size / 1e6:.1f} MB on disk"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"\n  {'':<{width}}  {'wall min / median':>19}")
    for what, value, note in rows:
        print(f"  {what:<{width}}  {value:>19}  {note}")


if __name__ == "__main__":
    main()
