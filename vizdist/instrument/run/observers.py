"""The observers of a run: the tf.data service's run token, and what ``timing=`` and ``placement=`` ask for.

The engine (:mod:`vizdist.instrument.core.engine`) installs nothing itself; every front end builds its run
with these observers.

Example:
    >>> observers_for()
    [ServiceObserver()]
"""

from __future__ import annotations

from vizdist.instrument.core.engine import Observer
from vizdist.instrument.observe.placement import PlacementObserver
from vizdist.instrument.observe.timing import TimingObserver
from vizdist.instrument.service.observer import ServiceObserver

__all__ = ["observers_for"]


def observers_for(*, timing: bool | int = False, placement: bool | str = False,
                  users_code: bool = False, note: str = "") -> list[Observer]:
    """The observers of a run: the tf.data service's (always, first), then those ``timing=`` and ``placement=``
    ask for (placement first).

    The service observer installs the tf.data service patch and gives every service read of the run one
    token; started first, it closes last. Placement comes next so that it is on before anything is traced, and so that timing wraps the
    fresh copy of the step the placement recorder traces. ``users_code``: the user's own code runs
    inside the run (``record``): TF's warnings stay as they are, and no profiler runs (host spans
    only; ``note`` says what they measure).

    Example:
        >>> observers_for()
        [ServiceObserver()]
    """
    out: list[Observer] = [ServiceObserver()]
    if placement:
        out.append(PlacementObserver("CURT_HEALTH" if placement is True else str(placement), quiet=not users_code))
    if timing is not False:
        out.append(TimingObserver(0 if users_code else timing, note=note))
    return out
