"""A recording's folder of parts, without TensorFlow: names, joining runs, bounds, and file systems by URL."""

from __future__ import annotations

import os

import pytest

import vizdist
from vizdist import _parts, _storage
from vizdist._parts import load_recording, part_name, stamp, write_part
from vizdist._storage import LOCAL

RUNS = ("0000000000000000001x00000001", "0000000000000000002x00000002")


def _block(steps: list[int], ids: list[int], *, dataset: int = 0, epoch: int = 0, meta: dict | None = None):
    """A record()-like trace: one replica, one element per step."""
    return vizdist.Trace.from_records(
        batches=[dict(step=s, replica=0, n_elements=1, dataset=dataset, phase="train", epoch=epoch, epoch_step=k)
                 for k, s in enumerate(steps)],
        elements=[dict(step=s, replica=0, source_id=i, position=0, dataset=dataset, phase="train", epoch=epoch)
                  for s, i in zip(steps, ids, strict=True)],
        meta={"api": "record", "datasets": [{"steps_per_pass": 4}], "steps_run": len(steps),
              "passes": [{"dataset": dataset, "phase": "train", "epoch": epoch, "steps": len(steps),
                          "first_step": steps[0]}], **(meta or {})})


def _write(folder, trace, *, run: str, part: int, first: int, steps: int, ended: bool, task=("worker", 0)):
    name = part_name(*task, run, part)
    write_part(LOCAL, str(folder), name, stamp(trace, run=run, part=part, task=f"{task[0]}-{task[1]}",
                                                first_step=first, steps=steps, ended=ended))
    return folder / name


def test_parts_of_a_run_join_in_order(tmp_path):
    _write(tmp_path, _block([0, 1], [5, 6]), run=RUNS[0], part=0, first=0, steps=2, ended=False)
    _write(tmp_path, _block([2], [7]), run=RUNS[0], part=1, first=2, steps=1, ended=True)
    t = vizdist.load_trace(tmp_path)
    assert t.elements["source_id"].tolist() == [5, 6, 7] and t.steps == [0, 1, 2]
    assert t.meta["recording"]["ended"] is True


def test_two_runs_of_one_task_follow_each_other(tmp_path):
    """A crashed run and its resumed run: steps and datasets numbered on, epochs kept (they line up)."""
    _write(tmp_path, _block([0, 1], [0, 1], epoch=1), run=RUNS[0], part=0, first=0, steps=2, ended=True)
    _write(tmp_path, _block([0, 1, 2, 3], [0, 1, 2, 3], epoch=1), run=RUNS[1], part=0, first=0, steps=4, ended=True)
    t = vizdist.load_trace(tmp_path)
    b = t.batches.drop_duplicates("step")
    assert b["step"].tolist() == list(range(6)) and b["dataset"].tolist() == [0, 0, 1, 1, 1, 1]
    assert set(b["epoch"]) == {1}
    assert [p["first_step"] for p in t.meta["passes"]] == [0, 2] and len(t.meta["datasets"]) == 2
    assert [r["first_step"] for r in t.meta["recording"]["runs"]] == [0, 2]
    cov = t.coverage()
    assert cov.set_index("source_id")["delivered"].to_dict() == {0: 2, 1: 2, 2: 1, 3: 1}


def test_tasks_merge_as_shards(tmp_path):
    for w in range(2):
        _write(tmp_path, _block([0], [w]), run=RUNS[w], part=0, first=0, steps=1, ended=True, task=("worker", w))
    t = vizdist.load_trace(tmp_path)
    assert t.meta["kind"] == "multi_worker" and sorted(s["task"] for s in t.meta["shards"]) == ["worker-0",
                                                                                                 "worker-1"]


def test_bounds_hold_for_the_folder_as_a_whole(tmp_path):
    for k in range(3):
        _write(tmp_path, _block([k], [k]), run=RUNS[0], part=k, first=k, steps=1, ended=k == 2)
    with pytest.raises(vizdist.TraceFormatError, match="max_rows=2"):
        vizdist.load_trace(tmp_path, max_rows=2)
    with pytest.raises(vizdist.TraceFormatError, match="max_bytes"):
        vizdist.load_trace(tmp_path, max_bytes=5000)


def test_other_entries_are_named_not_read(tmp_path):
    _write(tmp_path, _block([0], [1]), run=RUNS[0], part=0, first=0, steps=1, ended=True)
    (tmp_path / "notes.txt").write_text("mine")
    os.symlink(tmp_path / "notes.txt", tmp_path / part_name("worker", 0, RUNS[0], 1))
    with pytest.warns(UserWarning, match="skipped 2 entries"):
        t = vizdist.load_trace(tmp_path)
    assert t.steps == [0] and len(t.meta["skipped"]) == 2


def test_a_url_without_tensorflow_loaded_says_what_to_do(monkeypatch):
    monkeypatch.setattr(_storage, "_SCHEMES", {})
    with pytest.raises(_storage.NoFileSystem, match=r"import vizdist\.instrument"):
        vizdist.load_trace("gs://bucket/run")


def test_a_part_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    calls = []
    real = LOCAL.write

    def failing(path, data):
        calls.append(path)
        if path.endswith("batches.parquet"):
            raise OSError("disk full")
        real(path, data)

    monkeypatch.setattr(LOCAL, "write", failing)
    with pytest.raises(OSError, match="disk full"):
        _write(tmp_path, _block([0], [1]), run=RUNS[0], part=0, first=0, steps=1, ended=True)
    (part,) = os.listdir(tmp_path)
    assert sorted(os.listdir(tmp_path / part)) == ["elements.parquet"]  # no meta.json: not a part yet
    with pytest.raises(vizdist.TraceFormatError, match="no whole part"):
        load_recording(tmp_path)
    assert _parts.is_recording(tmp_path)
