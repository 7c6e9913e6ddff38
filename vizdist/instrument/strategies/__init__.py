"""Strategy-specific instruments (above ``run/``): parameter servers and their closures, reductions and loss scaling.

``parameter_server.py`` (+ ``closures.py``) records which worker ran each scheduled closure on which elements;
``reduction.py`` one real reduction (it records through ``run/``'s ``trace_distribution``; a
``DistributedValues``' components are ``observe/values.py``).
"""
