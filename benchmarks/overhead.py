"""What does tracing cost? Traced vs untraced, side by side, for the shapes users have (issue 14).

Each row runs the same pipeline over 4 replicas (``MirroredStrategy`` on 4
logical CPUs) the way a training loop does, with a small ``tf.function``
step: once plainly (``untraced``) and once through
``vizdist.trace_distribution`` (``traced``), interleaved, ``--repeats``
times. The measure is process CPU time (``time.process_time``: all threads),
which stays put on these shared 2-core machines while wall time jumps in
doublings; wall time is shown beside it. Ratios are traced / untraced, of
the minima and of the medians.

The 10^6 row's ratio comes from interleaved runs in this process too (2
repeats, 3 with ``--full``, with A/A). Its peak RSS needs a fresh process per
variant: the extra peak of the traced run over the untraced one, per element,
is the memory row (aim <= 100 B; each run's peak over the memory its process
had in use when the run started: Linux's high-water mark, reset there, so what
start-up and warm-up took is not counted). Those fresh processes' CPU ratio is printed
as ``fresh procs``, without an aim: one process's CPU time varies by 5-15%
from the next here, more than the overhead measured. The 10^7 row
(``--big``) runs in fresh processes only, and also saves and loads its
Parquet trace.

Every in-process row also runs ``id only``: the same pipeline carrying the
cheapest exact per-element id plain TF offers, keyed ``{"n": id, "value":
element}`` as vizdist keys its tag, distributed and iterated by the same loop
as ``untraced``, the id carried and unused. For the file rows that is TF's
line number (what ``reader.enumerate()`` zips in before the batch: a
position, naming no file); for the range rows, the range's own number, put
beside the value by the pipeline's existing ``map`` (no extra op). Its ratio
is what any exact per-element id costs on this TF before vizdist records
anything: where it misses a row's aim, so must ``traced``, and the row says so.

Where the overhead goes: ``--explain`` adds a ``tag only`` variant to the
in-process rows: the tagged pipeline distributed and iterated by the same
loop as ``untraced``, with nothing recorded. ``tag only`` / ``untraced`` is
what TensorFlow spends carrying vizdist's tag (one more component per
element; the distributed iterator's per-step work per component);
``traced`` / ``tag only`` is vizdist's own recording. Every in-process row
also runs ``again (A/A)``, the untraced loop a second time: how far noise
alone moves a ratio; a row that misses its aim by less than that says so.
``--explain`` also prints TF's own price of one more tensor per element, on
a plain iterator: the call the distributed iterator makes per replica per
step costs (here, TF 2.21, Python 3.11, elements read from a cache so the
pipeline's own work is not counted) about 48-55 us for a one-tensor element and
90-100 us for a pair (tf.data packs the tuple and checks each tensor's spec in
Python; a lone tensor skips that), and only about 10 us more for a third
tensor; on Python 3.12, 47 / 76 / 89 us. vizdist carries its tag keyed,
``{"tag": t, "value": v}`` (:func:`vizdist.instrument.core.codes.keyed`: the same
tensors and graph), which TF packs without a ``Protocol`` check: about 73 us.
That is why the tag costs most on the benchmark's one-tensor elements and why
it is a per-step cost that a heavier step hides.

Run: ``python benchmarks/overhead.py`` (every row, shorter runs: about 5
minutes on 2 cores);
``--full`` runs the rows at the issue's sizes (batch 32 over 100k elements,
3,125 steps) with 5 repeats, and 3 of the 10^6 row (about 15 minutes);
``--big`` adds 10^7 elements (about 15 more minutes); ``--timing`` adds
``timing=True`` / ``timing=0`` variants to the batch-512 row.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

REPLICAS = 4
FILES = 8


@dataclass
class Shape:
    label: str
    source: str  # "range", "text" or "tfrecord"
    n: int
    batch: int
    aim: float


IN_PROCESS = [
    Shape("range, batch 32 (3,125 steps)", "range", 100_000, 32, 1.05),
    Shape("range, batch 256, 100k", "range", 100_000, 256, 1.05),
    Shape("8 text files, 100k lines, batch 256", "text", 100_000, 256, 1.05),
    Shape("8 TFRecord files, 100k records, batch 256", "tfrecord", 100_000, 256, 1.05),
    Shape("range, batch 512, 10^5", "range", 100_000, 512, 1.03),
]
#: The default (quick) run: the same shapes, the longest rows shorter (the ratio is per step and per element).
QUICK = {"range, batch 32 (3,125 steps)": Shape("range, batch 32 (1,250 steps)", "range", 40_000, 32, 1.05),
         "range, batch 256, 100k": Shape("range, batch 256, 50k", "range", 50_000, 256, 1.05)}
SUBPROCESS = [Shape("range, batch 512, 10^6", "range", 1_000_000, 512, 1.03)]
BIG = [Shape("range, batch 512, 10^7", "range", 10_000_000, 512, 1.03)]
MEMORY_AIM_B = 100


# -- the workload -------------------------------------------------------------------
def _setup() -> tuple[Any, Any]:
    import vizdist

    vizdist.virtual_devices(REPLICAS)
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    return tf, tf.distribute.MirroredStrategy()


def _write_files(tf: Any, source: str, n: int, folder: str) -> list[str]:
    from vizdist.instrument.experiments.sharding import write_text_files, write_tfrecord_files

    per = n // FILES
    if source == "text":
        return write_text_files(folder, n_files=FILES, lines_per_file=per)
    return write_tfrecord_files(folder, n_files=FILES, records_per_file=per)


def _pipeline(tf: Any, shape: Shape, files: list[str], numbered: bool = False) -> Any:
    """The row's pipeline; ``numbered``: each element keyed ``{"n": id, "value": element}`` (the
    range's own number; for files, the position zipped in as ``enumerate`` does)."""
    if shape.source == "range":
        fn = (lambda x: {"n": x, "value": x * 2 + 1}) if numbered else (lambda x: x * 2 + 1)
        return tf.data.Dataset.range(shape.n).map(fn, num_parallel_calls=tf.data.AUTOTUNE) \
            .batch(shape.batch).prefetch(tf.data.AUTOTUNE)
    elif shape.source == "text":
        ds = tf.data.TextLineDataset(files)
    else:
        ds = tf.data.TFRecordDataset(files)
    if numbered:  # keyed as vizdist carries its tag: a dict costs TF less per step than a tuple
        ds = tf.data.Dataset.zip({"n": tf.data.Dataset.range(1 << 62), "value": ds})
    return ds.batch(shape.batch).prefetch(tf.data.AUTOTUNE)


def _workload(tf: Any, strategy: Any, shape: Shape, folder: str) -> dict[str, Any]:
    """``untraced`` and ``traced`` callables for one shape; each returns the number of steps run."""
    import vizdist

    files = _write_files(tf, shape.source, shape.n, folder) if shape.source != "range" else []

    def dataset(numbered: bool = False) -> Any:
        return _pipeline(tf, shape, files, numbered)

    @tf.function
    def step(x: Any) -> Any:
        if x.dtype == tf.string:
            return tf.reduce_sum(tf.strings.length(x))
        return tf.reduce_sum(x * x)

    def untraced() -> int:
        n = 0
        for batch in strategy.experimental_distribute_dataset(dataset()):
            strategy.experimental_local_results(strategy.run(step, args=(batch,)))
            n += 1
        return n

    def traced(**kw: Any) -> int:
        t = vizdist.trace_distribution(strategy, dataset(), step_fn=step, progress=False, timeout=None, **kw)
        return int(t.meta["steps_run"])

    def tag_only() -> int:
        from vizdist.instrument.core.codes import keyed, untag
        from vizdist.instrument.ids.tagging import tag_dataset

        n = 0
        for element in strategy.experimental_distribute_dataset(keyed(tag_dataset(dataset()).dataset)):
            _tag, batch = untag(element)
            strategy.experimental_local_results(strategy.run(step, args=(batch,)))
            n += 1
        return n

    def id_only() -> int:
        n = 0
        for element in strategy.experimental_distribute_dataset(dataset(numbered=True)):
            strategy.experimental_local_results(strategy.run(step, args=(element["value"],)))
            n += 1
        return n

    variants: dict[str, Any] = {"untraced": untraced, "traced": traced, "tag only": tag_only,
                                "id only": id_only}
    variants["_trace"] = lambda: vizdist.trace_distribution(strategy, dataset(), step_fn=step, progress=False,
                                                          timeout=None)
    return variants


def _measure(fn: Any) -> tuple[float, float, int]:
    c0, t0 = time.process_time(), time.perf_counter()
    steps = fn()
    return time.process_time() - c0, time.perf_counter() - t0, steps


# -- in-process rows ----------------------------------------------------------------------
def _run_in_process(tf: Any, strategy: Any, shape: Shape, repeats: int, timing: bool,
                    explain: bool, lean: bool = False) -> dict[str, Any]:
    """``lean``: only untraced, traced and A/A (the 10^6 row, where each run takes about 25 s)."""
    with tempfile.TemporaryDirectory(prefix="vizdist-bench-") as folder:
        w = _workload(tf, strategy, shape, folder)
        names = ["untraced", "traced"] + (["tag only"] if explain and not lean else []) + ["again (A/A)"]
        names += [] if lean else ["id only"]
        w["again (A/A)"] = w["untraced"]  # A/A: the same loop twice shows what noise alone does to a ratio
        if timing:
            w["timing"] = lambda: w["traced"](timing=True)
            w["timing-host"] = lambda: w["traced"](timing=0)
            names += ["timing", "timing-host"]
        warm = _workload(tf, strategy, Shape("warm", shape.source, 64 * shape.batch, shape.batch, 0.0),
                         os.path.join(folder, "warm"))
        for name in ("untraced", "traced", "tag only", "id only"):  # warm up on a short run: tf.function tracing,
            if name in names:                             # thread pools, file cache
                warm[name]()
        cpu: dict[str, list[float]] = {k: [] for k in names}
        wall: dict[str, list[float]] = {k: [] for k in names}
        steps: dict[str, int] = {}
        for r in range(repeats):
            order = names if r % 2 == 0 else names[::-1]  # interleaved, alternating which goes first
            for name in order:
                c, t, steps[name] = _measure(w[name])
                cpu[name].append(c)
                wall[name].append(t)
        if len(set(steps.values())) != 1:
            raise SystemExit(f"{shape.label}: variants ran different step counts {steps}")
    return {"cpu": cpu, "wall": wall, "steps": steps["untraced"]}


# -- subprocess rows (separate peaks) -------------------------------------------------------------
def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith(field + ":"))
    except (OSError, StopIteration):
        return None


def _reset_peak() -> int:
    """Start measuring the peak here: reset Linux's high-water mark of resident memory (VmHWM; writing
    5 to /proc/self/clear_refs) and return the resident memory now, in kB. Where that cannot be done,
    the peak is ru_maxrss since the process started, and the base is that peak so far."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        rss = _status_kb("VmRSS")
        if rss is not None:
            return rss
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _peak_kb() -> int:
    """Peak resident memory since :func:`_reset_peak` (VmHWM), else since the process started."""
    hwm = _status_kb("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(mode: str, n: int, batch: int, save: bool) -> None:
    """One variant in a fresh process: print CPU, wall, peak RSS before and after the run as JSON."""
    tf, strategy = _setup()
    shape = Shape("child", "range", n, batch, 0.0)
    w = _workload(tf, strategy, Shape("warm", "range", 64 * batch, batch, 0.0), "")
    w["untraced"]()
    w["traced"]()  # same code paths warmed in both modes: only the big run differs
    w = _workload(tf, strategy, shape, "")
    gc.collect()
    out: dict[str, Any] = {"base_kb": _reset_peak()}
    if mode == "traced":
        holder: list[Any] = []
        c, t, _ = _measure(lambda: holder.append(w["_trace"]()) or 0)
        trace = holder[0]
        out["steps"] = int(trace.meta["steps_run"])
    else:
        c, t, out["steps"] = _measure(w["untraced"])
    out.update(cpu=c, wall=t, peak_kb=_peak_kb())
    if mode == "traced" and save:
        import vizdist

        with tempfile.TemporaryDirectory(prefix="vizdist-bench-") as d:
            t0 = time.perf_counter()
            p = trace.save(os.path.join(d, "trace.parquet"))
            t1 = time.perf_counter()
            back = vizdist.load_trace(p)
            out.update(save_s=t1 - t0, load_s=time.perf_counter() - t1, rows=len(back.elements))
    print("RESULT " + json.dumps(out), flush=True)


def _run_subprocess(shape: Shape, repeats: int, save: bool) -> dict[str, Any]:
    cpu: dict[str, list[float]] = {"untraced": [], "traced": []}
    wall: dict[str, list[float]] = {"untraced": [], "traced": []}
    peaks: dict[str, list[int]] = {"untraced": [], "traced": []}
    grew: dict[str, list[int]] = {"untraced": [], "traced": []}  # peak over the process's own warmed-up base
    extra: dict[str, Any] = {}
    for r in range(repeats):
        for mode in (("untraced", "traced") if r % 2 == 0 else ("traced", "untraced")):
            cmd = [sys.executable, __file__, "--child", mode, str(shape.n), str(shape.batch)]
            if save and mode == "traced":
                cmd.append("--save")
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise SystemExit(f"{shape.label} ({mode}) failed:\n{proc.stderr[-3000:]}")
            res = json.loads(lines[-1][len("RESULT "):])
            cpu[mode].append(res["cpu"])
            wall[mode].append(res["wall"])
            peaks[mode].append(res["peak_kb"])
            grew[mode].append(res["peak_kb"] - res["base_kb"])
            extra.update({k: res[k] for k in ("save_s", "load_s") if k in res})
    return {"cpu": cpu, "wall": wall, "peaks": peaks, "grew": grew, "extra": extra}


# -- report ----------------------------------------------------------------------------------
def _ratios(values: dict[str, list[float]], name: str) -> tuple[float, float]:
    return (min(values[name]) / min(values["untraced"]),
            statistics.median(values[name]) / statistics.median(values["untraced"]))


def _noise(res: dict[str, Any]) -> float | None:
    """How far the A/A row (the untraced loop run twice) moved from 1, min or median: noise alone."""
    if "again (A/A)" not in res["cpu"]:
        return None
    return max(abs(r - 1) for r in _ratios(res["cpu"], "again (A/A)"))


def _verdict(c_min: float, aim: float, noise: float | None) -> str:
    """met / NOT met on the CPU minimum; a miss by less than the A/A noise says so."""
    if c_min <= aim:
        return "met"
    if noise is not None and c_min - aim < noise:
        return f"NOT met ({c_min:.3f}x), by less than the A/A noise ({noise:.1%})"
    return f"NOT met ({c_min:.3f}x)"


def _row(label: str, res: dict[str, Any], name: str, aim: float | None) -> str:
    c_min, c_med = _ratios(res["cpu"], name)
    w_min, w_med = _ratios(res["wall"], name)
    cpu_s = min(res["cpu"][name])
    verdict = "" if aim is None else _verdict(c_min, aim, _noise(res))
    if aim is not None and c_min > aim and "id only" in res["cpu"] and _ratios(res["cpu"], "id only")[0] > aim:
        verdict += f"; TF's own id alone: {_ratios(res['cpu'], 'id only')[0]:.3f}x"
    aim_s = f"<= {aim:.2f}x" if aim is not None else ""
    return (f"  {label:<44} {name:<12} {cpu_s:7.2f} s  {c_min:5.2f}x {c_med:5.2f}x   "
            f"{w_min:5.2f}x {w_med:5.2f}x   {aim_s:<9} {verdict}")


def _split_row(res: dict[str, Any]) -> str:
    """Where the traced run's extra CPU goes: TF carrying the tag vs vizdist recording (min CPU)."""
    c = {k: min(v) for k, v in res["cpu"].items()}
    return (f"  {'':<44} {'':<12} of the extra CPU: TF carrying the tag {c['tag only'] - c['untraced']:+.2f} s "
            f"({(c['tag only'] - c['untraced']) / res['steps'] * 1e3:+.2f} ms/step), vizdist recording "
            f"{c['traced'] - c['tag only']:+.2f} s ({(c['traced'] - c['tag only']) / res['steps'] * 1e3:+.2f} ms/step)")


def _component_price(tf: Any, n: int = 16_000, batch: int = 8) -> str:
    """TF's own price of one more tensor per element: ``get_next_as_optional`` + ``get_value`` on a
    plain (not distributed) iterator, CPU of the calling thread per call, for elements of one, two
    and three tensors. The elements come from a filled ``cache()`` of the same map with 1, 2 or 3
    outputs, so the pipeline's own work (which tf.data runs on its threads) is not counted: what is
    left is the per-call work in Python and the iterator op. The distributed iterator makes that call
    once per replica per step."""
    def per_call(ds: Any) -> float:
        it, calls = iter(ds), 0
        c0 = time.thread_time()
        while True:
            opt = it.get_next_as_optional()
            if not opt.has_value():
                break
            opt.get_value()
            calls += 1
        return (time.thread_time() - c0) / calls * 1e6

    fns = {"1": lambda x: x * 2 + 1, "2": lambda x: (x + 7, x * 2 + 1), "3": lambda x: (x + 7, x * 2 + 1, x),
           "dict": lambda x: {"tag": x + 7, "value": x * 2 + 1}}
    us = {}
    for k, fn in fns.items():
        ds = tf.data.Dataset.range(n).map(fn).batch(batch).cache()
        for _ in ds:  # fill the cache
            pass
        us[k] = min(per_call(ds) for _ in range(5))
    return (f"\n  TF's price of a tensor per element (plain iterator, cached elements: get_next_as_optional + "
            f"get_value, calling thread's CPU per call): 1 tensor {us['1']:.0f} us, 2 tensors {us['2']:.0f} us, "
            f"3 tensors {us['3']:.0f} us; 2 tensors keyed {{'tag', 'value'}} as vizdist carries them {us['dict']:.0f} us;"
            "\n  the distributed iterator makes that call for each replica at each step")


def _memory_row(shape: Shape, res: dict[str, Any]) -> str:
    # what the measured run added to its own process's resident memory (its peak over the memory in
    # use when it started), traced minus untraced: not what start-up and warm-up took in that process
    extra_kb = min(res["grew"]["traced"]) - min(res["grew"]["untraced"])
    per = extra_kb * 1024 / shape.n
    ok = "met" if per <= MEMORY_AIM_B else "NOT met"
    mb = {k: (min(res["peaks"][k]) / 1024, min(res["grew"][k]) / 1024) for k in ("untraced", "traced")}
    line = (f"  {shape.label:<44} peak RSS untraced {mb['untraced'][0]:5.0f} MB (run +{mb['untraced'][1]:.0f}), "
            f"traced {mb['traced'][0]:5.0f} MB (run +{mb['traced'][1]:.0f}): +{extra_kb / 1024:.0f} MB = "
            f"{per:.0f} B/element   aim <= {MEMORY_AIM_B} B   {ok}")
    if "save_s" in res["extra"]:
        line += f"\n  {'':<44} Parquet trace: save {res['extra']['save_s']:.1f} s, load {res['extra']['load_s']:.1f} s"
    return line


def _print_rows(shape: Shape, res: dict[str, Any]) -> None:
    for name in res["cpu"]:
        if name != "untraced":
            aim = shape.aim if name == "traced" else None if name in ("tag only", "again (A/A)", "id only") else 1.5
            print(_row(shape.label, res, name, aim), flush=True)


def _big_row(tf: Any, strategy: Any, shape: Shape, full: bool) -> str:
    """The 10^6 row: CPU ratio from interleaved in-process runs (with A/A), like the other rows; peak
    RSS from a fresh process per variant, whose CPU ratio is shown beside it without an aim. The 10^7
    row (``--big``) runs in fresh processes only, and also saves and loads its Parquet trace."""
    fresh_only = shape.n > 1_000_000
    if not fresh_only:
        _print_rows(shape, _run_in_process(tf, strategy, shape, 3 if full else 2, False, False, lean=True))
    res = _run_subprocess(shape, 3 if full and not fresh_only else 1, save=fresh_only)
    name = "traced" if fresh_only else "fresh procs"
    res["cpu"][name], res["wall"][name] = res["cpu"].pop("traced"), res["wall"].pop("traced")
    print(_row(shape.label, res, name, shape.aim if fresh_only else None), flush=True)
    return _memory_row(shape, res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=None,
                    help="interleaved repeats of each in-process row (default 3; 5 with --full)")
    ap.add_argument("--full", action="store_true", help="the issue's sizes, more repeats (about 15 minutes)")
    ap.add_argument("--explain", action="store_true", help="add a 'tag only' variant: TF's cost of carrying the tag")
    ap.add_argument("--big", action="store_true", help="add the 10^7-element row (subprocesses)")
    ap.add_argument("--timing", action="store_true", help="add timing=True / timing=0 to the batch-512 row")
    ap.add_argument("--only", default="", help="run only rows whose label contains this text")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "N", "BATCH"), help=argparse.SUPPRESS)
    ap.add_argument("--save", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]), int(args.child[2]), args.save)
        return
    args.repeats = args.repeats or (5 if args.full else 3)
    started = time.perf_counter()
    tf, strategy = _setup()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the start", flush=True)
    print(f"vizdist tracing overhead: {REPLICAS} replicas (MirroredStrategy on logical CPUs), TF {tf.__version__}, "
          f"{os.cpu_count()} CPUs; traced / untraced, min and median of {args.repeats} interleaved repeats "
          "(10^6: 2 repeats, 3 with --full; fresh processes: one run per variant, 3 with --full)", flush=True)
    header = (f"  {'shape':<44} {'variant':<12} {'CPU':>9}  {'CPU min':>6} {'med':>5}   {'wall min':>6} {'med':>5}   aim")
    print(header)
    for shape in IN_PROCESS:
        shape = shape if args.full else QUICK.get(shape.label, shape)
        if args.only and args.only not in shape.label:
            continue
        res = _run_in_process(tf, strategy, shape, args.repeats, args.timing and shape.batch == 512, args.explain)
        _print_rows(shape, res)
        if "tag only" in res["cpu"]:
            print(_split_row(res), flush=True)
    if args.explain:
        print(_component_price(tf), flush=True)
    memory = []
    for shape in SUBPROCESS + (BIG if args.big else []):
        if args.only and args.only not in shape.label:
            continue
        memory.append(_big_row(tf, strategy, shape, args.full))
    if memory:
        print("\n  memory (fresh process per variant, after the same warm-up):")
        print("\n".join(memory))
    print(f"\n  took {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
