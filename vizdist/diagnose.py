"""Findings: what went wrong (or is worth knowing) in a recorded run.

Each check is a function ``Trace -> Iterable[Finding]`` in ``vizdist/checks/<topic>.py``, one module
per topic (the run, splits, workers, the tf.data service, parameter servers, placement, numerics).
:data:`vizdist.checks.registry.CHECKS` lists every check :func:`diagnose` runs, in the order it runs
them (loaded the first time :func:`diagnose` runs); findings of one step and code keep that order. This
module and ``vizdist/checks/`` are part of the analysis layer (see :mod:`vizdist.analysis`).

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

from typing import TYPE_CHECKING

from vizdist._clip import MAX_MESSAGE, clip
from vizdist.checks.finding import MAX_PER_CODE, SEVERITIES, CheckFn, Finding, more_like_these

if TYPE_CHECKING:  # pandas and the trace load on the first diagnose() call, not on ``import vizdist``
    import pandas as pd

    from vizdist.trace import Trace

# Finding and friends live in vizdist.checks.finding (below the checks); here for the callers of diagnose.
__all__ = ["MAX_CELLS", "MAX_PER_CODE", "SEVERITIES", "CheckFn", "Finding", "block_checks", "checks", "diagnose",
           "more_like_these"]

COLUMNS = ["code", "severity", "step", "replicas", "workers", "message"]
#: Steps x replicas a diagnosis reads at most (its per-step checks hold a table that size): a bigger trace
#: is diagnosed over its first steps, and an ``info`` finding says how many it read.
MAX_CELLS = 20_000_000


def checks() -> tuple[CheckFn, ...]:
    """The checks :func:`diagnose` runs, in its order (:data:`vizdist.checks.registry.CHECKS`; imported now).

    Example:
        >>> [fn.__name__ for fn in checks()][:3]
        ['empty_dataset', 'timed_out', 'not_recorded']
    """
    from vizdist.checks.registry import CHECKS

    return CHECKS


def block_checks() -> tuple[CheckFn, ...]:
    """The checks :func:`diagnose` runs once over a whole ``vizdist.record()`` trace, after the per-pass ones
    (:data:`vizdist.checks.registry.BLOCK_CHECKS`).

    Example:
        >>> [fn.__name__ for fn in block_checks()]
        ['epoch_read_again', 'epoch_never_delivered']
    """
    from vizdist.checks.registry import BLOCK_CHECKS

    return BLOCK_CHECKS


def _bounded(trace: Trace, max_cells: int) -> tuple[Trace, list[dict[str, object]]]:
    """``trace``, or its first steps when it is bigger than ``max_cells`` (and a finding saying so)."""
    from vizdist.trace import Trace

    steps, replicas = trace.steps, max(len(trace.replicas), 1)
    if len(steps) * replicas <= max_cells:
        return trace, []
    keep = max(max_cells // replicas, 1)
    last = steps[keep - 1]
    part = Trace(elements=trace.elements[trace.elements["step"] <= last],
                 batches=trace.batches[trace.batches["step"] <= last], events=trace.events, meta=trace.meta)
    return part, [dict(code="diagnose-partial", severity="info", step=-1, replicas=[], workers=[], message=(
        f"This trace has {len(steps):,} steps of {replicas:,} replicas; diagnose read the first {keep:,} steps "
        f"(steps {steps[0]}..{last}), what it reads at most (max_cells={max_cells:,} step-replica cells). Pass "
        "diagnose(trace, max_cells=...) to read it whole.")),
    ]


def _capped(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """At most :data:`MAX_PER_CODE` findings of each code, and for a code with more, one that counts the rest
    (a check's own :func:`more_like_these` is kept as it is)."""
    kept: list[dict[str, object]] = []
    extra: dict[str, list[dict[str, object]]] = {}
    seen: dict[str, int] = {}
    for row in rows:
        code = str(row["code"])
        if str(row["message"]).startswith("And ") and "more findings like these" in str(row["message"]):
            kept.append(row)
            continue
        seen[code] = seen.get(code, 0) + 1
        (kept if seen[code] <= MAX_PER_CODE else extra.setdefault(code, [])).append(row)
    for code, more in extra.items():
        steps = [int(r["step"]) for r in more if int(r["step"]) >= 0]  # type: ignore[call-overload]  # row values are untyped
        f = more_like_these(code, str(more[0]["severity"]), len(more), steps)
        kept.append(dict(code=f.code, severity=f.severity, step=-1, replicas=[], workers=[], message=f.message))
    return kept


def _rows(trace: Trace) -> list[dict[str, object]]:
    return [dict(code=f.code, severity=f.severity, step=int(f.step), replicas=list(f.replicas),
                 workers=list(f.workers), message=f.message) for fn in checks() for f in fn(trace)]


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
                  workers=list(f.workers), message=f.message) for fn in block_checks() for f in fn(trace)]
    return list(first.values()) + whole


def diagnose(trace: Trace, *, severity: str | None = None, max_cells: int = MAX_CELLS) -> pd.DataFrame:
    """Return the findings for ``trace`` as a DataFrame.

    Columns: ``code``, ``severity`` (error, warning, info), ``step`` (-1 when
    the finding is not about one step), ``replicas``, ``workers`` and
    ``message`` (cause and fix, in plain words). Rows are ordered by step
    (-1, the run as a whole, first), then code; findings of one step and code
    in the order of :func:`checks` (the registry's). An empty frame means
    nothing looked wrong.

    Args:
        trace: a recorded run.
        severity: keep only findings at least this severe ("error" keeps
            errors, "warning" keeps errors and warnings).
        max_cells: read at most this many step x replica cells (the first
            steps; an ``info`` finding ``diagnose-partial`` says how many);
            raise it to read a bigger trace whole. Findings of one code are
            listed up to :data:`MAX_PER_CODE`, and one more counts the rest.

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
    if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
        raise ValueError(f"max_cells must be a positive int; got {max_cells!r}.")
    trace, note = _bounded(trace, max_cells)
    rows = _record_rows(trace) if _is_record(trace) else _rows(trace)
    df = pd.DataFrame(_capped(rows) + note, columns=COLUMNS)
    df["message"] = [clip(m, MAX_MESSAGE) for m in df["message"].tolist()]  # a hostile value is cut, and says so
    if severity is not None:
        keep = SEVERITIES[: SEVERITIES.index(severity) + 1]
        df = df[df["severity"].isin(keep)]
    df = df.sort_values(["step", "code"], kind="stable").reset_index(drop=True)
    df["step"] = df["step"].astype("int64")
    return df
