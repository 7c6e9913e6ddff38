"""A private network for vizdist's processes: a user + network namespace holding only ``lo``.

A small holder process creates it (``unshare(CLONE_NEWUSER | CLONE_NEWNET)``, no root needed) and keeps it
alive; children a :class:`~vizdist.instrument.processes.supervisor.Supervisor` spawns join it. TensorFlow's
servers listen on ``[::]:port``; inside the namespace that reaches its own loopback only, so nothing else on the
network (or on this machine) can connect to them. Where the OS cannot make one, :meth:`Namespace.start` says
why (:func:`userns_switches`: the sysctl settings that turn user namespaces off). Importable from
:mod:`vizdist.instrument.processes.supervisor` too.

Example:
    >>> userns_switches(root="/nonexistent")
    []
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from pathlib import Path

from vizdist.instrument.processes.janitor import stop_popen

__all__ = ["Namespace", "userns_switches"]

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
        stop_popen(popen)
        rest = popen.stdout.read() if popen.stdout else ""  # type: ignore[union-attr]  # the Popen was made with PIPE: never None
        why = (line + rest).strip()[-400:] or f"the namespace holder exited with {popen.returncode}"
        return None, "; ".join([why, *userns_switches()])

    def close(self) -> None:
        """Stop the holder (the namespace goes away with its last process)."""
        with contextlib.suppress(OSError, ValueError):
            self._popen.stdin.close()  # type: ignore[union-attr]  # the Popen was made with PIPE: never None
        stop_popen(self._popen)
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
