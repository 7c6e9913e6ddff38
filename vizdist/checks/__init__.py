"""Checks behind ``vizdist.diagnose``: one module per topic, every check listed in :mod:`.registry`.

``finding.py`` (what a check yields) is the lowest module here; each topic module imports it, and
``registry.py`` imports the topic modules and declares, in one ordered tuple, every check ``diagnose`` runs.
The checks read the trace and ``vizdist.analysis`` (below them); ``vizdist.diagnose`` (above) runs them, and
nothing here imports it.
"""
