"""The one door to TensorFlow's and Keras's private side: every private module, ``_``-prefixed attribute,
class swap and process-wide patch vizdist relies on is reached through this package, and nowhere else.

Each private name is declared once (once per place: ``_stop`` of a ``range`` and ``_stop()`` of a server
are two entries) in :data:`vizdist.instrument.tfapi.table.TABLE` (the name, where TF or
Keras defines it, what vizdist uses it for, the TF/Keras versions it is known in), and
``tests/instrument/test_tfapi.py`` checks every entry exists in the installed TensorFlow and Keras (also on the
oldest supported ones: ``make smoke``), and scans the rest of vizdist for private TF/Keras names reached
around this package. It is the lowest layer of ``instrument/``: it imports nothing of vizdist but
:mod:`vizdist.errors`.

By concern, one module each:

* :mod:`.datasets`: tf.data's dataset classes (by TF's class name), the fields TF keeps on them, their
  serialized graphs, and the few datasets vizdist builds from TF's private classes;
* :mod:`.input_lib`: tf.distribute's distributed datasets and iterators, which a recording re-classes;
* :mod:`.keras`: the Keras functions a recording hooks (callbacks, trainers, data adapters) and the fields of
  Keras's data adapters;
* :mod:`.service`: the tf.data service functions vizdist patches, and its servers;
* :mod:`.runtime`: the eager context, op callbacks and the debugger, deprecation warnings, TF's export
  registry, function graphs and strategy internals;
* :mod:`.coordinator`: the parameter-server ``ClusterCoordinator``'s workers, closures and remote values.

Example:
    >>> from vizdist.instrument.tfapi.table import TABLE
    >>> len({(s.name, s.where) for s in TABLE}) == len(TABLE)      # each private name declared once
    True
"""
