"""What changed between two runs: elements that moved, replicas that emptied, findings that came or went.

``vizdist.diff(before, after)`` compares two traces of the same data (for example before and after
you changed a knob) and returns a :class:`TraceDiff`: plain tables you can query, with a text and an
HTML view. An element is matched by its source id (and source, file, line and epoch where the trace
has them); when the same element arrives several times, the k-th arrival in one run is matched with
the k-th in the other.

It is the top of the analysis layer: it runs :func:`vizdist.diagnose.diagnose` on both traces, so it lives
above ``diagnose.py`` (and ``analysis/``, ``checks/``), never inside ``analysis/``.

Example:
    >>> from vizdist.trace import Trace
    >>> a = Trace.from_records(elements=[dict(step=0, replica=r, source_id=r, position=0) for r in range(2)],
    ...                        batches=[dict(step=0, replica=r, n_elements=1) for r in range(2)])
    >>> b = Trace.from_records(elements=[dict(step=0, replica=0, source_id=r, position=r) for r in range(2)],
    ...                        batches=[dict(step=0, replica=0, n_elements=2),
    ...                                 dict(step=0, replica=1, n_elements=0, empty=True)])
    >>> d = diff(a, b)
    >>> d.moved[["source_id", "replica_before", "replica_after"]].values.tolist()
    [[1, 1, 0]]
    >>> d.became_empty.values.tolist()
    [[0, 1]]
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import pandas as pd

from vizdist.diagnose import diagnose
from vizdist.trace import Trace

__all__ = ["TraceDiff", "diff", "unfinished_run"]

_KEY = ("source", "source_file", "source_line", "source_id", "epoch")
_WHERE = ["step", "replica", "worker", "device"]
_FINDING = ["code", "severity", "step", "replicas", "message"]


@dataclass(frozen=True)
class TraceDiff:
    """The difference between two traces (see :func:`diff`).

    Attributes:
        moved: elements that arrived in both runs but somewhere else (``*_before`` / ``*_after``
            columns for step, replica, worker and device).
        appeared: arrivals only the second run has; ``gone``: arrivals only the first run has.
        became_empty: (step, replica) whose batch was not empty before and is now;
            ``no_longer_empty``: the reverse.
        findings_appeared / findings_gone: ``diagnose`` findings of one run and not the other.
    """

    moved: pd.DataFrame
    appeared: pd.DataFrame
    gone: pd.DataFrame
    became_empty: pd.DataFrame
    no_longer_empty: pd.DataFrame
    findings_appeared: pd.DataFrame
    findings_gone: pd.DataFrame

    @property
    def unchanged(self) -> bool:
        """True when nothing moved, appeared or went, and no finding changed."""
        return all(len(getattr(self, name)) == 0 for name in self.__dataclass_fields__)

    def summary(self) -> str:
        """One line per kind of change, in plain words."""
        if self.unchanged:
            return "no change: every element arrived where it did before, with the same findings"
        lines = [f"{len(self.moved)} element(s) moved", f"{len(self.appeared)} arrival(s) appeared",
                 f"{len(self.gone)} arrival(s) gone",
                 f"{len(self.became_empty)} (step, replica) batch(es) became empty",
                 f"{len(self.no_longer_empty)} no longer empty"]
        lines += [f"finding appeared: {c}" for c in self.findings_appeared["code"]]
        lines += [f"finding gone: {c}" for c in self.findings_gone["code"]]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return "TraceDiff:\n" + self.summary()

    def _repr_html_(self) -> str:
        parts = [f"<pre>{html.escape(self.summary())}</pre>"]
        for name in ("moved", "appeared", "gone", "became_empty", "findings_appeared", "findings_gone"):
            df = getattr(self, name)
            if len(df):
                parts.append(f"<b>{name.replace('_', ' ')}</b>" + df.head(50).to_html(index=False, escape=True))
        return "".join(parts)


def _arrivals(trace: Trace, key: list[str]) -> pd.DataFrame:
    e = trace.elements.sort_values(["step", "worker", "replica", "position"], kind="stable")
    e = e.assign(arrival=e.groupby(key, sort=False).cumcount())
    e = e.astype({c: object for c in _WHERE if isinstance(e[c].dtype, pd.CategoricalDtype)})  # runs differ in devices
    return e[[*key, "arrival", *_WHERE]].reset_index(drop=True)


def _elements(before: Trace, after: Trace) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    key = [c for c in _KEY if c in before.elements.columns and c in after.elements.columns]
    both = _arrivals(before, key).merge(_arrivals(after, key), on=[*key, "arrival"], how="outer",
                                        suffixes=("_before", "_after"), indicator=True)
    same = both["_merge"] == "both"
    differs = pd.Series(False, index=both.index)
    for col in _WHERE:
        differs |= both[f"{col}_before"] != both[f"{col}_after"]
    cols = [*key, "arrival"]
    moved = both[same & differs][[*cols, *(f"{c}_{s}" for c in _WHERE for s in ("before", "after"))]]
    gone = both[both["_merge"] == "left_only"][[*cols, *(f"{c}_before" for c in _WHERE)]]
    appeared = both[both["_merge"] == "right_only"][[*cols, *(f"{c}_after" for c in _WHERE)]]
    return tuple(_ints(df.reset_index(drop=True)) for df in (moved, appeared, gone))  # type: ignore[return-value]  # _ints returns list[int]; a tuple of three of them is what the signature says


def _ints(df: pd.DataFrame) -> pd.DataFrame:
    """Outer merges turn int columns into floats; give whole numbers back their int type."""
    for col in df.columns:
        if df[col].dtype.kind == "f" and df[col].notna().all() and (df[col] % 1 == 0).all():
            df[col] = df[col].astype("int64")
    return df


def _empty(trace: Trace) -> set[tuple[int, int]]:
    b = trace.batches
    return {(int(s), int(r)) for s, r in zip(b.loc[b["empty"], "step"], b.loc[b["empty"], "replica"], strict=True)}


def _findings(trace: Trace) -> pd.DataFrame:
    f = diagnose(trace)
    return f[[c for c in _FINDING if c in f.columns]].astype({"replicas": str} if "replicas" in f else {})


def _one_sided(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    key = [c for c in ("code", "step", "replicas") if c in a.columns]
    merged = a.merge(b[key].drop_duplicates(), on=key, how="left", indicator=True)
    return merged[merged["_merge"] == "left_only"].drop(columns="_merge").reset_index(drop=True)


def unfinished_run(trace: Trace) -> str:
    """Why a trace holds only part of its run (stopped by its timeout or by Ctrl-C), or ``""``.

    Drawn as a run, its split would show the steps recorded before it stopped, and a diff against it
    would call every later element gone: a claim about TensorFlow that the run never made. The what-if
    and predict widgets show this instead of a picture or an answer.

    Example:
        >>> t = Trace.from_records(elements=[dict(step=0, replica=0, source_id=0)],
        ...                        meta={"stopped": "timeout", "timeout_s": 60.0, "steps_run": 1})
        >>> unfinished_run(t)[:41]
        'its 60 s timeout passed after 1 step, so '
        >>> unfinished_run(Trace.from_records(elements=[dict(step=0, replica=0, source_id=0)]))
        ''
    """
    stopped = trace.meta.get("stopped")
    if stopped not in ("timeout", "interrupted"):
        return ""
    seconds = trace.meta.get("timeout_s")
    why = "it was interrupted" if stopped == "interrupted" else \
        f"its {seconds:g} s timeout passed" if seconds else "its timeout passed"
    n = int(trace.meta.get("steps_run") or 0)
    return (f"{why} after {n} step{'' if n == 1 else 's'}, so it holds part of a run, not what TensorFlow "
            "does with the whole of it")


def diff(before: Trace, after: Trace) -> TraceDiff:
    """Compare two traces: where elements moved, which batches emptied, which findings changed.

    Args:
        before: the first run (e.g. before you changed a knob).
        after: the second run.

    Returns:
        A :class:`TraceDiff` of plain DataFrames, with ``summary()``, a text repr and an HTML view.

    Example:
        >>> from vizdist.trace import Trace
        >>> t = Trace.from_records(elements=[dict(step=0, replica=0, source_id=1)])
        >>> diff(t, t).unchanged
        True
    """
    for name, t in (("before", before), ("after", after)):
        if not isinstance(t, Trace):
            raise TypeError(f"vizdist.diff takes two vizdist.Trace objects; {name} is a {type(t).__name__}.")
    moved, appeared, gone = _elements(before, after)
    eb, ea = _empty(before), _empty(after)
    frame: Any = lambda pairs: pd.DataFrame(sorted(pairs), columns=["step", "replica"], dtype="int64")  # noqa: E731
    fb, fa = _findings(before), _findings(after)
    return TraceDiff(moved=moved, appeared=appeared, gone=gone, became_empty=frame(ea - eb),
                     no_longer_empty=frame(eb - ea), findings_appeared=_one_sided(fa, fb),
                     findings_gone=_one_sided(fb, fa))
