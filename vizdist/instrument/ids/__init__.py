"""The id carrier: how each element's source id is attached to it (``tagging.py``) and found again (``map_failure.py``)."""
