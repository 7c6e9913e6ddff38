"""The lowest layer of ``instrument/`` (only ``tfapi/`` is below it): what every other sub-package needs.

* :mod:`.rows` — :class:`~vizdist.instrument.core.rows.Recorder`, the one builder of every trace row, storing
  its columns as :mod:`.columns` packs them; :mod:`.workers` — the strategy facts each instrument asks
  (``replica_devices``, ``worker_position``, ``strategy_name``; importable from :mod:`.rows` too);
* :mod:`.codes` — the id tag's layout: build, strip (``untag``) and decode (``decode_tags``) it;
* :mod:`.service_registry` — what this process registered with and read from a tf.data service
  (TensorFlow's two service entry points, wrapped by ``install()``), and which ``LocalDataService`` serves an
  address;
* :mod:`.engine` — the generic run engine: a ``Run`` and the ``Observer`` protocol its recorders plug into; it
  knows no recorder and no tf.data service (``service/observer.py`` plugs the service in);
* :mod:`.devices` — ``virtual_devices``, what every session calls first; :mod:`.storage` — TensorFlow's file
  systems for ``gs://`` and other paths; :mod:`.versions` — the TensorFlow versions vizdist supports.

Its modules import each other, ``tfapi/`` and vizdist's lower layers (the trace, the analysis), never another
sub-package of ``instrument/``.
"""
