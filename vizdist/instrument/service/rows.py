"""Rows of a service trace: one ``elements`` row per delivered source element, one ``batches`` row
per (consumer, step, replica), one ``events`` row per ``next()`` of a consumer."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from vizdist.instrument.core.rows import Recorder
from vizdist.trace import Trace

#: What a consumer hands over per replica: (replica, tags, worker ids, first value tensor, device).
Part = tuple[int, Any, Any, Any, str]


class Rows:
    """Accumulates the rows of one service trace (elements and batches through the one
    :class:`~vizdist.instrument.core.rows.Recorder`; one ``consume`` event per step here).

    Example:
        >>> import numpy as np
        >>> rows = Rows(lambda tags: {"source_id": tags, "source": tags * 0,
        ...                           "source_file": np.array([""] * len(tags)), "source_line": tags * 0})
        >>> rows.add(0, 0, 10, 20, [(-1, np.array([3, 4]), np.array([1, 1]), None, "")])
        2
        >>> t = rows.trace({"kind": "data_service"})
        >>> t.elements[["source_id", "worker", "consumer"]].values.tolist(), t.batches["worker"].tolist()
        ([[3, 1, 0], [4, 1, 0]], [1])
    """

    def __init__(self, decode: Callable[[Any], dict[str, np.ndarray]]) -> None:
        self.recorder = Recorder(worker=-1, decode=decode)
        self.decode = decode
        self.events: list[dict[str, Any]] = []
        self.received = 0

    def _part(self, c: int, n: int, end: int, part: Part) -> tuple[list[int], int]:
        replica, tags, wids, value, device = part
        tags = np.asarray(tags, dtype=np.int64).reshape(-1)
        wids = np.broadcast_to(np.asarray(wids, dtype=np.int64).reshape(-1), tags.shape) if tags.size else \
            np.zeros(0, dtype=np.int64)
        uniform = bool(wids.size) and bool((wids == wids[0]).all())
        w_batch = int(wids[0]) if uniform else -1
        self.recorder.add(
            n, replica, tags=tags, device=device, worker=w_batch if uniform or not wids.size else wids.copy(),
            shape=json.dumps(list(getattr(value, "shape", []))),
            dtype=str(getattr(getattr(value, "dtype", None), "name", "")),
            elements={"consumer": c, "order": np.arange(self.received, self.received + tags.size), "t_ns": end},
            batch={"consumer": c})
        self.received += int(tags.size)
        ids = self.decode(tags)["source_id"].tolist() if tags.size else []
        return [int(i) for i in ids], w_batch

    def add(self, c: int, n: int, start: int, end: int, parts: list[Part]) -> int:
        """Record step ``n`` of consumer ``c`` (received between ``start`` and ``end`` ns); ids added."""
        ids: list[int] = []
        w_batch = -1
        for part in parts:
            got, w_batch = self._part(c, n, end, part)
            ids.extend(got)
        self.events.append(dict(
            lane=f"consumer {c}", stage="consume", step=n, worker=w_batch, replica=-1,
            t_start_ns=start, t_end_ns=end, elements=json.dumps(ids)))
        return len(ids)

    def add_stops(self, stopped: list[dict[str, Any]]) -> None:
        """One ``worker-stopped`` event per worker vizdist stopped."""
        for s in stopped:
            self.events.append(dict(lane=f"worker {s['worker']}", stage="worker-stopped", step=-1,
                                    worker=s["worker"], t_start_ns=s["t_ns"], t_end_ns=s["t_ns"]))

    def trace(self, meta: dict[str, Any]) -> Trace:
        """The trace of what was recorded, with ``meta``."""
        elements, batches = self.recorder.tables()
        return Trace(elements=elements, batches=batches, events=Trace.from_records(events=self.events).events,
                     meta=meta)
