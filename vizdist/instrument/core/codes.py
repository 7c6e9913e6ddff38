"""A tag's layout, and reading it back: the read side of the id carrier (:mod:`.tagging` writes tags).

A tag is one int64 per element, ``source << SOURCE_SHIFT | local`` (see :mod:`.tagging` for how each
source makes ``local``). A strategy distributes :func:`keyed` elements (``{"tag", "value"}``);
:func:`untag` takes them apart before the user's step; :func:`decode_tags` turns tags back into
source ids, files and lines, epochs and tf.data service workers with numpy, from the layout the
builder recorded in ``info["sources"]``; :func:`values_are_ids` says when the values themselves are
the ids (no tag needed).

Example:
    >>> SOURCE_SHIFT, LINE_BITS
    (56, 32)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

from vizdist.instrument.tfapi import datasets

__all__ = [
    "FILE_UNKNOWN",
    "FINGERPRINT_BUCKETS",
    "LINE_BITS",
    "LOCAL_MASK",
    "SOURCE_SHIFT",
    "const_value",
    "decode_tags",
    "keyed",
    "tensor_value",
    "untag",
    "values_are_ids",
]

SOURCE_SHIFT = 56


LOCAL_MASK = (1 << SOURCE_SHIFT) - 1


LINE_BITS = 32


FILE_UNKNOWN = (1 << (SOURCE_SHIFT - LINE_BITS)) - 1  # file index of a file not in the list


FINGERPRINT_BUCKETS = (1 << 63) - 1


def keyed(tagged: tf.data.Dataset) -> tf.data.Dataset:
    """The same tagged dataset, its elements nested as ``{"tag": tag, "value": value}`` instead of a pair.

    Nothing TF runs changes: no op is added (the dataset is TF's own ``_RestructuredDataset`` over
    the same graph), and TF flattens a dict in sorted key order, so the flat tensors are still
    ``tag, value...``. What changes is TF's Python per step: a distributed iterator repacks each
    replica's element from its flat tensors, and for a tuple TF's ``nest`` asks a runtime-checkable
    ``Protocol`` (twice per replica; about 6 us each on Python 3.11), which it skips for a dict.
    Over 4 replicas that is about 100 us less per step (``benchmarks/overhead.py --explain``).

    Example:
        >>> import tensorflow as tf                                                   # doctest: +SKIP
        >>> ds = keyed(tf.data.Dataset.range(2).map(lambda x: (x + 10, x)))            # doctest: +SKIP
        >>> [untag(e) for e in ds.as_numpy_iterator()]                                # doctest: +SKIP
        [(10, 0), (11, 1)]
    """
    tag_spec, value_spec = tagged.element_spec
    return datasets.restructured(tagged, {"tag": tag_spec, "value": value_spec})


def untag(element: Any) -> tuple[Any, Any]:
    """``(tag, value)`` of one element of a :func:`keyed` dataset.

    Example:
        >>> untag({"tag": 7, "value": "x"})
        (7, 'x')
    """
    return element["tag"], element["value"]


#: Transformations (by their label in ``info["pipeline"]``) that pass values through unchanged. Over
#: them the user's dataset itself is distributed (no copy), so its own state (a shuffle's reshuffle
#: sequence, a cache) is the one that runs.
_KEEP_VALUES = ("range(", "batch(", "rebatch(", "unbatch", "filter", "take_while", "take(", "skip(",
                "shard(", "prefetch(", "cache", "shuffle(")


def values_are_ids(dataset: tf.data.Dataset, info: dict[str, Any]) -> bool:
    """True when every value the pipeline yields is its own tag: no tag needs to ride beside it.

    That holds for one ``range`` source (ids are its values, source 0) followed only by
    transformations that keep values as they are (batch, filter, take, ...): the user's
    dataset can then be distributed as built, and each replica's values read as its tags, which
    saves TF carrying a second component through every step.

    Example:
        >>> import tensorflow as tf                                          # doctest: +SKIP
        >>> ds = tf.data.Dataset.range(10).filter(lambda x: x % 3 > 0).batch(4)  # doctest: +SKIP
        >>> values_are_ids(ds, tag_dataset(ds).info)                         # doctest: +SKIP
        True
    """
    sources = info.get("sources", [])
    spec = dataset.element_spec
    return (info.get("provenance") == "tagged" and not info.get("services") and len(sources) == 1
            and sources[0].get("id_is") == "value" and sources[0].get("index") == 0
            and isinstance(spec, tf.TensorSpec) and spec.dtype == tf.int64
            and all(op.startswith(_KEEP_VALUES) for op in info.get("pipeline", [])))


#: ``source_file`` of tags that name no file: its dtype made once (a refresh of the live view decodes a few tags).
_NO_FILE = pd.CategoricalDtype([""])


def decode_tags(tags: Any, info: dict[str, Any]) -> dict[str, Any]:
    """Turn tags back into ``source``, ``source_id``, ``source_file``, ``source_line`` and ``epoch``.

    Vectorized (numpy): no Python work per element. ``epoch`` is the repetition of the source
    element (0 without ``repeat``; see ``Source layout`` in the module docs). ``source_file`` is a
    ``pandas.Categorical`` (``""`` where the element is not a file's line); the rest are int64 arrays.

    Example:
        >>> info = {"sources": [{"index": 0, "kind": "range", "id_is": "value", "id_bits": 3,
        ...                      "epochs": [{"shift": 3, "bits": 1, "count": 2}]}]}
        >>> d = decode_tags(np.array([3, 4, 3 + 8]), info)
        >>> d["source_id"].tolist(), d["epoch"].tolist()
        ([3, 4, 3], [0, 0, 1])
    """
    tags = np.asarray(tags, dtype=np.int64).reshape(-1)
    source = tags >> SOURCE_SHIFT
    local = tags & LOCAL_MASK
    source_id = local.copy()
    epoch = np.zeros(tags.shape, dtype=np.int64)
    file_codes = np.zeros(tags.shape, dtype=np.int32)  # source_file as category codes; 0 is ""
    file_names: dict[str, int] = {"": 0}
    source_line = np.full(tags.shape, -1, dtype=np.int64)
    present = _present(source)
    worker = np.full(tags.shape, -1, dtype=np.int64) if info.get("services") else None
    for s in info.get("sources", []):
        if s["index"] not in present:
            continue
        mask = slice(None) if len(present) == 1 else source == s["index"]  # one source: no per-element mask
        loc = local[mask]
        bits = s.get("id_bits", SOURCE_SHIFT)
        ids = loc & ((1 << bits) - 1)
        source_id[mask] = ids
        scale = 1
        ep = np.zeros(loc.shape, np.int64)
        for f in s.get("epochs", []):
            ep += ((loc >> f["shift"]) & ((1 << f["bits"]) - 1)) * scale
            scale *= max(int(f.get("count") or 1), 1)
        epoch[mask] = ep
        sw = s.get("service_worker")
        if sw and worker is not None:
            worker[mask] = ((loc >> sw["shift"]) & ((1 << sw["bits"]) - 1)) - 1
        parts = s.get("parts")
        if parts:
            source_line[mask] = (loc >> parts["shift"]) & ((1 << parts["bits"]) - 1)
        if s.get("id_is") == "file_line":
            source_line[mask] = ids & ((1 << LINE_BITS) - 1)
            file_codes[mask] = _file_codes(s, ids >> LINE_BITS, file_names)
    source_file = (pd.Categorical.from_codes(file_codes, dtype=_NO_FILE) if len(file_names) == 1  # ~50x cheaper
                   else pd.Categorical.from_codes(file_codes, categories=list(file_names)))
    out = {"source": source, "source_id": source_id, "source_file": source_file, "source_line": source_line,
           "epoch": epoch}
    if worker is not None:
        out["service_worker"] = worker  # the tf.data service worker (-1: unknown), with a service read
    return out


def _present(source: np.ndarray) -> set[int]:
    """The source indexes that occur (a count per index: no sort of the tags)."""
    if not source.size:
        return set()
    if source.min() < 0:  # not a vizdist tag (source <= MAX_SOURCES); still decoded, in the slow way
        return {int(s) for s in np.unique(source)}
    return {int(s) for s in np.flatnonzero(np.bincount(source))}


def _file_codes(source: dict[str, Any], index: np.ndarray, names: dict[str, int]) -> np.ndarray:
    """Category codes (into ``names``, grown here) of file indexes, or of hash buckets when the list of
    files was not known: a lookup per distinct file, none per element."""
    files = source.get("files") or []
    if source.get("file_ids", "index") == "index":
        listed = [*files, "<file not in the list vizdist read>"]
        lookup = np.array([names.setdefault(f, len(names)) for f in listed], dtype=np.int32)
        return lookup[np.minimum(index, len(files))]
    buckets = _bucket_names(tuple(files))
    uniq, inverse = np.unique(index, return_inverse=True)
    lookup = np.array([names.setdefault(buckets.get(b, f"<file bucket {b}>"), len(names)) for b in uniq.tolist()],
                      dtype=np.int32)
    return lookup[inverse.reshape(-1)]


@functools.lru_cache(maxsize=16)
def _bucket_names(files: tuple[str, ...]) -> dict[int, str]:
    if not files:
        return {}
    buckets = tensor_value(tf.strings.to_hash_bucket_fast(list(files), FILE_UNKNOWN)).tolist()
    return dict(zip(buckets, files, strict=False))


def const_value(t: Any) -> Any:
    """Python value of a constant tensor (or None when not constant)."""
    if t is None:
        return None
    if isinstance(t, (int, float, bool, str)):
        return t
    try:
        v = datasets.constant_value(t)
    except Exception:
        v = None
    if v is None:
        try:
            v = t.numpy()
        except Exception:
            return None
    v = np.asarray(v)
    return v.item() if v.ndim == 0 else v.tolist()


def tensor_value(t: Any) -> Any:
    """NumPy value of a tensor, eagerly or in graph mode.

    Eagerly this is ``t.numpy()``. In graph mode (``tf.compat.v1.disable_eager_execution()``: a TF1
    ``Session`` program) a tensor is symbolic and has no ``.numpy()``; its value is then folded from
    constants when TF can (``tf.get_static_value``), else computed in a one-off ``Session`` on its graph.

    Example:
        >>> import tensorflow as tf                                   # doctest: +SKIP
        >>> int(tensor_value(tf.data.Dataset.range(3).cardinality()))  # doctest: +SKIP
        3
    """
    if hasattr(t, "numpy"):
        return t.numpy()
    v = tf.get_static_value(t)
    if v is not None:
        return v
    with tf.compat.v1.Session(graph=t.graph) as sess:
        return sess.run(t)
