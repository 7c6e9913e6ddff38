"""TensorFlow's file systems (``tf.io.gfile``) for a recording's folder given as a URL.

``vizdist.record(path="gs://bucket/run")`` writes its parts, and ``vizdist.load_trace`` reads them, where
the cluster's own TensorFlow reads and writes (``gs://``, ``hdfs://``, TF's in-memory ``ram://``, any file
system TensorFlow has registered). :mod:`vizdist.instrument` registers :data:`GFILE` for every URL scheme
when it loads (:func:`vizdist._storage.register_scheme`); a local path never comes here (the standard
library writes and reads it, failing closed).

Each file is written whole or not at all, as for a local folder: to a fresh, unpredictably named file
beside it (``.<name>.<random>.tmp``), then renamed into place with ``overwrite=False``. These file systems
have no symbolic links to follow.

Example:
    >>> fs = GFILE                                                  # doctest: +SKIP
    >>> fs.makedirs("ram://demo/run"); fs.write("ram://demo/run/a", b"x")  # doctest: +SKIP
    >>> fs.entries("ram://demo/run")                                # doctest: +SKIP
    [('a', 'file')]
"""

from __future__ import annotations

import secrets
from typing import Any

__all__ = ["GFILE", "GFileSystem"]


def _gfile() -> Any:
    import tensorflow as tf

    return tf.io.gfile


class GFileSystem:
    """:class:`vizdist._storage.FileSystem` over ``tf.io.gfile`` (TensorFlow imported on first use)."""

    def join(self, folder: str, name: str) -> str:
        return folder.rstrip("/") + "/" + name

    def entries(self, folder: str) -> list[tuple[str, str]]:
        g = _gfile()
        names = sorted(n.rstrip("/") for n in g.listdir(folder))
        return [(n, "dir" if g.isdir(self.join(folder, n)) else "file") for n in names]

    def read(self, path: str, *, limit: int) -> bytes:
        with _gfile().GFile(path, "rb") as fh:
            data: bytes = fh.read(limit + 1)
        return data

    def write(self, path: str, data: bytes) -> None:
        g = _gfile()
        folder, _, name = path.rpartition("/")
        tmp = f"{folder}/.{name}.{secrets.token_hex(8)}.tmp"
        try:
            with g.GFile(tmp, "wb") as fh:
                fh.write(data)
            g.rename(tmp, path, overwrite=False)
        except BaseException:
            if g.exists(tmp):
                g.remove(tmp)
            raise

    def makedirs(self, folder: str) -> None:
        _gfile().makedirs(folder)

    def mkdir_new(self, folder: str) -> None:
        g = _gfile()
        if g.exists(folder):
            raise FileExistsError(f"{folder!r} exists already")
        g.makedirs(folder)

    def isdir(self, path: str) -> bool:
        return bool(_gfile().isdir(path))

    def exists(self, path: str) -> bool:
        return bool(_gfile().exists(path))


#: TensorFlow's file systems.
GFILE = GFileSystem()
