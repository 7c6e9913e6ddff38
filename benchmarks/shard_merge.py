"""How long does merging a real cluster's shard folder take? ``load_trace(folder)`` of 1,000 worker shards.

Each of ``--workers`` shards (default 1,000) holds one worker's 4 steps, as ``record_worker_shard`` writes
them; the script times ``vizdist.load_trace(folder)`` (wall and process CPU) and the memory the merge
takes (the process's peak resident size over what it used before), then 10x the rows in as many shards
to show memory grows with rows. Aim: <= 5 s for 1,000 workers (issue 28).

Run: ``python benchmarks/shard_merge.py`` (about 20 s); ``--workers 10000``.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

AIM_S = 5.0


def _write(folder: Path, workers: int, steps: int) -> int:
    from vizdist.trace import Trace

    for w in range(workers):
        dev = f"/job:worker/replica:0/task:{w}/device:CPU:0"
        Trace.from_records(
            elements=[dict(step=s, replica=w, worker=w, device=dev, source_id=w * steps + s, position=0)
                      for s in range(steps)],
            batches=[dict(step=s, replica=w, worker=w, device=dev, n_elements=1) for s in range(steps)],
            meta={"kind": "distribution", "strategy": "MultiWorkerMirroredStrategy", "num_replicas": workers,
                  "task": f"worker-{w}", "num_workers": workers},
        ).save(folder / f"worker-{w}.json")
    return workers * steps


def _merge(workers: int, steps: int) -> tuple[float, float, float, int]:
    import vizdist

    folder = Path(tempfile.mkdtemp(prefix="vizdist-bench-shards-"))
    try:
        rows = _write(folder, workers, steps)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        c0, t0 = time.process_time(), time.perf_counter()
        merged = vizdist.load_trace(folder)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert len(merged.elements) == rows
        return wall, cpu, grew, rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000)
    args = parser.parse_args()
    wall, cpu, grew, rows = _merge(args.workers, 4)
    verdict = "met" if wall <= AIM_S else "NOT met"
    print(f"{args.workers} shards, {rows} element rows: merged in {wall:.2f} s wall, {cpu:.2f} s CPU "
          f"(aim <= {AIM_S} s: {verdict}); peak memory +{grew:.0f} MB")
    wall, cpu, grew, rows = _merge(args.workers, 40)
    print(f"{args.workers} shards, {rows} element rows (10x): {wall:.2f} s wall, {cpu:.2f} s CPU; peak memory "
          f"+{grew:.0f} MB (over the first run's peak)")


if __name__ == "__main__":
    main()
