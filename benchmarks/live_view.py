"""What does the live explorer (``rec.show()``) cost a running Keras ``fit``? Side by side, in a real kernel.

The live explorer runs in the Jupyter kernel: a thread that reads the block's newest steps every 0.5 s and
sends the widget's new state to the browser over the kernel's IOPub channel. So this starts a real IPython
kernel (``jupyter_client``, the kernel JupyterLab starts) and runs, interleaved ``--repeats`` times, one
epoch of ``fit`` (a small dense model on 60,000 examples in global batches of 64: 938 steps, with a Keras
progress bar, ``verbose=1``, as users run it) under ``MirroredStrategy`` over 4 logical CPUs, four ways:

* ``plain``: the fit as written;
* ``recorded``: inside ``with vizdist.record():``;
* ``recorded + live``: the same with ``rec.show()`` displayed before the fit, in the same cell;
* ``again (A/A)``: plain a second time (how far noise alone moves a ratio).

The measure is the kernel's process CPU time over the fit (all threads, the live view's included), wall
time beside it; ratios of the minima and of the medians. The live view's cost is ``recorded + live`` over
``recorded``; its own thread's CPU time (``LiveExplorer.cpu_s``, ``time.thread_time``) over the fit's process
CPU time is shown too (it leaves out the IOPub thread's sends). Aim: <= 2% of the fit's CPU.

Run: ``python benchmarks/live_view.py`` (about 5 minutes on 2 quiet cores); ``--repeats 5`` for more.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
from typing import Any

AIM = 1.02
MODES = ("plain", "recorded", "recorded + live", "again (A/A)")

SETUP = """
import json, time, warnings
import vizdist
devices = vizdist.virtual_devices(4)
import numpy as np, tensorflow as tf, keras
warnings.filterwarnings("ignore")
strategy = tf.distribute.MirroredStrategy(devices)
x = np.random.default_rng(0).normal(size=(60_000, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

def model():
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
        m.compile(optimizer="sgd", loss="mse", jit_compile=False)
    return m

def timed(mode):
    m = model()
    view = None
    c0, t0 = time.process_time(), time.perf_counter()
    if mode.startswith("recorded"):
        with vizdist.record() as rec:
            if mode == "recorded + live":
                view = rec.show(display=False)
                display(view)
            m.fit(ds, epochs=1, verbose=1)
    else:
        m.fit(ds, epochs=1, verbose=1)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    live = view.cpu_s if view is not None else 0.0
    if view is not None:
        view.close()
    print("RESULT " + json.dumps({"mode": mode, "cpu": cpu, "wall": wall, "live_cpu": live}))

timed("plain")  # warm up: TF and Keras traced once
"""


def _execute(client: Any, code: str, timeout: float) -> list[dict[str, Any]]:
    """Run ``code`` in the kernel; return the RESULT lines it printed (every other message is drained)."""
    msg_id = client.execute(code)
    results = []
    while True:
        try:
            msg = client.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"the kernel gave no output for {timeout} s") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            results += [json.loads(line[7:]) for line in content["text"].splitlines() if line.startswith("RESULT ")]
        elif kind == "error":
            raise RuntimeError("\n".join(content["traceback"][-5:]))
        elif kind == "status" and content["execution_state"] == "idle":
            return results


def _ratio(a: list[float], b: list[float]) -> str:
    return f"{min(a) / min(b):.3f} / {statistics.median(a) / statistics.median(b):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
    km, client = start_new_kernel(kernel_name="python3", env=env)
    try:
        _execute(client, SETUP, timeout=600)
        rows: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                (r,) = _execute(client, f"timed({mode!r})", timeout=900)
                rows[mode].append(r)
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)
    cpu = {m: [r["cpu"] for r in rs] for m, rs in rows.items()}
    wall = {m: [r["wall"] for r in rs] for m, rs in rows.items()}
    print(f"one epoch of fit (938 steps), 4 logical CPUs, in a real kernel, {args.repeats} repeats; "
          "min / median")
    print(f"{'':<17} {'CPU s':>15} {'wall s':>15} {'CPU / plain':>15} {'wall / plain':>15}")
    for m in MODES:
        print(f"{m:<17} {min(cpu[m]):>7.2f} / {statistics.median(cpu[m]):<6.2f} {min(wall[m]):>7.2f} / "
              f"{statistics.median(wall[m]):<6.2f} {_ratio(cpu[m], cpu['plain']):>15} {_ratio(wall[m], wall['plain']):>15}")
    live = [r["live_cpu"] / r["cpu"] for r in rows["recorded + live"]]
    ratio = min(cpu["recorded + live"]) / min(cpu["recorded"])
    print(f"the live view: recorded + live / recorded = {_ratio(cpu['recorded + live'], cpu['recorded'])} in CPU "
          f"(aim <= {AIM}: {'met' if ratio <= AIM else 'NOT met'}); its own thread's CPU "
          f"{100 * min(live):.2f}% / {100 * statistics.median(live):.2f}% of the fit's")


if __name__ == "__main__":
    main()
