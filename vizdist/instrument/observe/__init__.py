"""What a run records beside where elements went (above ``ids/``).

``timing.py`` (+ ``xplane.py``, the TF profiler's spans) and ``placement.py`` (+ ``stages.py``, what each op was for and the
copies between devices; ``numerics.py``, the NaN/Inf checks) are the ``Observer`` s a run plugs in (the protocol is ``core/engine.py``); ``topology.py`` reads
what TF servers listen on, ``collectives.py`` the collective ops of a step, ``values.py`` a
``DistributedValues``' components and their devices. Imports ``core/`` and ``ids/``.
"""
