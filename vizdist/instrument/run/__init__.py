"""The front ends of the run engine (above ``service/``): ``trace_distribution``, ``trace_tf1``, ``record()``.

Each opens a ``core/engine.py`` ``Run`` with the observers ``observers.py`` makes (the tf.data service's, timing,
placement), makes its input (``inputs.py``, ``keras_inputs.py``) and reads steps with one ``StepReader``
(``reader.py``: each replica's elements, eager or inside a ``tf.function``). ``distribution.py`` is
``trace_distribution``, ``legacy.py`` ``trace_tf1``, ``user_run.py`` + ``dataset_record.py`` (one dataset of the
block, and the phase of a pass) + ``recorded_input.py`` + ``epochs.py`` + ``stream.py`` ``record()``; ``feed.py``
the newest steps the live explorer (``rec.show()``) reads. Imports every sub-package below it.
"""
