"""The newest steps of a ``record()`` block as the live explorer reads them: columns, not a trace.

:meth:`Recording.recent_steps <vizdist.instrument.run.user_run.Recording.recent_steps>` and
:meth:`~vizdist.instrument.run.user_run.Recording.recent` gather the newest batches of each dataset (and of
the part just written, with ``path=``) as one array per column: one value per batch, and per element for
:data:`ELEMENT_COLUMNS` (the batches' elements one after another). This module turns those columns into
what the live view takes (:func:`per_batch`) or a trace (:func:`as_trace`), and a part's newest steps into
columns (:func:`trace_columns`), without pandas on the common path.

Example:
    >>> cols = {"step": np.array([3, 3]), "replica": np.array([0, 1]), "device": np.array(["CPU:0", "CPU:1"]),
    ...         "n_elements": np.array([2, 0]), "dataset": np.array([0, 0]), "phase": np.array(["train"] * 2),
    ...         "epoch": np.array([0, 0]), "epoch_step": np.array([3, 3]), "source_id": np.array([6, 7]),
    ...         "source": np.array([0, 0]), "source_file": np.array(["", ""], dtype=object),
    ...         "source_line": np.array([-1, -1])}
    >>> per_batch(cols)["ids"], trace_columns(as_trace(cols, strategy="X"), 2)["source_id"].tolist()
    ([[6, 7], []], [6, 7])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from vizdist.trace import Trace

__all__ = ["BATCH_COLUMNS", "ELEMENT_COLUMNS", "as_trace", "per_batch", "trace_columns"]

#: Columns read once per element (the rest once per batch).
ELEMENT_COLUMNS = ("source_id", "source", "source_file", "source_line")
#: Columns read once per batch.
BATCH_COLUMNS = ("step", "replica", "device", "n_elements", "dataset", "phase", "epoch", "epoch_step")


def per_batch(cols: dict[str, np.ndarray]) -> dict[str, Any]:
    """Plain lists: one value per batch, and each batch's ``ids``, ``sources``, ``files``, ``lines``."""
    n = cols["n_elements"].tolist()
    bounds = np.cumsum(cols["n_elements"]).tolist()
    out: dict[str, Any] = {k: cols[k].tolist() for k in BATCH_COLUMNS if k != "dataset"}
    for name, k in (("ids", "source_id"), ("sources", "source"), ("files", "source_file"), ("lines", "source_line")):
        v = cols[k].tolist()
        out[name] = [v[hi - m:hi] for m, hi in zip(n, bounds, strict=True)]
    return out


def as_trace(cols: dict[str, np.ndarray], *, strategy: str) -> Trace:
    """The columns as a :class:`~vizdist.trace.Trace` (``api="record"``)."""
    n = cols["n_elements"]
    rows = np.repeat(np.arange(len(n)), n)
    b = pd.DataFrame({k: cols[k] for k in BATCH_COLUMNS})
    b.insert(4, "empty", n == 0)
    e = pd.DataFrame({"step": cols["step"][rows], "replica": cols["replica"][rows],
                      "device": cols["device"][rows], **{k: cols[k] for k in ELEMENT_COLUMNS},
                      "position": np.arange(len(rows)) - (np.cumsum(n) - n)[rows],
                      **{k: cols[k][rows] for k in ("dataset", "phase", "epoch", "epoch_step")}})
    meta = {"kind": "distribution", "api": "record", "strategy": strategy}
    return Trace(elements=e, batches=b, meta=meta)


def trace_columns(t: Trace, after: int) -> dict[str, np.ndarray]:
    """The batches of ``t`` (a part's newest steps) after step ``after`` as columns, each batch's
    ``n_elements`` its element rows."""
    b = t.batches[t.batches["step"] > after].sort_values(["step", "replica"], kind="stable")
    e = t.elements[t.elements["step"] > after].sort_values(["step", "replica", "position"], kind="stable")
    by_batch = e.groupby(["step", "replica"], sort=False)
    keys = list(zip(b["step"].tolist(), b["replica"].tolist(), strict=True))
    got = {k: [v.get(key, []) for key in keys]
           for k, v in ((k, by_batch[k].agg(list).to_dict()) for k in ELEMENT_COLUMNS)}
    return {"step": b["step"].to_numpy(np.int64), "replica": b["replica"].to_numpy(np.int64),
            "device": np.asarray(b["device"].astype(str), dtype=object),
            "n_elements": np.array([len(g) for g in got["source_id"]], dtype=np.int64),
            "dataset": b["dataset"].to_numpy(np.int64), "phase": np.asarray(b["phase"].astype(str), dtype=object),
            "epoch": b["epoch"].to_numpy(np.int64), "epoch_step": b["epoch_step"].to_numpy(np.int64),
            **{k: np.array([i for g in got[k] for i in g], dtype=object if k == "source_file" else np.int64)
               for k in ELEMENT_COLUMNS}}
