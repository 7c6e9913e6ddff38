"""A real tf.data service, traced element by element.

:class:`LocalDataService` starts a real ``tf.data.experimental.service``
``DispatchServer`` and ``WorkerServer`` s (each its own process by default, or
all in this process), or connects to a dispatcher you already run.
:meth:`LocalDataService.trace` runs your dataset through it and records, for
every delivered source element:

* which **worker** produced it — read for real inside the pipeline: every
  worker process runs in its own folder holding a ``vizdist_worker_id`` file,
  and vizdist appends one step to your pipeline that reads that file
  (``tf.io.read_file`` with a relative path) on the worker;
* which **consumer** received it, at which position of its stream, and when;
* its **source id** (the value for ``range``, the index for
  ``from_tensor_slices``, ``file#line`` for text files), carried by
  :func:`vizdist.instrument.ids.tagging.tag_dataset` and stripped from what the
  service hands your code.

By default the dispatcher, the workers and the consumers run as processes in
one private network namespace that has only loopback: TensorFlow's servers
listen on ``[::]:port``, and there nobody else can reach them. Your notebook
sends the pipeline (its graph, as tf.data service itself ships it) to the
consumer process and gets the trace back as a file.

The parts, one job each:

* :mod:`.local` — :class:`LocalDataService`: start, trace, stop;
* :mod:`.options` — checks of the knobs;
* :mod:`.pipeline` — tagging, the worker-id step, shipping the graph;
* :mod:`.consume` — consumer threads and the stall watchdog;
* :mod:`.rows` — the trace rows;
* :mod:`.host` — the consumer process (and dispatcher);
* :mod:`.remote` — talking to it; :mod:`.inprocess` — ``in_process=True``;
* :mod:`.observer` — the service's part in every run: ``ServiceObserver`` installs the registry's patch and
  gives the run's service reads one token.

It sits above ``core/``, ``ids/``, ``observe/`` and ``processes/`` and imports nothing above them. What
this process registered with and read from a service is ``core/service_registry.py`` (every sub-package
needs it); your own ``distribute(...)`` / ``from_dataset_id`` pipeline, traced with real ids, is
``ids/own_service.py``.

Example:
    >>> import vizdist, tensorflow as tf                      # doctest: +SKIP
    >>> with vizdist.LocalDataService(workers=2) as service:  # doctest: +SKIP
    ...     t = service.trace(tf.data.Dataset.range(20), processing_mode="parallel_epochs")
    >>> t.elements.groupby("worker")["source_id"].count().to_dict()  # doctest: +SKIP
    {0: 20, 1: 20}
"""

from __future__ import annotations

from vizdist.instrument.service.local import LocalDataService
from vizdist.instrument.service.options import PROCESSING_MODES, SHARDING_POLICIES

__all__ = ["PROCESSING_MODES", "SHARDING_POLICIES", "LocalDataService"]
