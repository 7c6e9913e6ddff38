"""``vizdist.record(path=FOLDER)``: the recording written to disk as it runs, in parts, so memory stays bounded.

:class:`PartStream` decides when a part is due (every :data:`PART_ELEMENTS` elements by default, and at
least every :data:`PART_SECONDS` seconds while steps come in) and writes it with
:func:`vizdist._parts.write_part` into ``FOLDER`` on any file system: a local folder (failing closed, see
:mod:`vizdist._files`) or a URL on one of TensorFlow's (``tf.io.gfile``: ``gs://``, ``hdfs://``,
``ram://``, ...). The part format is the one :mod:`vizdist._parts` reads back; each part is named for the
task that wrote it (``TF_CONFIG``, or the strategy's cluster resolver; ``worker-0`` in a single process),
so every worker of a cluster can stream into one shared folder.

Example:
    >>> with vizdist.record(path="/shared/run1") as rec:      # doctest: +SKIP
    ...     model.fit(ds, epochs=100)
    >>> vizdist.load_trace("/shared/run1")                     # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from vizdist._parts import join_parts, load_recording, new_run, part_name, stamp, write_part
from vizdist._storage import for_path
from vizdist.errors import TracingError
from vizdist.trace import Trace

__all__ = ["PART_ELEMENTS", "PART_SECONDS", "PartStream", "task_of"]

#: Elements per part (a part of 65,536 elements is about 0.5 MB of Parquet).
PART_ELEMENTS = 1 << 16
#: A part is written at least this often while steps come in, so a reader (or a crash) is at most this far behind.
PART_SECONDS = 10.0


def task_of(strategy: Any) -> tuple[str, int]:
    """``(task type, index)`` of this process: the strategy's cluster resolver, else ``TF_CONFIG``, else
    ``("worker", 0)`` (a single process)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    ttype = getattr(resolver, "task_type", None)
    if ttype in ("chief", "worker", "evaluator", "ps"):
        return str(ttype), int(getattr(resolver, "task_id", 0) or 0)
    try:
        task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
        if task.get("type") in ("chief", "worker", "evaluator", "ps"):
            return str(task["type"]), int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError):
        pass
    return "worker", 0


class PartStream:
    """Writes one ``record()`` block's parts into ``path`` (see the module docs)."""

    def __init__(self, path: Any, *, part_elements: int = PART_ELEMENTS) -> None:
        if isinstance(part_elements, bool) or not isinstance(part_elements, int) or part_elements < 1:
            raise ValueError(f"part_elements must be a whole number of at least 1; got {part_elements!r}.")
        from vizdist._optional import require

        require("pyarrow.parquet", pip="pyarrow", conda="pyarrow")  # parts are Parquet: say so before the run
        self.path = os.fspath(path)
        self.fs, self.folder = for_path(self.path)
        self.fs.makedirs(self.folder)
        self.part_elements = part_elements
        self.run = new_run()
        self.parts = 0
        self.task: tuple[str, int] | None = None
        self._since = time.monotonic()

    def due(self, buffered: int) -> bool:
        """Whether the steps held in memory (``buffered`` elements) should go into a part now."""
        return buffered >= self.part_elements or (buffered > 0 and time.monotonic() - self._since >= PART_SECONDS)

    def write(self, trace: Trace, *, strategy: Any, first_step: int, steps: int, ended: bool,
              error: str | None = None) -> None:
        """Write ``trace`` (steps ``first_step`` to ``steps - 1`` of the block) as the next part."""
        if self.task is None:
            self.task = task_of(strategy)
        ttype, index = self.task
        name = part_name(ttype, index, self.run, self.parts)
        part = stamp(trace, run=self.run, part=self.parts, task=f"{ttype}-{index}", first_step=first_step,
                     steps=steps - first_step, ended=ended, error=error)
        try:
            write_part(self.fs, self.folder, name, part)
        except FileExistsError:
            raise TracingError(
                f"vizdist.record(path={self.path!r}): {name!r} exists already in the folder. A part is never written "
                "into or over something already there (a symbolic link planted there, or another recorder's part): "
                "record into a folder only this run writes.") from None
        self.parts += 1
        self._since = time.monotonic()

    def load(self, *, parts: int | None = None, memory: Trace | None = None) -> Trace:
        """This block's trace: its first ``parts`` parts (all written so far by default) and the steps
        still in ``memory`` (a snapshot inside the block)."""
        n = self.parts if parts is None else parts
        traces = [load_recording(self.path, run=self.run, parts=n)] if n else []
        if memory is not None:
            traces.append(memory)
        if not traces:
            raise TracingError("the block has recorded nothing yet.")
        return traces[0] if len(traces) == 1 else join_parts(traces)
