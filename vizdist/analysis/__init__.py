"""The analysis layer: what a recorded run means, without TensorFlow or a renderer.

Layers (enforced by ``tests/test_layers.py``)::

    instrument/ (runs TensorFlow)  ->  trace.py + contract.py (plain data)
        ->  analysis (this package, diagnose.py, checks/)  ->  render/ (figures, widgets, export)

Modules here import only ``vizdist.trace`` / ``vizdist.contract`` /
``vizdist.errors`` and each other, plus pandas and numpy: never TensorFlow,
``vizdist.instrument`` or ``vizdist.render``. ``vizdist/diagnose.py`` and
``vizdist/checks/`` belong to this layer too (they stay where they are).

- :mod:`vizdist.analysis.sharding`: :class:`~vizdist.analysis.sharding.ShardComparison`.
- :mod:`vizdist.analysis.timeline`: :func:`~vizdist.analysis.timeline.overlap_summary` and the other
  timing statistics, a trace's own as ``trace.timing`` (:class:`~vizdist.analysis.timeline.Timing`).
- :mod:`vizdist.analysis.whatif`: the :class:`~vizdist.analysis.whatif.Knob` s and the
  :class:`~vizdist.analysis.whatif.Experiment` a what-if widget shows.
"""
