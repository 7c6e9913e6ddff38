"""The JSON documents a launcher and its child processes exchange in a job folder, typed and checked.

Every document is a frozen dataclass with ``to_json()`` and ``from_json(text, source=...)``;
``from_json`` checks each field's presence and type and raises :class:`JobDocumentError` naming the
file, the field and what was expected (a file another version of vizdist wrote, or one cut short):
neither side reads a document by string keys.

===================  ==============================  ==================================================
document             file (:mod:`.jobfiles`)         written by -> read by
===================  ==============================  ==================================================
:class:`RunSpec`     ``spec.json``                   ``LocalCluster`` -> each task (``_worker_main``)
:class:`TaskResult`  ``result-<task>.json``          a task (or TF1's graph child) -> the launcher
:class:`TaskError`   ``error-<task>.json``           a task (or TF1's graph child) -> the launcher
:class:`Stopped`     ``stopped-<task>.json``         the launcher -> the task that asked
                                                     (``WorkerContext.stop_task``)
===================  ==============================  ==================================================

A :class:`Stopped` is also one entry of a trace's ``meta["lost_tasks"]``
(:class:`vizdist.contract.LostTask`): :meth:`Stopped.to_dict`.

Example:
    >>> spec = RunSpec(mode="ps", workers=2, ps=1, layout={"chief": 1, "worker": 2, "ps": 1}, timeout=60.0,
    ...                collective_timeout=30.0, cluster={"worker": ["127.0.0.1:5000"]}, deadline=0.0)
    >>> RunSpec.from_json(spec.to_json()) == spec
    True
    >>> Stopped.from_json('{"task": "worker-1", "how": "not running"}')
    Traceback (most recent call last):
    ...
    vizdist.instrument.processes.documents.JobDocumentError: stopped-<task>.json is not a valid Stopped document: field 'after_s' is missing (a number). ...
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from vizdist.errors import TracingError
from vizdist.instrument.processes import jobfiles

__all__ = ["JobDocumentError", "RunSpec", "Stopped", "TaskError", "TaskResult"]

_D = TypeVar("_D", bound="_Document")


class JobDocumentError(TracingError):
    """A job-folder document is not what its reader expects: the message names the file and the field."""


def _check(value: Any, expected: str) -> bool:
    """Whether ``value`` fits the annotation text ``expected`` (the few types these documents use)."""
    checks: dict[str, Any] = {
        "str": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "Any": lambda v: True,
        "dict[str, int]": lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and isinstance(x, int) and not isinstance(x, bool) for k, x in v.items()),
        "dict[str, list[str]]": lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and isinstance(x, list) and all(isinstance(a, str) for a in x) for k, x in v.items()),
        "dict[str, Any] | None": lambda v: v is None or isinstance(v, dict),
    }
    return bool(checks[expected](value))


_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "dict[str, int]": "an object of integers",
          "dict[str, list[str]]": "an object of lists of strings", "dict[str, Any] | None": "an object or null",
          "Any": "any JSON value"}


@dataclass(frozen=True)
class _Document:
    """What every document shares: JSON out, JSON in with each field checked."""

    #: the file name (pattern) the document lives in, for error messages.
    FILE: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """The document as plain JSON-able data."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The document as JSON text (a value JSON cannot hold is written as its ``str``)."""
        return json.dumps(self.to_dict(), default=str)

    @classmethod
    def from_json(cls: type[_D], text: str, *, source: str = "") -> _D:
        """Parse and check ``text``; :class:`JobDocumentError` names ``source`` (or the file kind) and the field."""
        where = source or cls.FILE
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise cls._error(where, f"it is not JSON ({exc})") from None
        return cls.from_dict(doc, source=where)

    @classmethod
    def from_dict(cls: type[_D], doc: Any, *, source: str = "") -> _D:
        """Check ``doc`` (parsed JSON) field by field and build the document."""
        where = source or cls.FILE
        if not isinstance(doc, dict):
            raise cls._error(where, f"it holds a {type(doc).__name__}, not an object")
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            expected = str(f.type)
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if f.name not in doc:
                if has_default:
                    continue
                raise cls._error(where, f"field {f.name!r} is missing ({_WORDS[expected]})")
            if not _check(doc[f.name], expected):
                raise cls._error(where, f"field {f.name!r} is {doc[f.name]!r}, not {_WORDS[expected]}")
            values[f.name] = float(doc[f.name]) if expected == "float" else doc[f.name]
        return cls(**values)

    @classmethod
    def _error(cls, where: str, what: str) -> JobDocumentError:
        return JobDocumentError(
            f"{where} is not a valid {cls.__name__} document: {what}. The launcher and its task processes must run "
            "the same vizdist; a file cut short means its writer died while writing it (see the task's log-<task>.txt "
            "in the job folder).")


@dataclass(frozen=True)
class RunSpec(_Document):
    """The launcher's run spec (``spec.json``), read by every task of a ``LocalCluster`` run.

    ``mode``: ``"mwms"`` or ``"ps"``; ``layout``: tasks per type (``chief``, ``worker``, ``ps``);
    ``cluster``: each type's ``host:port`` addresses (what ``TF_CONFIG`` lists); ``timeout``: seconds the
    run may take; ``collective_timeout``: seconds a collective waits for a peer; ``deadline``: the wall-clock
    time (``time.time()``) the launcher stops the run at (0: none).

    Example:
        >>> RunSpec.from_json('{"mode": "mwms"}', source="/job/spec.json")
        Traceback (most recent call last):
        ...
        vizdist.instrument.processes.documents.JobDocumentError: /job/spec.json is not a valid RunSpec document: field 'workers' is missing (an integer). ...
    """

    FILE: ClassVar[str] = jobfiles.SPEC

    mode: str
    workers: int
    ps: int
    layout: dict[str, int]
    timeout: float
    collective_timeout: float
    cluster: dict[str, list[str]]
    deadline: float = 0.0


@dataclass(frozen=True)
class TaskResult(_Document):
    """What a task's callable returned when it was not a trace: a plain JSON value (``result-<task>.json``).

    Example:
        >>> TaskResult.from_json(TaskResult(value=[1, 2]).to_json()).value
        [1, 2]
    """

    FILE: ClassVar[str] = jobfiles.RESULT.name("<task>")

    value: Any


@dataclass(frozen=True)
class TaskError(_Document):
    """What a task raised (``error-<task>.json``): its type, message and traceback, and any partial trace.

    ``partial_trace``: the ``Trace.to_dict()`` of the error's ``partial_trace`` (what the task recorded before
    it failed), or None.

    Example:
        >>> try:
        ...     raise ValueError("no data")
        ... except ValueError as exc:
        ...     err = TaskError.of(exc, task="worker-0")
        >>> err.type, err.message, err.partial_trace is None
        ('ValueError', 'no data', True)
        >>> err.summary()
        'ValueError: no data'
    """

    FILE: ClassVar[str] = jobfiles.ERROR.name("<task>")

    type: str
    message: str
    traceback: str
    task: str = ""
    partial_trace: dict[str, Any] | None = None

    @classmethod
    def of(cls, exc: BaseException, *, task: str = "") -> TaskError:
        """The document for ``exc``, being handled now (its traceback is the current one)."""
        import traceback

        partial = getattr(exc, "partial_trace", None)
        to_dict = getattr(partial, "to_dict", None)
        return cls(type=type(exc).__name__, message=str(exc), traceback=traceback.format_exc(), task=task,
                   partial_trace=to_dict() if callable(to_dict) else None)

    def summary(self) -> str:
        """``"<type>: <message>"``."""
        return f"{self.type}: {self.message}"


@dataclass(frozen=True)
class Stopped(_Document):
    """The launcher's answer to a task's stop request (``stopped-<task>.json``), and one lost task of a run.

    ``how``: how the task ended (``"killed on request with SIGTERM, then SIGKILL"``, ``"not running"``,
    ``"exited with code 1"``, ...); ``after_s``: seconds into the run (-1: it was not running).

    Example:
        >>> Stopped(task="worker-1", how="not running", after_s=-1.0).to_dict()
        {'task': 'worker-1', 'how': 'not running', 'after_s': -1.0}
    """

    FILE: ClassVar[str] = jobfiles.STOPPED.name("<task>")

    task: str
    how: str
    after_s: float
