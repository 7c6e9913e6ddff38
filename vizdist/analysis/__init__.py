"""The analysis layer: what a recorded run means, without TensorFlow or a renderer.

Layers (enforced by ``tests/test_layers.py``)::

    instrument/ (runs TensorFlow)  ->  trace.py + contract.py (plain data)
        ->  analysis (this package, diagnose.py, checks/)  ->  render/ (figures, widgets, export)

Modules here import only ``vizdist.trace`` / ``vizdist.contract`` /
``vizdist.errors`` and each other, plus pandas and numpy: never TensorFlow or
``vizdist.instrument``, and ``vizdist.render`` only lazily, inside the methods
by which a result draws itself (``ShardComparison.plot()``, ``Topology.plot()``,
``.show()``, ``_repr_*_``; ``tests/test_layers.py``'s ``LAZY_UP``).
``vizdist/diagnose.py``, ``vizdist/checks/`` and ``vizdist/trace_diff.py`` belong to this layer too, in
one declared order, lowest first (``tests/test_layers.py``'s ``ANALYSIS_ORDER``; no upward import, no cycle):
this package (what a trace means) < ``checks/`` (findings, built on it) < ``diagnose.py`` (runs the checks)
< ``trace_diff.py`` (two runs compared, their findings too).

- :mod:`vizdist.analysis.sharding`: :class:`~vizdist.analysis.sharding.ShardComparison`.
- :mod:`vizdist.analysis.timeline`: :func:`~vizdist.analysis.timeline.overlap_summary` and the other
  timing statistics, a trace's own as ``trace.timing`` (:class:`vizdist.views.TimingAccessor`).
- :mod:`vizdist.analysis.topology`: :func:`~vizdist.analysis.topology.topology` reads the tasks and links of a
  run or a cluster spec (TensorFlow's rules) into a :class:`~vizdist.analysis.topology_model.Topology`
  (:mod:`vizdist.analysis.topology_model`: the data, which draws itself).
- :mod:`vizdist.analysis.whatif`: the :class:`~vizdist.analysis.whatif.Knob` s and the
  :class:`~vizdist.analysis.whatif.Experiment` a what-if widget shows.
"""
