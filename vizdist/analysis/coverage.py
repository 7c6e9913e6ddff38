"""How many times each source element was delivered in each epoch: ``trace.coverage()``.

One row per (input, phase, epoch, source element): ``delivered`` counts the times that element reached a
replica in that epoch, and an element of the dataset that never did gets a row with 0. The dataset's
elements (its *universe*) come from the trace's sources (:func:`universe`: a ``range`` or an indexed
source of known length); where they are not known (a generator, files), only the delivered elements have
rows, and ``trace.coverage().attrs["unknown_universe"]`` lists those sources.

``data`` numbers the inputs: the datasets a block distributed from the same pipeline (a ``fit`` run again
after a crash distributes the training dataset anew; a resumed run in another process builds it anew)
are one input, so their deliveries add up in the epoch they share. ``epoch`` is the trace's: for a
``vizdist.record()`` trace the user's epoch (Keras's epoch number, which a resumed ``fit`` keeps).

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(
    ...     elements=[dict(step=s, replica=0, source_id=i, position=0) for s, i in [(0, 0), (1, 1), (2, 0)]],
    ...     meta={"sources": [{"index": 0, "kind": "range", "id_is": "value", "start": 0, "stop": 3, "step": 1}]})
    >>> coverage(t)[["source_id", "delivered"]].values.tolist()
    [[0, 2], [1, 1], [2, 0]]
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from vizdist.trace import Trace

__all__ = ["COLUMNS", "coverage", "data_of", "universe"]

#: The columns of :func:`coverage`.
COLUMNS = ["data", "phase", "epoch", "source", "source_file", "source_id", "delivered"]


def universe(source: dict[str, Any]) -> set[int] | None:
    """The ids of every element of one source of a trace's pipeline (``meta["sources"]``), or None when the
    trace does not know them: a ``range``'s values, or the indexes of a source of known length.

    Example:
        >>> sorted(universe({"kind": "range", "id_is": "value", "start": 2, "stop": 8, "step": 3}))
        [2, 5]
        >>> universe({"kind": "generator", "id_is": "index", "cardinality": -2}) is None
        True
    """
    card = source.get("cardinality")
    if source.get("id_is") == "value" and source.get("kind") == "range":
        start, stop, step = source.get("start"), source.get("stop"), source.get("step")
        if isinstance(start, int) and isinstance(stop, int) and isinstance(step, int) and step:
            return set(range(start, stop, step))
    if source.get("id_is") == "index" and isinstance(card, int) and card >= 0:
        return set(range(card))
    return None


def _input_key(meta: dict[str, Any]) -> str:
    return json.dumps({"sources": meta.get("sources"), "pipeline": meta.get("pipeline")}, sort_keys=True,
                      default=str)


def data_of(trace: Trace) -> tuple[dict[int, int], list[dict[str, Any]]]:
    """``(dataset -> input number, each input's meta)``: datasets with the same sources and pipeline are one
    input (see the module docs). A trace without ``meta["datasets"]`` is one input (its own meta)."""
    datasets = trace.meta.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        return {}, [dict(trace.meta)]
    keys: dict[str, int] = {}
    inputs: list[dict[str, Any]] = []
    out: dict[int, int] = {}
    for i, d in enumerate(datasets):
        key = _input_key(d if isinstance(d, dict) else {})
        if key not in keys:
            keys[key] = len(inputs)
            inputs.append(d if isinstance(d, dict) else {})
        out[i] = keys[key]
    return out, inputs


def _keyed(trace: Trace) -> pd.DataFrame:
    """The elements with the coverage key columns (``data``, ``phase``, ``epoch``)."""
    e = trace.elements
    mapping, _ = data_of(trace)
    data = (e["dataset"].map(mapping).fillna(0).astype(np.int64) if mapping and "dataset" in e.columns
            else pd.Series(0, index=e.index, dtype=np.int64))
    phase = e["phase"].astype(str) if "phase" in e.columns else pd.Series("", index=e.index)
    epoch = e["epoch"].astype(np.int64) if "epoch" in e.columns else pd.Series(0, index=e.index, dtype=np.int64)
    return pd.DataFrame({"data": data, "phase": phase, "epoch": epoch, "source": e["source"].astype(np.int64),
                         "source_file": e["source_file"].astype(str), "source_id": e["source_id"].astype(np.int64)})


def coverage(trace: Trace) -> pd.DataFrame:
    """For each (input, phase, epoch, source element): how many times it was delivered (see the module docs).

    Returns:
        A frame with :data:`COLUMNS`, sorted by input, phase, epoch, source and id; ``attrs["unknown_universe"]``
        lists ``[data, source]`` pairs whose never-delivered elements cannot be listed.
    """
    keyed = _keyed(trace)
    keys = COLUMNS[:-1]
    counts = keyed.groupby(keys, sort=False).size().rename("delivered").reset_index()
    _, inputs = data_of(trace)
    zeros, unknown = [], []
    for (data, phase, epoch), got in counts.groupby(["data", "phase", "epoch"], sort=False):
        for source in inputs[int(data)].get("sources") or []:
            ids = universe(source) if isinstance(source, dict) else None
            index = source.get("index", 0) if isinstance(source, dict) else 0
            if ids is None:
                if [int(data), index] not in unknown:
                    unknown.append([int(data), index])
                continue
            seen = set(got.loc[(got["source"] == index) & (got["source_file"] == ""), "source_id"].tolist())
            missing = np.fromiter(sorted(ids - seen), dtype=np.int64)
            if len(missing):
                zeros.append(pd.DataFrame({"data": data, "phase": phase, "epoch": epoch, "source": index,
                                           "source_file": "", "source_id": missing, "delivered": 0}))
    out = pd.concat([counts, *zeros], ignore_index=True) if zeros else counts
    out = out.astype({"data": np.int64, "epoch": np.int64, "source": np.int64, "source_id": np.int64,
                      "delivered": np.int64})
    out = out.sort_values(keys, kind="stable").reset_index(drop=True)[COLUMNS]
    out.attrs["unknown_universe"] = unknown
    return out
