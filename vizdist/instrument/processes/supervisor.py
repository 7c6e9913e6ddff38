"""One way to start, watch and stop the processes vizdist runs.

:class:`vizdist.LocalCluster` and :class:`vizdist.LocalDataService` both start
their processes through a :class:`Supervisor`:

* **spawn** runs ``python -P -c BOOT ... -m <module>`` with a neutral import
  path (``-P``: no working or script folder on ``sys.path``; ``PYTHONPATH``
  set by the caller, or a folder holding only a link to the vizdist package),
  stdout and stderr going to one log file per child;
* **ready handshake**: a child calls :func:`report` (``"ready"``,
  ``"running"``, ``"done"``, ``"failed"``), which writes its status file
  atomically; the parent polls those files with a deadline
  (:meth:`Supervisor.wait`), so every wait is bounded;
* **a keeper per child**: the process started stays a small *keeper* that
  forks the real child. On Linux it is a child subreaper
  (``PR_SET_CHILD_SUBREAPER``), so every process of the child's tree that is
  orphaned (a double fork, a detached ``start_new_session`` process) becomes
  its own child; when the child ends, however it ends, the keeper kills every
  process left in its tree before it exits (with the child's exit code or
  signal). :attr:`Child.main_pid` is the real child;
* **exit on parent death**: the keeper polls ``getppid()`` every 50 ms; when
  the parent is gone (even killed with SIGKILL) it kills its whole tree and
  exits. The real child also dies with its keeper (``PR_SET_PDEATHSIG``);
* **tree kill**: SIGTERM, then SIGKILL to each child's process group and
  every descendant (``psutil``);
* **logs kept**: a failure text built by :meth:`Supervisor.failure_text`
  quotes the logs and marks the folder to be kept, so the files it names
  still exist after :meth:`Supervisor.close`.

Network isolation: with a :class:`Namespace` (:mod:`.namespace`), children join a
private user + network namespace that has only ``lo`` (created by a small holder
process with ``unshare(CLONE_NEWUSER | CLONE_NEWNET)``, no root needed). TensorFlow's
servers listen on ``[::]:port``; inside the namespace that reaches loopback
of the namespace only, so nothing else on the network (or on this machine)
can connect to them. A :class:`FolderJanitor` (:mod:`.janitor`) removes the
folders if this process is killed; every wait is bounded (:mod:`.limits`).

Example:
    >>> import tempfile
    >>> with Supervisor(tempfile.mkdtemp(), label="demo") as sup:
    ...     child = sup.spawn("demo", "platform")
    ...     sup.wait_exit(child, timeout=60)
    ...     "Linux" in sup.log_tail(child) or sys.platform != "linux"
    0
    True
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vizdist._files import write_file
from vizdist.instrument.processes import jobfiles
from vizdist.instrument.processes.janitor import CODE_FILES, KEEP_FILE, FolderJanitor, prune_kept, temp_folder
from vizdist.instrument.processes.limits import (
    DEFAULT_TIMEOUT,
    TASK_MARGIN_S,
    bounded_timeout,
    check_count,
    check_seconds,
    free_ports,
    port_in_use,
    process_limit,
    set_task_deadline,
    vizdist_root,
)
from vizdist.instrument.processes.namespace import Namespace, userns_switches

# The bounds and shared checks (limits.py), the janitor and kept folders (janitor.py) and the private network
# (namespace.py) live in modules of their own; their names stay importable from here.
__all__ = [
    "CODE_FILES",
    "DEFAULT_TIMEOUT",
    "KEEP_FILE",
    "POLL_S",
    "STATUS_ENV",
    "TASK_MARGIN_S",
    "Child",
    "FolderJanitor",
    "Namespace",
    "Supervisor",
    "bounded_timeout",
    "check_count",
    "check_seconds",
    "free_ports",
    "port_in_use",
    "process_limit",
    "prune_kept",
    "report",
    "set_task_deadline",
    "temp_folder",
    "userns_switches",
    "vizdist_root",
]


#: How often a wait polls a child's status file (seconds).
POLL_S = 0.05
#: The environment variable that names a child's status file (:func:`report` writes it).
STATUS_ENV = "VIZDIST_STATUS_FILE"


# Runs first in every child, before anything that could start a thread (joining a user namespace
# needs a single-threaded process). argv: NETNS_PID|- PARENT_PID MODULE ARGS...
# The process started stays a small *keeper*: it forks the real child (which runs MODULE), and, as a
# child subreaper (Linux), inherits every process of that child's tree that is orphaned, double-forked
# or detached included. When the child ends, or the parent dies (checked every 50 ms), it kills every
# process left in its tree, then exits as the child did (same code, or same signal).
_BOOT = r"""
import ctypes, os, signal, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
holder, parent = sys.argv[1], int(sys.argv[2])
linux = sys.platform.startswith("linux")
if holder != "-":
    for ns, flag in (("user", 0x10000000), ("net", 0x40000000)):
        fd = os.open(f"/proc/{holder}/ns/{ns}", os.O_RDONLY)
        if libc.setns(fd, flag) != 0:
            sys.exit(f"vizdist: cannot join the private {ns} namespace of process {holder}: "
                     f"{os.strerror(ctypes.get_errno())}")
        os.close(fd)
if os.getppid() != parent:
    os._exit(3)
if linux and libc.prctl(36, 1) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit(f"vizdist: cannot become a child subreaper: {os.strerror(ctypes.get_errno())}")
keeper = os.getpid()
signal.signal(signal.SIGTERM, lambda *_: None)  # the child gets it too (same group): end the rest after it
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if linux:
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG = SIGKILL when the keeper exits
    if os.getppid() != keeper:
        os._exit(3)
    def _watch():
        while os.getppid() == keeper:
            time.sleep(0.5)
        os._exit(3)
    threading.Thread(target=_watch, name="vizdist-parent-watch", daemon=True).start()
    import runpy
    sys.argv = sys.argv[3:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    sys.exit(0)

def tree():
    kids = {}
    for d in os.listdir("/proc") if linux else ():
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as fh:
                stat = fh.read()
            kids.setdefault(int(stat[stat.rindex(b")") + 2:].split()[1]), []).append(int(d))
        except (OSError, ValueError):
            continue
    out, todo = [], list(kids.get(keeper, []))
    while todo:
        out.append(todo.pop())
        todo += kids.get(out[-1], [])
    return out

def reap():
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = st

status = None
while status is None:
    status = reap()
    if status is None and os.getppid() != parent:  # the parent died: nothing may outlive it
        os.kill(child, signal.SIGKILL)
        status = -1
    time.sleep(0.05 if status is None else 0)
end = time.monotonic() + 5
while time.monotonic() < end:
    left = tree()
    if not left:
        break
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    reap()
    time.sleep(0.02)
if status == -1:
    os._exit(3)
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
    os.kill(keeper, sig)
    os._exit(128 + sig)
os._exit(os.waitstatus_to_exitcode(status))
"""


def report(stage: str) -> None:
    """Tell the supervising parent this child reached ``stage`` (atomic status-file write).

    Does nothing in a process not started by a :class:`Supervisor`.

    Example:
        >>> report("ready")   # no-op outside a supervised child
    """
    path = os.environ.get(STATUS_ENV)
    if not path:
        return
    write_file(path, stage)


# -- the parent side ----------------------------------------------------------------------------
@dataclass
class Child:
    """One process started by a :class:`Supervisor`."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    status_file: Path

    @property
    def pid(self) -> int:
        """The process id of the child's keeper (the process started; its process group and session)."""
        return self.popen.pid

    @property
    def main_pid(self) -> int | None:
        """The process id of the real child (the keeper's first child); ``None`` once it has gone.

        Use it for what the child itself holds, say its sockets; signal :attr:`pid` to stop it.
        """
        import psutil

        try:
            kids = psutil.Process(self.pid).children()
            return min(kids, key=lambda p: (p.create_time(), p.pid)).pid if kids else None
        except (psutil.Error, ValueError):
            return None

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen.poll() is None

    def status(self) -> str:
        """The last stage the child reported (``"not started"`` before the first)."""
        try:
            return self.status_file.read_text(encoding="utf-8")
        except OSError:
            return "not started"


class Supervisor:
    """Starts, watches and stops the child processes of one vizdist object.

    Args:
        folder: where status files and logs go (created if missing).
        label: names the temporary copy of the logs kept after a failure.
        namespace: a :class:`Namespace` every child joins, or ``None``.
        env: environment for every child (``os.environ`` when ``None``).
        janitor: a :class:`FolderJanitor` that removes ``folder`` if this process is killed before
            :meth:`close` (the caller owns it and ends it).
    """

    def __init__(self, folder: str | os.PathLike[str], *, label: str = "vizdist",
                 namespace: Namespace | None = None, env: Mapping[str, str] | None = None,
                 janitor: FolderJanitor | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.janitor = janitor
        if janitor is not None:
            janitor.watch(self.folder)
        self.label = label
        self.namespace = namespace
        self.env = dict(os.environ if env is None else env)
        self.children: list[Child] = []
        self.kept_logs: Path | None = None

    def spawn(self, name: str, module: str, args: Sequence[str] = (), *, cwd: str | os.PathLike[str] = "/",
              python_path: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Child:
        """Start ``python -P -m module args`` (through the boot code and its keeper) as child ``name``.

        ``python_path`` becomes ``PYTHONPATH``; when ``None``, a folder that holds only a link to the
        vizdist package (so nothing else beside the package, say a planted ``argparse.py``, can shadow
        the standard library or anything else in the child);
        ``-P`` keeps ``cwd`` off the import path. ``TMPDIR`` is the child's own folder (removed by
        :meth:`close`) and ``TF_FORCE_GPU_ALLOW_GROWTH`` is ``true`` unless the environment sets it.
        """
        full_env = dict(self.env)
        # Several TF processes share one GPU only if none of them maps all its memory at start-up (TF's
        # default); a caller's own setting wins. (TF's GPU guide: "Limiting GPU memory growth".)
        full_env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
        full_env.update(env or {})
        full_env["PYTHONPATH"] = os.pathsep.join(python_path if python_path is not None else [str(self._import_dir())])
        full_env["PYTHONUNBUFFERED"] = "1"
        status = self.folder / f"status-{name}.txt"
        full_env[STATUS_ENV] = str(status)
        full_env["TMPDIR"] = str(self._tmpdir(name))
        holder = str(self.namespace.pid) if self.namespace is not None else "-"
        argv = [sys.executable, "-P", "-c", _BOOT, holder, str(os.getpid()), module, *args]
        log = jobfiles.LOG.path(self.folder, name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(log, flags, 0o600)
        with os.fdopen(fd, "wb") as fh:  # a new file: never one planted there, nor a link
            popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=full_env, cwd=cwd, start_new_session=True)
        child = Child(name, popen, log, status)
        self.children.append(child)
        return child

    def _import_dir(self) -> Path:
        """A folder in this supervisor's private folder holding only a link named ``vizdist`` to the package."""
        folder = self.folder / "import"
        if not folder.is_dir():
            folder.mkdir()
            (folder / "vizdist").symlink_to(Path(vizdist_root()) / "vizdist", target_is_directory=True)
        return folder

    def _tmpdir(self, name: str) -> Path:
        """The child's own temporary folder, removed by :meth:`close`.

        What a child leaves in its temporary folder goes with it: TF's autograph writes a source
        file per converted function and deletes it at interpreter exit, which a child that ends
        with ``os._exit`` (or is killed) never reaches.
        """
        tmp = self.folder / f"tmp-{name}"
        tmp.mkdir(exist_ok=True)
        return tmp

    def wait(self, children: Iterable[Child], stages: Iterable[str], *, deadline: float,
             bar: Any = None) -> tuple[str, list[Child]]:
        """Wait until every child reported one of ``stages``; bounded by ``deadline`` (monotonic).

        Returns ``("ok", [])``, ``("dead", children that exited first)`` or
        ``("timeout", children still waiting)``.
        """
        waiting, wanted, seen = list(children), set(stages), 0
        while True:
            waiting = [c for c in waiting if c.status() not in wanted]
            if bar is not None and len(self.children) - len(waiting) != seen:
                bar.update(len(self.children) - len(waiting) - seen)
                seen = len(self.children) - len(waiting)
            if not waiting:
                return "ok", []
            dead = [c for c in waiting if not c.alive() and c.status() not in wanted]
            if dead:
                return "dead", dead
            if time.monotonic() > deadline:
                return "timeout", waiting
            time.sleep(POLL_S)

    def wait_exit(self, child: Child, *, timeout: float) -> int | None:
        """Wait at most ``timeout`` seconds for ``child`` to exit; its exit code or ``None``."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            return child.popen.wait(timeout=timeout)
        return None

    def log_tail(self, child: Child, n: int = 25) -> str:
        """The last ``n`` lines of ``child``'s log."""
        try:
            lines = child.log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def failure_text(self, child: Child, n: int = 25) -> str:
        """How ``child`` ended plus its log tail; the logs are kept after :meth:`close`."""
        code = child.popen.poll()
        how = ("is still running" if code is None else
               f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
        self.keep()
        return (f"{child.name} (pid {child.pid}) {how}; status {child.status()!r}. Last lines of its log "
                f"({child.log}, kept for you):\n{self.log_tail(child, n)}")

    def keep(self) -> None:
        """Keep the folder (logs) after :meth:`close`: an error message points at it."""
        self.kept_logs = self.folder
        with contextlib.suppress(OSError):
            (self.folder / KEEP_FILE).touch()

    def kill(self, child: Child, *, grace: float = 3.0) -> None:
        """Stop ``child`` and everything it started: SIGTERM, then SIGKILL after ``grace`` seconds."""
        self.kill_all([child], grace=grace)

    def kill_all(self, children: Sequence[Child] | None = None, *, grace: float = 3.0) -> None:
        """Tree-kill ``children`` (all when ``None``): SIGTERM, wait ``grace``, SIGKILL, reap."""
        targets = list(self.children if children is None else children)
        tree = {c.pid: _descendants(c.pid) for c in targets}
        for c in targets:
            _signal_tree(c, tree[c.pid], signal.SIGTERM)
        end = time.monotonic() + grace
        for c in targets:
            self.wait_exit(c, timeout=max(0.05, end - time.monotonic()))
        for c in targets:
            tree[c.pid] += _descendants(c.pid)
            _signal_tree(c, tree[c.pid], signal.SIGKILL)
            self.wait_exit(c, timeout=5.0)
        _wait_gone([p for procs in tree.values() for p in procs], timeout=5.0)

    def close(self, *, remove: bool = True) -> None:
        """Kill every child; delete the folder unless ``remove`` is false or a failure named its logs."""
        self.kill_all()
        if remove and self.kept_logs is None and not (self.folder / KEEP_FILE).exists():
            shutil.rmtree(self.folder, ignore_errors=True)
        prune_kept(self.folder)  # kept logs keep no code and no temporary files
        if self.janitor is not None:
            self.janitor.forget(self.folder)  # removed, or kept on purpose (named in an error)

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _descendants(pid: int) -> list[Any]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _wait_gone(procs: list[Any], *, timeout: float) -> None:
    """Wait (bounded) until each process is gone: a killed process dies when the kernel next runs it,
    so without this a caller could still see a grandchild alive just after ``close()``."""
    import psutil

    with contextlib.suppress(psutil.Error):
        psutil.wait_procs(procs, timeout=timeout)


def _signal_tree(child: Child, descendants: list[Any], sig: int) -> None:
    import psutil

    if child.alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)  # the child's session: anything it forked
    for proc in descendants:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


