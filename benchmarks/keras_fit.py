"""What does ``vizdist.record()`` cost around a real Keras ``fit`` and a custom loop? Recorded vs plain, side by side.

A small dense model (``Dense(64) -> Dense(1)``) is trained for one epoch on 10^5 examples in global
batches of 256 (391 steps) under ``MirroredStrategy`` over 4 logical CPUs, for each input shape users
have:

* ``fit dataset``: ``fit`` on a ``tf.data`` dataset;
* ``fit shuffled``: ``fit`` on a dataset shuffled each epoch (vizdist's copy shares its seed generator);
* ``fit numpy``: ``fit(x, y, shuffle=True)`` on numpy arrays (Keras's own pipeline carries the row ids);
* ``loop``: a hand-written training step in a ``tf.function``, called once per batch of a distributed
  dataset.

Each shape runs three ways, interleaved ``--repeats`` times: ``plain`` (as written), ``recorded`` (the
same code inside ``with vizdist.record():``) and ``again (A/A)`` (plain a second time: how far noise alone
moves a ratio). The measure is process CPU time (all threads), which stays put on these shared 2-core
machines while wall time jumps in doublings; wall time is shown beside it. Ratios are of the minima and of
the medians. Aim: recorded / plain <= 1.10 in CPU time, for every shape.

Memory: what the recording holds per recorded element, the finished trace's tables (pandas' deep memory
use) over the number of element rows. Aim: <= 100 B per element.

Run: ``python benchmarks/keras_fit.py`` (about 6 minutes on 2 cores); ``--repeats 5`` for more,
``--shapes loop "fit numpy"`` for some.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

N, BATCH, AIM, MEMORY_AIM = 100_000, 256, 1.10, 100
SHAPES = ("fit dataset", "fit shuffled", "fit numpy", "loop")


class Bench:
    """The strategy, data and model factory every shape shares."""

    def __init__(self) -> None:
        import vizdist

        devices = vizdist.virtual_devices(4)
        import keras
        import numpy as np
        import tensorflow as tf

        warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
        self.tf, self.keras = tf, keras
        self.x = np.random.default_rng(0).normal(size=(N, 8)).astype("float32")
        self.y = self.x.sum(axis=1, keepdims=True)
        self.strategy = tf.distribute.MirroredStrategy(devices)

    def model(self) -> Any:
        keras = self.keras
        keras.utils.set_random_seed(1)
        with self.strategy.scope():
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64, activation="relu"),
                                      keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse", jit_compile=False)
        return model

    def dataset(self, shuffled: bool = False) -> Any:
        ds = self.tf.data.Dataset.from_tensor_slices((self.x, self.y))
        return (ds.shuffle(10_000, seed=3) if shuffled else ds).batch(BATCH)

    def run(self, shape: str) -> Callable[[], Any]:
        """The code of one shape, ready to run (model and data made outside the timed part)."""
        model = self.model()
        if shape == "fit numpy":
            return lambda: model.fit(self.x, self.y, batch_size=BATCH, shuffle=True, epochs=1, verbose=0)
        if shape == "loop":
            return self._loop(model)
        data = self.dataset(shuffled=shape == "fit shuffled")
        return lambda: model.fit(data, epochs=1, verbose=0)

    def _loop(self, model: Any) -> Callable[[], Any]:
        tf, strategy, data = self.tf, self.strategy, self.dataset()
        with strategy.scope():
            optimizer = self.keras.optimizers.SGD()

        def replica_step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=BATCH)
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                          model.trainable_variables, strict=True))
            return loss

        @tf.function
        def step(batch: Any) -> Any:
            return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

        def loop() -> None:
            for batch in strategy.experimental_distribute_dataset(data):
                step(batch)

        return loop


def _timed(bench: Bench, shape: str, record: bool) -> tuple[float, float, Any]:
    import vizdist

    code = bench.run(shape)
    c0, t0 = time.process_time(), time.perf_counter()
    if record:
        with vizdist.record() as rec:
            code()
        trace = rec.trace
    else:
        code()
        trace = None
    return time.process_time() - c0, time.perf_counter() - t0, trace


def _ratio(a: list[float], b: list[float]) -> str:
    return f"{min(a) / min(b):.3f} / {statistics.median(a) / statistics.median(b):.3f}"


def _report(shape: str, cpu: dict[str, list[float]], wall: dict[str, list[float]]) -> None:
    for name in cpu:
        verdict = ""
        if name == "recorded":
            ok = min(cpu[name]) / min(cpu["plain"]) <= AIM
            verdict = f"   aim <= {AIM}: {'met' if ok else 'NOT met'}"
        print(f"{shape:<13} {name:<12} {min(cpu[name]):>7.2f} / {statistics.median(cpu[name]):<6.2f} "
              f"{min(wall[name]):>7.2f} / {statistics.median(wall[name]):<6.2f}   "
              f"{_ratio(cpu[name], cpu['plain']):>17}   {_ratio(wall[name], wall['plain']):>18}{verdict}")


def _memory(trace: Any) -> None:
    rows = len(trace.elements)
    used = trace.elements.memory_usage(deep=True).sum() + trace.batches.memory_usage(deep=True).sum()
    per = used / max(rows, 1)
    print(f"memory: {rows} element rows, trace tables {used / 1e6:.1f} MB = {per:.0f} B per element "
          f"(aim <= {MEMORY_AIM}: {'met' if per <= MEMORY_AIM else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    args = parser.parse_args()
    bench = Bench()
    print(f"{N} examples, batch {BATCH}, MirroredStrategy over 4 logical CPUs, {args.repeats} repeats")
    print(f"{'shape':<13} {'variant':<12} {'CPU s min/med':>16} {'wall s min/med':>16}   ratio CPU min/med   "
          "ratio wall min/med")
    trace = None
    for shape in args.shapes:
        _timed(bench, shape, False)  # warm-up: TF's first function traces and thread pools for this shape
        cpu: dict[str, list[float]] = {"plain": [], "recorded": [], "again (A/A)": []}
        wall: dict[str, list[float]] = {k: [] for k in cpu}
        for _ in range(args.repeats):
            for name in cpu:
                c, w, t = _timed(bench, shape, name == "recorded")
                cpu[name].append(c)
                wall[name].append(w)
                trace = t if t is not None and shape == "fit dataset" else trace
        _report(shape, cpu, wall)
    if trace is not None:
        _memory(trace)


if __name__ == "__main__":
    main()
