"""tf.distribute's distributed datasets and iterators, re-classed in place so a recording sees each step.

A recording hands the user TF's own ``DistributedDataset`` (or ``DistributedDatasetsFromFunction``, or, for
the default strategy, a plain dataset) over vizdist's *tagged* data, turned into an instance of a subclass
made here (:func:`recorded`, :func:`plain`): ``__class__`` is swapped, nothing about how TF reads, shards,
rebatches or prefetches changes. The subclasses override only what the user's code sees, and call the
:class:`Hooks` of the recording:

* ``get_next`` / ``get_next_as_optional`` (and so ``next()``, ``for`` and ``reduce``) call TF's own and return
  ``hooks.strip(element)`` (the value part; the hooks report the step);
* ``element_spec`` is ``hooks.user_spec`` of TF's spec;
* TF's private ``_type_spec`` is a spec subclass whose ``_from_components`` rebuilds the subclass, so the
  iterator (or dataset) passed into a ``tf.function`` strips and reports there too; ``_serialize`` adds
  ``hooks.key``, so specs of two recordings never compare equal and a ``tf.function`` traced for one is
  never reused for another.

Example:
    >>> dist = strategy.experimental_distribute_dataset(tagged)   # doctest: +SKIP
    >>> recorded(dist, hooks)                                       # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Protocol

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops, iterator_ops, optional_ops
from tensorflow.python.data.util import structure
from tensorflow.python.distribute import input_lib
from tensorflow.python.framework import ops
from tensorflow.python.ops import gen_dataset_ops

__all__ = ["DISTRIBUTED_DATASETS", "Hooks", "classes", "is_distributed_dataset", "plain", "recorded"]

#: TF's distributed datasets, which a recording turns into its own subclasses.
DISTRIBUTED_DATASETS = (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction)


class Hooks(Protocol):
    """What a recorded dataset calls (one object per recorded dataset; its subclasses are cached on it)."""

    key: int
    made: dict[str, type] | None

    def strip(self, element: Any) -> Any: ...
    def user_spec(self, spec: Any) -> Any: ...
    def new_pass(self) -> None: ...
    def before_read(self) -> None: ...


def is_distributed_dataset(obj: Any) -> bool:
    """Whether ``obj`` is one of TF's distributed datasets (:data:`DISTRIBUTED_DATASETS`)."""
    return isinstance(obj, DISTRIBUTED_DATASETS)


def _stripping(hooks: Hooks, opt: Any) -> Any:
    """TF's optional of a tagged element, made to strip the tag (and report the step) when its value is read.

    No ``tf.cond`` of vizdist's own: the optional TF made is the one the user's code gets, as a subclass
    whose ``get_value`` strips, so it also survives being a ``while_loop`` variable (Keras's
    ``steps_per_execution``) or a ``cond`` output.
    """
    opt.__class__ = classes(hooks)["optional"]
    return opt


class _OptionalMixin:
    _vizdist: Hooks
    __slots__ = ()

    def get_value(self, name: str | None = None) -> Any:
        return self._vizdist.strip(_up(self).get_value(self, name))

    element_spec = property(lambda self: self._vizdist.user_spec(self._element_spec),
                            doc="The value part of TF's spec: what the user's code gets.")

    @property
    def _type_spec(self) -> Any:
        return _respec(optional_ops.OptionalSpec(self._element_spec),  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
                       classes(self._vizdist)["optional_spec"])


class _IteratorMixin:
    _vizdist: Hooks
    __slots__ = ()

    def get_next(self, name: str | None = None) -> Any:
        self._vizdist.before_read()
        return self._vizdist.strip(_up(self).get_next(self, name))

    def get_next_as_optional(self) -> Any:
        self._vizdist.before_read()
        return _stripping(self._vizdist, _up(self).get_next_as_optional(self))

    element_spec = property(lambda self: self._vizdist.user_spec(_up(self).element_spec.__get__(self)),
                            doc="The value part of TF's spec: what the user's code gets.")

    @property
    def _type_spec(self) -> Any:
        spec = _up(self)._type_spec.__get__(self)
        return _respec(spec, classes(self._vizdist)["iterator_spec"])


class _DatasetMixin:
    _vizdist: Hooks
    __slots__ = ()

    def __iter__(self) -> Any:
        it = _up(self).__iter__(self)
        it.__class__ = classes(self._vizdist)["iterator"]
        self._vizdist.new_pass()
        return it

    element_spec = _IteratorMixin.element_spec

    @property
    def _type_spec(self) -> Any:
        spec = _up(self)._type_spec.__get__(self)
        name = "dataset_spec" if isinstance(self, input_lib.DistributedDataset) else "function_spec"
        return _respec(spec, classes(self._vizdist)[name])


class _OwnedIteratorMixin:
    """The default strategy hands the dataset itself to the one replica: TF's ``OwnedIterator``, taught alike."""

    _vizdist: Hooks
    __slots__ = ()

    def _next_internal(self) -> Any:
        self._vizdist.before_read()
        return self._vizdist.strip(_up(self)._next_internal(self))

    def get_next_as_optional(self) -> Any:
        hooks, tagged = self._vizdist, self._element_spec  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
        hooks.before_read()
        with ops.colocate_with(self._iterator_resource):  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
            opt = optional_ops._OptionalImpl(gen_dataset_ops.iterator_get_next_as_optional(
                self._iterator_resource, output_types=structure.get_flat_tensor_types(tagged),  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
                output_shapes=structure.get_flat_tensor_shapes(tagged)), tagged)
        return _stripping(hooks, opt)

    @property
    def element_spec(self) -> Any:
        return self._vizdist.user_spec(self._element_spec)  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time

    @property
    def _type_spec(self) -> Any:
        return _respec(iterator_ops.IteratorSpec(self._element_spec),  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
                       classes(self._vizdist)["owned_spec"])


class _PlainDatasetMixin:
    """The user's values as a dataset of their own (what TF's default strategy returns), iterated tagged."""

    _vizdist: Hooks
    _vizdist_source: Any  # the tagged dataset the iterator really reads
    __slots__ = ()

    def __iter__(self) -> Any:
        if not (tf.executing_eagerly() or ops.get_default_graph().building_function):
            return _up(self).__iter__(self)
        it = iterator_ops.OwnedIterator(self._vizdist_source)
        it.__class__ = classes(self._vizdist)["owned"]
        self._vizdist.new_pass()
        return it


def _up(obj: Any) -> Any:
    """The TF class a recorded subclass was made from (each has exactly one base: TF's)."""
    return type(obj).__mro__[1]


def _subclass(name: str, mixin: type, base: type, **attrs: Any) -> type:
    """``base`` with ``mixin``'s methods (copied in: a mixin *base* would change the object layout, and
    ``__class__`` assignment needs the layout of TF's class)."""
    members = {k: v for k, v in vars(mixin).items() if k not in ("__dict__", "__weakref__", "__module__")}
    return type(name, (base,), {**members, "__module__": __name__, **attrs})


def _respec(spec: Any, cls: type) -> Any:
    """The same TF spec, as an instance of ``cls`` (a subclass of its class with the hooks bound)."""
    spec.__class__ = cls
    return spec


class _SpecMixin:
    """``_from_components`` rebuilds the recorded subclass; ``_serialize`` tells recordings apart."""

    _vizdist: Hooks
    _value_kind: str
    __slots__ = ()

    @property
    def value_type(self) -> type:
        return classes(self._vizdist)[self._value_kind]

    def _from_components(self, components: Any) -> Any:
        value = _up(self)._from_components(self, components)
        value.__class__ = classes(self._vizdist)[self._value_kind]
        return value

    def _serialize(self) -> Any:
        return (*_up(self)._serialize(self), "vizdist", self._vizdist.key)

    @classmethod
    def _deserialize(cls, serialization: Any) -> Any:
        """TypeSpec's ``_without_tensor_names`` / ``_with_tensor_ranks_only`` rebuild a spec this way."""
        base: Any = cls.__mro__[1]  # the TF spec class this one extends
        spec = base._deserialize(tuple(serialization)[:-2])
        spec.__class__ = cls
        return spec


def _make_classes(hooks: Hooks) -> dict[str, type]:
    made = {
        "iterator": _subclass("RecordedDistributedIterator", _IteratorMixin, input_lib.DistributedIterator,
                              _vizdist=hooks),
        "dataset": _subclass("RecordedDistributedDataset", _DatasetMixin, input_lib.DistributedDataset,
                             _vizdist=hooks),
        "function": _subclass("RecordedDistributedDatasetsFromFunction", _DatasetMixin,
                              input_lib.DistributedDatasetsFromFunction, _vizdist=hooks),
    }
    specs = {"iterator_spec": (input_lib.DistributedIteratorSpec, "iterator"),
             "dataset_spec": (input_lib.DistributedDatasetSpec, "dataset"),
             "function_spec": (input_lib.DistributedDatasetsFromFunctionSpec, "function")}
    made["optional"] = _subclass("RecordedOptional", _OptionalMixin, optional_ops._OptionalImpl, _vizdist=hooks)
    specs["optional_spec"] = (optional_ops.OptionalSpec, "optional")
    made["owned"] = _subclass("RecordedOwnedIterator", _OwnedIteratorMixin, iterator_ops.OwnedIterator,
                              _vizdist=hooks)
    specs["owned_spec"] = (iterator_ops.IteratorSpec, "owned")
    for name, (base, kind) in specs.items():
        made[name] = _subclass(f"Recorded{base.__name__}", _SpecMixin, base, _vizdist=hooks, _value_kind=kind)
    return made


def classes(hooks: Hooks) -> dict[str, type]:
    """The subclasses bound to ``hooks``: ``iterator``, ``dataset``, ``function`` and their ``*_spec``
    (made once, kept on the hooks: they live as long as the recorded dataset does, and no longer)."""
    if hooks.made is None:
        hooks.made = _make_classes(hooks)
    return hooks.made


def plain(source: Any, values: Any, hooks: Hooks) -> Any:
    """The dataset to hand the user where TF's strategy returns the dataset itself (the default strategy).

    ``values`` is a real dataset of the user's values (what the user's code may transform further);
    iterating it reads ``source`` (the tagged data) and strips the tags, reporting each element.
    """
    ds = dataset_ops._RestructuredDataset(values, values.element_spec)
    ds.__class__ = _subclass("RecordedDataset", _PlainDatasetMixin, type(ds), _vizdist=hooks, _vizdist_source=source)
    return ds


def recorded(dist: Any, hooks: Hooks) -> Any:
    """Turn TF's distributed dataset ``dist`` (over the tagged data) into the recorded subclass, in place.

    Raises:
        TypeError: ``dist`` is not one of TF's distributed datasets.
    """
    if isinstance(dist, input_lib.DistributedDataset):
        dist.__class__ = classes(hooks)["dataset"]
    elif isinstance(dist, input_lib.DistributedDatasetsFromFunction):
        dist.__class__ = classes(hooks)["function"]
    else:
        raise TypeError(
            f"vizdist.record can follow TF's DistributedDataset and DistributedDatasetsFromFunction; this "
            f"strategy returned {type(dist).__name__}."
        )
    return dist
