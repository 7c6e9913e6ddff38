"""The timeline widget through a real notebook: kernel -> Jupyter server -> websocket -> JupyterLab.

``render_scale.py`` measures the widget in a plain page; this measures it where users see it.
It starts a real JupyterLab on 127.0.0.1 (``tests/browser/lab.py``, the browser test's helper),
opens a temporary notebook in Debian's headless Chromium, and runs its cells: the
kernel builds a synthetic trace of N spans (``render_scale.spans``), then one cell records
``time.time()``, builds ``t.show("timeline")`` and displays it. The page records (same machine,
same clock, epoch ms) when the widget's first frame is drawn (``data-draw-ms`` appears on its
root) and painted (the next animation frame), and splits kernel start -> first frame into:

* kernel: ``t.show("timeline")`` (layout, binary columns, ``comm_open`` sent with one buffer
  per column), wall with process CPU beside it;
* kernel: ``display`` (the static PNG fallback for GitHub/nbval, then ``display_data``);
* Jupyter: from the ``comm_open`` header's date (kernel) to its websocket frame in the page
  (ZMQ -> server -> websocket), and on to JupyterLab's widget manager having the model;
* JupyterLab: from ``display_data`` reaching the page to the first frame drawn, and painted.

Then 12 zooms (6 in, 6 out, 2x each), each timed as ``render_scale._ZOOM`` does (button click
to the synchronously redrawn canvas) and also to the next painted frame. Aims (issue 14): at
10^6 spans <= 500 ms kernel start -> first frame and <= 50 ms per zoom; at 10^7 it opens and
zooms. 10^6 runs ``--repeats`` times (a fresh widget each, the previous one closed: min /
median); 10^7 once. The bytes synced are the websocket frames the page received. Interleaved
with the 10^6 runs, an experiment displays the live view's bundle without vizdist's static PNG
fallback, to show what that fallback costs on the way to the first frame.

No Jupyter limit stands in the way at 10^7 (one 240 MB ``comm_open``): tornado's
``websocket_max_message_size`` (10 MiB) caps only frames the server *receives* (the widget sends
back only ``view``/``step``), and jupyter_server's IOPub rate limits count ``stream`` bytes only
and skip ``comm_open``.

Run: ``python benchmarks/widget_in_lab.py`` (about 20 s on 2 quiet cores, a minute or more
under load; ``--no-big`` leaves out 10^7). Needs ``/usr/bin/chromium`` (``bash
.ci/browser-deps``); without it, it says so and measures nothing. Chromium is driven over the
DevTools protocol directly (``tests/browser/cdp.py``), not through Playwright: Playwright turns
on DevTools' Network domain, which copies every websocket frame the page receives,
base64-encoded, to its driver (32 MB of JSON per 10^6-span widget, slowing the page; at 10^7
the driver ran out of memory), a cost no user's page pays.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.browser: the browser test's JupyterLab helper, a DevTools client

from tests.browser.cdp import Page, chromium_page  # noqa: E402
from tests.browser.lab import CHROMIUM, CHROMIUM_ARGS, jupyter_lab  # noqa: E402

ZOOMS = 6
RUN_S = {1_000_000: 180, 10_000_000: 590}  # bound on one cell (the kernel builds, the page paints)

# Before any page script: log every large websocket frame the page receives (size, arrival).
_INIT = """
window.__vz = { frames: [] };
const NativeWS = window.WebSocket;
window.WebSocket = class extends NativeWS {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", (ev) => {  // registered before JupyterLab's onmessage: fires first
      const n = typeof ev.data === "string" ? ev.data.length : ev.data.byteLength;
      if (n > 65536) window.__vz.frames.push({ at: Date.now(), bytes: n });
    });
  }
};
"""

# Watch one cell for a new timeline root carrying data-draw-ms (its first drawn frame), then the
# next painted frame; note when comm_open / display_data went through JupyterLab's kernel.
_ARM = """(i) => {
  const nb = window.jupyterapp.shell.currentWidget;
  const cell = nb.content.widgets[i];
  const old = new Set(cell.node.querySelectorAll(".vizdist-timeline"));
  const run = window.__vz.run = { msgs: [], frames0: window.__vz.frames.length, done: false };
  const kernel = nb.sessionContext.session.kernel;
  const onMsg = (_, m) => {
    const t = m.header.msg_type;
    const columns = t === "comm_open" && (m.buffers || []).length > 0;  // the timeline's model, not its Layout's
    if (columns || t === "display_data")
      run.msgs.push({ type: t, at: Date.now(), sent: Date.parse(m.header.date), buffers: (m.buffers || []).length });
  };
  kernel.iopubMessage.connect(onMsg);
  run.stop = () => kernel.iopubMessage.disconnect(onMsg);
  let root = null;
  const obs = new MutationObserver((records) => {  // the first drawn frame, then draws until it is painted
    if (root) { run.draws += records.filter((r) => r.target === root).length; return; }
    root = [...cell.node.querySelectorAll(".vizdist-timeline[data-draw-ms]")].find((r) => !old.has(r));
    if (!root) return;
    Object.assign(run, { drawnAt: Date.now(), draws: 1, drawMs: Number(root.dataset.drawMs), mode: root.dataset.mode,
                         inView: Number(root.dataset.inView) });
    requestAnimationFrame(() => setTimeout(() => { run.paintedAt = Date.now(); obs.disconnect(); }, 0));
  });
  obs.observe(cell.node, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-draw-ms"] });
  run.obs = obs;
}"""

_RUN_CELL = """(i) => {
  const nb = window.jupyterapp.shell.currentWidget;
  nb.content.activeCellIndex = i;
  nb.content.deselectAll();
  const run = window.__vz.run || (window.__vz.run = {});
  run.done = false;
  window.jupyterapp.commands.execute("notebook:run-cell").then(() => { run.done = true; });
}"""

_CELL_ERRORS = """(i) => {
  const o = window.jupyterapp.shell.currentWidget.content.widgets[i].model.outputs, out = [];
  for (let k = 0; k < o.length; k++) { const m = o.get(k).toJSON();
    if (m.output_type === "error") out.push(m.ename + ": " + m.evalue + "\\n" + (m.traceback || []).slice(-3).join("\\n")); }
  return out;
}"""

_COLLECT = """() => {
  const run = window.__vz.run;
  run.stop(); run.obs.disconnect();
  const frames = window.__vz.frames.slice(run.frames0);
  return { msgs: run.msgs, frames, drawnAt: run.drawnAt, paintedAt: run.paintedAt, drawMs: run.drawMs,
           mode: run.mode, inView: run.inView, draws: run.draws };
}"""

# As render_scale._ZOOM (click -> synchronous redraw), plus click -> next painted frame.
_ZOOM = """async ([i, n]) => {
  const root = window.jupyterapp.shell.currentWidget.content.widgets[i].node.querySelector(".vizdist-timeline");
  root.scrollIntoView();
  const out = [];
  for (const cls of [...Array(n).fill(".vizdist-tl-zoom-in"), ...Array(n).fill(".vizdist-tl-zoom-out")]) {
    const t = performance.now();
    root.querySelector(cls).click();  // the widget redraws on the view change, synchronously
    const ms = performance.now() - t;
    const rec = { ms, draw_ms: Number(root.dataset.drawMs), mode: root.dataset.mode, in_view: Number(root.dataset.inView) };
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    rec.painted_ms = performance.now() - t;
    out.push(rec);
  }
  return out;
}"""


def _cell(src: str) -> dict[str, Any]:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}


def notebook(results: Path) -> dict[str, Any]:
    """The temporary notebook: setup, a warm-up widget, the traces, and the timed cell (index 3)."""
    timed = (
        "if 'tl' in globals():\n"
        "    tl.close()  # the previous run's widget leaves the kernel and the page\n"
        "    del tl\n"
        "k0, c0 = time.time(), time.process_time()\n"
        "tl = t.show('timeline')  # layout, binary columns, comm_open with one buffer per column\n"
        "k1, c1 = time.time(), time.process_time()\n"
        "display(tl) if FALLBACK else live_only(tl)  # (the PNG fallback, then) display_data: the view\n"
        "k2, c2 = time.time(), time.process_time()\n"
        "with open(RESULTS, 'a') as f:\n"
        "    f.write(json.dumps(dict(n=len(t.events), k0=k0, build=k1 - k0, build_cpu=c1 - c0,\n"
        "                            display=k2 - k1, display_cpu=c2 - c1, fallback=FALLBACK)) + '\\n')"
    )
    cells = [
        _cell(f"import json, sys, time\nsys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
              f"import anywidget\nimport render_scale\nimport vizdist\nfrom IPython.display import display\nRESULTS = {str(results)!r}\n"
              "FALLBACK = True\n\n\n"
              "def live_only(w):  # the experiment: the live view's bundle, without vizdist's static PNG\n"
              "    data = anywidget.AnyWidget._repr_mimebundle_(w)\n"
              "    display(data[0] if isinstance(data, tuple) else data, raw=True)"),
        _cell("display(render_scale.spans(1_000).show('timeline'))  # warm-up: imports, the widget's module"),
        _cell("t = render_scale.spans(1_000_000)"),
        _cell(timed),
        _cell("del t\nt = render_scale.spans(10_000_000)"),
        _cell("FALLBACK = False"),
        _cell("FALLBACK = True"),
    ]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                        "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def open_lab(page: Page, base: str, token: str, notebook: str) -> None:
    """Open ``notebook`` in JupyterLab (the frame logger installed first); return once its kernel is idle."""
    page.call("Page.enable")
    page.call("Page.addScriptToEvaluateOnNewDocument", {"source": _INIT})
    page.call("Page.navigate", {"url": f"{base}/lab/tree/{notebook}?token={token}"})
    page.wait_for("""(name) => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        return w && w.context && w.context.path.endsWith(name) && w.sessionContext && w.sessionContext.session &&
               w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'; }""",
                  notebook, timeout_s=150)


def run_cell(page: Page, i: int, timeout_s: float, *, painted: bool = False) -> None:
    """Run cell ``i``; wait (bounded) until it is done (and the armed widget painted); raise its error."""
    page.evaluate(_RUN_CELL, i)
    cond = "() => window.__vz.run.done" + (" && !!window.__vz.run.paintedAt" if painted else "")
    try:
        page.wait_for(cond, timeout_s=timeout_s)
    except TimeoutError as e:
        errors = page.evaluate(_CELL_ERRORS, i)
        raise RuntimeError(f"cell {i} did not finish{' and paint' if painted else ''} within {timeout_s} s"
                           f"{': ' + '; '.join(errors) if errors else ''}") from e
    errors = page.evaluate(_CELL_ERRORS, i)
    if errors:
        raise RuntimeError(f"cell {i} raised in the kernel: {'; '.join(errors)}")


def server_cpu_s(tmp: Path) -> float:
    """CPU seconds the Jupyter server process has used so far (its pid from its runtime file)."""
    info = json.loads(next((tmp / "runtime").glob("jpserver-*.json")).read_text())
    fields = Path(f"/proc/{info['pid']}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def open_once(page: Page, tmp: Path, n: int) -> dict[str, Any]:
    """One fresh widget of ``n`` spans: kernel stamps, page stamps, then the 12 zooms."""
    page.evaluate(_ARM, 3)
    s0, p0 = server_cpu_s(tmp), page.metric("TaskDuration")
    run_cell(page, 3, RUN_S[n], painted=True)
    rec = page.evaluate(_COLLECT)
    rec["server_cpu"], rec["page_task"] = server_cpu_s(tmp) - s0, page.metric("TaskDuration") - p0
    results = tmp / "kernel.jsonl"
    rec["kernel"] = json.loads(results.read_text().splitlines()[-1])
    assert rec["kernel"]["n"] == n, rec["kernel"]
    rec["zoom"] = page.evaluate(_ZOOM, [3, ZOOMS], timeout_s=RUN_S[n])
    return rec


def measure(repeats: int, big: bool) -> dict[tuple[int, bool], list[dict[str, Any]]]:
    """Start JupyterLab and Chromium, run the notebook; runs per (spans, PNG fallback); always clean up.

    At 10^6 each repeat is two fresh widgets, interleaved: displayed as users do (with the static
    PNG fallback) and, as an experiment, with the live view's bundle alone.
    """
    out: dict[tuple[int, bool], list[dict[str, Any]]] = {(1_000_000, True): [], (1_000_000, False): []}
    with tempfile.TemporaryDirectory(prefix="vizdist-lab-bench-") as d:
        tmp = Path(d)
        (tmp / "root").mkdir()
        (tmp / "root" / "bench.ipynb").write_text(json.dumps(notebook(tmp / "kernel.jsonl")))
        with jupyter_lab(tmp, root=tmp / "root") as (base, token), \
                chromium_page(tmp, chromium=CHROMIUM, args=CHROMIUM_ARGS, size=(1400, 1150)) as page:
            open_lab(page, base, token, "bench.ipynb")
            for i in range(3):  # setup, warm-up widget, 10^6 spans
                run_cell(page, i, 180)
            for _ in range(repeats):
                for fallback in (True, False):
                    run_cell(page, 6 if fallback else 5, 30)
                    out[1_000_000, fallback].append(open_once(page, tmp, 1_000_000))
            print(f"  10^6: {repeats} runs of each done", flush=True)
            run_cell(page, 6, 30)
            if big:
                run_cell(page, 4, RUN_S[10_000_000])
                out[10_000_000, True] = [open_once(page, tmp, 10_000_000)]
    return out


def _ms(values: list[float]) -> str:
    return f"{min(values):7.0f} / {statistics.median(values):<7.0f}"


def _first(rec: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(m for m in rec["msgs"] if m["type"] == kind)


def rows(n: int, runs: list[dict[str, Any]], aim_first: str, aim_zoom: str) -> list[tuple[str, str, str]]:
    """The table rows of one size (all times in ms, min / median over ``runs``)."""
    k = [r["kernel"] for r in runs]
    k0 = [x["k0"] * 1000 for x in k]
    opened = [_first(r, "comm_open") for r in runs]
    shown = [_first(r, "display_data") for r in runs]
    big = [max(r["frames"], key=lambda f: f["bytes"]) for r in runs]
    synced = sum(f["bytes"] for f in runs[0]["frames"])
    z = [x for r in runs for x in r["zoom"]]
    modes = "/".join(sorted({x["mode"] for x in z}))
    return [
        (f"widget {n:,} spans in JupyterLab: trace.show('timeline') (kernel)", _ms([x["build"] * 1000 for x in k]) + " ms",
         f"cpu {_ms([x['build_cpu'] * 1000 for x in k])} ms; comm_open with binary columns"),
        ("  display: PNG fallback + display_data (kernel)", _ms([x["display"] * 1000 for x in k]) + " ms",
         f"cpu {_ms([x['display_cpu'] * 1000 for x in k])} ms"),
        ("  comm_open: kernel send -> websocket frame in page",
         _ms([f["at"] - o["sent"] for f, o in zip(big, opened, strict=True)]) + " ms",
         f"{big[0]['bytes'] / 1e6:.1f} MB frame; {synced / 1e6:.1f} MB in frames > 64 kB"),
        ("  frame -> JupyterLab's widget model ready", _ms([o["at"] - f["at"] for f, o in zip(big, opened, strict=True)])
         + " ms", "websocket deserialize, widget manager, anywidget module"),
        ("  display_data in page -> first frame drawn",
         _ms([r["drawnAt"] - s["at"] for r, s in zip(runs, shown, strict=True)]) + " ms",
         f"draw {_ms([r['drawMs'] for r in runs])} ms ({runs[0]['mode']} of {runs[0]['inView']:,} spans)"),
        ("  = kernel start -> first frame drawn", _ms([r["drawnAt"] - a for r, a in zip(runs, k0, strict=True)]) + " ms",
         f"meanwhile: server cpu {_ms([r['server_cpu'] * 1000 for r in runs])} ms, "
         f"page main thread busy {_ms([r['page_task'] * 1000 for r in runs])} ms"),
        ("  = kernel start -> first frame painted", _ms([r["paintedAt"] - a for r, a in zip(runs, k0, strict=True)]) + " ms",
         f"{aim_first}; drawn {'/'.join(sorted({str(r['draws']) for r in runs}))}x before it"),
        (f"  zoom (click to redrawn), {len(z)} zooms", _ms([x["ms"] for x in z]) + " ms",
         f"{aim_zoom}; max {max(x['ms'] for x in z):.0f} ms; drawn as {modes}"),
        ("  zoom (click to next painted frame)", _ms([x["painted_ms"] for x in z]) + " ms",
         f"max {max(x['painted_ms'] for x in z):.0f} ms"),
    ]


def stamps(rec: dict[str, Any]) -> str:
    """One run's events in order, ms after the kernel started the cell (kernel and page share the clock)."""
    k = rec["kernel"]
    k0 = k["k0"] * 1000
    ev = [("built", k["build"] * 1000), ("displayed", (k["build"] + k["display"]) * 1000)]
    ev += [(f"{m['type']} sent", m["sent"] - k0) for m in rec["msgs"]]
    ev += [(f"{f['bytes'] / 1e6:.1f} MB frame", f["at"] - k0) for f in rec["frames"]]
    ev += [(f"{m['type']} handled", m["at"] - k0) for m in rec["msgs"]]
    ev += [("drawn", rec["drawnAt"] - k0), ("painted", rec["paintedAt"] - k0)]
    return ", ".join(f"{name} {t:.0f}" for name, t in sorted(ev, key=lambda e: e[1]))


def table(runs: dict[tuple[int, bool], list[dict[str, Any]]]) -> list[tuple[str, str, str]]:
    """Every row: 10^6 and 10^7 as users display the widget, then the experiment without the PNG."""
    out = rows(1_000_000, runs[1_000_000, True], "aim <= 500 ms", "aim <= 50 ms")
    if (10_000_000, True) in runs:
        out += rows(10_000_000, runs[10_000_000, True], "aim: opens", "aim: zooms")
    bare = runs[1_000_000, False]
    out += [("experiment: 10^6 without the static PNG fallback", "", "(interleaved with the runs above)")]
    out += [r for r in rows(1_000_000, bare, "", "") if r[0].startswith("  =")]
    out.append(("  display_data (kernel), without the PNG", _ms([r["kernel"]["display"] * 1000 for r in bare]) + " ms", ""))
    return out


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="fresh widgets of 10^6 spans")
    ap.add_argument("--no-big", action="store_true", help="leave out the 10^7-span run")
    args = ap.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"widget_in_lab: skipped, {CHROMIUM} is missing (bash .ci/browser-deps installs it).")
        return
    import jupyterlab

    import vizdist

    print(f"vizdist {vizdist.__version__}, JupyterLab {jupyterlab.__version__}, {os.cpu_count()} CPUs; "
          f"min / median of {args.repeats} runs at 10^6; load average {_load()}", flush=True)
    t0 = time.monotonic()
    runs = measure(args.repeats, not args.no_big)
    rows_ = table(runs)
    width = max(len(r[0]) for r in rows_)
    print(f"\n  {'':<{width}}  {'wall min / median':>19}")
    for what, value, note in rows_:
        print(f"  {what:<{width}}  {value:>19}  {note}")
    print("\nEach run, ms after the kernel started the cell:")
    for (n, fallback), rs in runs.items():
        for r in rs:
            print(f"  {n:,}{'' if fallback else ' (no PNG)'}: {stamps(r)}")
    print(f"\n{time.monotonic() - t0:.0f} s in all; load average {_load()}")


if __name__ == "__main__":
    main()
