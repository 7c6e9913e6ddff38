// vizdist timeline: a canvas view of timed spans (anywidget ES module).
// Synced: `spec` (plain JSON: lanes, stages, colours, steps), `columns` (one binary buffer per
// span column, sorted by depth then start; read as typed arrays without a copy), `view`
// ([t0_ms, t1_ms], the visible range), `step` (highlighted step, -1 = none), `show_idle_lanes`.
// Up to spec.summary_above spans in view, every span is drawn; above it, a per-pixel summary
// (every span marks each pixel it touches; a pixel shows the stage most spans there have), and
// the bar says so. Lanes that carry nothing in view are hidden unless show_idle_lanes is on.
// Zoom: mouse wheel or the +/- buttons; pan: drag; reset: double click or "fit".
// Every user string (lane, stage, op names) reaches the page as text: canvas fillText or textContent.

const LANE_H = 22;
const GROUP_H = 18;
const LABEL_W = 170;
const AXIS_H = 22;
const BLOCK = 256; // spans per block of the "reach" index (latest end so far)
const MAX_OUTLINED = 10000;
const TYPES = {
  float64: Float64Array, float32: Float32Array, int32: Int32Array, uint32: Uint32Array,
  int16: Int16Array, uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array,
};

// A synced column as a typed array: a binary buffer (DataView from ipywidgets, ArrayBuffer, typed
// array) is viewed in place; a plain list is copied.
export function column(value, dtype, n) {
  const T = TYPES[dtype] || Float64Array;
  if (value == null) return new T(0);
  if (Array.isArray(value)) return T.from(value);
  let buf = value instanceof ArrayBuffer ? value : value.buffer;
  let off = value instanceof ArrayBuffer ? 0 : value.byteOffset;
  const len = value.byteLength;
  if (off % T.BYTES_PER_ELEMENT !== 0) { buf = buf.slice(off, off + len); off = 0; }
  return new T(buf, off, Math.min(n, Math.floor(len / T.BYTES_PER_ELEMENT)));
}

// first index in [lo, hi) with arr[i] >= x (strict=false) or arr[i] > x (strict=true)
function bound(arr, x, lo, hi, strict) {
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (strict ? arr[mid] <= x : arr[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// Runs of spans of one depth (the kernel sorts by depth, then start), each with a block index
// of the latest end so far: the first block that can reach t is found by binary search.
function depthLevels(cols) {
  const { depth, end, n } = cols;
  const levels = [];
  let i = 0;
  while (i < n) {
    const d = depth[i];
    const j = bound(depth, d, i, n, true);
    const reach = new Float64Array(Math.ceil((j - i) / BLOCK));
    let m = -Infinity;
    for (let b = 0; b < reach.length; b++) {
      const stop = Math.min(i + (b + 1) * BLOCK, j);
      for (let k = i + b * BLOCK; k < stop; k++) if (end[k] > m) m = end[k];
      reach[b] = m;
    }
    levels.push({ depth: d, lo: i, hi: j, reach });
    i = j;
  }
  return levels;
}

// [from, to): the spans of a level that can overlap [t0, t1] (those in it still need end >= t0)
function candidates(cols, lvl, t0, t1) {
  const from = Math.min(lvl.lo + bound(lvl.reach, t0, 0, lvl.reach.length, false) * BLOCK, lvl.hi);
  return [from, bound(cols.start, t1, from, lvl.hi, true)];
}

function niceStep(range, target) {
  const raw = range / Math.max(target, 1);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function rgba32(hex, alpha) { // little-endian RGBA in one Uint32 (ImageData byte order)
  const v = parseInt(hex.slice(1), 16);
  return ((Math.round(alpha * 255) << 24) | ((v & 0xff) << 16) | (v & 0xff00) | ((v >> 16) & 0xff)) >>> 0;
}

function el(tag, cls, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}

function render({ model, el: host }) {
  const root = el("div", "vizdist-timeline", host);
  const bar = el("div", "vizdist-tl-bar", root);
  const mk = (txt, cls, title) => { const b = el("button", cls, bar); b.textContent = txt; b.title = title; return b; };
  const zin = mk("+", "vizdist-tl-zoom-in", "zoom in");
  const zout = mk("\u2212", "vizdist-tl-zoom-out", "zoom out");
  const fit = mk("fit", "vizdist-tl-fit", "show everything");
  const range = el("span", "vizdist-tl-range", bar);
  const idleBox = el("label", "vizdist-tl-idle", bar);
  const idleCheck = el("input", "", idleBox);
  idleCheck.type = "checkbox";
  const idleText = el("span", "", idleBox);
  const legend = el("span", "vizdist-tl-legend", bar);
  const mode = el("div", "vizdist-tl-mode", root);
  const wrap = el("div", "vizdist-tl-canvas-wrap", root);
  const canvas = el("canvas", "vizdist-tl-canvas", wrap);
  const tip = el("div", "vizdist-tl-tip", wrap);
  tip.style.display = "none";
  const off = document.createElement("canvas"); // the summary image, drawn onto the canvas

  let spec = null, cols = null, levels = [], rows = [], laneY = [], width = 800, drawnWidth = 0;

  function load() {
    spec = model.get("spec") || {};
    const c = model.get("columns") || {};
    const n = c.n || 0, dt = c.dtypes || {};
    cols = { n };
    for (const k of ["start", "end", "lane", "stage", "step", "depth", "op"]) cols[k] = column(c[k], dt[k] || "float64", n);
    levels = depthLevels(cols);
    legend.textContent = "";
    (spec.stages || []).forEach((s, k) => {
      const item = el("span", "vizdist-tl-key", legend);
      el("i", "", item).style.background = spec.colors[k];
      item.appendChild(document.createTextNode(s));
    });
  }

  function view() {
    const v = model.get("view");
    if (v && v.length === 2 && v[1] > v[0]) return v;
    const a = spec.t_min || 0, b = spec.t_max || 0;
    return b > a ? [a, b] : [a - 0.5, a + 0.5]; // a single zero-length span still gets an axis
  }

  function setView(t0, t1) {
    const full = spec.t_max - spec.t_min || 1;
    const minSpan = Math.max(full * 1e-7, 1e-6);
    if (t1 - t0 < minSpan) { const c = (t0 + t1) / 2; t0 = c - minSpan / 2; t1 = c + minSpan / 2; }
    model.set("view", [t0, t1]);
    model.save_changes();
  }

  // One pass over the spans in view: how many, which lanes hold any, how busy (outermost spans), the
  // highlighted step's spans, and for the summary, per depth level, how many spans of each (stage, lane)
  // cover each of the W pixel columns (+1 where a span starts, -1 after it ends; summed along x later).
  function scan(t0, t1, sel, W) {
    const nL = (spec.lanes || []).length, S = (spec.stages || []).length, C = W + 1;
    const any = new Uint8Array(nL), busy = new Float64Array(nL), outlined = [], counts = [];
    const { start, end, lane, stage, step } = cols;
    const scale = W / (t1 - t0);
    let count = 0;
    for (const lvl of levels) {
      const [from, to] = candidates(cols, lvl, t0, t1);
      const cnt = new Int32Array(S * nL * C);
      counts.push(cnt);
      const outer = lvl === levels[0] && lvl.depth === 0;
      for (let i = from; i < to; i++) {
        const b = end[i];
        if (b < t0) continue;
        const a = start[i], ln = lane[i];
        count++; any[ln] = 1;
        if (outer) busy[ln] += Math.min(b, t1) - Math.max(a, t0);
        if (sel >= 0 && step[i] === sel && outlined.length < MAX_OUTLINED) outlined.push(i);
        const base = (stage[i] * nL + ln) * C;
        const c0 = Math.floor((a - t0) * scale), c1 = Math.floor((b - t0) * scale);
        cnt[base + (c0 < 0 ? 0 : c0 >= W ? W - 1 : c0)]++;
        cnt[base + (c1 < 0 ? 0 : c1 >= W ? W - 1 : c1) + 1]--;
      }
    }
    return { count, any, busy, outlined, counts };
  }

  function hiddenLanes(seen, t0, t1) {
    const nL = (spec.lanes || []).length;
    const hide = new Uint8Array(nL);
    if (model.get("show_idle_lanes")) return hide;
    const frac = spec.idle_busy_fraction || 0, prof = spec.lane_profiler || [];
    let all = true;
    for (let l = 0; l < nL; l++) {
      hide[l] = (!seen.any[l] || (prof[l] && seen.busy[l] < frac * (t1 - t0))) ? 1 : 0;
      all = all && hide[l] === 1;
    }
    return all ? new Uint8Array(nL) : hide;
  }

  function layoutRows(hide) {
    rows = []; laneY = new Array((spec.lanes || []).length).fill(-1);
    let y = 0, lastW = null;
    (spec.lanes || []).forEach((name, i) => {
      if (hide[i]) return;
      const w = spec.lane_worker[i];
      if (w !== lastW) { rows.push({ kind: "group", label: "worker " + w, y }); y += GROUP_H; lastW = w; }
      laneY[i] = y; rows.push({ kind: "lane", label: name, y, lane: i }); y += LANE_H;
    });
    return y + AXIS_H;
  }

  function laneHeight(depth) { return Math.max(LANE_H * (0.8 - 0.16 * depth), LANE_H * 0.25); }

  function drawSpans(ctx, t0, t1, sx, sel) {
    let drawn = 0;
    for (const lvl of levels) {
      const h = laneHeight(lvl.depth);
      const [from, to] = candidates(cols, lvl, t0, t1);
      const lastX = new Float64Array(laneY.length).fill(-1);
      for (let i = from; i < to; i++) {
        const a = cols.start[i], b = cols.end[i], ln = cols.lane[i];
        if (b < t0 || laneY[ln] < 0) continue;
        const xa = LABEL_W + (a - t0) * sx, w = Math.max((b - a) * sx, 1);
        if (w <= 1 && Math.floor(xa) === lastX[ln]) continue; // sub-pixel spans: one per pixel column
        lastX[ln] = Math.floor(xa);
        const faded = sel >= 0 && cols.step[i] !== sel;
        ctx.globalAlpha = faded ? 0.25 : 0.95;
        ctx.fillStyle = spec.colors[cols.stage[i]];
        ctx.fillRect(xa, laneY[ln] + (LANE_H - h) / 2, w, h);
        if (!faded && sel >= 0) { ctx.strokeStyle = "#000"; ctx.strokeRect(xa, laneY[ln] + (LANE_H - h) / 2, w, h); }
        drawn++;
      }
    }
    return drawn;
  }

  // The per-pixel summary: per depth level, count the spans of each (stage, lane) over each pixel
  // column (+1 where a span starts, -1 after it ends, summed along x); a pixel shows the stage with
  // the most spans there (ties: the first stage).
  function drawSummary(ctx, counts, W, H, dpr, faded) {
    const HP = Math.max(1, Math.round(H * dpr));
    const S = spec.stages.length, L = laneY.length, C = W + 1;
    const img = new ImageData(W, HP);
    const px = new Uint32Array(img.data.buffer);
    const color = spec.colors.map((c) => rgba32(c, faded ? 0.25 : 0.95));
    const best = new Int32Array(L * W), top = new Int16Array(L * W);
    levels.forEach((lvl, k) => {
      const cnt = counts[k];
      best.fill(0); top.fill(-1);
      for (let s = 0; s < S; s++) {
        for (let l = 0; l < L; l++) {
          if (laneY[l] < 0) continue;
          let run = 0;
          const base = (s * L + l) * C;
          for (let x = 0; x < W; x++) {
            run += cnt[base + x];
            if (run > best[l * W + x]) { best[l * W + x] = run; top[l * W + x] = s; }
          }
        }
      }
      const h = laneHeight(lvl.depth);
      for (let l = 0; l < L; l++) {
        if (laneY[l] < 0) continue;
        const r0 = Math.floor((laneY[l] + (LANE_H - h) / 2) * dpr), r1 = Math.min(Math.ceil((laneY[l] + (LANE_H + h) / 2) * dpr), HP);
        for (let x = 0; x < W; x++) {
          const s = top[l * W + x];
          if (s < 0) continue;
          const c = color[s];
          for (let r = r0; r < r1; r++) px[r * W + x] = c;
        }
      }
    });
    off.width = W; off.height = HP;
    off.getContext("2d").putImageData(img, 0, 0);
    ctx.drawImage(off, LABEL_W, 0, W / dpr, HP / dpr);
  }

  function outline(ctx, idx, t0, sx) {
    for (const i of idx) {
      const ln = cols.lane[i];
      if (laneY[ln] < 0) continue;
      const h = laneHeight(cols.depth[i]);
      const xa = LABEL_W + (cols.start[i] - t0) * sx, w = Math.max((cols.end[i] - cols.start[i]) * sx, 1);
      ctx.globalAlpha = 0.95;
      ctx.fillStyle = spec.colors[cols.stage[i]];
      ctx.fillRect(xa, laneY[ln] + (LANE_H - h) / 2, w, h);
      ctx.strokeStyle = "#000";
      ctx.strokeRect(xa, laneY[ln] + (LANE_H - h) / 2, w, h);
    }
  }

  function drawRows(ctx) {
    ctx.font = "11px sans-serif";
    ctx.textBaseline = "middle";
    for (const r of rows) {
      if (r.kind === "group") {
        ctx.fillStyle = "#eef1f5"; ctx.fillRect(0, r.y, width, GROUP_H);
        ctx.fillStyle = "#333"; ctx.font = "bold 11px sans-serif";
        ctx.fillText(r.label, 4, r.y + GROUP_H / 2); ctx.font = "11px sans-serif";
      } else {
        ctx.fillStyle = (r.lane % 2) ? "#fafafa" : "#ffffff"; ctx.fillRect(0, r.y, width, LANE_H);
        ctx.fillStyle = "#222"; ctx.fillText(String(r.label).slice(0, 28), 12, r.y + LANE_H / 2);
      }
    }
  }

  function drawAxis(ctx, t0, t1, plotW, H, X) {
    const ay = H - AXIS_H;
    ctx.fillStyle = "#fff"; ctx.fillRect(0, ay, width, AXIS_H);
    ctx.strokeStyle = "#888"; ctx.beginPath(); ctx.moveTo(LABEL_W, ay + 0.5); ctx.lineTo(width, ay + 0.5); ctx.stroke();
    const st = niceStep(t1 - t0, plotW / 90);
    ctx.fillStyle = "#333"; ctx.textBaseline = "top";
    for (let t = Math.ceil(t0 / st) * st; t <= t1; t += st) {
      const x = X(t);
      ctx.beginPath(); ctx.moveTo(x + 0.5, ay); ctx.lineTo(x + 0.5, ay + 4); ctx.stroke();
      ctx.fillText(+t.toPrecision(6) + " ms", x + 2, ay + 5);
    }
  }

  function draw() {
    if (!spec) return;
    // Not laid out yet (JupyterLab renders a ready model's view before placing it; or hidden): the
    // ResizeObserver draws once the canvas has a width, instead of a wasted draw at a guessed one.
    drawnWidth = wrap.clientWidth;
    if (!drawnWidth) return;
    const tDraw = performance.now();
    const [t0, t1] = view();
    const sel = model.get("step");
    width = Math.max(drawnWidth, 300);
    const dpr = window.devicePixelRatio || 1;
    const plotW = width - LABEL_W - 8;
    const W = Math.max(1, Math.round(plotW * dpr)); // pixel columns of the summary
    const seen = scan(t0, t1, sel, W);
    const hide = hiddenLanes(seen, t0, t1);
    const H = layoutRows(hide);
    canvas.width = Math.floor(width * dpr);
    canvas.height = Math.floor(H * dpr);
    canvas.style.width = width + "px";
    canvas.style.height = H + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, H);
    const sx = plotW / (t1 - t0);
    const X = (t) => LABEL_W + (t - t0) * sx;
    drawRows(ctx);
    const ss = spec.step_starts || {};
    ctx.strokeStyle = "#bbb"; ctx.lineWidth = 1;
    for (const k in ss) {
      const x = X(ss[k]);
      if (x < LABEL_W || x > width) continue;
      ctx.beginPath(); ctx.moveTo(x + 0.5, 0); ctx.lineTo(x + 0.5, H - AXIS_H); ctx.stroke();
    }
    const summary = seen.count > (spec.summary_above || Infinity);
    ctx.save();
    ctx.beginPath(); ctx.rect(LABEL_W, 0, plotW, H - AXIS_H); ctx.clip();
    let drawn = seen.count;
    if (summary) {
      drawSummary(ctx, seen.counts, W, H - AXIS_H, dpr, sel >= 0);
      if (sel >= 0) outline(ctx, seen.outlined, t0, sx);
    } else {
      drawn = drawSpans(ctx, t0, t1, sx, sel);
    }
    ctx.restore();
    ctx.globalAlpha = 1;
    drawAxis(ctx, t0, t1, plotW, H, X);
    const nHidden = hide.reduce((a, b) => a + b, 0);
    range.textContent = `visible ${(+t0.toPrecision(6))}\u2013${(+t1.toPrecision(6))} ms` +
      (sel >= 0 ? `, step ${sel} highlighted` : "");
    range.dataset.t0 = String(t0);
    range.dataset.t1 = String(t1);
    idleCheck.checked = !!model.get("show_idle_lanes");
    idleText.textContent = nHidden ? ` show ${nHidden} idle lane${nHidden > 1 ? "s" : ""}` : " show idle lanes";
    idleBox.title = (spec.lanes || []).filter((_, l) => hide[l]).join("\n");
    mode.textContent = summary
      ? `${seen.count.toLocaleString("en-US")} spans in view, summarised per pixel: every span marks each ` +
        "pixel it touches; a pixel shows the stage most spans there have. Zoom in to see each span."
      : "";
    root.dataset.mode = summary ? "summary" : "spans";
    root.dataset.inView = String(seen.count);
    root.dataset.hidden = String(nHidden);
    root.dataset.drawn = String(drawn);
    root.dataset.step = String(sel);
    root.dataset.drawMs = (performance.now() - tDraw).toFixed(2);
  }

  function zoomAt(factor, xPix) {
    const [t0, t1] = view();
    const plotW = width - LABEL_W - 8;
    const f = Math.min(Math.max((xPix - LABEL_W) / plotW, 0), 1);
    const c = t0 + f * (t1 - t0);
    setView(c - (c - t0) * factor, c + (t1 - c) * factor);
  }

  zin.addEventListener("click", () => zoomAt(0.5, LABEL_W + (width - LABEL_W) / 2));
  zout.addEventListener("click", () => zoomAt(2, LABEL_W + (width - LABEL_W) / 2));
  fit.addEventListener("click", () => setView(spec.t_min, spec.t_max));
  idleCheck.addEventListener("change", () => { model.set("show_idle_lanes", idleCheck.checked); model.save_changes(); });
  canvas.addEventListener("dblclick", () => setView(spec.t_min, spec.t_max));
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const rect = canvas.getBoundingClientRect();
    zoomAt(ev.deltaY < 0 ? 0.8 : 1.25, ev.clientX - rect.left);
  }, { passive: false });
  let dragging = null;
  canvas.addEventListener("mousedown", (ev) => { dragging = { x: ev.clientX, v: view() }; });
  const up = () => { dragging = null; };
  window.addEventListener("mouseup", up);
  canvas.addEventListener("mousemove", (ev) => {
    const rect = canvas.getBoundingClientRect();
    const mx = ev.clientX - rect.left, my = ev.clientY - rect.top;
    if (dragging) {
      const [a, b] = dragging.v;
      const dt = (ev.clientX - dragging.x) / ((width - LABEL_W - 8) / (b - a));
      setView(a - dt, b - dt);
      tip.style.display = "none";
      return;
    }
    hover(mx, my);
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });

  // the deepest span under the cursor on the lane under it (-1: none)
  function spanAt(lane, t, tol) {
    for (let L = levels.length - 1; L >= 0; L--) {
      const [from, to] = candidates(cols, levels[L], t - tol, t + tol);
      for (let i = to - 1; i >= from; i--) {
        if (cols.lane[i] === lane && cols.start[i] - tol <= t && cols.end[i] + tol >= t) return i;
      }
    }
    return -1;
  }

  function hover(mx, my) {
    const row = spec && mx >= LABEL_W ? rows.find((r) => r.kind === "lane" && my >= r.y && my < r.y + LANE_H) : null;
    if (!row) { tip.style.display = "none"; return; }
    const [t0, t1] = view();
    const sx = (width - LABEL_W - 8) / (t1 - t0);
    const i = spanAt(row.lane, t0 + (mx - LABEL_W) / sx, 2 / sx);
    if (i < 0) { tip.style.display = "none"; return; }
    const step = cols.step[i];
    const key = spec.lane_worker[cols.lane[i]] + ":" + step;
    const els = step >= 0 ? ((spec.step_elements || {})[key] || "") : "";
    const dur = cols.end[i] - cols.start[i];
    tip.textContent = "";
    const lines = [
      `${spec.stages[cols.stage[i]]} \u2014 ${spec.lanes[cols.lane[i]]}`,
      spec.ops[cols.op[i]] ? `op: ${spec.ops[cols.op[i]]}` : "",
      `step: ${step >= 0 ? step : "not tied to a step"}`,
      els ? `elements: ${els}` : "",
      `${(+dur.toPrecision(4))} ms at ${(+cols.start[i].toPrecision(6))} ms`,
    ].filter(Boolean);
    for (const l of lines) el("div", "", tip).textContent = l;
    tip.dataset.step = String(step);
    tip.dataset.span = String(i);
    tip.style.display = "block";
    tip.style.left = Math.min(mx + 12, width - 260) + "px";
    tip.style.top = (my + 14) + "px";
  }

  load();
  draw();
  model.on("change:spec", () => { load(); draw(); });
  model.on("change:columns", () => { load(); draw(); });
  model.on("change:view", draw);
  model.on("change:step", draw);
  model.on("change:show_idle_lanes", draw);
  const ro = new ResizeObserver(() => { if (wrap.clientWidth !== drawnWidth) draw(); });  // placed, shown, resized
  ro.observe(wrap);
  return () => { ro.disconnect(); window.removeEventListener("mouseup", up); };
}

export default { render };
