"""Every process vizdist starts (above ``observe/``).

``supervisor.py`` starts, watches and always cleans up every child (``limits.py``: the bounds on every wait and
the checks the launchers share; ``janitor.py``: folders removed if this process dies; ``namespace.py``: the
private network children may join); ``cluster.py`` is ``LocalCluster`` (``_worker_main.py`` one of its tasks,
``context.py`` the ``WorkerContext`` a task's callable gets, ``isolation.py`` its servers isolated, or exposed on
an explicit opt-out); ``jobfiles.py`` spells once each file a launcher and its children exchange, and
``documents.py`` types the JSON ones (``RunSpec``, ``TaskResult``, ``TaskError``, ``Stopped``: checked on read);
``shards.py`` writes and reads one worker's shard of a trace. Imports ``core/`` and ``observe/``.
"""
