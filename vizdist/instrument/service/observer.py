"""The tf.data service side of a run: the patch on, and one run token for every service read of the run.

The run engine (:mod:`vizdist.instrument.core.engine`) knows nothing of the tf.data service; each front end
(``trace_distribution``, ``trace_tf1``, ``record()``) plugs this observer into its run
(:func:`vizdist.instrument.run.observers.observers_for` puts it first). When the run opens it installs
:func:`vizdist.instrument.core.service_registry.install` (so a service pipeline built inside the run, in
``record()``'s block, is seen) and opens :func:`~vizdist.instrument.core.service_registry.one_run`: pipelines
that share a tf.data service job in TF (the same ``job_name``) share it traced too, whichever dataset of the
run they belong to. Started first, it is closed last.

Example:
    >>> from vizdist.instrument.core import engine, service_registry
    >>> with engine.Run(None, api="demo", observers=[ServiceObserver()]):  # doctest: +SKIP
    ...     service_registry.run_token() == service_registry.run_token()
    True
"""

from __future__ import annotations

import contextlib

from vizdist.instrument.core import service_registry
from vizdist.instrument.core.engine import Observer, Run

__all__ = ["ServiceObserver"]


class ServiceObserver(Observer):
    """Installs the service patch when a run opens; one service run token until it closes.

    Example:
        >>> ServiceObserver()
        ServiceObserver()
    """

    def __init__(self) -> None:
        self._token: contextlib.AbstractContextManager[str] | None = None

    def __repr__(self) -> str:
        return "ServiceObserver()"

    def start(self, run: Run) -> None:
        service_registry.install()
        self._token = service_registry.one_run()
        self._token.__enter__()

    def close(self, exc: BaseException | None) -> None:
        if self._token is not None:
            self._token.__exit__(None, None, None)
            self._token = None
