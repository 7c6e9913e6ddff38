"""Every file vizdist writes goes through one atomic helper; shards are opened without following links."""

from __future__ import annotations

import ast
import json
import os
import threading
from pathlib import Path

import pytest

import vizdist
from vizdist import _files, _tracefiles
from vizdist.render import export

ROOT = Path(vizdist.__file__).parent


def _events_trace() -> vizdist.Trace:
    return vizdist.Trace.from_records(events=[dict(lane="w0 host", stage="transfer", step=0, t_start_ns=0,
                                                   t_end_ns=10)])


@pytest.mark.parametrize("name", ["out.json", "out.json.gz"])
def test_to_chrome_trace_never_writes_through_a_planted_link(tmp_path: Path, name: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.symlink(victim, tmp_path / f"{name}.tmp")  # the old fixed temp name: ignored
    out = _events_trace().to_chrome_trace(tmp_path / name)
    assert victim.read_text() == "keep me" and (tmp_path / f"{name}.tmp").is_symlink()
    raw = out.read_bytes()  # complete Chrome trace JSON
    if name.endswith(".gz"):
        import gzip

        raw = gzip.decompress(raw)
    assert json.loads(raw)["traceEvents"][0]["name"]
    out.unlink()
    os.symlink(victim, out)  # a link at the target itself: refused, neither followed nor replaced
    with pytest.raises(_files.LinkedTarget, match="is a symbolic link"):
        _events_trace().to_chrome_trace(out)
    assert victim.read_text() == "keep me" and out.is_symlink()


def test_a_failed_write_leaves_neither_a_partial_file_nor_a_temporary_one(tmp_path: Path, monkeypatch) -> None:
    def half(fh, events, other):
        fh.write('{"displayTimeUnit":"ms"')
        raise OSError("disk full")

    monkeypatch.setattr(export, "_write", half)
    with pytest.raises(OSError, match="disk full"):
        _events_trace().to_chrome_trace(tmp_path / "out.json")
    assert list(tmp_path.iterdir()) == []


def test_write_text_files_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "data").mkdir()
    os.symlink(victim, tmp_path / "data" / "part-0.txt")
    with pytest.raises(_files.LinkedTarget, match=r"part-0\.txt' is a symbolic link"):
        vizdist.write_text_files(tmp_path / "data", n_files=1, lines_per_file=2)
    assert victim.read_text() == "keep me"
    files = vizdist.write_text_files(tmp_path / "fresh", n_files=1, lines_per_file=2)
    assert Path(files[0]).read_text() == "0\n1\n"


def test_write_file_can_refuse_to_replace_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "shard.json"
    _files.write_file(target, "first", replace=False)
    with pytest.raises(FileExistsError):
        _files.write_file(target, "second", replace=False)
    assert target.read_text() == "first" and os.listdir(tmp_path) == ["shard.json"]


def _writes_outside_the_helper(path: Path, root: Path = ROOT) -> list[str]:
    """Calls that write a file by another way than vizdist._files.write_file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        mode = next((a.value for a in node.args[1:2] if isinstance(a, ast.Constant)), None)
        mode = next((k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)),
                    mode)
        writes = name in ("write_text", "write_bytes", "mkstemp")
        on_os = isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "os"
        renames = on_os and name in ("replace", "rename")  # a temp file renamed by hand (df.rename is fine)
        opens_for_writing = name == "open" and isinstance(mode, str) and bool(set(mode) & set("wax+"))
        if writes or renames or opens_for_writing:
            found.append(f"{path.relative_to(root.parent)}:{node.lineno} {name}")
    return found


def test_every_writer_uses_the_one_atomic_helper() -> None:
    found = [w for p in sorted(ROOT.rglob("*.py")) if p.name != "_files.py" for w in _writes_outside_the_helper(p)]
    assert found == []


def test_the_scan_above_sees_a_plain_write(tmp_path: Path) -> None:
    pkg = tmp_path / "vizdist"
    pkg.mkdir()
    (pkg / "m.py").write_text('open(p, "w").write(x)\nPath(p).write_text(x)\nos.replace(a, b)\ns.replace("a", "b")\n'
                              'df.rename(columns={})\nopen(p).read()\n')
    found = _writes_outside_the_helper(pkg / "m.py", pkg)
    assert sorted(w.split()[-1] for w in found) == ["open", "replace", "write_text"]


def _shard(path: Path, worker: int) -> None:  # path: a shard's name, worker-<type>-<index>.json
    vizdist.Trace.from_records(elements=[dict(step=0, worker=worker, source_id=worker)]).save(path)


def test_a_shard_swapped_for_a_link_to_a_fifo_after_the_listing_is_refused_not_hung(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    _shard(tmp_path / "worker-worker-00000.json", 0)
    fifo = tmp_path / "elsewhere.fifo"
    os.mkfifo(fifo)
    os.symlink(fifo, tmp_path / "worker-worker-00001.json")  # a link to a FIFO
    os.mkfifo(tmp_path / "worker-worker-00002.json")          # a FIFO in place of a shard
    # The folder was listed and checked before the swap: the check saw regular files.
    monkeypatch.setattr(_tracefiles, "folder_entry", lambda c: (c.name.endswith(".json"), ""))
    out: list[object] = []

    def load() -> None:
        try:
            with pytest.warns(UserWarning, match="skipped 2 file"):
                out.append(vizdist.load_trace(tmp_path, errors="skip"))
        except BaseException as exc:  # handed to the test thread
            out.append(exc)

    th = threading.Thread(target=load, daemon=True)
    th.start()
    th.join(60)
    hung = th.is_alive()
    if hung:  # let the reader go: a writer end opened without blocking releases a reader blocked on open
        for f in (fifo, tmp_path / "worker-worker-00002.json"):
            with pytest.raises(OSError):
                os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))
    assert not hung, "load_trace blocked opening a FIFO"
    t = out[0]
    assert isinstance(t, vizdist.Trace), t
    assert t.elements["worker"].tolist() == [0]
    reasons = {Path(s["path"]).name: s["reason"] for s in t.meta["skipped"]}
    assert "symbolic link" in reasons["worker-worker-00001.json"] and "a FIFO" in reasons["worker-worker-00002.json"]


def test_open_regular_refuses_links_only_when_told(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x")
    os.symlink(tmp_path / "a", tmp_path / "link")
    with _files.open_regular(tmp_path / "link") as fh:
        assert fh.read() == b"x"
    with pytest.raises(_files.NotRegularFile, match="symbolic link"):
        _files.open_regular(tmp_path / "link", follow=False)
    with pytest.raises(_files.NotRegularFile, match="a folder"):
        _files.open_regular(tmp_path)


def _folder(path: Path, text: str) -> None:
    (path / "meta.json").write_text(text)


def test_write_folder_swaps_whole_without_renameat2_too(tmp_path: Path, monkeypatch) -> None:
    """Issue 36 item 2: where the OS has no RENAME_EXCHANGE, two renames, undone when the second fails."""
    target = tmp_path / "t.parquet"
    _files.write_folder(target, lambda f: _folder(f, "old"))
    monkeypatch.setattr(_files.ctypes, "CDLL", lambda *a, **k: object())  # no renameat2
    _files.write_folder(target, lambda f: _folder(f, "new"))
    assert (target / "meta.json").read_text() == "new" and os.listdir(tmp_path) == ["t.parquet"]
    real = os.rename

    def second_fails(src, dst, *a, **k):
        if str(src).endswith(".tmp"):
            raise OSError("disk gone")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(_files.os, "rename", second_fails)
    with pytest.raises(OSError, match="disk gone"):
        _files.write_folder(target, lambda f: _folder(f, "newer"))
    assert (target / "meta.json").read_text() == "new" and os.listdir(tmp_path) == ["t.parquet"]


def test_write_folder_never_follows_a_link_planted_after_its_check(tmp_path: Path, monkeypatch) -> None:
    """The old folder swapped out is removed without following a link that took its place."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    target = tmp_path / "t.parquet"
    _files.write_folder(target, lambda f: _folder(f, "old"))

    def plant(folder: Path) -> None:  # while the new one is filled, the target is swapped for a link
        _folder(folder, "new")
        import shutil

        shutil.rmtree(target)
        target.symlink_to(victim, target_is_directory=True)

    _files.write_folder(target, plant, replaceable=lambda p: "")
    assert (victim / "keep.txt").read_text() == "keep" and not target.is_symlink()
    assert (target / "meta.json").read_text() == "new"
