"""The vizdist command: summary and merge, with clear errors."""

from __future__ import annotations

from vizdist.cli import main
from vizdist.trace import Trace, load_trace


def test_summary_prints_split_and_findings(tmp_path, capsys):
    t = Trace.from_records(
        elements=[dict(step=0, replica=0, source_id=0, position=0)],
        batches=[dict(step=0, replica=0, n_elements=1), dict(step=0, replica=1, n_elements=0, empty=True)],
        meta={"strategy": "MirroredStrategy", "num_replicas": 2, "global_batch_size": 2})
    p = t.save(tmp_path / "t.json")
    assert main(["summary", str(p)]) == 0
    out = capsys.readouterr().out
    assert "step 0: r0 [0] | r1 empty" in out
    assert "- warning empty-replica step 0: At step 0, replica 1 got an empty batch" in out


def test_merge_joins_shards(tmp_path, capsys):
    for w in range(2):
        Trace.from_records(elements=[dict(worker=w, source_id=w)]).save(tmp_path / "s" / f"worker-worker-{w:05d}.json")
    assert main(["merge", str(tmp_path / "s"), str(tmp_path / "all.json")]) == 0
    assert load_trace(tmp_path / "all.json").elements["worker"].tolist() == [0, 1]


def test_python_dash_m_vizdist_is_the_same_command(tmp_path):
    import os
    import subprocess
    import sys

    from vizdist.instrument.processes.supervisor import vizdist_root

    for w in range(2):
        Trace.from_records(elements=[dict(worker=w, source_id=w)]).save(tmp_path / "s" / f"worker-worker-{w:05d}.json")
    done = subprocess.run([sys.executable, "-m", "vizdist", "merge", str(tmp_path / "s"), str(tmp_path / "all.json")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=vizdist_root()))
    assert done.returncode == 0, done.stderr
    assert "merged" in done.stdout and load_trace(tmp_path / "all.json").elements["worker"].tolist() == [0, 1]
    usage = subprocess.run([sys.executable, "-m", "vizdist"], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=vizdist_root()))
    assert usage.returncode == 2 and usage.stderr.startswith("usage: vizdist ")


def test_bad_file_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text("{}")
    assert main(["summary", str(p)]) == 2
    assert "is not a vizdist trace" in capsys.readouterr().err


def test_summary_escapes_terminal_control_sequences_from_the_trace(tmp_path, capsys):
    clear_and_retitle = "\x1b[2J\x1b]0;pwned\x07"
    t = Trace.from_records(
        elements=[dict(step=0, replica=0, source_id=0, position=0, device=f"CPU{clear_and_retitle}",
                       source_file="a\u202eb.txt")],
        batches=[dict(step=0, replica=0, n_elements=1, device=f"CPU{clear_and_retitle}")],
        meta={"strategy": f"S{clear_and_retitle}", "num_replicas": 1, "api": "\x9b31m"})
    assert main(["summary", str(t.save(tmp_path / "t.json"))]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\x9b\u202e"), repr(out)
    assert r"S\x1b[2J\x1b]0;pwned\x07" in out


def test_merge_lists_skipped_files_escaped_and_summary_rejects_a_bad_shard(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    for w in range(2):
        Trace.from_records(elements=[dict(worker=w, source_id=w)]).save(tmp_path / "s" / f"worker-worker-{w:05d}.json")
    (tmp_path / "s" / "evil\x1b[2J.json").symlink_to(tmp_path / "s" / "worker-worker-00000.json")
    (tmp_path / "s" / "worker-worker-00007.json").symlink_to(tmp_path / "s" / "worker-worker-00000.json")
    assert main(["merge", str(tmp_path / "s"), str(tmp_path / "all.json")]) == 0
    err = capsys.readouterr().err
    assert "symbolic link" in err and "\x1b" not in err and r"evil\x1b[2J.json: not a shard" in err
    (tmp_path / "s" / "worker-worker-00009.json").write_text("{}")
    assert main(["summary", str(tmp_path / "s")]) == 2
    assert "worker-worker-00009.json" in capsys.readouterr().err


def test_skip_bad_merges_the_readable_shards_and_names_the_others(tmp_path, capsys):
    for w in range(2):
        Trace.from_records(elements=[dict(worker=w, source_id=w)]).save(tmp_path / "s" / f"worker-worker-{w:05d}.json")
    (tmp_path / "s" / "worker-worker-00002.json").write_text('{"format": "vizdist.trace", "version": 2, "meta": {')
    assert main(["merge", str(tmp_path / "s"), str(tmp_path / "all.json")]) == 2
    assert "worker-worker-00002.json" in capsys.readouterr().err
    assert main(["merge", "--skip-bad", str(tmp_path / "s"), str(tmp_path / "all.json")]) == 0
    assert "worker-worker-00002.json: " in capsys.readouterr().err
    merged = load_trace(tmp_path / "all.json")
    assert merged.elements["worker"].tolist() == [0, 1]
    assert [s["path"] for s in merged.meta["skipped"]] == [str(tmp_path / "s" / "worker-worker-00002.json")]
    assert main(["summary", "--skip-bad", str(tmp_path / "s")]) == 0


def test_load_bounds_can_be_raised_on_the_command_line(tmp_path, capsys):
    t = Trace.from_records(elements=[dict(step=s, replica=0, source_id=s, position=0) for s in range(5)])
    p = t.save(tmp_path / "t.json")
    assert main(["summary", str(p), "--max-rows", "3"]) != 0  # over the bound: a clear error
    assert "max_rows" in capsys.readouterr().err
    assert main(["summary", str(p), "--max-rows", "10"]) == 0
    t.save(tmp_path / "s" / "worker-worker-00000.json")
    assert main(["merge", str(tmp_path / "s"), str(tmp_path / "out.json"), "--max-rows", "3"]) == 2
    assert main(["merge", str(tmp_path / "s"), str(tmp_path / "out.json"), "--max-rows", "10"]) == 0


def _record_shards(folder, n=2):
    for w in range(n):  # the names record_worker_shard writes (vizdist.trace.shard_name)
        Trace.from_records(elements=[dict(worker=w, source_id=w)], meta={"task": f"worker-{w}"}).save(
            folder / f"worker-worker-{w:05d}.json")


def test_a_merge_never_reads_its_own_output(tmp_path, capsys):
    """Issue 36 item 4: `vizdist merge d d/merged.json` twice gave 2, then 4 rows for 2 shards."""
    d = tmp_path / "d"
    _record_shards(d)
    for _ in range(3):
        assert main(["merge", str(d), str(d / "merged.json")]) == 0
        assert load_trace(d / "merged.json").elements["worker"].tolist() == [0, 1]
    assert "merged.json: not a shard" in capsys.readouterr().err  # said, not read
    assert main(["merge", str(d), str(d / "worker-worker-00000.json")]) == 2  # would replace a shard
    assert "would replace the shard" in capsys.readouterr().err
    assert load_trace(d / "worker-worker-00000.json").elements["worker"].tolist() == [0]
