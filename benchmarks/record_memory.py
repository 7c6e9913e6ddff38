"""What does ``vizdist.record()`` hold in memory per recorded step, and with ``path=`` over 10^6 steps?

Three measures, each side by side in one run:

1. **Per step, small batches**: a custom loop in a ``tf.function`` over ``MirroredStrategy`` with 2 replicas
   and a global batch of 4 (2 elements per replica: a recorded step of 4 elements), recorded in memory.
   Python's own allocations (``tracemalloc``: numpy's arrays included) are read inside the block at the
   end of the loop, for N and for 2N steps; per step is their difference over N (what does not grow with
   the steps cancels). Beside it: the finished trace's tables (``rec.trace``), per step. Aim: <= 400 B
   per step while recording.
2. **Per element, large batches**: the same with a global batch of 256 (128 per replica). Aim: <= 100 B
   per element while recording.
3. **10^6 steps with path=**: the small-batch loop for 10^6 steps, recorded with ``path=`` into a temporary
   folder, beside the same loop plain (A) and again plain (A/A): the process's resident memory (RSS,
   sampled every 50 ms by a thread) over its value when the loop starts, its peak, and process CPU time
   beside wall time. Aim: recorded peak minus plain peak <= 200 MB. The folder's size on disk is shown.

Run: ``python benchmarks/record_memory.py`` (about 15 minutes on 2 quiet cores, mostly the 10^6-step
loops); ``--steps 200000`` for a shorter third measure, ``--only 1 2`` for the first two.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import threading
import time
import tracemalloc
import warnings
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# plain TF warns so whenever a distributed dataset is iterated in a tf.function (with or without vizdist)
warnings.filterwarnings("ignore", message="To make it possible to preserve tf.data options")

STEP_AIM, ELEMENT_AIM, PATH_AIM_MB = 400, 100, 200


class Bench:
    def __init__(self) -> None:
        import vizdist

        devices = vizdist.virtual_devices(2)
        import tensorflow as tf

        self.tf, self.vizdist = tf, vizdist
        self.strategy = tf.distribute.MirroredStrategy(devices)
        strategy = self.strategy

        @tf.function
        def loop(dist: Any) -> Any:
            total = tf.constant(0, tf.int64)
            for x in dist:
                total += strategy.reduce("SUM", strategy.run(lambda v: tf.reduce_sum(v), args=(x,)), axis=None)
            return total

        self.loop = loop

    def dist(self, steps: int, batch: int) -> Any:
        ds = self.tf.data.Dataset.range(steps * batch).batch(batch)
        return self.strategy.experimental_distribute_dataset(ds)

    def held(self, steps: int, batch: int) -> tuple[int, Any]:
        """(bytes Python holds at the end of a recorded loop of ``steps``, the recording), tracemalloc."""
        gc.collect()
        tracemalloc.start()
        with self.vizdist.record() as rec:
            self.loop(self.dist(steps, batch))
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return held, rec


def per_step(bench: Bench, steps: int, batch: int) -> tuple[float, float, int]:
    """(bytes held per step while recording, bytes of the finished trace's tables per step, elements per step)."""
    bench.held(20, batch)  # the loop traced once, TF warmed up
    a, _ = bench.held(steps, batch)
    b, rec = bench.held(2 * steps, batch)
    t = rec.trace
    tables = sum(int(getattr(t, n).memory_usage(deep=True).sum()) for n in ("elements", "batches"))
    return (b - a) / steps, tables / (2 * steps), batch


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


class Peak:
    """The peak RSS over a block, sampled by a thread every 50 ms."""

    def __enter__(self) -> Peak:
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.peak = max(self.peak, _rss())


def long_loop(bench: Bench, steps: int) -> None:
    folder = tempfile.mkdtemp(prefix="vizdist-bench-")
    rows = []
    try:
        for name in ("plain", "path=", "again (A/A)"):
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            with Peak() as peak:
                if name == "path=":  # the dataset is distributed inside the block, or the block records nothing
                    with bench.vizdist.record(path=os.path.join(folder, "run")):
                        bench.loop(bench.dist(steps, 4))
                else:
                    bench.loop(bench.dist(steps, 4))
            rows.append((name, (peak.peak - peak.start) / 1e6, time.process_time() - c0, time.perf_counter() - t0))
            print(f"  {name}: done, {rows[-1][2]:.1f} CPU s, {rows[-1][3]:.1f} wall s", flush=True)
        disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\n3. {steps} steps of 4 elements (2 replicas), a loop in a tf.function; RSS over its value at the start")
    print(f"{'':<13} {'RSS peak +MB':>12} {'CPU s':>8} {'wall s':>8} {'CPU / plain':>12}")
    for name, mb, cpu, wall in rows:
        print(f"{name:<13} {mb:>12.1f} {cpu:>8.1f} {wall:>8.1f} {cpu / rows[0][2]:>12.2f}")
    extra = rows[1][1] - max(rows[0][1], rows[2][1])
    print(f"path= holds {extra:.1f} MB more than the plain loop (aim <= {PATH_AIM_MB}: "
          f"{'met' if extra <= PATH_AIM_MB else 'NOT met'}); its parts take {disk / 1e6:.1f} MB on disk "
          f"({disk / (4 * steps):.1f} B per element)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="steps of the third measure")
    parser.add_argument("--only", nargs="+", type=int, choices=(1, 2, 3), default=[1, 2, 3])
    args = parser.parse_args()
    bench = Bench()
    if 1 in args.only:
        step, tables, _ = per_step(bench, 5000, 4)
        print(f"1. a recorded step of 4 elements: {step:.0f} B held while recording (aim <= {STEP_AIM}: "
              f"{'met' if step <= STEP_AIM else 'NOT met'}); the finished trace's tables {tables:.0f} B per step")
    if 2 in args.only:
        step, tables, n = per_step(bench, 400, 256)
        print(f"2. a recorded step of {n} elements: {step / n:.1f} B per element held while recording (aim <= "
              f"{ELEMENT_AIM}: {'met' if step / n <= ELEMENT_AIM else 'NOT met'}); the finished trace's tables "
              f"{tables / n:.1f} B per element")
    if 3 in args.only:
        long_loop(bench, args.steps)


if __name__ == "__main__":
    main()
