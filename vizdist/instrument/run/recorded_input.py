"""TF's own distributed dataset and iterator, taught to strip vizdist's tag and report each step.

:func:`vizdist.record` distributes a *tagged* copy of the user's dataset (each element
``{"tag": ..., "value": ...}``, :func:`~vizdist.instrument.core.codes.keyed`) with TF's own
``experimental_distribute_dataset`` / ``distribute_datasets_from_function``, then turns the
``DistributedDataset`` TF returned into an instance of a subclass made here
(:func:`recorded`). Nothing about how TF reads, shards, rebatches or prefetches changes: the
subclass only overrides what the user's code sees:

* ``get_next`` / ``get_next_as_optional`` (and so ``next()``, ``for`` and ``reduce``) call
  TF's own, hand the step's tags to a :class:`StepSink`, and return the *value* part: exactly what
  the untagged dataset would have given;
* ``element_spec`` is the value part of TF's spec;
* ``_type_spec`` is a spec subclass whose ``_from_components`` rebuilds the subclass, so the
  iterator (or dataset) passed into a ``tf.function`` (Keras's ``train_function``, a hand-written
  ``@tf.function`` loop) strips and reports there too: in a graph the report is a
  ``tf.py_function`` that runs each time the step runs, in the order the graph reads the data.

Each recorded dataset gets its own subclasses (:func:`classes`), so specs of two recordings never
compare equal, and a ``tf.function`` traced for one is never reused for another.

``vizdist/instrument/run/user_run.py`` holds the sink (the recording).
"""

from __future__ import annotations

from typing import Any, Protocol

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops, iterator_ops, optional_ops
from tensorflow.python.data.util import structure
from tensorflow.python.distribute import input_lib
from tensorflow.python.framework import ops
from tensorflow.python.ops import gen_dataset_ops

from vizdist.instrument.core.codes import untag

__all__ = ["TF_DISTRIBUTED_DATASETS", "StepSink", "classes", "recorded"]

#: TF's distributed datasets, which a recording turns into its own subclasses.
TF_DISTRIBUTED_DATASETS = (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction)


class StepSink(Protocol):
    """Where a recorded dataset reports (see :class:`vizdist.instrument.run.user_run.DatasetRecord`)."""

    key: int
    tagged: bool
    ids_in_values: bool

    def split(self, element: Any) -> tuple[Any, Any]:
        """(tags, values) of one distributed element (tags None: ids come from the content)."""
    def phase_now(self) -> str: ...
    def before_read(self) -> None: ...
    def new_pass(self, phase: str) -> None: ...
    def eager_step(self, tags: Any, values: Any) -> None: ...
    def graph_step(self, tags: Any, values: Any) -> None: ...


def _user_spec(sink: StepSink, spec: Any) -> Any:
    return spec if not sink.tagged or sink.ids_in_values else untag(spec)[1]


def _strip(sink: StepSink, element: Any) -> Any:
    tags, values = sink.split(element)
    if tf.executing_eagerly():
        sink.eager_step(tags, values)
    else:
        sink.graph_step(tags, values)
    return values


def _stripping(sink: StepSink, opt: Any) -> Any:
    """TF's optional of a tagged element, made to strip the tag (and report the step) when its value is read.

    No ``tf.cond`` of vizdist's own: the optional TF made is the one the user's code gets, as a subclass
    (:class:`_OptionalMixin`) whose ``get_value`` strips, so it also survives being a ``while_loop``
    variable (Keras's ``steps_per_execution``) or a ``cond`` output. The step is reported when the
    value is read: when the element is really handed to the user's code.
    """
    opt.__class__ = classes(sink)["optional"]
    return opt


class _OptionalMixin:
    _vizdist: StepSink
    __slots__ = ()

    def get_value(self, name: str | None = None) -> Any:
        return _strip(self._vizdist, _up(self).get_value(self, name))  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call

    element_spec = property(lambda self: _user_spec(self._vizdist, self._element_spec),
                            doc="The value part of TF's spec: what the user's code gets.")

    @property
    def _type_spec(self) -> Any:
        return _respec(optional_ops.OptionalSpec(self._element_spec),  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
                       classes(self._vizdist)["optional_spec"])


def _pass_marker(sink: StepSink) -> None:
    """A new pass begins: now (eager), or each time the graph being built runs (a ``tf.function``)."""
    phase = sink.phase_now()  # where the pass starts in Python (a graph: where it was traced)
    if tf.executing_eagerly():
        sink.new_pass(phase)
        return

    def mark() -> int:
        sink.new_pass(phase)
        return 0

    tf.py_function(mark, [], tf.int32, name="vizdist_new_pass")


class _IteratorMixin:
    _vizdist: StepSink
    __slots__ = ()

    def get_next(self, name: str | None = None) -> Any:
        self._vizdist.before_read()
        return _strip(self._vizdist, _up(self).get_next(self, name))  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call

    def get_next_as_optional(self) -> Any:
        self._vizdist.before_read()
        return _stripping(self._vizdist, _up(self).get_next_as_optional(self))  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call

    element_spec = property(lambda self: _user_spec(self._vizdist, _up(self).element_spec.__get__(self)),
                            doc="The value part of TF's spec: what the user's code gets.")

    @property
    def _type_spec(self) -> Any:
        spec = _up(self)._type_spec.__get__(self)  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call
        return _respec(spec, classes(self._vizdist)["iterator_spec"])


class _DatasetMixin:
    _vizdist: StepSink
    __slots__ = ()

    def __iter__(self) -> Any:
        it = _up(self).__iter__(self)  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call
        it.__class__ = classes(self._vizdist)["iterator"]
        _pass_marker(self._vizdist)
        return it

    element_spec = _IteratorMixin.element_spec

    @property
    def _type_spec(self) -> Any:
        spec = _up(self)._type_spec.__get__(self)  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call
        name = "dataset_spec" if isinstance(self, input_lib.DistributedDataset) else "function_spec"
        return _respec(spec, classes(self._vizdist)[name])


class _OwnedIteratorMixin:
    """The default strategy hands the dataset itself to the one replica: TF's ``OwnedIterator``, taught alike."""

    _vizdist: StepSink
    __slots__ = ()

    def _next_internal(self) -> Any:
        self._vizdist.before_read()
        return _strip(self._vizdist, _up(self)._next_internal(self))  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call

    def get_next_as_optional(self) -> Any:
        sink, tagged = self._vizdist, self._element_spec  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
        sink.before_read()
        with ops.colocate_with(self._iterator_resource):  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
            opt = optional_ops._OptionalImpl(gen_dataset_ops.iterator_get_next_as_optional(
                self._iterator_resource, output_types=structure.get_flat_tensor_types(tagged),  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
                output_shapes=structure.get_flat_tensor_shapes(tagged)), tagged)
        return _stripping(sink, opt)

    @property
    def element_spec(self) -> Any:
        return _user_spec(self._vizdist, self._element_spec)  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time

    @property
    def _type_spec(self) -> Any:
        return _respec(iterator_ops.IteratorSpec(self._element_spec),  # type: ignore[attr-defined]  # TF's private attribute of the class this one extends at run time
                       classes(self._vizdist)["owned_spec"])


class _PlainDatasetMixin:
    """The user's values as a dataset of their own (what TF's default strategy returns), iterated tagged."""

    _vizdist: StepSink
    _vizdist_source: Any  # the tagged (keyed) dataset the iterator really reads
    __slots__ = ()

    def __iter__(self) -> Any:
        if not (tf.executing_eagerly() or ops.get_default_graph().building_function):
            return _up(self).__iter__(self)  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call
        it = iterator_ops.OwnedIterator(self._vizdist_source)
        it.__class__ = classes(self._vizdist)["owned"]
        _pass_marker(self._vizdist)
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
    """The same TF spec, as an instance of ``cls`` (a subclass of its class with the sink bound)."""
    spec.__class__ = cls
    return spec


class _SpecMixin:
    """``_from_components`` rebuilds the recorded subclass; ``_serialize`` tells recordings apart."""

    _vizdist: StepSink
    _value_kind: str
    __slots__ = ()

    @property
    def value_type(self) -> type:
        return classes(self._vizdist)[self._value_kind]  # type: ignore[no-any-return]  # classes() returns TF classes picked at run time

    def _from_components(self, components: Any) -> Any:
        value = _up(self)._from_components(self, components)  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call
        value.__class__ = classes(self._vizdist)[self._value_kind]
        return value

    def _serialize(self) -> Any:
        return (*_up(self)._serialize(self), "vizdist", self._vizdist.key)  # type: ignore[misc]  # the TF base class is picked at run time (_up): mypy cannot type the unbound call

    @classmethod
    def _deserialize(cls, serialization: Any) -> Any:
        """TypeSpec's ``_without_tensor_names`` / ``_with_tensor_ranks_only`` rebuild a spec this way."""
        base: Any = cls.__mro__[1]  # the TF spec class this one extends
        spec = base._deserialize(tuple(serialization)[:-2])
        spec.__class__ = cls
        return spec


def _make_classes(sink: StepSink) -> dict[str, type]:
    made = {
        "iterator": _subclass("RecordedDistributedIterator", _IteratorMixin, input_lib.DistributedIterator,
                              _vizdist=sink),
        "dataset": _subclass("RecordedDistributedDataset", _DatasetMixin, input_lib.DistributedDataset, _vizdist=sink),
        "function": _subclass("RecordedDistributedDatasetsFromFunction", _DatasetMixin,
                              input_lib.DistributedDatasetsFromFunction, _vizdist=sink),
    }
    specs = {"iterator_spec": (input_lib.DistributedIteratorSpec, "iterator"),
             "dataset_spec": (input_lib.DistributedDatasetSpec, "dataset"),
             "function_spec": (input_lib.DistributedDatasetsFromFunctionSpec, "function")}
    made["optional"] = _subclass("RecordedOptional", _OptionalMixin, optional_ops._OptionalImpl, _vizdist=sink)
    specs["optional_spec"] = (optional_ops.OptionalSpec, "optional")
    made["owned"] = _subclass("RecordedOwnedIterator", _OwnedIteratorMixin, iterator_ops.OwnedIterator, _vizdist=sink)
    specs["owned_spec"] = (iterator_ops.IteratorSpec, "owned")
    for name, (base, kind) in specs.items():
        made[name] = _subclass(f"Recorded{base.__name__}", _SpecMixin, base, _vizdist=sink, _value_kind=kind)
    return made


def classes(sink: StepSink) -> dict[str, type]:
    """The subclasses bound to ``sink``: ``iterator``, ``dataset``, ``function`` and their ``*_spec``."""
    made: dict[str, type] | None = getattr(sink, "_vizdist_classes", None)
    if made is None:  # kept on the sink: they live as long as it does, and no longer
        made = _make_classes(sink)
        sink._vizdist_classes = made  # type: ignore[attr-defined]  # the classes made for a recorded dataset live on its sink (set here, read by classes())
    return made


def plain(source: Any, values: Any, sink: StepSink) -> Any:
    """The dataset to hand the user where TF's strategy returns the dataset itself (the default strategy).

    ``values`` is a real dataset of the user's values (what the user's code may transform further);
    iterating it reads ``source`` (the tagged data) and strips the tags, reporting each element.
    """
    ds = dataset_ops._RestructuredDataset(values, values.element_spec)
    ds.__class__ = _subclass("RecordedDataset", _PlainDatasetMixin, type(ds), _vizdist=sink, _vizdist_source=source)
    return ds


def recorded(dist: Any, sink: StepSink) -> Any:
    """Turn TF's distributed dataset ``dist`` (over the tagged data) into the recorded subclass, in place.

    Example:
        >>> dist = strategy.experimental_distribute_dataset(keyed(tag_dataset(ds).dataset))  # doctest: +SKIP
        >>> for values in recorded(dist, sink): ...                                        # doctest: +SKIP
    """
    if isinstance(dist, input_lib.DistributedDataset):
        dist.__class__ = classes(sink)["dataset"]
    elif isinstance(dist, input_lib.DistributedDatasetsFromFunction):
        dist.__class__ = classes(sink)["function"]
    else:
        raise TypeError(
            f"vizdist.record can follow TF's DistributedDataset and DistributedDatasetsFromFunction; this "
            f"strategy returned {type(dist).__name__}."
        )
    return dist
