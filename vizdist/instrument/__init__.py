"""The only part of vizdist that imports TensorFlow: it runs real pipelines and records them.

Its sub-packages form layers; a module imports only from its own sub-package or a lower one
(``tests/test_layers.py``'s ``INSTRUMENT_ORDER`` declares the order and forbids every upward import and
every cycle between sub-packages). Lowest first:

==============  ================================================================================================
``tfapi/``      every private TensorFlow / Keras name vizdist uses, behind one door (imports nothing of vizdist
                but :mod:`vizdist.errors`)
``core/``       what every sub-package needs: the row builder (``rows.py``), the id tag's layout (``codes.py``),
                the tf.data service registry and patch (``service_registry.py``), the generic run engine and its
                ``Observer`` protocol (``engine.py``), ``virtual_devices`` (``devices.py``), file systems
                (``storage.py``), supported versions (``versions.py``)
``ids/``        the id carrier: tagging each element with its source id, through the tf.data service too
``observe/``    what a run records beside the elements: timing, placement, numerics, topology, collectives,
                distributed values
``processes/``  every process vizdist starts: the supervisor, ``LocalCluster``, the typed job documents
``service/``    ``LocalDataService`` and the service's part in a run (``ServiceObserver``)
``run/``        the front ends of the engine: ``trace_distribution``, ``trace_tf1``, ``record()``
``strategies/`` strategy-specific instruments: parameter servers, reductions
``experiments/`` teaching experiments: what-if runs, the auto-shard policy comparison
==============  ================================================================================================

Loading it registers TensorFlow's file systems (``tf.io.gfile``, :mod:`vizdist.instrument.core.storage`) for
patches) is reached only through :mod:`vizdist.instrument.tfapi`, which declares each private name it uses.
every URL scheme, so ``vizdist.record(path="gs://...")`` and ``vizdist.load_trace("gs://...")`` read and
write where the cluster's TensorFlow does (TensorFlow itself is imported when such a path is first used).
"""

from vizdist._storage import register_scheme
from vizdist.instrument.core.storage import GFILE

register_scheme("*", GFILE)
