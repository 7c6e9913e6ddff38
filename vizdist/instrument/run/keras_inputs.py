"""Keras's own inputs, recorded: what ``vizdist.record()`` hooks into Keras 3 for the length of a block.

Keras turns every input of ``fit`` / ``evaluate`` / ``predict`` into a ``tf.data`` dataset with a *data
adapter* and distributes that dataset itself (``TFEpochIterator`` in ``keras/src/backend/tensorflow/
trainer.py``). A ``tf.data.Dataset`` input is recorded like any dataset; for the others the adapter's own
pipeline carries each element's id, so no copy is made and nothing Keras draws (its shuffle of the rows or
of the batches) changes:

* **arrays** (numpy, pandas, tensors; ``sample_weight`` and ``class_weight`` ride as Keras packs them):
  ``ArrayDataAdapter`` gathers each batch's rows by index from the arrays (``get_tf_dataset``); an index
  array beside them is gathered by the same indices, so each row's id is its row number in what the user
  passed. ``validation_split`` rows keep their number: the split is Keras's own
  (``array_slicing.train_validation_split``), and the validation part starts where the training part ends.
* **PyDataset / Sequence** (also with ``workers``): each batch ``py_dataset[i]`` carries ``i``; a row's id
  is the batch number, and its row in that batch is ``source_line``.
* **generators**: their batches have no identity of their own; each is numbered by its place in what the
  user's generator yielded (``source_id``; its rows in ``source_line``), labelled as such. Keras peeks at
  the first batches to learn their shapes and yields those again at the start of every pass
  (``peek_and_restore`` in ``generator_data_adapter.py``): they keep their numbers.

Keras's epoch number comes from ``fit``'s callbacks (``CallbackList.on_epoch_begin``).

Each hook acts only in the thread that opened the block; every other thread runs Keras untouched. Every
Keras name used here is listed in :data:`KERAS_NAMES` (:mod:`vizdist.instrument.tfapi.keras`; tests check each
exists in the installed Keras).

Example:
    >>> hooks = KerasHooks(recording)             # doctest: +SKIP
    >>> hooks.install(); ...; hooks.remove()      # doctest: +SKIP
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from vizdist.instrument.core.codes import SOURCE_SHIFT
from vizdist.instrument.tfapi.keras import (
    KERAS_NAMES,
    adapter_field,
    class_field,
    first_defined,
    set_adapter_field,
)
from vizdist.instrument.tfapi.keras import tensor_spec_of as _tensor_spec_of

__all__ = ["KERAS_NAMES", "ROW_BITS", "KerasHooks", "first_defined", "keras_source"]

#: Bits of a PyDataset tag that hold the row within its batch (``source_line``).
ROW_BITS = 24

_sources: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(dataset) -> (weakref, tag info)


def keras_source(dataset: Any) -> dict[str, Any] | None:
    """The tag info of a dataset a Keras adapter built with ids in it (None: any other dataset)."""
    hit = _sources.get(id(dataset))
    return hit[1] if hit is not None and hit[0]() is dataset else None


def _mark(dataset: Any, info: dict[str, Any]) -> Any:
    key = id(dataset)
    _sources[key] = (weakref.ref(dataset, lambda _r: _sources.pop(key, None)), info)
    return dataset


def _first_leaf(structure: Any) -> Any:
    leaves = [x for x in tf.nest.flatten(structure) if x is not None]
    return leaves[0] if leaves else None


def _bits(n: int) -> int:
    return max(n - 1, 0).bit_length()


class _Indexed:
    """One PyDataset batch and its index (what the wrapped ``py_dataset[i]`` returns; picklable)."""

    __slots__ = ("batch", "index")

    def __init__(self, index: int, batch: Any) -> None:
        self.index, self.batch = index, batch


class IndexedPyDataset:
    """The user's PyDataset, each batch handed out with its index (everything else is the user's)."""

    def __init__(self, py_dataset: Any) -> None:
        self._vizdist_inner = py_dataset

    def __getitem__(self, index: int) -> _Indexed:
        return _Indexed(int(index), self._vizdist_inner[index])

    def __len__(self) -> int:
        return len(self._vizdist_inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_vizdist_inner"], name)


class KerasHooks:
    """The hooks of one recording (``recording.owns_thread()`` says whether the calling thread is its own)."""

    def __init__(self, recording: Any) -> None:
        self.recording = recording
        self.offsets: dict[int, tuple[Any, int]] = {}  # id(first array) -> (the array, first row number)
        self.missing: list[str] = []
        self._saved: list[tuple[Any, str, Any]] = []

    # -- install / remove ------------------------------------------------------------------------------
    def install(self) -> None:
        """Replace the Keras functions for the block (nothing when Keras is not imported)."""
        if "keras" not in sys.modules:
            return
        wrappers: dict[str, Callable[[Any], Any]] = {
            "epoch begins": self._on_epoch_begin,
            "fit ends": self._on_train_end,
            "validation split": self._train_validation_split,
            "arrays": self._arrays,
            "PyDataset": self._py_dataset,
            "generators": self._generator,
        }
        for purpose, wrap in wrappers.items():
            found = first_defined(KERAS_NAMES[purpose])
            if found is None:
                self.missing.append(purpose)
                continue
            owner, name = found
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, wrap(original))

    def remove(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()
        self.offsets.clear()

    # -- epochs ----------------------------------------------------------------------------------------
    def _on_epoch_begin(self, original: Any) -> Any:
        hooks = self

        def on_epoch_begin(callbacks: Any, epoch: Any, logs: Any = None) -> Any:
            if hooks.recording.owns_thread():
                hooks.recording.epochs.keras_epoch = int(epoch)
            return original(callbacks, epoch, logs)

        return on_epoch_begin

    def _on_train_end(self, original: Any) -> Any:
        hooks = self

        def on_train_end(callbacks: Any, logs: Any = None) -> Any:
            if hooks.recording.owns_thread():
                hooks.recording.epochs.keras_epoch = None
            return original(callbacks, logs)

        return on_train_end

    # -- arrays ----------------------------------------------------------------------------------------
    def _train_validation_split(self, original: Any) -> Any:
        hooks = self

        def train_validation_split(arrays: Any, validation_split: Any) -> Any:
            train, val = original(arrays, validation_split=validation_split)
            if hooks.recording.owns_thread():
                first = _first_leaf(train)
                split_at = int(first.shape[0]) if first is not None and hasattr(first, "shape") else 0
                hooks._offset(first, 0)
                hooks._offset(_first_leaf(val), split_at)
            return train, val

        return train_validation_split

    def _offset(self, array: Any, row: int) -> None:
        if array is not None:
            self.offsets[id(array)] = (array, row)

    def offset_of(self, inputs: Any) -> int:
        """The row number, in what the user passed, of the first row of an adapter's ``inputs``."""
        first = _first_leaf(inputs)
        hit = self.offsets.get(id(first))
        return hit[1] if hit is not None and hit[0] is first else 0

    def _arrays(self, original: Any) -> Any:
        hooks = self

        def get_tf_dataset(adapter: Any) -> Any:
            if not hooks.recording.owns_thread():
                return original(adapter)
            inputs, n = adapter_field(adapter, "inputs"), int(adapter_field(adapter, "num_samples"))
            offset = hooks.offset_of(inputs)
            set_adapter_field(adapter, "inputs", {"tag": np.arange(offset, offset + n, dtype=np.int64), "value": inputs})
            try:
                dataset = original(adapter)
            finally:
                set_adapter_field(adapter, "inputs", inputs)
            return _mark(dataset, _array_info(adapter, offset, n))

        return get_tf_dataset

    # -- PyDataset -------------------------------------------------------------------------------------
    def _py_dataset(self, original: Any) -> Any:
        hooks = self

        def get_tf_dataset(adapter: Any) -> Any:
            if not hooks.recording.owns_thread():
                return original(adapter)
            _index_batches(adapter)
            return _mark(original(adapter), _py_dataset_info(adapter))

        return get_tf_dataset


    # -- generators ------------------------------------------------------------------------------------
    def _generator(self, original: Any) -> Any:
        hooks = self

        def get_tf_dataset(adapter: Any) -> Any:
            if not hooks.recording.owns_thread():
                return original(adapter)
            _number_batches(adapter)
            return _mark(original(adapter), _generator_info())

        return get_tf_dataset


def _rows_tag(index: int, batch: Any, bits: int) -> np.ndarray:
    """One tag per row of ``batch``: ``index`` (which batch) plus the row's place in it above ``bits``."""
    first = _first_leaf(batch)
    n = int(np.shape(first)[0]) if first is not None and np.ndim(first) else 1
    return np.int64(index) + (np.arange(n, dtype=np.int64) << bits)


def _number_batches(adapter: Any) -> None:
    """Make the generator adapter yield ``{"tag", "value"}``: each batch numbered by its place in what the
    user's generator yielded (the peeked batches Keras yields again keep their numbers)."""
    if getattr(adapter, "_vizdist_numbered", False):
        return
    first_batches = adapter_field(adapter, "first_batches")
    peeked, chained, bits = len(first_batches), adapter.generator, SOURCE_SHIFT - ROW_BITS
    later = iter(range(peeked, 1 << bits))  # the user's generator's own batches, after the peeked ones

    def numbered() -> Any:
        for k, batch in enumerate(chained()):
            yield {"tag": _rows_tag(k if k < peeked else next(later), batch, bits), "value": batch}

    spec = adapter_field(adapter, "output_signature") or _tensor_spec_of(first_batches)
    set_adapter_field(adapter, "output_signature", {"tag": tf.TensorSpec([None], tf.int64), "value": spec})
    adapter.generator, adapter._vizdist_numbered = numbered, True


def _generator_info() -> dict[str, Any]:
    bits = SOURCE_SHIFT - ROW_BITS
    source = {"index": 0, "kind": "generator", "id_is": "index", "label": "Python generator (batches in order)",
              "cardinality": -1, "id_bits": bits, "parts": {"shift": bits, "bits": ROW_BITS}}
    note = ("a Python generator's batches have no identity of their own: source_id numbers them in the order "
            "the generator yielded them, source_line is the row")
    return {"provenance": "tagged", "provenance_notes": [note], "sources": [source],
            "pipeline": ["Python generator (Keras)"], "global_batch_size": None, "drop_remainder": False,
            "batched": True, "keras_input": "generator"}


def _array_info(adapter: Any, offset: int, n: int) -> dict[str, Any]:
    """How to read the tags of an array adapter's dataset: the row number, source 0."""
    rows = f"rows {offset}..{offset + n - 1}" if n else "no rows"
    source = {"index": 0, "kind": "arrays", "id_is": "index", "label": f"Keras arrays ({rows})",
              "cardinality": offset + n, "id_bits": _bits(offset + n)}
    shuffle = adapter_field(adapter, "shuffle", False)
    batch_size = adapter_field(adapter, "batch_size")
    ops = [f"Keras arrays ({rows})", *([f"shuffle={shuffle!r} (Keras)"] if shuffle else []), f"batch({batch_size})"]
    return {"provenance": "tagged", "provenance_notes": [], "sources": [source], "pipeline": ops,
            "global_batch_size": int(batch_size), "drop_remainder": False, "batched": True,
            "shuffle": bool(shuffle), "keras_input": "arrays", "steps_per_pass": int(adapter_field(adapter, "size"))}


def _index_batches(adapter: Any) -> None:
    """Make each batch the adapter hands out carry its index: ``{"tag": i | row << bits, "value": batch}``."""
    inner = adapter.py_dataset if not isinstance(adapter.py_dataset, IndexedPyDataset) \
        else adapter.py_dataset._vizdist_inner
    n = inner.num_batches
    bits = _bits(n) if n is not None else SOURCE_SHIFT - ROW_BITS
    proxy = IndexedPyDataset(inner)
    adapter.py_dataset = proxy
    if getattr(adapter, "enqueuer", None) is not None:
        adapter.enqueuer.py_dataset = proxy
    standardize = class_field(adapter, "standardize_batch")
    signature = adapter_field(adapter, "output_signature")
    if isinstance(signature, dict) and set(signature) == {"tag", "value"}:
        pass  # indexed already (the adapter's dataset was built again)
    elif signature is not None:
        set_adapter_field(adapter, "output_signature", {"tag": tf.TensorSpec([None], tf.int64), "value": signature})

    def standardize_batch(batch: Any) -> Any:
        if not isinstance(batch, _Indexed):
            return standardize(adapter, batch)
        value = standardize(adapter, batch.batch)
        return {"tag": _rows_tag(batch.index, value, bits), "value": value}

    set_adapter_field(adapter, "standardize_batch", standardize_batch)
    adapter._vizdist_bits = bits


def _py_dataset_info(adapter: Any) -> dict[str, Any]:
    inner = adapter.py_dataset._vizdist_inner
    n = inner.num_batches
    bits = adapter._vizdist_bits
    source = {"index": 0, "kind": "py_dataset", "id_is": "index", "label": f"{type(inner).__name__} batches",
              "cardinality": n if n is not None else -1, "id_bits": bits,
              "parts": {"shift": bits, "bits": ROW_BITS}}
    shuffle = getattr(adapter, "shuffle", False)
    ops = [f"{type(inner).__name__}[i] ({n if n is not None else 'endless'} batches)",
           *(["shuffle=True (Keras: the order of the batches)"] if shuffle else [])]
    return {"provenance": "tagged", "provenance_notes": [], "sources": [source], "pipeline": ops,
            "global_batch_size": None, "drop_remainder": False, "batched": True, "shuffle": bool(shuffle),
            "keras_input": "py_dataset", "steps_per_pass": n}
