"""The one way vizdist writes a file, and the one way it opens a file it did not write.

:func:`write_file` writes through a fresh, unpredictably named temporary file created exclusively
beside the target (a planted file or symbolic link there is never followed), then renames it over
the target (which replaces a link at the target rather than writing through it) and removes the
temporary file on any failure. Readers see the old file or the new one, never half of one.

:func:`open_regular` opens without blocking and, unless told to follow them, without following
symbolic links, then checks the *opened* file: a FIFO, device or folder is refused instead of
hanging the reader (checking a path first and opening it after can be raced).

Imports only the standard library (it runs in every child process vizdist starts).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["NotRegularFile", "open_regular", "write_file"]


def write_file(path: str | os.PathLike[str], content: bytes | str | Callable[[BinaryIO], Any]) -> Path:
    """Write ``content`` (bytes, UTF-8 text, or a function writing to a binary file) to ``path`` atomically.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> os.symlink(os.path.join(d, "victim"), os.path.join(d, "out.txt"))
        >>> write_file(os.path.join(d, "out.txt"), "new").read_text(), sorted(os.listdir(d))
        ('new', ['out.txt'])
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), 0o666 & ~_umask())  # as open() would create it
            if callable(content):
                content(fh)
            else:
                fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


class NotRegularFile(OSError):
    """The path is a symbolic link (where links are not followed), a FIFO, a device or a folder."""


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> BinaryIO:
    """Open ``path`` for reading in binary if it is a regular file; :class:`NotRegularFile` otherwise.

    ``follow=False`` refuses a symbolic link at ``path`` itself (``O_NOFOLLOW``). The open never
    blocks (``O_NONBLOCK``: a FIFO with no writer would otherwise wait forever), and the type is read
    from the opened file (``fstat``), so swapping the path between a check and the open changes nothing.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> os.mkfifo(os.path.join(d, "pipe"))
        >>> open_regular(os.path.join(d, "pipe"))
        Traceback (most recent call last):
        ...
        vizdist._files.NotRegularFile: ... is a FIFO, not a regular file
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise NotRegularFile(f"{str(path)!r} is a symbolic link, which is not followed here") from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"{str(path)!r} is {_kind(mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def _umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # elsewhere: set and restore (briefly process-wide)
    os.umask(mask)
    return mask
