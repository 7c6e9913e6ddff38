"""Accessors, the machinery: what a view class hangs off, and the decorators that register your own.

As ``pandas/core/accessor.py`` is to ``df.plot``: :class:`Accessor` is the base of the classes that hang
off an object (``trace.plot``, ``trace.show``, ``trace.timing`` in :mod:`vizdist.views`, and yours);
:func:`register_view` adds a method to one, :func:`register_accessor` hangs a whole class off an owner's
objects. Either warns (:class:`ViewNameWarning`) when the name is taken, and replaces it. Plain Python:
nothing here imports pandas, a renderer or the trace.

Example:
    >>> class Shout(Accessor):
    ...     def loud(self) -> str:
    ...         return str(self._obj).upper()
    >>> class Word(str):
    ...     pass
    >>> _ = register_accessor(Word, "shout")(Shout)
    >>> Word("hi").shout.loud(), Shout.views()
    ('HI', ['loud'])
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["Accessor", "ViewError", "ViewNameWarning", "register_accessor", "register_view", "unregister_view"]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


class ViewError(AttributeError):
    """An accessor has no view of that name (the message lists the ones it has)."""


class ViewNameWarning(UserWarning):
    """A registered view or accessor took a name that was already taken (it replaces the old one)."""


class Accessor:
    """What the accessors share: the object they hang off, ``dir()`` listing their views, a repr naming them."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    @classmethod
    def views(cls) -> list[str]:
        """The names of this accessor's views (its public methods, registered ones too)."""
        return sorted(name for name in dir(cls) if not name.startswith("_") and name != "views"
                      and callable(getattr(cls, name)))

    def __dir__(self) -> list[str]:
        return self.views()

    if not TYPE_CHECKING:  # hidden from mypy, which then still flags a misspelt view

        def __getattr__(self, name: str) -> Any:
            # only reached for a name the class does not have: say which views there are
            if name.startswith("_"):
                raise AttributeError(name)
            raise ViewError(f"{type(self).__name__} has no view {name!r}; its views are: "
                            f"{', '.join(self.views())}.")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of a {type(self._obj).__name__}: {', '.join(self.views())}>"


def _warn_taken(owner: type, name: str, what: str) -> None:
    if hasattr(owner, name):
        warnings.warn(f"registering {what} {name!r} for {owner.__name__} replaces the attribute of that name it "
                      "already has; choose another name to keep both.", ViewNameWarning, stacklevel=3)


def register_view(accessor: type[Accessor], name: str) -> Callable[[F], F]:
    """Add ``fn(obj, ...)`` to ``accessor`` as the view ``name``: ``trace.plot.<name>(...)`` calls ``fn(trace, ...)``.

    Use as a decorator. ``help(trace.plot.<name>)`` shows ``fn``'s docstring and its signature without the
    trace. A name the accessor already has is replaced, with a :class:`ViewNameWarning`.

    Args:
        accessor: ``vizdist.views.PlotAccessor``, ``ShowAccessor`` or ``TimingAccessor`` (or an accessor
            class of your own, see :func:`register_accessor`).
        name: the view's name.

    Example:
        >>> import vizdist, warnings
        >>> from vizdist.views import PlotAccessor
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     register_view(PlotAccessor, "split")(lambda trace: "mine")
        ...     unregister_view(PlotAccessor, "split")
        <function <lambda> at ...>
        >>> [type(w.message).__name__ for w in caught]
        ['ViewNameWarning']
    """
    if not (isinstance(accessor, type) and issubclass(accessor, Accessor)):
        raise TypeError(f"register_view adds a view to an accessor class of vizdist.views (PlotAccessor, "
                        f"ShowAccessor, TimingAccessor, or one of yours); got {accessor!r}.")
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"a view's name is a public Python name (letters, digits, _; not starting with _); "
                         f"got {name!r}.")

    def decorator(fn: F) -> F:
        _warn_taken(accessor, name, "the view")

        @functools.wraps(fn)
        def view(self: Accessor, *args: Any, **kwargs: Any) -> Any:
            return fn(self._obj, *args, **kwargs)

        sig = inspect.signature(fn)
        own = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)  # in fn: the object drawn
        # help() and inspect read it: fn's signature, with self for the object's parameter
        view.__signature__ = sig.replace(parameters=[own, *list(sig.parameters.values())[1:]])  # type: ignore[attr-defined]  # a function object takes any attribute
        _REPLACED.setdefault((accessor, name), accessor.__dict__.get(name))
        setattr(accessor, name, view)
        return fn

    return decorator


def unregister_view(accessor: type[Accessor], name: str) -> None:
    """Undo :func:`register_view`: the accessor gets back what it had under ``name`` (or nothing)."""
    old = _REPLACED.pop((accessor, name), None)
    if old is None:
        delattr(accessor, name)
    else:
        setattr(accessor, name, old)


_REPLACED: dict[tuple[type, str], Any] = {}


class _Built:
    """The descriptor behind a registered accessor: ``obj.<name>`` is ``cls(obj)``; the class itself on ``Owner``."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self.cls if obj is None else self.cls(obj)


def register_accessor(owner: type, name: str) -> Callable[[C], C]:
    """Hang a class of your own off ``owner``'s objects: ``obj.<name>`` is ``cls(obj)`` (pandas'
    ``register_dataframe_accessor``). Use as a decorator on the class.

    A name ``owner`` already has is replaced, with a :class:`ViewNameWarning`.

    Args:
        owner: the class whose objects get the accessor (:class:`vizdist.Trace`, say).
        name: the attribute's name.

    Example:
        >>> import vizdist
        >>> @register_accessor(vizdist.Trace, "sizes")
        ... class Sizes(Accessor):
        ...     def elements(self) -> int:
        ...         return len(self._obj.elements)
        >>> vizdist.Trace.from_records(elements=[dict(step=0)]).sizes.elements()
        1
        >>> del vizdist.Trace.sizes
    """
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"an accessor's name is a public Python name; got {name!r}.")

    def decorator(cls: C) -> C:
        _warn_taken(owner, name, "the accessor")
        setattr(owner, name, _Built(cls))
        return cls

    return decorator
