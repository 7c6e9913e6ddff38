"""Which function draws what: the views a trace (and other result objects) hang off themselves.

A :class:`~vizdist.trace.Trace` is plain data and never imports a renderer, yet
``trace.plot.split()`` draws it and ``trace.show()`` opens its explorer. The link is this registry:
each view is registered by name, for a kind of object, as a ``"module:function"`` *path* that is
imported only when the view is first used. ``vizdist/__init__.py`` registers vizdist's own views,
explicitly, in one place (:func:`register_builtin_views`); importing a renderer registers nothing.

An *accessor* is registered the same way, as a class built with the object: ``trace.timing`` is
``"Trace.accessor"``'s ``timing``, whose methods are the trace's timing statistics.

You can register your own (the function takes the object first)::

    vizdist.views.register("Trace", "my_view", "mypackage.views:draw")
    trace.plot.my_view()

Example:
    >>> register("Demo", "twice", "builtins:repr")
    >>> resolve("Demo", "twice")(2)
    '2'
    >>> sorted(names("Demo"))
    ['twice']
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ViewError", "ViewSet", "names", "register", "register_builtin_views", "resolve"]

_VIEWS: dict[str, dict[str, str]] = {}


class ViewError(AttributeError):
    """No view of that name is registered for that kind of object."""


def register(kind: str, name: str, path: str) -> None:
    """Register ``path`` (``"package.module:function"``) as the view ``name`` of objects of ``kind``.

    Raises:
        ValueError: ``path`` is not of the form ``module:function``.
    """
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"a view's path is 'package.module:function'; got {path!r}.")
    _VIEWS.setdefault(kind, {})[name] = path


def names(kind: str) -> list[str]:
    """The views registered for ``kind``."""
    return sorted(_VIEWS.get(kind, {}))


def resolve(kind: str, name: str) -> Callable[..., Any]:
    """The function registered as view ``name`` of ``kind`` (its module imported now)."""
    path = _VIEWS.get(kind, {}).get(name)
    if path is None:
        raise ViewError(f"{kind} has no view {name!r}; its views are: {', '.join(names(kind)) or 'none'}.")
    module, _, attr = path.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return fn


def has(kind: str, name: str) -> bool:
    """Whether ``kind`` has a view ``name``."""
    return name in _VIEWS.get(kind, {})


class ViewSet:
    """The views of one object as methods: ``obj.plot.split()`` calls the ``split`` view with ``obj``.

    Example:
        >>> register("Demo", "twice", "builtins:repr")
        >>> ViewSet("Demo", 21).twice()
        '21'
    """

    def __init__(self, kind: str, obj: Any) -> None:
        self._kind, self._obj = kind, obj

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(resolve(self._kind, name), self._obj)

    def __dir__(self) -> list[str]:
        return names(self._kind)

    def __iter__(self) -> Iterator[str]:
        return iter(names(self._kind))

    def __repr__(self) -> str:
        return f"<views of a {self._kind}: {', '.join(names(self._kind))}>"


#: vizdist's own views: kind -> {view name: "module:function"}.
BUILTIN = {
    "Trace": {
        "split": "vizdist.render.figures:plot_split",
        "timeline": "vizdist.render.timeline_figure:plot_timeline",
        "coverage": "vizdist.render.service:plot_coverage",
        "streams": "vizdist.render.service:plot_streams",
        "placement": "vizdist.render.placement:plot_placement",
        "closures": "vizdist.render.parameter_server:plot_closures",
        "variable_shards": "vizdist.render.parameter_server:plot_variable_shards",
        "topology": "vizdist.render.topology:plot_topology",
    },
    "Trace.show": {
        "explorer": "vizdist.render.explorer:show",
        "timeline": "vizdist.render.timeline_widget:timeline",
        "placement": "vizdist.render.placement:show_placement",
        "topology": "vizdist.render.topology:show_topology",
        "reduction": "vizdist.render.reduction:show_reduction",
    },
    # the live explorer of a running vizdist.record() block (rec.show()): handed the block's feed of newest steps
    "Recording.show": {
        "explorer": "vizdist.render.live:show_live",
    },
    "Trace.export": {
        "chrome_trace": "vizdist.render.export:to_chrome_trace",
    },
    # load_trace's reader of a folder vizdist.record(path=...) wrote (vizdist._parts imports vizdist.trace)
    "Trace.load": {
        "is_recording": "vizdist._parts:is_recording",
        "recording": "vizdist._parts:load_recording",
    },
    # tables of meaning: trace.<name>() is this function of the trace
    "Trace.analysis": {
        "coverage": "vizdist.analysis.coverage:coverage",
    },
    # accessors: trace.<name> is this class built with the trace (its methods take no trace)
    "Trace.accessor": {
        "timing": "vizdist.analysis.timeline:Timing",
    },
    "ShardComparison": {
        "plot": "vizdist.render.sharding:plot_shard_policies",
        "html": "vizdist.render.sharding:shard_policies_html",
    },
    "Topology": {
        "plot": "vizdist.render.topology:plot_topology",
        "html": "vizdist.render.topology:topology_html",
        "png": "vizdist.render.topology:topology_png",
    },
}


def register_builtin_views() -> None:
    """Register vizdist's own views (:data:`BUILTIN`); ``vizdist/__init__.py`` calls it once."""
    for kind, views in BUILTIN.items():
        for name, path in views.items():
            register(kind, name, path)
