"""Renderers: turn a Trace into figures, HTML and widgets. Nothing here imports TensorFlow.

Each view is reached through what it draws (``trace.plot.split()``: :mod:`vizdist.views`; a
``Topology``'s or a ``ShardComparison``'s own ``.plot()``), which imports the renderer here when called.
Where a view has several outputs they draw from one layout: ``TimelineLayout``
(:mod:`vizdist.analysis.timeline_layout`), ``TopologyLayout`` (:mod:`vizdist.render.topology_layout`),
``split_layout`` (:mod:`vizdist.render.layout`).
"""
