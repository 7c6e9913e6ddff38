"""The run engine (``engine.py``) and its front ends: ``trace_distribution``, ``trace_tf1``, ``record()``; ``rows.py`` builds every row."""
