"""Folders vizdist's processes write go when this process dies, and what a folder kept for its logs keeps.

A :class:`FolderJanitor` is a small process in a session of its own that removes the folders it watches if this
process dies without removing them (SIGKILL included: its stdin closes, its parent changes); a folder named in an
error keeps its logs (:data:`KEEP_FILE`) but loses the code sent to the children (:data:`CODE_FILES`,
:func:`prune_kept`). :func:`temp_folder` makes a private folder. Importable from
:mod:`vizdist.instrument.processes.supervisor` too.

Example:
    >>> d = temp_folder("vizdist-doc-")
    >>> _ = (d / "job.pkl").write_bytes(b"x"); _ = (d / KEEP_FILE).write_bytes(b"")
    >>> prune_kept(d); sorted(p.name for p in d.iterdir())
    ['.vizdist-keep']
    >>> shutil.rmtree(d)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from vizdist.instrument.processes import jobfiles

__all__ = ["CODE_FILES", "KEEP_FILE", "FolderJanitor", "prune_kept", "stop_popen", "temp_folder"]

#: A file in a folder kept for its logs: the janitor and :meth:`Supervisor.close` leave that folder in place.
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
        stop_popen(self._popen)


def stop_popen(popen: subprocess.Popen[Any]) -> None:
    """Stop a helper process vizdist started (the janitor, the namespace holder): kill it, wait at most 5 s."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            popen.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=5)


def temp_folder(prefix: str) -> Path:
    """A new private temporary folder (mode 0700).

    Example:
        >>> d = temp_folder("vizdist-doc-")
        >>> oct(d.stat().st_mode & 0o777)
        '0o700'
        >>> d.rmdir()
    """
    return Path(tempfile.mkdtemp(prefix=prefix))
