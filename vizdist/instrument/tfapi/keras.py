"""Keras's private side: the functions a recording hooks for the length of a block (callbacks, trainers, data
adapters), the fields of Keras 3's data adapters, and the trainer methods a phase is read from by name.

Every Keras name hooked is listed in :data:`KERAS_NAMES` (where Keras 3, then Keras 2 (TF 2.15's
``tf.keras``), defines it); each is also declared in :mod:`.table`.

Example:
    >>> sorted(KERAS_NAMES)[:2]
    ['PyDataset', 'PyDataset batches']
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ADAPTER_FIELDS",
    "BUILD_METHOD",
    "KERAS_NAMES",
    "TRAINER_METHODS",
    "adapter_field",
    "class_field",
    "first_defined",
    "is_trainer_frame",
    "set_adapter_field",
    "tensor_spec_of",
]

_ADAPTERS = "keras.src.trainers.data_adapters"

#: The Keras names the hooks replace for the block: what each is for -> where Keras 3 (then Keras 2, TF
#: 2.15's ``tf.keras``) defines it, as (module, attribute path). The first that exists is hooked; Keras 2
#: names its epochs the same way and has none of Keras 3's data adapters (its arrays are recorded as the
#: dataset it builds).
KERAS_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    "epoch begins": (("keras.src.callbacks.callback_list", "CallbackList.on_epoch_begin"),
                     ("keras.src.callbacks", "CallbackList.on_epoch_begin")),
    "fit ends": (("keras.src.callbacks.callback_list", "CallbackList.on_train_end"),
                 ("keras.src.callbacks", "CallbackList.on_train_end")),
    "validation split": ((f"{_ADAPTERS}.array_slicing", "train_validation_split"),),
    "arrays": ((f"{_ADAPTERS}.array_data_adapter", "ArrayDataAdapter.get_tf_dataset"),),
    "PyDataset": ((f"{_ADAPTERS}.py_dataset_adapter", "PyDatasetAdapter.get_tf_dataset"),),
    "PyDataset batches": ((f"{_ADAPTERS}.py_dataset_adapter", "PyDatasetAdapter._standardize_batch"),),
    "generators": ((f"{_ADAPTERS}.generator_data_adapter", "GeneratorDataAdapter.get_tf_dataset"),),
    "generator specs": ((f"{_ADAPTERS}.data_adapter_utils", "get_tensor_spec"),),
}

#: Keras 3's trainer method that reads one batch of a fresh pass to build the model, and drops it.
BUILD_METHOD = "_maybe_symbolic_build"
#: The trainer methods whose frames say which phase a pass belongs to.
TRAINER_METHODS = ("fit", "evaluate", "predict", BUILD_METHOD)

#: The fields vizdist reads (and sets, for the block) on Keras 3's data adapters: ``adapter_field(a, "inputs")``
#: is ``a._inputs`` (each declared in :mod:`.table`).
ADAPTER_FIELDS = frozenset({"inputs", "num_samples", "first_batches", "output_signature", "batch_size", "size",
                            "shuffle", "standardize_batch"})
_MISSING = object()


def _resolve(module: str, path: str) -> tuple[Any, str]:
    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for p in parents:
        owner = getattr(owner, p)
    getattr(owner, name)  # it exists (AttributeError otherwise)
    return owner, name


def first_defined(places: tuple[tuple[str, str], ...]) -> tuple[Any, str] | None:
    """(the object holding it, its name) for the first of ``places`` the installed Keras defines, or None.

    Example:
        >>> first_defined((("json", "no_such_name"),)) is None
        True
    """
    for module, path in places:
        try:
            return _resolve(module, path)
        except (ImportError, AttributeError):
            continue
    return None


def is_trainer_frame(name: str, filename: str) -> bool:
    """Whether a Python frame running function ``name`` in file ``filename`` is one of Keras's trainer methods
    (:data:`TRAINER_METHODS`). Keras 3: ``keras/src/trainers/trainer.py`` and
    ``keras/src/backend/<backend>/trainer.py``; Keras 2 (TF 2.15's tf.keras): ``fit``, ``evaluate`` and
    ``predict`` in ``keras/src/engine/training.py`` (it has no build read).

    Example:
        >>> is_trainer_frame("fit", "/site-packages/keras/src/backend/tensorflow/trainer.py")
        True
    """
    if name not in TRAINER_METHODS:
        return False
    path = filename.replace("\\", "/")
    if "/keras/" not in path:
        return False
    return "trainer" in path or path.endswith("/engine/training.py")


def _check(name: str) -> str:
    if name not in ADAPTER_FIELDS:
        raise KeyError(f"{name!r} is not a declared field of Keras's data adapters; declare _{name} in "
                       "vizdist/instrument/tfapi/table.py and add it to tfapi.keras.ADAPTER_FIELDS")
    return "_" + name


def adapter_field(adapter: Any, name: str, default: Any = _MISSING) -> Any:
    """A data adapter's private field ``_<name>`` (``default`` when absent; see :data:`ADAPTER_FIELDS`)."""
    attr = _check(name)
    return getattr(adapter, attr) if default is _MISSING else getattr(adapter, attr, default)


def set_adapter_field(adapter: Any, name: str, value: Any) -> None:
    """Set a data adapter's private field ``_<name>`` (on the instance)."""
    setattr(adapter, _check(name), value)


def class_field(adapter: Any, name: str) -> Any:
    """The field ``_<name>`` of the adapter's class (a method as the class defines it)."""
    return getattr(type(adapter), _check(name))


def tensor_spec_of(batches: Any) -> Any:
    """The spec Keras 3 infers from a generator's first batches (``data_adapter_utils.get_tensor_spec``)."""
    from keras.src.trainers.data_adapters import data_adapter_utils

    return data_adapter_utils.get_tensor_spec(batches)
