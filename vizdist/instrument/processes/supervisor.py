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

Network isolation: with a :class:`Namespace`, children join a private user +
network namespace that has only ``lo`` (created by a small holder process
with ``unshare(CLONE_NEWUSER | CLONE_NEWNET)``, no root needed). TensorFlow's
servers listen on ``[::]:port``; inside the namespace that reaches loopback
of the namespace only, so nothing else on the network (or on this machine)
can connect to them.

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
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vizdist._files import write_file
from vizdist.instrument.processes import jobfiles

__all__ = [
    "DEFAULT_TIMEOUT",
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
    "report",
    "set_task_deadline",
    "userns_switches",
    "vizdist_root",
]

#: How long a call that starts processes or servers waits by default (``timeout=``) before it stops
#: them and returns (or raises with) what it has: no call vizdist makes waits without a bound.
DEFAULT_TIMEOUT = 180.0
#: In a task a :class:`LocalCluster` started, a bounded run ends this long before the launcher's own
#: deadline, so its partial trace comes back before the launcher stops the task.
TASK_MARGIN_S = 15.0
_task_deadline = 0.0  # time.time() by which the launcher stops this process (0: no launcher)


def set_task_deadline(deadline: float) -> None:
    """Note the wall-clock time (``time.time()``) by which this process's launcher stops it (0: none)."""
    global _task_deadline
    _task_deadline = float(deadline)


def bounded_timeout(timeout: float | None) -> float | None:
    """``timeout``, cut to end :data:`TASK_MARGIN_S` before this task's launcher deadline, if it has one.

    Example:
        >>> bounded_timeout(30.0), bounded_timeout(None)   # no launcher deadline in this process
        (30.0, None)
    """
    if not _task_deadline:
        return timeout
    left = max(10.0, _task_deadline - time.time() - TASK_MARGIN_S)
    return left if timeout is None else min(float(timeout), left)

POLL_S = 0.05
STATUS_ENV = "VIZDIST_STATUS_FILE"
KEEP_FILE = ".vizdist-keep"
#: What a folder kept for its logs loses (glob patterns): the pickled callable and the dataset graphs sent to a
#: child (code, which nobody needs to debug and which must not lie around), the children's temporary folders
#: and the import folder (a link to the package).
CODE_FILES = (jobfiles.JOB, f"{jobfiles.REQUEST_GRAPH.prefix}*{jobfiles.REQUEST_GRAPH.suffix}",
              f"{jobfiles.REQUEST_SPEC.prefix}*{jobfiles.REQUEST_SPEC.suffix}", "tmp-*", "import")


def prune_kept(folder: str | os.PathLike[str]) -> None:
    """Remove :data:`CODE_FILES` from ``folder`` (kept for its logs, spec and error reports).

    Example:
        >>> d = temp_folder("vizdist-doc-")
        >>> for name in ("job.pkl", "log-worker-0.txt", "spec.json"):
        ...     _ = (d / name).write_bytes(b"x")
        >>> (d / "tmp-worker-0").mkdir()
        >>> prune_kept(d); sorted(p.name for p in d.iterdir())
        ['log-worker-0.txt', 'spec.json']
        >>> shutil.rmtree(d)
    """
    for pattern in CODE_FILES:
        for path in Path(folder).glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()

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

# The holder: creates the namespace, brings lo up, says READY, then waits for its stdin to close.
_HOLDER = r"""
import ctypes, fcntl, os, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid, parent = os.getuid(), os.getgid(), os.getppid()
if libc.unshare(0x10000000 | 0x40000000) != 0:
    print("FAILED unshare(CLONE_NEWUSER|CLONE_NEWNET):", os.strerror(ctypes.get_errno()), flush=True)
    sys.exit(2)
for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
    with open(f"/proc/self/{name}", "w") as fh:
        fh.write(text)
libc.prctl(1, 9)
if os.getppid() != parent:
    os._exit(3)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
s.close()
print("READY", flush=True)
sys.stdin.read()
"""


# -- small checks shared by LocalCluster and LocalDataService ----------------------------
def vizdist_root() -> str:
    """The folder that holds the ``vizdist`` package (what children need on ``PYTHONPATH``).

    Example:
        >>> (Path(vizdist_root()) / "vizdist" / "__init__.py").exists()
        True
    """
    return str(Path(__file__).resolve().parents[3])


def process_limit() -> int:
    """How many TensorFlow processes vizdist starts without being told to: 4 per core, at least 8.

    Example:
        >>> process_limit() >= 8
        True
    """
    return max(8, 4 * (os.cpu_count() or 1))


def check_count(name: str, value: Any, *, minimum: int, limit: int | None = None, owner: str = "") -> int:
    """``value`` as an int >= ``minimum`` (``bool`` is refused), at most ``limit`` processes.

    Example:
        >>> check_count("workers", 2, minimum=1)
        2
        >>> check_count("workers", True, minimum=1)
        Traceback (most recent call last):
        ...
        TypeError: workers must be an int; got True (a bool).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "a bool" if isinstance(value, bool) else type(value).__name__
        raise TypeError(f"{name} must be an int; got {value!r} ({kind}).")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}.")
    if limit is not None and value > limit:
        cores = os.cpu_count() or 1
        raise ValueError(
            f"{owner}{name}={value} would start {value} TensorFlow processes on a machine with {cores} CPU "
            f"core(s); vizdist refuses more than {limit} unless told (max_workers={limit} is the default, "
            f"4 per core, at least 8). Pass max_workers={value} to start them anyway."
        )
    return value


def check_seconds(name: str, value: Any) -> float:
    """``value`` as a positive, finite number of seconds (``bool`` and strings are refused).

    Example:
        >>> check_seconds("timeout", 60)
        60.0
        >>> check_seconds("timeout", "60")
        Traceback (most recent call last):
        ...
        TypeError: timeout must be a number of seconds (int or float); got '60' (str).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds (int or float); got {value!r} "
                        f"({type(value).__name__}).")
    if not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive, finite number of seconds; got {value!r}.")
    return float(value)


def free_ports(n: int, *, host: str = "127.0.0.1") -> list[int]:
    """Return ``n`` distinct TCP ports that are free on ``host`` right now.

    The sockets are bound together (so the ports differ) and closed before
    returning; a port can still be taken by someone else in between, in
    which case the servers fail to start and say so.

    Example:
        >>> ports = free_ports(2)
        >>> len(set(ports)) == 2
        True
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether binding ``host:port`` fails right now.

    Example:
        >>> port_in_use(free_ports(1)[0])
        False
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


# -- in a child ----------------------------------------------------------------------------
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


# -- folders that must go if this process dies --------------------------------------------------
# The janitor: reads "+ PATH" (watch) / "- PATH" (forget) / "q" (quit) lines on stdin. When this process
# dies (stdin closes, or its parent changes), it removes every watched folder that holds no KEEP file,
# retrying for up to 30 s while the keepers end the processes that may still write there; from a kept
# folder it removes the code (CODE_FILES: the pickled callable, dataset graphs) and temporary files.
_JANITOR = r"""
import glob, os, select, shutil, sys, time
parent, keep, code = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
folders, buf = set(), b""
while True:
    orphaned = os.getppid() != parent  # then read only what was written before it died
    if not select.select([0], [], [], 0 if orphaned else 0.25)[0]:
        if orphaned:
            break
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        break
    *lines, buf = (buf + chunk).split(b"\n")
    for line in lines:
        if line == b"q":
            sys.exit(0)
        path = os.fsdecode(line[2:])
        folders.add(path) if line[:1] == b"+" else folders.discard(path)
end = time.monotonic() + 30
while folders and time.monotonic() < end:
    for f in sorted(folders):
        if os.path.lexists(os.path.join(f, keep)) or not os.path.lexists(f):
            for g in (p for pattern in code for p in glob.glob(os.path.join(glob.escape(f), pattern))):
                shutil.rmtree(g, ignore_errors=True) if os.path.isdir(g) and not os.path.islink(g) else os.unlink(g)
            folders.discard(f)
        else:
            shutil.rmtree(f, ignore_errors=True)
    time.sleep(0.1)
"""


class FolderJanitor:
    """A small process that removes the folders it watches if this process dies without removing them.

    A process killed with SIGKILL (or SIGTERM, whose default action kills it too) runs no clean-up;
    the janitor notices (its stdin closes, its parent changes) and removes every watched folder but
    those holding :data:`KEEP_FILE` (their logs were named in an error; from those it removes
    :data:`CODE_FILES`, as :func:`prune_kept` does). It runs in a session of its
    own, so a Ctrl-C or a signal sent to this process's group does not stop it first.
    :meth:`close` ends it without removing anything.

    Example:
        >>> janitor = FolderJanitor()
        >>> folder = temp_folder("vizdist-doc-")
        >>> janitor.watch(folder)
        >>> janitor.forget(folder); folder.rmdir(); janitor.close()
    """

    def __init__(self) -> None:
        self._popen = subprocess.Popen(
            [sys.executable, "-P", "-c", _JANITOR, str(os.getpid()), KEEP_FILE, *CODE_FILES], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")

    def _send(self, line: bytes) -> None:
        with contextlib.suppress(OSError, ValueError):  # gone already: close() or a dead janitor
            self._popen.stdin.write(line + b"\n")  # type: ignore[union-attr]  # made with stdin=PIPE: never None
            self._popen.stdin.flush()  # type: ignore[union-attr]  # made with stdin=PIPE: never None

    def watch(self, folder: str | os.PathLike[str]) -> None:
        """Remove ``folder`` if this process dies before :meth:`forget` or :meth:`close`."""
        self._send(b"+ " + os.fsencode(folder))

    def forget(self, folder: str | os.PathLike[str]) -> None:
        """Stop watching ``folder`` (this process removed it, or keeps it on purpose)."""
        self._send(b"- " + os.fsencode(folder))

    def close(self) -> None:
        """End the janitor (bounded); it removes nothing."""
        self._send(b"q")
        with contextlib.suppress(OSError, ValueError):
            self._popen.stdin.close()  # type: ignore[union-attr]  # made with stdin=PIPE: never None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=5)
        _stop_popen(self._popen)


# -- the private network namespace ----------------------------------------------------------
class Namespace:
    """A private user + network namespace holding only ``lo``, kept alive by a holder process.

    Start it with :meth:`start`; it returns ``None`` and a reason where the OS
    cannot make one (not Linux, user namespaces disabled). Children spawned
    by a :class:`Supervisor` given this namespace join it.

    Example:
        >>> ns, why = Namespace.start()
        >>> ns is not None or bool(why)
        True
        >>> if ns is not None:
        ...     ns.close()
    """

    def __init__(self, popen: subprocess.Popen[str]) -> None:
        self._popen = popen
        self.pid = popen.pid

    @classmethod
    def start(cls, *, timeout: float = 15.0) -> tuple[Namespace | None, str]:
        """A new namespace, or ``(None, reason)`` where this machine cannot make one."""
        if sys.platform != "linux":
            return None, f"network namespaces are a Linux feature (this is {sys.platform})"
        popen = subprocess.Popen(
            [sys.executable, "-P", "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd="/",
        )
        line = _read_line(popen, timeout)
        if line.strip() == "READY":
            return cls(popen), ""
        _stop_popen(popen)
        rest = popen.stdout.read() if popen.stdout else ""  # type: ignore[union-attr]  # the Popen was made with PIPE: never None
        why = (line + rest).strip()[-400:] or f"the namespace holder exited with {popen.returncode}"
        return None, "; ".join([why, *userns_switches()])

    def close(self) -> None:
        """Stop the holder (the namespace goes away with its last process)."""
        with contextlib.suppress(OSError, ValueError):
            self._popen.stdin.close()  # type: ignore[union-attr]  # the Popen was made with PIPE: never None
        _stop_popen(self._popen)
        with contextlib.suppress(OSError, ValueError):
            self._popen.stdout.close()  # type: ignore[union-attr]  # the Popen was made with PIPE: never None

    def __repr__(self) -> str:
        return f"Namespace(holder pid {self.pid})"


# sysctl files that turn unprivileged user namespaces off, and the value that does it
_USERNS_OFF = (("user/max_user_namespaces", "0"), ("kernel/unprivileged_userns_clone", "0"),
               ("kernel/apparmor_restrict_unprivileged_userns", "1"))


def userns_switches(root: str = "/proc/sys") -> list[str]:
    """Which of this machine's sysctl settings turn user namespaces off (``[]`` when none does).

    Example:
        >>> all(s.endswith("(turns user namespaces off)") for s in userns_switches())
        True
    """
    off = []
    for name, value in _USERNS_OFF:
        with contextlib.suppress(OSError):
            if Path(root, name).read_text(encoding="ascii").strip() == value:
                off.append(f"{name.replace('/', '.')} = {value} (turns user namespaces off)")
    return off


def _read_line(popen: subprocess.Popen[str], timeout: float) -> str:
    """First line of ``popen``'s stdout, waiting at most ``timeout`` seconds."""
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(popen.stdout.readline()), daemon=True)  # type: ignore[union-attr]  # the Popen was made with PIPE: never None
    t.start()
    t.join(timeout)
    return out[0] if out else ""


def _stop_popen(popen: subprocess.Popen[Any]) -> None:
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            popen.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=5)


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


def temp_folder(prefix: str) -> Path:
    """A new private temporary folder (mode 0700).

    Example:
        >>> d = temp_folder("vizdist-doc-")
        >>> oct(d.stat().st_mode & 0o777)
        '0o700'
        >>> d.rmdir()
    """
    return Path(tempfile.mkdtemp(prefix=prefix))
