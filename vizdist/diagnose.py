"""Findings: what went wrong (or is worth knowing) in a recorded run.

Each check is a function ``Trace -> Iterable[Finding]`` registered with
:func:`check`. Checks live in ``vizdist/checks/<topic>.py``, one module per
topic (single-process splits, workers, tf.data service); every module in that
package is loaded the first time :func:`diagnose` runs. This module and
``vizdist/checks/`` are part of the analysis layer (see :mod:`vizdist.analysis`).

Example:
    >>> import vizdist
    >>> t = vizdist.Trace.from_records(
    ...     batches=[dict(step=0, replica=0, n_elements=1), dict(step=0, replica=1, n_elements=0, empty=True)],
    ...     elements=[dict(step=0, replica=0, source_id=0, position=0)],
    ...     meta={"num_replicas": 2, "global_batch_size": 2})
    >>> vizdist.diagnose(t)["code"].tolist()
    ['empty-replica', 'partial-batch']
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas and the trace load on the first diagnose() call, not on ``import vizdist``
    import pandas as pd

    from vizdist.trace import Trace

__all__ = ["SEVERITIES", "Finding", "check", "check_block", "diagnose"]

SEVERITIES = ("error", "warning", "info")
COLUMNS = ["code", "severity", "step", "replicas", "workers", "message"]


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


CheckFn = Callable[["Trace"], Iterable[Finding]]
_CHECKS: list[CheckFn] = []
_loaded = False


def check(fn: CheckFn) -> CheckFn:
    """Register a check (use as a decorator in a ``vizdist/checks`` module)."""
    _CHECKS.append(fn)
    return fn


_BLOCK_CHECKS: list[CheckFn] = []


def check_block(fn: CheckFn) -> CheckFn:
    """Register a check that reads a whole ``vizdist.record()`` trace at once, across its passes and runs
    (the others read one pass at a time): what happened *between* passes, such as an epoch read again."""
    _BLOCK_CHECKS.append(fn)
    return fn


def _load_checks() -> None:
    global _loaded
    if _loaded:
        return
    import vizdist.checks as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        importlib.import_module(f"{pkg.__name__}.{info.name}")
    _loaded = True


def _rows(trace: Trace) -> list[dict[str, object]]:
    return [dict(code=f.code, severity=f.severity, step=int(f.step), replicas=list(f.replicas),
                 workers=list(f.workers), message=f.message) for fn in _CHECKS for f in fn(trace)]


def _is_record(trace: Trace) -> bool:
    from vizdist.analysis.passes import is_record

    return is_record(trace)


def _record_rows(trace: Trace) -> list[dict[str, object]]:
    """A ``vizdist.record()`` trace: every check reads one pass at a time (Keras's build read left out);
    a finding that recurs in later passes is reported once, at its first pass, naming the others."""
    from vizdist.analysis.passes import passes

    first: dict[tuple[object, ...], dict[str, object]] = {}
    seen: dict[tuple[object, ...], list[str]] = {}
    for info, part in passes(trace, phases=("train", "validation", "evaluate", "predict", "loop")):
        where = f"{info['phase']} epoch {info['epoch']}"
        for row in _rows(part):
            key = (info["dataset"], info["phase"], row["code"], row["severity"])
            seen.setdefault(key, []).append(where)
            if key not in first:  # its step is the block's step, as the message says
                row["message"] = f"[{where}, dataset {info['dataset']}] {row['message']}"
                first[key] = row
    for found, row in first.items():
        if len(seen[found]) > 1:
            row["message"] = f"{row['message']} (Also in {', '.join(seen[found][1:])}.)"
    whole = [dict(code=f.code, severity=f.severity, step=int(f.step), replicas=list(f.replicas),
                  workers=list(f.workers), message=f.message) for fn in _BLOCK_CHECKS for f in fn(trace)]
    return list(first.values()) + whole


def diagnose(trace: Trace, *, severity: str | None = None) -> pd.DataFrame:
    """Return the findings for ``trace`` as a DataFrame.

    Columns: ``code``, ``severity`` (error, warning, info), ``step`` (-1 when
    the finding is not about one step), ``replicas``, ``workers`` and
    ``message`` (cause and fix, in plain words). Rows are ordered by step,
    then code. An empty frame means nothing looked wrong.

    Args:
        trace: a recorded run.
        severity: keep only findings at least this severe ("error" keeps
            errors, "warning" keeps errors and warnings).

    Example:
        >>> import vizdist
        >>> vizdist.diagnose(vizdist.Trace()).empty
        True
    """
    import pandas as pd

    from vizdist.trace import Trace

    if not isinstance(trace, Trace):
        raise TypeError(
            f"diagnose() takes a vizdist.Trace; got {type(trace).__name__}. "
            "Record one with vizdist.trace_distribution(...) or load one with vizdist.load_trace(path)."
        )
    if severity is not None and severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}; got {severity!r}")
    _load_checks()
    rows = _record_rows(trace) if _is_record(trace) else _rows(trace)
    df = pd.DataFrame(rows, columns=COLUMNS)
    if severity is not None:
        keep = SEVERITIES[: SEVERITIES.index(severity) + 1]
        df = df[df["severity"].isin(keep)]
    df = df.sort_values(["step", "code"], kind="stable").reset_index(drop=True)
    df["step"] = df["step"].astype("int64")
    return df
