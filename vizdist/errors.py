"""Errors vizdist raises. Each message says what was wrong and what to do."""

from __future__ import annotations

import traceback


class TracingError(RuntimeError):
    """Recording a run failed: the message names the cause and a fix.

    ``partial_trace`` holds what was recorded before the failure, if anything.
    """

    def __init__(self, message: str, *, partial_trace: object | None = None) -> None:
        super().__init__(message)
        self.partial_trace = partial_trace


class IsolationError(RuntimeError):
    """vizdist could not isolate the TensorFlow servers it was asked to start, so it started none.

    The message names the cause and the explicit opt-out (``isolate=False``), which runs them
    reachable from the network: anyone who can reach the machine can then run code in them.
    """


class RecordingWarning(UserWarning):
    """A ``vizdist.record()`` block ended with something it did not record: the message says what, and why.

    What the user's code ran is never changed by it; filter it with
    ``warnings.filterwarnings("ignore", category=vizdist.RecordingWarning)``.
    """


class VizdistDeprecationWarning(DeprecationWarning):
    """Something of vizdist's own is deprecated: the message says what to write instead and when it goes.

    Every deprecation vizdist makes from 0.2.0 on uses this class, so the test suite can turn vizdist's own
    into errors (``pyproject.toml``'s ``filterwarnings``) while third parties' stay theirs to fix. A name is
    deprecated for one release, then removed (``CHANGELOG.md``).
    """


class TraceFormatError(ValueError):
    """A file or dict is not a vizdist trace, or is damaged: the message names the file and what is wrong."""


def release_frames(error: BaseException | None) -> None:
    """Let go of the locals in ``error``'s traceback (and the errors it chains), keeping its lines.

    A tf.data error's traceback runs through TF's iterator code, whose frames hold the iterator.
    Caught and kept (as vizdist keeps the error it re-raises with the partial trace), they put the
    iterator in a reference cycle, and whichever later garbage collection found it destroyed it, in an
    unrelated thread. TF's iterator destructor waits for the iterator's threads while holding the GIL:
    in CI that froze a later test for up to three minutes. Cleared frames let the iterator go at once, in
    the thread that read it. The printed traceback is the same; only a post-mortem debugger sees fewer
    locals.

        >>> def read(iterator):
        ...     return 1 / 0
        >>> try:
        ...     read(iter([1]))
        ... except ZeroDivisionError as e:
        ...     release_frames(e)
        ...     failed_in = e.__traceback__.tb_next.tb_frame
        >>> failed_in.f_code.co_name, failed_in.f_locals
        ('read', {})
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__
