"""The bounds on every process vizdist starts, and the checks :class:`vizdist.LocalCluster` and
:class:`vizdist.LocalDataService` share.

Every wait is bounded: :data:`DEFAULT_TIMEOUT` by default, and in a task a cluster started, cut to end
:data:`TASK_MARGIN_S` before the launcher's own deadline (:func:`bounded_timeout`, the deadline set by
:func:`set_task_deadline`). How many processes vizdist starts unasked is bounded too (:func:`process_limit`,
:func:`check_count`); :func:`check_seconds` checks a timeout; :func:`free_ports` and :func:`port_in_use` find
loopback ports; :func:`vizdist_root` is what a child needs on its import path. Importable from
:mod:`vizdist.instrument.processes.supervisor` too.

Example:
    >>> check_seconds("timeout", 60), bounded_timeout(30.0)
    (60.0, 30.0)
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_TIMEOUT", "TASK_MARGIN_S", "bounded_timeout", "check_count", "check_seconds", "free_ports",
           "port_in_use", "process_limit", "set_task_deadline", "vizdist_root"]

#: How long a call that starts processes or servers waits by default (``timeout=``) before it stops
#: them and returns (or raises with) what it has: no call vizdist makes waits without a bound.
DEFAULT_TIMEOUT = 180.0
#: In a task a :class:`LocalCluster` started, a bounded run ends this long before the launcher's own
#: deadline, so its partial trace comes back before the launcher stops the task.
TASK_MARGIN_S = 15.0
_task_deadline = 0.0  # time.time() by which the launcher stops this process (0: no launcher)


def set_task_deadline(deadline: float) -> None:
    """Note the wall-clock time (``time.time()``) by which this process's launcher stops it (0: none)."""
    global _task_deadline
    _task_deadline = float(deadline)


def bounded_timeout(timeout: float | None) -> float | None:
    """``timeout``, cut to end :data:`TASK_MARGIN_S` before this task's launcher deadline, if it has one.

    Example:
        >>> bounded_timeout(30.0), bounded_timeout(None)   # no launcher deadline in this process
        (30.0, None)
    """
    if not _task_deadline:
        return timeout
    left = max(10.0, _task_deadline - time.time() - TASK_MARGIN_S)
    return left if timeout is None else min(float(timeout), left)


def vizdist_root() -> str:
    """The folder that holds the ``vizdist`` package (what children need on ``PYTHONPATH``).

    Example:
        >>> (Path(vizdist_root()) / "vizdist" / "__init__.py").exists()
        True
    """
    return str(Path(__file__).resolve().parents[3])


def process_limit() -> int:
    """How many TensorFlow processes vizdist starts without being told to: 4 per core, at least 8.

    Example:
        >>> process_limit() >= 8
        True
    """
    return max(8, 4 * (os.cpu_count() or 1))


def check_count(name: str, value: Any, *, minimum: int, limit: int | None = None, owner: str = "") -> int:
    """``value`` as an int >= ``minimum`` (``bool`` is refused), at most ``limit`` processes.

    Example:
        >>> check_count("workers", 2, minimum=1)
        2
        >>> check_count("workers", True, minimum=1)
        Traceback (most recent call last):
        ...
        TypeError: workers must be an int; got True (a bool).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "a bool" if isinstance(value, bool) else type(value).__name__
        raise TypeError(f"{name} must be an int; got {value!r} ({kind}).")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}.")
    if limit is not None and value > limit:
        cores = os.cpu_count() or 1
        raise ValueError(
            f"{owner}{name}={value} would start {value} TensorFlow processes on a machine with {cores} CPU "
            f"core(s); vizdist refuses more than {limit} unless told (max_workers={limit} is the default, "
            f"4 per core, at least 8). Pass max_workers={value} to start them anyway."
        )
    return value


def check_seconds(name: str, value: Any) -> float:
    """``value`` as a positive, finite number of seconds (``bool`` and strings are refused).

    Example:
        >>> check_seconds("timeout", 60)
        60.0
        >>> check_seconds("timeout", "60")
        Traceback (most recent call last):
        ...
        TypeError: timeout must be a number of seconds (int or float); got '60' (str).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds (int or float); got {value!r} "
                        f"({type(value).__name__}).")
    if not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive, finite number of seconds; got {value!r}.")
    return float(value)


def free_ports(n: int, *, host: str = "127.0.0.1") -> list[int]:
    """Return ``n`` distinct TCP ports that are free on ``host`` right now.

    The sockets are bound together (so the ports differ) and closed before
    returning; a port can still be taken by someone else in between, in
    which case the servers fail to start and say so.

    Example:
        >>> ports = free_ports(2)
        >>> len(set(ports)) == 2
        True
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether binding ``host:port`` fails right now.

    Example:
        >>> port_in_use(free_ports(1)[0])
        False
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False
