"""vizdist: see what TensorFlow really does with your data when it distributes it.

Record a real ``tf.distribute`` / tf.data / tf.data service run, then look at
where every element went (replica, device, worker, step) and when.

Example:
    >>> import vizdist
    >>> vizdist.virtual_devices(4)            # doctest: +SKIP
    >>> import tensorflow as tf                # doctest: +SKIP
    >>> trace = vizdist.trace_distribution(    # doctest: +SKIP
    ...     tf.distribute.MirroredStrategy(), tf.data.Dataset.range(10).batch(4))
    >>> vizdist.diagnose(trace)                # doctest: +SKIP

``import vizdist`` stays light: TensorFlow is imported only when you call
something that runs it (everything under ``vizdist.instrument``).
"""

from __future__ import annotations

import importlib
from typing import Any

from vizdist._version import __version__

# Bound eagerly: the function shares its name with its module (importing the module
# later must not replace the function on the package). Imports no pandas.
from vizdist.diagnose import diagnose

# Public name -> module that defines it. Imported on first use, so that
# ``import vizdist`` never imports TensorFlow, pandas, matplotlib or ipywidgets.
# What a view draws hangs off what it draws (trace.plot.split(), trace.show(), trace.timing, a
# comparison's or a topology's .plot()): see vizdist.views.
_LAZY = {
    # the trace (plain data) and the errors and warnings vizdist raises
    "Trace": "vizdist.trace",
    "load_trace": "vizdist.trace",
    "TraceFormatError": "vizdist.errors",
    "TracingError": "vizdist.errors",
    "RecordingWarning": "vizdist.errors",
    "IsolationError": "vizdist.errors",
    # instruments (run TensorFlow)
    "virtual_devices": "vizdist.instrument.core.devices",
    "record": "vizdist.instrument.run.user_run",
    "trace_distribution": "vizdist.instrument.run.distribution",
    "trace_tf1": "vizdist.instrument.run.legacy",
    "run_in_graph_mode": "vizdist.instrument.run.legacy",
    "LocalCluster": "vizdist.instrument.processes.cluster",
    "record_worker_shard": "vizdist.instrument.processes.shards",
    "compare_shard_policies": "vizdist.instrument.experiments.sharding",
    "write_text_files": "vizdist.instrument.experiments.sharding",
    "trace_parameter_server": "vizdist.instrument.strategies.parameter_server",
    "record_parameter_server": "vizdist.instrument.strategies.parameter_server",
    "LocalDataService": "vizdist.instrument.service",
    "trace_reduction": "vizdist.instrument.strategies.reduction",
    "trace_loss_scaling": "vizdist.instrument.strategies.reduction",
    # analysis (no TensorFlow, no renderer)
    "diff": "vizdist.trace_diff",
    "topology": "vizdist.analysis.topology",
    # tables and teaching widgets
    "loss_table": "vizdist.render.reduction",
    "predict_split": "vizdist.render.predict",
    "predict_files": "vizdist.render.predict",
    "predict_arrivals": "vizdist.render.predict",
    "what_if": "vizdist.experiments",  # instrument's experiment shown as render's WhatIf
    "what_if_cluster": "vizdist.experiments",
    "what_if_service": "vizdist.experiments",
}

#: Deprecated, and still resolved (not in ``__all__``): its removal is in ``vizdist/instrument/run/`` (CHANGELOG.md).
_STILL_DEPRECATED = {"watch": "vizdist.instrument.run.distribution"}

#: Names ``vizdist`` no longer has (CHANGELOG.md, 0.2.0): name -> what to write instead. Asking for one is an
#: AttributeError that says so; none of them resolves.
_GONE = {
    # the deprecated top-level views and timing statistics (deprecated in 0.1.0)
    "plot_split": "trace.plot.split(...)",
    "plot_timeline": "trace.plot.timeline(...)",
    "plot_coverage": "trace.plot.coverage(...)",
    "plot_streams": "trace.plot.streams(...)",
    "plot_placement": "trace.plot.placement(...)",
    "plot_closures": "trace.plot.closures(...)",
    "plot_variable_shards": "trace.plot.variable_shards(...)",
    "show": "trace.show()",
    "timeline": 'trace.show("timeline", ...)',
    "show_placement": 'trace.show("placement", ...)',
    "show_reduction": 'trace.show("reduction", ...)',
    "to_chrome_trace": "trace.to_chrome_trace(path)",
    "overlap_summary": "trace.timing.overlap_summary()",
    "most_at_once": "trace.timing.most_at_once(...), or vizdist.analysis.timeline.most_at_once(pairs) for "
                    "(start, end) pairs",
    "tf_data_iterators": "trace.timing.tf_data_iterators()",
    "map_threads": "trace.timing.map_threads()",
    "prefetch_buffers": "trace.timing.prefetch_buffers()",
    "empty_buffer_steps": "trace.timing.empty_buffer_steps()",
    # moved off the top level in 0.2.0: views hang off what they draw, result types live where they are made
    "plot_topology": "vizdist.topology(source).plot(...) (or trace.plot.topology(...))",
    "show_topology": "vizdist.topology(source).show() (or trace.show.topology())",
    "plot_shard_policies": "comparison.plot(...), comparison = vizdist.compare_shard_policies(...)",
    "Explorer": "vizdist.render.explorer.Explorer (trace.show() returns one)",
    "ShardComparison": "vizdist.analysis.sharding.ShardComparison (compare_shard_policies returns one)",
    "TraceDiff": "vizdist.trace_diff.TraceDiff (vizdist.diff returns one)",
    "Topology": "vizdist.analysis.topology.Topology (vizdist.topology returns one)",
    "Recording": "vizdist.instrument.run.user_run.Recording (vizdist.record() returns one)",
    "Predict": "vizdist.render.predict.Predict (the predict_* functions return one)",
    "WhatIf": "vizdist.render.whatif.WhatIf (the what_if* functions return one)",
    "validate_meta": "vizdist.contract.validate_meta",
    "variable_shards": "vizdist.instrument.strategies.parameter_server.variable_shards",
    "trace_values": "vizdist.trace_distribution(strategy, values) (it takes distributed values too)",
}

__all__ = ["__version__", "diagnose", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name) or _STILL_DEPRECATED.get(name)
    if module is None:
        if name in _GONE:
            raise AttributeError(f"vizdist.{name} is gone (CHANGELOG.md, 0.2.0): use {_GONE[name]}.")
        raise AttributeError(f"module 'vizdist' has no attribute {name!r}")
    if module.startswith("vizdist.instrument.") or module == "vizdist.experiments":
        # Before anything that runs TensorFlow is imported: an unsupported TF is refused (or warned about) here,
        # with what to install, not by an error from deep inside vizdist.
        from vizdist.instrument.core.versions import require_supported_tensorflow

        require_supported_tensorflow(stacklevel=3)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
