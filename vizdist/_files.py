"""The one way vizdist writes a file or a folder, and the one way it opens a file it did not write.

:func:`write_file` writes through a fresh, unpredictably named temporary file created exclusively
beside the target (a planted file or symbolic link there is never followed), then renames it over
the target and removes the temporary file on any failure. Readers see the old file or the new one,
never half of one. A symbolic link *at* the target is refused (:class:`LinkedTarget`): vizdist makes
none, so one there was planted or made by someone else, and it neither writes through it nor replaces
it. ``replace=False`` never replaces an existing file (``FileExistsError``), atomically too.

:func:`write_folder` does the same for a folder (a Parquet trace): it fills a fresh sibling folder,
then swaps it with the old one in one step (``renameat2(RENAME_EXCHANGE)`` on Linux), so the old
folder or the new one is there whole, never a mix; only a folder ``replaceable`` accepts is replaced.

:func:`open_regular` opens without blocking and, unless told to follow them, without following
symbolic links, then checks the *opened* file: a FIFO, device or folder is refused instead of
hanging the reader (checking a path first and opening it after can be raced).

Imports only the standard library (it runs in every child process vizdist starts).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["LinkedTarget", "NotRegularFile", "open_regular", "write_file", "write_folder"]


class LinkedTarget(OSError):
    """The path vizdist was asked to write is a symbolic link: refused (it neither writes through it nor replaces it)."""


def refuse_link(path: str | os.PathLike[str]) -> None:
    """:class:`LinkedTarget` when ``path`` itself is a symbolic link (read with ``lstat``, never followed).

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> os.symlink("/etc", os.path.join(d, "out.parquet"))
        >>> refuse_link(os.path.join(d, "out.parquet"))
        Traceback (most recent call last):
        ...
        vizdist._files.LinkedTarget: '.../out.parquet' is a symbolic link; vizdist does not write through, or replace, a link it did not make. Remove the link, or write to the path it points to.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise LinkedTarget(f"{str(path)!r} is a symbolic link; vizdist does not write through, or replace, a link it "
                           "did not make. Remove the link, or write to the path it points to.")


def write_file(path: str | os.PathLike[str], content: bytes | str | Callable[[BinaryIO], Any], *,
               replace: bool = True) -> Path:
    """Write ``content`` (bytes, UTF-8 text, or a function writing to a binary file) to ``path`` atomically.

    A symbolic link at ``path`` is refused (:class:`LinkedTarget`). ``replace=False`` refuses an
    existing ``path`` too (``FileExistsError``), checked atomically as the file appears (a hard link of
    the finished temporary file, which fails if the name exists).

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> write_file(os.path.join(d, "out.txt"), "new").read_text(), sorted(os.listdir(d))
        ('new', ['out.txt'])
        >>> write_file(os.path.join(d, "out.txt"), "again", replace=False)
        Traceback (most recent call last):
        ...
        FileExistsError: [Errno 17] File exists: '.../out.txt'
    """
    path = Path(path)
    refuse_link(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), 0o666 & ~_umask())  # as open() would create it
            if callable(content):
                content(fh)
            else:
                fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        if replace:
            os.replace(tmp, path)  # a link planted since the check is replaced, never written through
        else:
            _link_new(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _link_new(tmp: str, path: Path) -> None:
    """Give the finished file ``tmp`` the name ``path`` unless that name exists (``FileExistsError``)."""
    try:
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
    except OSError as exc:  # a file system without hard links: create the name exclusively, then copy
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
            raise
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        out = os.open(path, flags, 0o666)
        with os.fdopen(out, "wb") as dst, open(tmp, "rb") as src:
            shutil.copyfileobj(src, dst)
    os.unlink(tmp)


def write_folder(path: str | os.PathLike[str], fill: Callable[[Path], Any], *,
                 replaceable: Callable[[Path], str] = lambda _: "") -> Path:
    """Make the folder ``path`` by ``fill(folder)`` on a fresh sibling folder, then swap it in whole.

    A link at ``path`` is refused (:class:`LinkedTarget`), so is a file (``FileExistsError``) and an
    existing folder for which ``replaceable(path)`` gives a reason (``FileExistsError`` with it). The
    old folder is swapped out in one step where the OS can (Linux ``renameat2(RENAME_EXCHANGE)``),
    else moved aside and back on failure, then removed; if ``fill`` raises, the old folder is untouched
    and the new one removed.

    Example:
        >>> import tempfile, os
        >>> d = os.path.join(tempfile.mkdtemp(), "t.parquet")
        >>> for text in ("old", "new"):
        ...     _ = write_folder(d, lambda f: (f / "meta.json").write_text(text))
        >>> os.listdir(d), open(os.path.join(d, "meta.json")).read()
        (['meta.json'], 'new')
    """
    path = Path(path)
    refuse_link(path)
    old = path.exists()
    if old and not path.is_dir():
        raise FileExistsError(errno.EEXIST, f"{str(path)!r} exists and is not a folder; choose another path", str(path))
    why = replaceable(path) if old else ""
    if why:
        raise FileExistsError(errno.EEXIST, why, str(path))
    new = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        os.chmod(new, 0o777 & ~_umask())  # as mkdir() would make it
        fill(new)
        if not old:
            os.rename(new, path)  # fails (and changes nothing) if a non-empty folder appeared there since
            return path
        _swap(new, path)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    _remove(new)  # after the swap: the old folder
    return path


AT_FDCWD, RENAME_EXCHANGE = -100, 2


def _swap(new: Path, path: Path) -> None:
    """Put ``new`` at ``path`` and the old ``path`` at ``new``: in one step, or by two renames undone on failure."""
    libc = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        if renameat2(AT_FDCWD, os.fsencode(new), AT_FDCWD, os.fsencode(path), RENAME_EXCHANGE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(path))
    aside = path.with_name(f".{path.name}.{secrets.token_hex(8)}.old")
    os.rename(path, aside)
    try:
        os.rename(new, path)
    except BaseException:
        os.rename(aside, path)
        raise
    os.rename(aside, new)


def _remove(path: Path) -> None:
    """Remove what is at ``path`` (a folder's tree, without following links in it; a link or file itself)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


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
