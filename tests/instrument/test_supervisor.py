"""The one process supervisor: handshake, bounded waits, tree kill, kept logs, namespaces (also as non-root)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from vizdist.instrument.processes import namespace
from vizdist.instrument.processes import supervisor as sv


def test_child_reports_ready_and_logs_survive_a_failure(tmp_path: Path) -> None:
    sup = sv.Supervisor(tmp_path / "run", label="t")
    ok = sup.spawn("ok", "vizdist.instrument.processes._demo_child", ["ready"])
    bad = sup.spawn("bad", "vizdist.instrument.processes._demo_child", ["fail"])
    state, which = sup.wait([ok], ("ready",), deadline=time.monotonic() + 60)
    assert (state, which) == ("ok", [])
    state, which = sup.wait([bad], ("ready",), deadline=time.monotonic() + 60)
    assert state == "dead" and which == [bad]
    text = sup.failure_text(bad)
    assert "exited with code 1" in text and "demo child failed on purpose" in text
    sup.close()
    assert not ok.alive() and bad.log.exists(), "the log an error named was deleted"


def test_what_a_child_leaves_in_its_temporary_folder_goes_with_the_supervisor(tmp_path: Path) -> None:
    """A child ending with os._exit skips the clean-up at exit (TF's autograph files): nothing of it stays."""
    for keep in (False, True):
        sup = sv.Supervisor(tmp_path / f"run-{keep}", label="t")
        child = sup.spawn("leaver", "vizdist.instrument.processes._demo_child", ["tempfile"])
        assert sup.wait_exit(child, timeout=60) == 0, sup.log_tail(child)
        left = Path(sup.log_tail(child).splitlines()[-1])
        assert left.exists() and left.is_relative_to(sup.folder)
        if keep:
            sup.keep()
        sup.close()
        assert not left.exists()
        assert child.log.exists() == keep, "kept logs are kept; only the temporary files go"


def test_a_module_planted_beside_the_package_never_shadows_the_standard_library(tmp_path: Path,
                                                                                monkeypatch) -> None:
    """Children import vizdist from a folder that holds nothing else, not from the folder around the package."""
    import argparse

    import vizdist.errors

    root = tmp_path / "site"  # the folder holding the vizdist package, with an argparse.py planted beside it
    root.mkdir()
    (root / "vizdist").symlink_to(Path(vizdist.__file__).parent, target_is_directory=True)
    ran = tmp_path / "planted-argparse-ran"
    (root / "argparse.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    monkeypatch.setattr(sv, "vizdist_root", lambda: str(root))
    with sv.Supervisor(tmp_path / "run", label="t") as sup:
        child = sup.spawn("modules", "vizdist.instrument.processes._demo_child", ["modules"])
        assert sup.wait_exit(child, timeout=60) == 0, sup.log_tail(child)
        seen = json.loads(sup.log_tail(child).splitlines()[-1])
    assert not ran.exists(), "the planted argparse.py ran in the child"
    assert seen == {"argparse": argparse.__file__, "vizdist": os.path.realpath(vizdist.errors.__file__)}


def test_children_grow_gpu_memory_unless_the_caller_says_otherwise(tmp_path: Path) -> None:
    """Several TF processes share one GPU only if none maps all its memory at start (TF's default)."""
    with sv.Supervisor(tmp_path / "run", label="t", env={"PATH": os.environ.get("PATH", "")}) as sup:
        default = sup.spawn("default", "vizdist.instrument.processes._demo_child", ["gpu-env"])
        own = sup.spawn("own", "vizdist.instrument.processes._demo_child", ["gpu-env"],
                        env={"TF_FORCE_GPU_ALLOW_GROWTH": "false"})
        for child in (default, own):
            assert sup.wait_exit(child, timeout=60) == 0, sup.log_tail(child)
        assert [sup.log_tail(c).splitlines()[-1] for c in (default, own)] == ["true", "false"]


def test_wait_is_bounded_and_kill_takes_the_whole_tree(tmp_path: Path) -> None:
    sup = sv.Supervisor(tmp_path / "run", label="t")
    child = sup.spawn("tree", "vizdist.instrument.processes._demo_child", ["tree"])
    state, _ = sup.wait([child], ("ready",), deadline=time.monotonic() + 60)
    assert state == "ok"
    grandchild = psutil.Process(
        int((tmp_path / "run" / "log-tree.txt").read_text().split("grandchild")[1].split()[0]))
    state, which = sup.wait([child], ("never",), deadline=time.monotonic() + 0.5)
    assert state == "timeout" and which == [child]
    sup.close()
    assert not child.alive()
    # is_running() compares the start time too, so a new process that reuses the pid does not count
    assert not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE


def still_running(pids: list[int], cmdline: list[str], *, timeout: float = 30.0) -> list[int]:
    """Those of ``pids`` still running ``cmdline`` (zombies do not count) after waiting up to ``timeout`` s.

    Those are then killed (by pid, checked against ``cmdline``), so a failing test leaves nothing behind.
    """
    def running(pid: int) -> bool:
        try:
            p = psutil.Process(pid)
            return p.status() != psutil.STATUS_ZOMBIE and p.cmdline() == cmdline
        except psutil.Error:
            return False

    end = time.monotonic() + timeout
    while any(running(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.1)
    left = [p for p in pids if running(p)]
    for p in left:
        with contextlib.suppress(psutil.Error):
            psutil.Process(p).kill()
    return left


def test_a_detached_grandchild_does_not_outlive_the_child(tmp_path: Path) -> None:
    """A child that starts a sleep in its own session and a double-forked one, then exits: both go."""
    token = f"{time.time() % 1000 + 300:.6f}"  # a unique command line: pids may be reused
    with sv.Supervisor(tmp_path / "run", label="t") as sup:
        child = sup.spawn("detacher", "vizdist.instrument.processes._demo_child", ["detached", token])
        assert sup.wait_exit(child, timeout=60) == 0, sup.log_tail(child)
        pids = json.loads(sup.log_tail(child).splitlines()[-1])
        assert len(pids) == 2
        # gone once the child has ended, before close(): its keeper ended them
        assert still_running(pids, ["sleep", token]) == []


_WATCHER = r"""
import os, signal, sys
from vizdist.instrument.processes.supervisor import FolderJanitor
janitor = FolderJanitor()
for folder in sys.argv[1:]:
    janitor.watch(folder)
janitor.forget(sys.argv[1])
print(janitor._popen.pid, flush=True)
sys.stdin.readline()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_janitor_removes_watched_folders_when_their_process_is_killed(tmp_path: Path) -> None:
    """SIGKILL runs no clean-up in the process: its janitor removes the folders, but one whose logs were kept."""
    gone, kept, forgotten = (tmp_path / n for n in ("gone", "kept", "forgotten"))
    for d in (gone, kept, forgotten):
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "log.txt").write_text("x")
    (kept / sv.KEEP_FILE).touch()
    proc = subprocess.Popen([sys.executable, "-c", _WATCHER, str(forgotten), str(gone), str(kept)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=sv.vizdist_root()))
    janitor = psutil.Process(int(proc.stdout.readline()))  # type: ignore[union-attr]
    proc.stdin.write("go\n")  # type: ignore[union-attr]
    proc.stdin.flush()  # type: ignore[union-attr]
    assert proc.wait(timeout=30) == -9
    try:
        janitor.wait(timeout=30)
    except psutil.TimeoutExpired:
        janitor.kill()
        raise
    assert not gone.exists() and (kept / "sub" / "log.txt").exists() and (forgotten / "sub").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="network namespaces are Linux-only")
def test_namespace_has_only_loopback(tmp_path: Path) -> None:
    ns, why = sv.Namespace.start()
    if ns is None:
        pytest.skip(f"user + network namespaces are unavailable here: {why}")
    try:
        sup = sv.Supervisor(tmp_path / "run", label="t", namespace=ns)
        child = sup.spawn("probe", "vizdist.instrument.processes._demo_child", ["interfaces"])
        assert sup.wait_exit(child, timeout=60) == 0, sup.log_tail(child)
        got = json.loads(sup.log_tail(child).splitlines()[-1])
        assert got == {"interfaces": ["lo"], "loopback_ok": True}
        sup.close()
    finally:
        ns.close()


_AS_NOBODY = r"""
import json, subprocess, sys
HOLDER, BOOT, folder = json.load(open(sys.argv[1]))
h = subprocess.Popen([sys.executable, "-P", "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert h.stdout.readline().strip() == "READY", "holder failed"
import os
env = dict(os.environ, PYTHONPATH=folder)
r = subprocess.run([sys.executable, "-P", "-c", BOOT, str(h.pid), str(os.getpid()), "nscheck"],
                   capture_output=True, text=True, env=env, timeout=60)
h.stdin.close(); h.wait(10)
print(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "STDERR " + r.stderr)
"""

_NSCHECK = r"""
import json, os, socket
s = socket.socket(socket.AF_INET6); s.bind(("::", 0)); s.listen()
ok = True
try:
    socket.create_connection(("127.0.0.1", s.getsockname()[1]), timeout=2).close()
except OSError:
    ok = False
print(json.dumps({"uid": os.getuid(), "interfaces": [n for _, n in socket.if_nameindex()], "loopback_ok": ok}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="network namespaces are Linux-only")
def test_namespace_works_for_a_non_root_user() -> None:
    setpriv, python = shutil.which("setpriv"), shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or not setpriv or not python:
        pytest.skip("needs root (to become 'nobody'), setpriv and a system python3 that 'nobody' can run")
    # "nobody" must reach it: not under this run's own temporary folder (mode 0700, see conftest)
    folder = tempfile.mkdtemp(prefix="vizdist-nobody-", dir="/tmp")
    try:
        os.chmod(folder, 0o755)
        Path(folder, "nscheck.py").write_text(_NSCHECK)
        Path(folder, "code.json").write_text(json.dumps([namespace._HOLDER, sv._BOOT, folder]))
        Path(folder, "as_nobody.py").write_text(_AS_NOBODY)
        for f in Path(folder).iterdir():
            f.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        out = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, "-P",
                              f"{folder}/as_nobody.py", f"{folder}/code.json"],
                             capture_output=True, text=True, timeout=120, cwd="/",
                             env={**os.environ, "TMPDIR": folder})
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr
        if "holder failed" in out.stderr or "FAILED unshare" in line:
            pytest.skip(f"unprivileged user namespaces are disabled here: {line}")
        assert json.loads(line) == {"uid": 65534, "interfaces": ["lo"], "loopback_ok": True}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_port_helpers() -> None:
    ports = sv.free_ports(3)
    assert len(set(ports)) == 3 and not any(sv.port_in_use(p) for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert sv.port_in_use(s.getsockname()[1])


def test_a_kept_folder_loses_its_pickled_code_even_when_the_driver_dies(tmp_path) -> None:
    """Issue 36 item 5: a folder kept for its logs keeps no job.pkl, also when the janitor cleans up after a kill."""
    import subprocess
    import sys
    import time

    from vizdist.instrument.processes.supervisor import KEEP_FILE

    kept, gone = tmp_path / "kept", tmp_path / "gone"
    for d in (kept, gone):
        d.mkdir()
        for name in ("job.pkl", "log-worker-0.txt", "spec.json", "req-1.graph"):
            (d / name).write_text("x")
        (d / "tmp-worker-0").mkdir()
    (kept / KEEP_FILE).touch()
    driver = ("import os, sys, time\nfrom vizdist.instrument.processes.supervisor import FolderJanitor\n"
              "j = FolderJanitor()\nfor f in sys.argv[1:]:\n    j.watch(f)\ntime.sleep(0.5)\nos._exit(9)\n")
    subprocess.run([sys.executable, "-c", driver, str(kept), str(gone)], check=False, timeout=60)
    deadline = time.monotonic() + 30
    while (gone.exists() or (kept / "job.pkl").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not gone.exists()
    assert sorted(p.name for p in kept.iterdir()) == [KEEP_FILE, "log-worker-0.txt", "spec.json"]
