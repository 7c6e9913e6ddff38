"""The id carrier (above ``core/``): how each element's source id is attached to it and found again.

``tagging.py`` (the write side) attaches each element's id and carries it through ``map``, ``batch``, files and
the tf.data service (the tag's layout is ``core/codes.py``): it walks your pipeline and hands each dataset to the
handler of its TF class, one small module per family of ops in ``handlers/`` (the table is
``handlers/__init__.py``; what they share, ``handlers/state.py``); ``own_service.py`` rebuilds your own tf.data service
pipeline tagged and re-reads it with your read's arguments; ``random_state.py`` keeps random ops' state;
``map_failure.py`` finds the element a function raised on. Imports ``core/`` only.
"""
