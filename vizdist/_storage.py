"""Where a recording's files live: a local folder, or a folder on one of TensorFlow's file systems (a URL).

``vizdist.record(path=...)`` writes its parts, and ``vizdist.load_trace`` reads them, through a
:class:`FileSystem` picked by the path (:func:`for_path`):

* a local path (or ``file://``): the standard library, failing closed (:mod:`vizdist._files`): every file
  is written beside its name and renamed into place, and read only if it is a regular file, never
  through a symbolic link;
* a URL (``gs://``, ``hdfs://``, TF's ``ram://``, ...): the file system registered for its scheme with
  :func:`register_scheme`. ``vizdist.instrument`` (the part of vizdist that imports TensorFlow) registers
  TensorFlow's ``tf.io.gfile`` for every scheme when it loads, so a folder on a cluster's shared storage
  works wherever the cluster's TensorFlow reads it. This module imports no TensorFlow: in a process
  without it, a URL is a clear error naming what to do.

Example:
    >>> import tempfile, os
    >>> fs, folder = for_path(tempfile.mkdtemp())
    >>> fs.write(fs.join(folder, "a.txt"), b"hi"); fs.read(fs.join(folder, "a.txt"), limit=10)
    b'hi'
    >>> fs.entries(folder)
    [('a.txt', 'file')]

In a process where ``vizdist.instrument`` is not loaded, ``for_path("gs://bucket/run")`` raises
:class:`NoFileSystem`: "'gs://bucket/run' is on the gs:// file system, which vizdist reads and writes
through TensorFlow's tf.io.gfile (...). Run `import vizdist.instrument` first (it needs TensorFlow), or
copy the folder to a local disk and pass its local path."
"""

from __future__ import annotations

import os
import re
import stat
from typing import Protocol

from vizdist._files import NotRegularFile, open_regular, write_file

__all__ = ["LOCAL", "FileSystem", "NoFileSystem", "for_path", "register_scheme", "scheme_of"]

_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


class NoFileSystem(ValueError):
    """A URL whose file system is not available in this process (TensorFlow's side of vizdist not loaded)."""


class FileSystem(Protocol):
    """What a recording needs of a file system. Paths are strings; folders are joined with :meth:`join`."""

    def join(self, folder: str, name: str) -> str: ...

    def entries(self, folder: str) -> list[tuple[str, str]]:
        """``(name, kind)`` of each entry of ``folder``, by name; kind is ``file``, ``dir``, ``link`` or ``other``."""
        ...

    def read(self, path: str, *, limit: int) -> bytes:
        """The bytes of the regular file ``path``; at most ``limit + 1`` are read (the caller checks the bound)."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` whole: beside it first, then renamed into place."""
        ...

    def makedirs(self, folder: str) -> None: ...

    def mkdir_new(self, folder: str) -> None:
        """Create the folder ``folder``; ``FileExistsError`` if anything is there (a link is never followed)."""
        ...

    def isdir(self, path: str) -> bool: ...

    def exists(self, path: str) -> bool: ...


class _Local:
    """The local disk, failing closed: atomic writes, and reads of regular files only (no link followed)."""

    def join(self, folder: str, name: str) -> str:
        return os.path.join(folder, name)

    def entries(self, folder: str) -> list[tuple[str, str]]:
        out = []
        for name in sorted(os.listdir(folder)):
            mode = os.lstat(os.path.join(folder, name)).st_mode  # a link is reported as a link, never followed
            kind = ("link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode)
                    else "file" if stat.S_ISREG(mode) else "other")
            out.append((name, kind))
        return out

    def read(self, path: str, *, limit: int) -> bytes:
        try:
            with open_regular(path, follow=False) as fh:
                return fh.read(limit + 1)
        except NotRegularFile as exc:
            raise NotRegularFile(f"{exc}: a recording's files are regular files") from None

    def write(self, path: str, data: bytes) -> None:
        write_file(path, data)

    def makedirs(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)

    def mkdir_new(self, folder: str) -> None:
        os.mkdir(folder)  # fails on anything already there, a symbolic link included

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path) and not os.path.islink(path)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)


#: The local disk.
LOCAL: FileSystem = _Local()
_SCHEMES: dict[str, FileSystem] = {}


def register_scheme(scheme: str, fs: FileSystem) -> None:
    """Read and write URLs of ``scheme`` (``"gs"``; ``"*"``: every scheme without its own) through ``fs``."""
    _SCHEMES[scheme.lower()] = fs


def scheme_of(path: str | os.PathLike[str]) -> str:
    """The URL scheme of ``path`` (``""`` for a local path).

    Example:
        >>> scheme_of("gs://b/x"), scheme_of("/tmp/x"), scheme_of("file:///tmp/x")
        ('gs', '', 'file')
    """
    m = _URL.match(os.fspath(path)) if isinstance(os.fspath(path), str) else None
    return m[1].lower() if m else ""


def for_path(path: str | os.PathLike[str]) -> tuple[FileSystem, str]:
    """The file system holding ``path``, and the path as that file system names it."""
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"a recording's path is text; got {type(text).__name__}.")
    scheme = scheme_of(text)
    if not scheme:
        return LOCAL, text
    if scheme == "file":
        return LOCAL, text[len("file://"):]
    fs = _SCHEMES.get(scheme) or _SCHEMES.get("*")
    if fs is None:
        raise NoFileSystem(
            f"{text!r} is on the {scheme}:// file system, which vizdist reads and writes through TensorFlow's "
            "tf.io.gfile (as your cluster's TensorFlow does), and TensorFlow's side of vizdist is not loaded in this "
            "process. Run `import vizdist.instrument` first (it needs TensorFlow), or copy the folder to a local "
            "disk and pass its local path.")
    return fs, text
