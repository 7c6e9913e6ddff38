"""Trace: JSON/Parquet round trips, merging, and clear errors on bad files."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from vizdist.trace import Trace, TraceFormatError, load_trace


def sample() -> Trace:
    return Trace.from_records(
        elements=[dict(step=s, replica=r, device=f"/device:CPU:{r}", source_id=s * 2 + r, position=0,
                       source_file="a<b>.txt" if r else "") for s in range(3) for r in range(2)],
        batches=[dict(step=s, replica=r, n_elements=1, shape="(1,)", dtype="int64", result=json.dumps([s]))
                 for s in range(3) for r in range(2)],
        events=[dict(lane="w0 host", stage="consume", step=0, t_start_ns=1, t_end_ns=2**40, elements="[0, 1]")],
        meta={"strategy": "MirroredStrategy", "num_replicas": 2, "global_batch_size": 2, "nested": {"a": [1, None]}},
    )


@pytest.mark.parametrize("name", ["t.json", "t.json.gz", "t.parquet"])
def test_save_load_round_trip_is_exact(tmp_path, name):
    t = sample()
    t.elements["extra_float"] = [0.5, float("nan"), 1.0, 2.0, 3.0, 4.0]
    back = load_trace(t.save(tmp_path / name))
    assert back == t
    pd.testing.assert_frame_equal(back.elements, t.elements)
    assert back.meta == t.meta


def test_empty_trace_round_trips(tmp_path):
    assert load_trace(Trace().save(tmp_path / "e.json")) == Trace()


def test_merge_concatenates_and_keeps_common_meta():
    a = Trace.from_records(elements=[dict(step=0, worker=0, source_id=1)], meta={"strategy": "S", "worker": 0})
    b = Trace.from_records(elements=[dict(step=0, worker=1, source_id=2)], meta={"strategy": "S", "worker": 1})
    m = Trace.merge([a, b])
    assert m.elements["worker"].tolist() == [0, 1]
    assert m.meta["strategy"] == "S" and "worker" not in m.meta
    assert [s["worker"] for s in m.meta["shards"]] == [0, 1]


def test_load_folder_merges_shards_in_name_order(tmp_path):
    from vizdist.trace import shard_name

    for w in (1, 0):
        Trace.from_records(elements=[dict(worker=w, source_id=w)]).save(tmp_path / shard_name("worker", w))
    assert load_trace(tmp_path).elements["worker"].tolist() == [0, 1]


def test_split_and_ids():
    t = sample()
    assert t.ids(step=1, replica=1) == [3]
    assert t.split().loc[2, 0] == [4]
    assert t.steps == [0, 1, 2] and t.replicas == [0, 1]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"not json at all", "not a readable vizdist trace"),
        (json.dumps({"hello": 1}).encode(), "is not a vizdist trace"),
        (json.dumps({"format": "vizdist.trace", "version": 99}).encode(), "version 99"),
        (json.dumps({"format": "vizdist.trace", "version": 1, "meta": {}, "tables": {}}).encode(), "damaged"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not a readable vizdist trace"),
    ],
)
def test_corrupt_or_foreign_files_get_clear_errors(tmp_path, content, expected):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError, match=expected):
        load_trace(p)


def test_truncated_trace_is_reported_damaged(tmp_path):
    p = sample().save(tmp_path / "t.json")
    p.write_text(p.read_text()[:200])
    with pytest.raises(TraceFormatError, match="not a readable"):
        load_trace(p)


def test_truncated_gzip_is_reported(tmp_path):
    p = sample().save(tmp_path / "t.json.gz")
    p.write_bytes(gzip.compress(b'{"format": "vizdist.trace"')[:20])
    with pytest.raises(TraceFormatError):
        load_trace(p)


def test_mismatched_column_lengths_are_damaged(tmp_path):
    doc = sample().to_dict()
    doc["tables"]["elements"]["data"]["step"] = [0]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match="different lengths"):
        load_trace(p)


def test_missing_path_and_unknown_suffix(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trace at"):
        load_trace(tmp_path / "nope.json")
    with pytest.raises(ValueError, match=r"'.json', '.json.gz' or '.parquet'"):
        sample().save(tmp_path / "t.pkl")
    with pytest.raises(TraceFormatError, match="holds no readable shards"):
        load_trace(tmp_path)


def test_trace_files_are_json_not_pickle(tmp_path):
    p = sample().save(tmp_path / "t.json")
    assert json.loads(p.read_text())["format"] == "vizdist.trace"


# -- every malformed file is a TraceFormatError naming the file (issue 10) ----------------------
def _json_doc(tmp_path, edit):
    doc = sample().to_dict()
    edit(doc)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    return p


def _parquet(tmp_path, edit_head=None, edit_table=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = sample().save(tmp_path / "bad.parquet")
    if edit_head is not None:
        head = json.loads((p / "meta.json").read_text())
        edit_head(head)
        (p / "meta.json").write_text(json.dumps(head))
    if edit_table is not None:
        table = edit_table(pq.read_table(p / "elements.parquet").to_pandas())
        if not isinstance(table, pa.Table):
            table = pa.Table.from_pandas(table, preserve_index=False)
        pq.write_table(table, p / "elements.parquet")
    return p


def _set(doc, key, value):
    doc[key] = value


def _strings_in_step(df):
    df["step"] = ["x"] * len(df)
    return df


def _duplicate_column(df):
    import pyarrow as pa

    return pa.Table.from_arrays([pa.array(df["step"]), pa.array(df["step"])], names=["step", "step"])


MALFORMED = {
    # raw exceptions before (OverflowError, ValueError, RecursionError, ValueError, TypeError, KeyError)
    "huge int": lambda tmp: _json_doc(tmp, lambda d: d["tables"]["elements"]["data"]["step"].__setitem__(0, 10**30)),
    "5000-digit int": lambda tmp: (tmp / "bad.json").write_text('{"format": "vizdist.trace", "version": 2, "x": '
                                                               + "9" * 5000 + "}") and tmp / "bad.json",
    "100k nested brackets": lambda tmp: (tmp / "bad.json").write_text("[" * 100_000 + "]" * 100_000) and tmp / "bad.json",
    "parquet string in int column": lambda tmp: _parquet(tmp, edit_table=_strings_in_step),
    "parquet meta not a dict": lambda tmp: _parquet(tmp, edit_head=lambda h: _set(h, "meta", [1, 2])),
    "parquet without meta": lambda tmp: _parquet(tmp, edit_head=lambda h: h.pop("meta")),
    # loaded without complaint before
    "json duplicate columns": lambda tmp: _json_doc(tmp, lambda d: d["tables"]["elements"]["columns"].__setitem__(1, "step")),
    "parquet duplicate columns": lambda tmp: _parquet(tmp, edit_table=_duplicate_column),
    "parquet version 99": lambda tmp: _parquet(tmp, edit_head=lambda h: _set(h, "version", 99)),
    "meta of the wrong type": lambda tmp: _json_doc(tmp, lambda d: d["meta"].__setitem__("num_replicas", "four")),
    "column values not a list": lambda tmp: _json_doc(tmp, lambda d: d["tables"]["elements"]["data"].__setitem__("step", 5)),
    "unknown dtype": lambda tmp: _json_doc(tmp, lambda d: d["tables"]["elements"]["dtypes"].__setitem__(0, "datetime64")),
    # already clear before
    "not json": lambda tmp: (tmp / "bad.json").write_bytes(b"not json") and tmp / "bad.json",
    "empty file": lambda tmp: (tmp / "bad.json").write_bytes(b"") == 0 and tmp / "bad.json",
    "foreign json": lambda tmp: (tmp / "bad.json").write_text('{"name": "package"}') and tmp / "bad.json",
    "json version 99": lambda tmp: _json_doc(tmp, lambda d: _set(d, "version", 99)),
    "truncated gzip": lambda tmp: (tmp / "bad.json.gz").write_bytes(gzip.compress(b'{"format"')[:12]) and tmp / "bad.json.gz",
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_are_trace_format_errors_naming_the_file(tmp_path, case):
    path = MALFORMED[case](tmp_path)
    with pytest.raises(TraceFormatError, match=str(path).replace(".", r"\.")):
        load_trace(path)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_the_cli_reports_malformed_files_without_a_traceback(tmp_path, case, capsys):
    from vizdist.cli import main

    path = MALFORMED[case](tmp_path)
    assert main(["summary", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "Traceback" not in err


def test_a_pipe_named_like_a_trace_is_refused_not_waited_on(tmp_path):
    import os

    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    with pytest.raises(TraceFormatError, match="not a regular file"):
        load_trace(fifo)


# -- shard folders ------------------------------------------------------------------------------
def _shards(folder, n=2):
    from vizdist.trace import shard_name

    for w in range(n):
        Trace.from_records(elements=[dict(worker=w, source_id=w)]).save(folder / shard_name("worker", w))


def test_symlinks_out_of_the_folder_are_skipped_and_reported(tmp_path):
    (tmp_path / "shards").mkdir()
    _shards(tmp_path / "shards")
    outside = Trace.from_records(elements=[dict(worker=7, source_id=99)], meta={"secret": "x"}).save(
        tmp_path / "elsewhere.json")
    (tmp_path / "shards" / "worker-worker-00009.json").symlink_to(outside)
    with pytest.warns(UserWarning, match="worker-worker-00009.json: a symbolic link"):
        t = load_trace(tmp_path / "shards")
    assert t.elements["worker"].tolist() == [0, 1]
    assert "secret" not in t.meta and all("secret" not in s for s in t.meta["shards"])
    assert [s["path"] for s in t.meta["skipped"]] == [str(tmp_path / "shards" / "worker-worker-00009.json")]


def test_a_bad_shard_fails_the_merge_naming_it_unless_skipped(tmp_path):
    _shards(tmp_path)
    (tmp_path / "package.json").write_text('{"name": "my-app", "version": "1.0.0"}')  # not a shard: not read
    (tmp_path / "worker-worker-00002.json").write_text('{"format": "vizdist.trace"')
    with pytest.raises(TraceFormatError, match=r"worker-worker-00002\.json"):
        load_trace(tmp_path)
    with pytest.warns(UserWarning, match="skipped 2 file"):
        t = load_trace(tmp_path, errors="skip")
    assert t.elements["worker"].tolist() == [0, 1]
    assert [s["path"].rsplit("/", 1)[-1] for s in t.meta["skipped"]] == ["package.json", "worker-worker-00002.json"]
    assert "not a shard" in t.meta["skipped"][0]["reason"]
    assert "not a readable vizdist trace" in t.meta["skipped"][1]["reason"]


def test_skip_with_no_good_shard_is_still_an_error(tmp_path):
    (tmp_path / "package.json").write_text("{}")
    with pytest.warns(UserWarning), pytest.raises(TraceFormatError, match="no readable shards"):
        load_trace(tmp_path, errors="skip")
    with pytest.raises(ValueError, match="errors must be"):
        load_trace(tmp_path, errors="ignore")


def test_shards_of_different_kinds_do_not_merge(tmp_path):
    Trace(meta={"kind": "data_service"}).save(tmp_path / "worker-worker-00000.json")
    Trace(meta={"kind": "parameter_server"}).save(tmp_path / "worker-worker-00001.json")
    with pytest.raises(TraceFormatError, match="different kinds"):
        load_trace(tmp_path)


@pytest.mark.parametrize("name", ["run.json", "run.json.gz"])
def test_save_never_writes_through_a_planted_symlink(tmp_path, name):
    """A link at the target is refused (neither written through nor replaced); the old fixed temp name is ignored."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / f"{name}.tmp").symlink_to(victim)  # the temp name older vizdist used
    link = tmp_path / name
    link.symlink_to(victim)
    with pytest.raises(OSError, match="is a symbolic link; vizdist does not write through, or replace"):
        sample().save(link)
    assert victim.read_text() == "precious" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, f"{name}.tmp", "victim.txt"])
    plain = sample().save(tmp_path / f"plain-{name}")
    assert load_trace(plain) == sample() and (plain.stat().st_mode & 0o777) == 0o666 & ~_current_umask()


def test_parquet_save_replaces_planted_links_inside_the_folder(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "t.parquet"
    folder.mkdir()
    (folder / "elements.parquet").symlink_to(victim)
    (folder / "meta.json").symlink_to(victim)
    sample().save(folder)
    assert victim.read_text() == "precious" and load_trace(folder) == sample()


def _current_umask() -> int:
    import os

    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- issue 36: saves that never follow a link, never leave a mix -----------------------------------
def test_a_parquet_save_never_writes_through_a_planted_folder_link(tmp_path):
    """Issue 36 item 1: `ln -s /victim shared/run.parquet`, then save there: nothing may reach /victim."""
    import os

    from vizdist.cli import main

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "meta.json").write_text("precious")
    (tmp_path / "shared").mkdir()
    link = tmp_path / "shared" / "run.parquet"
    link.symlink_to(victim, target_is_directory=True)
    with pytest.raises(OSError, match=r"run\.parquet' is a symbolic link.*does not write through"):
        sample().save(link)
    _shards(tmp_path / "src")
    assert main(["merge", str(tmp_path / "src"), str(link)]) == 2
    assert os.listdir(victim) == ["meta.json"] and (victim / "meta.json").read_text() == "precious"
    assert link.is_symlink() and sorted(os.listdir(tmp_path / "shared")) == ["run.parquet"]


def _unstorable(t: Trace) -> Trace:
    t.events["when"] = pd.to_datetime(["2024-01-01"] * len(t.events))  # no trace format stores datetimes
    return t


def test_a_failed_parquet_save_leaves_the_old_trace_whole(tmp_path):
    """Issue 36 item 2: a save that raises leaves the old trace (not B's elements with A's meta and events)."""
    import os

    old = sample()
    p = old.save(tmp_path / "x.parquet")
    new = _unstorable(Trace.from_records(elements=[dict(step=9, replica=0, source_id=99)], meta={"strategy": "B"},
                                         events=[dict(lane="b", stage="consume", t_start_ns=0, t_end_ns=1)]))
    with pytest.raises(TraceFormatError, match="column 'when' has dtype datetime64"):
        new.save(p)
    assert load_trace(p) == old
    assert os.listdir(tmp_path) == ["x.parquet"]  # no temporary folder left beside it
    new.events = new.events.drop(columns="when")
    assert load_trace(new.save(p)) == new  # a save that works replaces the old trace whole
    assert os.listdir(tmp_path) == ["x.parquet"] and sorted(os.listdir(p)) == [
        "batches.parquet", "elements.parquet", "events.parquet", "meta.json"]


def test_a_failed_json_save_leaves_the_old_file_whole(tmp_path):
    import os

    old = sample()
    p = old.save(tmp_path / "x.json")
    with pytest.raises(TraceFormatError, match="column 'when' has dtype datetime64"):
        _unstorable(sample()).save(p)
    assert load_trace(p) == old and os.listdir(tmp_path) == ["x.json"]


def test_a_parquet_save_refuses_to_replace_a_folder_that_is_not_a_trace(tmp_path):
    """Replacing a folder removes it: only a Parquet trace vizdist wrote is replaced."""
    folder = tmp_path / "data.parquet"
    folder.mkdir()
    (folder / "part-0.parquet").write_text("someone's data")
    with pytest.raises(FileExistsError, match=r"not a vizdist Parquet trace.*part-0\.parquet"):
        sample().save(folder)
    assert (folder / "part-0.parquet").read_text() == "someone's data"
    (tmp_path / "file.parquet").write_text("a file")
    with pytest.raises(FileExistsError, match="not a folder"):
        sample().save(tmp_path / "file.parquet")


def test_a_folder_merge_reads_only_the_shards_record_worker_shard_writes(tmp_path):
    """Issue 36 item 4: other files in the folder (a merged trace, a stray trace) are not read, and said so."""
    from vizdist.trace import shard_name

    for w in range(2):
        Trace.from_records(elements=[dict(worker=w, source_id=w)], meta={"task": f"worker-{w}"}).save(
            tmp_path / shard_name("worker", w))
    sample().save(tmp_path / "merged.json")
    sample().save(tmp_path / "worker-1.json")  # not the layout (old docs' names)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.warns(UserWarning, match="skipped 2 file"):
        t = load_trace(tmp_path)
    assert t.elements["worker"].tolist() == [0, 1]
    assert [s["path"].rsplit("/", 1)[-1] for s in t.meta["skipped"]] == ["merged.json", "worker-1.json"]
    assert all("not a shard" in s["reason"] for s in t.meta["skipped"])


def test_two_shards_of_one_task_in_a_folder_do_not_merge(tmp_path):
    """A shard copied under another task's name, or one task under two spellings: refused, naming both."""
    import shutil

    from vizdist.trace import shard_name

    for w in range(2):
        Trace.from_records(elements=[dict(worker=w, source_id=w)], meta={"task": f"worker-{w}"}).save(
            tmp_path / shard_name("worker", w))
    shutil.copy(tmp_path / shard_name("worker", 0), tmp_path / shard_name("worker", 2))
    with pytest.raises(TraceFormatError, match=r"worker-worker-00002\.json.* is named for task worker-2 but was "
                                               r"written by task worker-0"):
        load_trace(tmp_path)
    (tmp_path / shard_name("worker", 2)).unlink()
    shutil.copy(tmp_path / shard_name("worker", 1), tmp_path / "worker-worker-1.json")
    with pytest.raises(TraceFormatError, match=r"worker-worker-1\.json.* a second shard for task worker-1 "
                                               r"\(worker-worker-00001\.json"):
        load_trace(tmp_path)
    with pytest.warns(UserWarning, match="skipped 1 file"):
        t = load_trace(tmp_path, errors="skip")
    assert t.elements["worker"].tolist() == [0, 1]
