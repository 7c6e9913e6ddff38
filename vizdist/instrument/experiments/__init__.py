"""Teaching experiments on real TensorFlow (the top of ``instrument/``): what-if knobs, the auto-shard policy comparison.

They run clusters (``processes/``), services (``service/``) and runs (``run/``), and return the analysis layer's
objects (``Experiment``, ``ShardComparison``); ``vizdist/experiments.py`` joins them to their widgets.
"""
