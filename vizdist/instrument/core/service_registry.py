"""What this process registered with, and read from, the tf.data service.

A dataset that reads from the tf.data service (``distribute``,
``from_dataset_id``) holds only a dataset *id*: TensorFlow's
``_DataServiceDatasetV2`` keeps no link to the dataset the workers run. To
trace a user's own service pipeline with real ids, vizdist needs that
dataset and the exact arguments of the read, so :func:`install` wraps the
two functions every public tf.data service API goes through
(``data_service_ops._register_dataset`` and ``_from_dataset_id``, called by
``distribute``, ``register_dataset`` and ``from_dataset_id``). Each call
runs unchanged; vizdist only keeps the registered dataset (by id, the last
:data:`KEEP` registrations) and attaches the read's arguments to the dataset
TensorFlow returns (:func:`read_of`).

The wrappers also refuse the dispatcher of a ``LocalDataService(isolate=True)``:
it lives in a private network namespace that this process cannot reach, and
TensorFlow would wait for it forever. Every open ``LocalDataService`` is in
:data:`LIVE`; :func:`serving` finds one by its dispatcher's address.

vizdist installs them explicitly, never on import: ``vizdist.virtual_devices()``,
``LocalDataService(...)`` and every run (``record()``'s block, ``trace_distribution``, ``trace_tf1``: the
run's :class:`vizdist.instrument.service.observer.ServiceObserver`) call :func:`install`. Build your service
pipeline after one of those (a notebook's setup cell does). The run engine itself never calls it.

Example:
    >>> import tensorflow as tf                                      # doctest: +SKIP
    >>> install()                                                    # doctest: +SKIP
    >>> ds = tf.data.Dataset.range(8).apply(
    ...     tf.data.experimental.service.distribute("parallel_epochs", "grpc://127.0.0.1:5050"))  # doctest: +SKIP
    >>> read_of(ds).registration.dataset                             # doctest: +SKIP
    <_RangeDataset element_spec=TensorSpec(shape=(), dtype=tf.int64, name=None)>
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import itertools
import os
import socket
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from vizdist.errors import TracingError
from vizdist.instrument.tfapi import service as tf_service

__all__ = ["KEEP", "LIVE", "Read", "Registration", "check_reachable", "install", "installed", "one_run", "read_of",
           "refuse_isolated", "run_token", "serving", "text_of", "uninstall"]

#: Registrations remembered (the oldest are forgotten first).
KEEP = 256
_ATTR = "_vizdist_service_read"
_REGISTERED: OrderedDict[tuple[str, str], Registration] = OrderedDict()
_ORIGINAL: dict[str, Callable[..., Any]] = {}
_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("vizdist_service_run", default=None)
_COUNTER = itertools.count(1)
#: Every open ``LocalDataService`` of this process (it adds itself; closed ones drop out).
LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0", "::", ""}


@dataclass(frozen=True)
class Registration:
    """One ``register_dataset`` call: the dataset the workers run, where, and how it is compressed."""

    dataset: Any
    address: str
    protocol: str
    compression: Any
    dataset_id: str


@dataclass(frozen=True)
class Read:
    """The arguments of one read from the service (``_from_dataset_id``), and its registration if known."""

    arguments: dict[str, Any]
    address: str
    protocol: str
    dataset_id: str
    registration: Registration | None


def _parse(service: Any) -> tuple[str, str]:
    """(protocol, address) of a service target, as TensorFlow parses it."""
    if isinstance(service, tuple):
        return str(service[0]), str(service[1])
    return tf_service.parse_service(service)


def text_of(value: Any) -> str | None:
    """A string or scalar string tensor as text (None inside a graph, where it has no value yet).

    Example:
        >>> text_of("1000"), text_of(object())
        ('1000', None)
    """
    if isinstance(value, str):
        return value
    try:
        import tensorflow as tf

        v = tf.get_static_value(value) if tf.is_tensor(value) else None  # eager, or a graph constant
    except Exception:
        return None
    if v is None:
        return None
    v = getattr(v, "item", lambda: v)() if getattr(v, "ndim", 0) == 0 else v
    return v.decode() if isinstance(v, bytes) else str(v)


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Raise a clear error unless a server accepts connections at ``host:port`` (waits at most ``timeout`` s).

    Example:
        >>> check_reachable("no-port")
        Traceback (most recent call last):
        ...
        ValueError: dispatcher must look like 'host:port' or 'grpc://host:port'; got 'no-port'.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"dispatcher must look like 'host:port' or 'grpc://host:port'; got {address!r}.")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise TracingError(
            f"no tf.data service dispatcher answers at {address} ({exc}). Start one "
            "(tf.data.experimental.service.DispatchServer, or vizdist.LocalDataService() without "
            "dispatcher=...) or fix the address."
        ) from None


def _same_place(a: str, b: str) -> bool:
    """Whether two ``host:port`` addresses name one server on this machine (loopback names are equal)."""
    (ha, _, pa), (hb, _, pb) = a.rpartition(":"), b.rpartition(":")
    ha, hb = ha.strip("[]"), hb.strip("[]")
    return pa == pb and (ha == hb or (ha in _LOOPBACK and hb in _LOOPBACK))


def serving(address: str) -> Any:
    """The open ``LocalDataService`` whose dispatcher is at ``address`` (None when vizdist did not start it).

    Example:
        >>> serving("127.0.0.1:1") is None
        True
    """
    return next((s for s in list(LIVE) if not s._closed and s.address and _same_place(s.address, address)), None)


def refuse_isolated(address: str) -> None:
    """Refuse a dispatcher this process cannot reach: one in a ``LocalDataService``'s private namespace.

    TensorFlow would wait for it forever (registering or reading a dataset), so say so now.

    Example:
        >>> refuse_isolated("127.0.0.1:1")   # no LocalDataService there: nothing to refuse
    """
    s = serving(address)
    if s is None or not s.isolated:
        return
    raise TracingError(
        f"grpc://{address} is the dispatcher of a LocalDataService(isolate=True): it runs in a private "
        "network namespace that this process cannot reach, so TensorFlow would wait for it forever. To run a "
        "dataset on this service, use service.trace(dataset, processing_mode=...) (its consumer runs inside "
        "the namespace). To read the service from this process with your own pipeline "
        "(tf.data.experimental.service.distribute / register_dataset / from_dataset_id), start it with "
        "vizdist.LocalDataService(isolate=False), whose servers then listen on every network interface.")


def _checked_call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, str, str]:
    """TF's arguments to its ``name`` function bound by name, and the service's protocol and address
    (refused at once when it is an isolated LocalDataService this process cannot reach)."""
    bound = inspect.signature(_ORIGINAL[name]).bind(*args, **kwargs)
    bound.apply_defaults()
    protocol, address = _parse(bound.arguments["service"])
    refuse_isolated(address)
    return bound, protocol, address


def _register(*args: Any, **kwargs: Any) -> Any:
    bound, protocol, address = _checked_call("register", args, kwargs)
    out = _ORIGINAL["register"](*args, **kwargs)
    dataset_id = text_of(out)
    if dataset_id is not None:
        _REGISTERED[(address, dataset_id)] = Registration(
            bound.arguments["dataset"], address, protocol, bound.arguments["compression"], dataset_id)
        _REGISTERED.move_to_end((address, dataset_id))
        while len(_REGISTERED) > KEEP:
            _REGISTERED.popitem(last=False)
    return out


def _service_dataset(ds: Any) -> Any:
    """TF's service read dataset under what TF's read function returned (it may wrap it in options)."""
    from vizdist.instrument.tfapi import datasets as tfd

    while ds is not None and type(ds).__name__ != tfd.DATA_SERVICE:
        ds = tfd.field(ds, "input_dataset", None)
    return ds


def _read(*args: Any, **kwargs: Any) -> Any:
    bound, protocol, address = _checked_call("read", args, kwargs)
    out = _ORIGINAL["read"](*args, **kwargs)
    dataset_id = text_of(bound.arguments["dataset_id"])
    target = _service_dataset(out)
    if target is not None and dataset_id is not None:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(target, _ATTR, Read(dict(bound.arguments), address, protocol, dataset_id,
                                        _REGISTERED.get((address, dataset_id))))
    return out


def install() -> None:
    """Wrap TensorFlow's tf.data service register/read functions (idempotent).

    Example:
        >>> install()          # doctest: +SKIP
        >>> installed()        # doctest: +SKIP
        True
    """
    if installed():
        return
    _ORIGINAL["register"], _ORIGINAL["read"] = tf_service.current("register"), tf_service.current("read")
    tf_service.patch("register", functools.wraps(_ORIGINAL["register"])(_register))
    tf_service.patch("read", functools.wraps(_ORIGINAL["read"])(_read))


def installed() -> bool:
    """Whether :func:`install` is in effect.

    Example:
        >>> isinstance(installed(), bool)   # doctest: +SKIP
        True
    """
    return bool(_ORIGINAL) and tf_service.current("register") is not _ORIGINAL["register"]


def uninstall() -> None:
    """Put TensorFlow's own functions back (tests use it to build a pipeline vizdist did not see).

    Example:
        >>> uninstall()        # doctest: +SKIP
    """
    if not _ORIGINAL:
        return
    tf_service.patch("register", _ORIGINAL["register"])
    tf_service.patch("read", _ORIGINAL["read"])
    _ORIGINAL.clear()


def read_of(ds: Any) -> Read | None:
    """The recorded read behind a ``_DataServiceDatasetV2`` (None when vizdist did not see it made).

    Example:
        >>> read_of(object()) is None
        True
    """
    return getattr(ds, _ATTR, None)


def register(service: Any, dataset: Any, compression: Any) -> Any:
    """Register ``dataset`` with TensorFlow's own function (not recorded): vizdist's tagged copy."""
    return (_ORIGINAL.get("register") or tf_service.current("register"))(service, dataset, compression=compression)


def read(arguments: dict[str, Any], **changes: Any) -> Any:
    """Read like a recorded :class:`Read`, with some arguments changed, through TensorFlow's own function."""
    return (_ORIGINAL.get("read") or tf_service.current("read"))(**{**arguments, **changes})


def run_token() -> str:
    """The token of the current trace run: readers that share a job inside one run share it in the trace.

    Example:
        >>> with one_run():
        ...     run_token() == run_token()
        True
    """
    return _RUN.get() or f"{os.getpid()}-{next(_COUNTER)}"


@contextlib.contextmanager
def one_run() -> Iterator[str]:
    """Every service read traced inside this block gets the same run token (one token per block).

    Example:
        >>> with one_run() as token:
        ...     token == run_token()
        True
    """
    token = _RUN.get() or f"{os.getpid()}-{next(_COUNTER)}"
    reset = _RUN.set(token)
    try:
        yield token
    finally:
        _RUN.reset(reset)
