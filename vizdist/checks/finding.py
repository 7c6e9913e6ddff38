"""What a check yields: a :class:`Finding` (code, severity, message: cause and fix), and the caps on them.

The lowest module of the analysis layer's checks: every check module (``vizdist/checks/<topic>.py``),
the registry of checks (:mod:`vizdist.checks.registry`) and :mod:`vizdist.diagnose` import it, and it
imports none of them.

Example:
    >>> Finding("empty-replica", "warning", "Replica 3 got nothing at step 2: ...", step=2, replicas=(3,)).code
    'empty-replica'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vizdist.trace import Trace

__all__ = ["MAX_PER_CODE", "SEVERITIES", "CheckFn", "Finding", "more_like_these"]

SEVERITIES = ("error", "warning", "info")
#: Findings of one code a diagnosis lists at most; one more finding of that code counts the rest.
MAX_PER_CODE = 1_000


@dataclass(frozen=True)
class Finding:
    """One finding. ``message`` says what happened, why, and the fix."""

    code: str
    severity: str
    message: str
    step: int = -1
    replicas: Sequence[int] = field(default_factory=tuple)
    workers: Sequence[int] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}; got {self.severity!r}")


#: A check: a function of a trace that yields its findings (it reads only the trace).
CheckFn = Callable[["Trace"], Iterable[Finding]]


def more_like_these(code: str, severity: str, n: int, steps: Sequence[int]) -> Finding:
    """The finding that stands for ``n`` more of ``code`` beyond :data:`MAX_PER_CODE` (a check that makes one
    per step may stop building them there and yield this instead).

    Example:
        >>> more_like_these("empty-replica", "warning", 5, [7, 11]).message
        'And 5 more findings like these (steps 7..11): diagnose lists the first 1,000 of each kind.'
    """
    where = f" (steps {min(steps)}..{max(steps)})" if len(steps) else ""
    return Finding(code, severity, f"And {n:,} more findings like these{where}: diagnose lists the first "
                   f"{MAX_PER_CODE:,} of each kind.")
