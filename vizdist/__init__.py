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

import functools
import importlib
import warnings
from typing import Any

from vizdist import views
from vizdist._version import __version__

# Bound eagerly: the function shares its name with its module (importing the module
# later must not replace the function on the package). Imports no pandas.
from vizdist.diagnose import diagnose

# Public name -> module that defines it. Imported on first use, so that
# ``import vizdist`` never imports TensorFlow, pandas, matplotlib or ipywidgets.
_LAZY = {
    # the trace and its contract (plain data)
    "Trace": "vizdist.trace",
    "load_trace": "vizdist.trace",
    "TraceFormatError": "vizdist.errors",
    "TracingError": "vizdist.errors",
    "RecordingWarning": "vizdist.errors",
    "IsolationError": "vizdist.errors",
    "validate_meta": "vizdist.contract",
    # instruments (run TensorFlow)
    "virtual_devices": "vizdist.instrument.devices",
    "trace_distribution": "vizdist.instrument.run.distribution",
    "watch": "vizdist.instrument.run.distribution",
    "record": "vizdist.instrument.run.user_run",
    "Recording": "vizdist.instrument.run.user_run",
    "trace_tf1": "vizdist.instrument.run.legacy",
    "run_in_graph_mode": "vizdist.instrument.run.legacy",
    "LocalCluster": "vizdist.instrument.processes.cluster",
    "record_worker_shard": "vizdist.instrument.processes.shards",
    "compare_shard_policies": "vizdist.experiments",  # registers ShardComparison's views, then runs
    "write_text_files": "vizdist.instrument.experiments.sharding",
    "trace_parameter_server": "vizdist.instrument.strategies.parameter_server",
    "record_parameter_server": "vizdist.instrument.strategies.parameter_server",
    "variable_shards": "vizdist.instrument.strategies.parameter_server",
    "LocalDataService": "vizdist.instrument.service",
    # analysis (no TensorFlow, no renderer); the timing statistics are trace.timing's now (deprecated here)
    "ShardComparison": "vizdist.analysis.sharding",
    "overlap_summary": "vizdist.analysis.timeline",
    "most_at_once": "vizdist.analysis.timeline",
    "tf_data_iterators": "vizdist.analysis.timeline",
    "map_threads": "vizdist.analysis.timeline",
    "prefetch_buffers": "vizdist.analysis.timeline",
    "empty_buffer_steps": "vizdist.analysis.timeline",
    "diff": "vizdist.analysis.diff",
    "TraceDiff": "vizdist.analysis.diff",
    # views and export
    "plot_split": "vizdist.render.figures",
    "show": "vizdist.render.explorer",
    "Explorer": "vizdist.render.explorer",
    "plot_shard_policies": "vizdist.render.sharding",
    "plot_coverage": "vizdist.render.service",
    "plot_streams": "vizdist.render.service",
    "plot_timeline": "vizdist.render.timeline_figure",
    "plot_variable_shards": "vizdist.render.parameter_server",
    "plot_closures": "vizdist.render.parameter_server",
    "timeline": "vizdist.render.timeline_widget",
    "to_chrome_trace": "vizdist.render.export",
    # predict, then reveal; what-if knobs on live TensorFlow (issue 13)
    "Predict": "vizdist.render.predict",
    "predict_split": "vizdist.render.predict",
    "predict_files": "vizdist.render.predict",
    "predict_arrivals": "vizdist.render.predict",
    "WhatIf": "vizdist.render.whatif",
    "what_if": "vizdist.experiments",  # instrument's experiment shown as render's WhatIf
    "what_if_cluster": "vizdist.experiments",
    "what_if_service": "vizdist.experiments",
    # placement and reduction (issue 11)
    "show_placement": "vizdist.render.placement",
    "plot_placement": "vizdist.render.placement",
    "trace_reduction": "vizdist.instrument.strategies.reduction",
    "trace_values": "vizdist.instrument.strategies.values",
    "trace_loss_scaling": "vizdist.instrument.strategies.reduction",
    "show_reduction": "vizdist.render.reduction",
    "loss_table": "vizdist.render.reduction",
    # cluster topology (issue 12): a Topology draws itself through vizdist.views
    "topology": "vizdist.analysis.topology",
    "Topology": "vizdist.analysis.topology",
    "plot_topology": "vizdist.render.topology",
    "show_topology": "vizdist.render.topology",
}

#: Top-level views and timing statistics that now hang off the trace: name -> what to write instead. They
#: still work (the same function, trace first) for one release, with a DeprecationWarning, and are no longer
#: in ``__all__``.
_DEPRECATED = {
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
    # the timing statistics of notebook 05 (issue 29)
    "overlap_summary": "trace.timing.overlap_summary()",
    "most_at_once": "trace.timing.most_at_once(...), or vizdist.analysis.timeline.most_at_once(pairs) for "
                    "(start, end) pairs",
    "tf_data_iterators": "trace.timing.tf_data_iterators()",
    "map_threads": "trace.timing.map_threads()",
    "prefetch_buffers": "trace.timing.prefetch_buffers()",
    "empty_buffer_steps": "trace.timing.empty_buffer_steps()",
}

__all__ = ["__version__", "diagnose", "views", *(name for name in _LAZY if name not in _DEPRECATED)]

# What draws what: trace.plot.split(), trace.show(), a ShardComparison's or a Topology's own display; and
# trace.timing, the accessor of a trace's timing statistics. Registered here, in one place, as paths
# imported on first use (nothing they name is imported now).
views.register_builtin_views()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vizdist' has no attribute {name!r}")
    if module.startswith("vizdist.instrument.") or module == "vizdist.experiments":
        # Before anything that runs TensorFlow is imported: an unsupported TF is refused (or warned about) here,
        # with what to install, not by an error from deep inside vizdist.
        from vizdist.instrument.versions import require_supported_tensorflow

        require_supported_tensorflow(stacklevel=3)
    value = getattr(importlib.import_module(module), name)
    if name in _DEPRECATED:
        value = _deprecated(name, value, _DEPRECATED[name])
    globals()[name] = value
    return value


def _deprecated(name: str, fn: Any, instead: str) -> Any:
    """``fn``, saying (DeprecationWarning) on each call that ``instead`` is the way to call it now."""

    @functools.wraps(fn)
    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"vizdist.{name} is deprecated: use {instead} (the same function); "
                      f"vizdist.{name} goes in the next release.", DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)

    return alias


def __dir__() -> list[str]:
    return sorted(__all__)
