"""The observers a run's options ask for: ``timing=`` and ``placement=`` (see :mod:`.engine`).

Example:
    >>> observers_for()
    []
"""

from __future__ import annotations

from vizdist.instrument.core.engine import Observer
from vizdist.instrument.observe.placement import PlacementObserver
from vizdist.instrument.observe.timing import TimingObserver

__all__ = ["observers_for"]


def observers_for(*, timing: bool | int = False, placement: bool | str = False,
                  users_code: bool = False, note: str = "") -> list[Observer]:
    """The observers a run's ``timing=`` and ``placement=`` options ask for (placement first).

    Placement comes first so that it is on before anything is traced, and so that timing wraps the
    fresh copy of the step the placement recorder traces. ``users_code``: the user's own code runs
    inside the run (``record``): TF's warnings stay as they are, and no profiler runs (host spans
    only; ``note`` says what they measure).

    Example:
        >>> observers_for()
        []
    """
    out: list[Observer] = []
    if placement:
        out.append(PlacementObserver("CURT_HEALTH" if placement is True else str(placement), quiet=not users_code))
    if timing is not False:
        out.append(TimingObserver(0 if users_code else timing, note=note))
    return out
