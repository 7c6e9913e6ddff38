"""What does ``vizdist.record()`` cost around a real Keras ``fit``? Recorded vs plain, side by side (issue 26).

A small dense model (``Dense(64) -> Dense(1)``) is fitted for one epoch on 10^5 examples in global
batches of 256 (391 steps) under ``MirroredStrategy`` over 4 logical CPUs, three ways, interleaved
``--repeats`` times: ``plain`` (the fit as written), ``recorded`` (the same fit inside
``with vizdist.record():``) and ``again (A/A)`` (the plain fit a second time: how far noise alone moves
a ratio). The measure is process CPU time (all threads), which stays put on these shared 2-core
machines while wall time jumps in doublings; wall time is shown beside it. Ratios are of the minima
and of the medians. Aim: recorded / plain <= 1.10 in CPU time.

Memory: what the recording holds per recorded element, the finished trace's tables (pandas'
deep memory use) over the number of element rows. Aim: <= 100 B per element.

Run: ``python benchmarks/keras_fit.py`` (about 2 minutes on 2 cores); ``--repeats 5`` for more.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

N, BATCH, AIM, MEMORY_AIM = 100_000, 256, 1.10, 100


def _setup() -> tuple[Any, Any, Any]:
    import vizdist

    devices = vizdist.virtual_devices(4)
    import keras
    import numpy as np
    import tensorflow as tf

    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
    x = np.random.default_rng(0).normal(size=(N, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    return tf.distribute.MirroredStrategy(devices), keras, data


def _fit(strategy: Any, keras: Any, data: Any, record: bool) -> tuple[float, float, Any]:
    import vizdist

    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    c0, t0 = time.process_time(), time.perf_counter()
    if record:
        with vizdist.record() as rec:
            model.fit(data, epochs=1, verbose=0)
        trace = rec.trace
    else:
        model.fit(data, epochs=1, verbose=0)
        trace = None
    return time.process_time() - c0, time.perf_counter() - t0, trace


def _ratio(a: list[float], b: list[float]) -> str:
    return f"{min(a) / min(b):.3f} / {statistics.median(a) / statistics.median(b):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    strategy, keras, data = _setup()
    _fit(strategy, keras, data, False)  # warm-up: TF's first function traces and thread pools
    cpu: dict[str, list[float]] = {"plain": [], "recorded": [], "again (A/A)": []}
    wall: dict[str, list[float]] = {k: [] for k in cpu}
    trace = None
    for _ in range(args.repeats):
        for name in cpu:
            c, w, t = _fit(strategy, keras, data, name == "recorded")
            cpu[name].append(c)
            wall[name].append(w)
            trace = t if t is not None else trace
    print(f"Keras fit, {N} examples, batch {BATCH}, MirroredStrategy over 4 logical CPUs, {args.repeats} repeats")
    print(f"{'variant':<14} {'CPU s min/med':>16} {'wall s min/med':>16}   ratio CPU min/med   ratio wall min/med")
    for name in cpu:
        verdict = ""
        if name == "recorded":
            ok = min(cpu[name]) / min(cpu["plain"]) <= AIM
            verdict = f"   aim <= {AIM}: {'met' if ok else 'NOT met'}"
        print(f"{name:<14} {min(cpu[name]):>7.2f} / {statistics.median(cpu[name]):<6.2f} "
              f"{min(wall[name]):>7.2f} / {statistics.median(wall[name]):<6.2f}   "
              f"{_ratio(cpu[name], cpu['plain']):>17}   {_ratio(wall[name], wall['plain']):>18}{verdict}")
    rows = len(trace.elements)
    used = trace.elements.memory_usage(deep=True).sum() + trace.batches.memory_usage(deep=True).sum()
    per = used / max(rows, 1)
    print(f"memory: {rows} element rows, trace tables {used / 1e6:.1f} MB = {per:.0f} B per element "
          f"(aim <= {MEMORY_AIM}: {'met' if per <= MEMORY_AIM else 'NOT met'})")


if __name__ == "__main__":
    main()
