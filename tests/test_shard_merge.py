"""load_trace(folder) merges JSON shards in one pass; it must give what merging them one by one gives."""

from __future__ import annotations

import json
import warnings

import pytest

import vizdist
from vizdist.trace import Trace


def _shard(w: int, **extra_cols) -> Trace:
    dev = f"/job:worker/replica:0/task:{w}/device:CPU:0"
    return Trace.from_records(
        elements=[dict(step=s, replica=w, worker=w, device=dev, source_id=10 * w + s, position=0, **extra_cols)
                  for s in range(3)],
        batches=[dict(step=s, replica=w, worker=w, device=dev, n_elements=1) for s in range(3)],
        meta={"kind": "distribution", "strategy": "MultiWorkerMirroredStrategy", "num_replicas": 3,
              "task": f"worker-{w}", "num_workers": 3})


def _one_by_one(folder) -> Trace:
    return Trace.merge([vizdist.load_trace(p) for p in sorted(folder.glob("*.json"))])


@pytest.mark.parametrize("extra", [{}, {"w1": {"tag": 5}}], ids=["same columns", "one shard with a column more"])
def test_folder_merge_equals_merging_shard_by_shard(tmp_path, extra):
    for w in range(3):
        _shard(w, **extra.get(f"w{w}", {})).save(tmp_path / f"worker-worker-{w:05d}.json")
    merged, careful = vizdist.load_trace(tmp_path), _one_by_one(tmp_path)
    assert merged == careful
    assert merged.meta == careful.meta and merged.meta["kind"] == "multi_worker"


def test_a_damaged_shard_is_still_named(tmp_path):
    for w in range(3):
        _shard(w).save(tmp_path / f"worker-worker-{w:05d}.json")
    bad = tmp_path / "worker-worker-00001.json"
    doc = json.loads(bad.read_text())
    doc["tables"]["elements"]["data"]["step"][0] = 1e20
    bad.write_text(json.dumps(doc))
    with pytest.raises(vizdist.TraceFormatError, match=r"worker-worker-00001\.json"):
        vizdist.load_trace(tmp_path)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        skipped = vizdist.load_trace(tmp_path, errors="skip")
    assert [s["path"] for s in skipped.meta["skipped"]] == [str(bad)]
    assert sorted(skipped.elements["worker"].unique()) == [0, 2]
