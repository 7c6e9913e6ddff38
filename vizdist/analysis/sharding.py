"""What each worker read under each auto-shard policy: :class:`ShardComparison` (plain data, no TensorFlow).

``vizdist.compare_shard_policies`` (in ``vizdist/instrument``) records the
runs and returns a :class:`ShardComparison`; this module only reads its
traces and the input files. Its figure and HTML table come from
``vizdist/render/sharding.py``, imported by :meth:`ShardComparison.plot` and ``_repr_html_`` when they
are called (the one way this layer reaches a renderer: ``tests/test_layers.py``'s ``LAZY_UP``).

Example:
    >>> from vizdist import Trace
    >>> t = Trace.from_records(elements=[dict(step=0, worker=w, source_file="a.txt", source_line=w,
    ...                                       value=str(w)) for w in range(2)])
    >>> cmp = ShardComparison({"DATA": t}, files=[], workers=2, global_batch_size=2)
    >>> cmp.worker_values("DATA")
    {0: ['0'], 1: ['1']}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from vizdist.trace import Trace

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["POLICIES", "ShardComparison", "content_map"]

#: The auto-shard policies, in the order comparisons show them.
POLICIES = ("AUTO", "FILE", "DATA", "HINT", "OFF")



def _records(path: str) -> list[str] | None:
    """The records of a small file as text: lines of a text file, records of a TFRecord file."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if path.endswith((".tfrecord", ".tfrecords")):
        import struct

        out, i = [], 0
        while i + 12 <= len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            rec = data[i + 12 : i + 12 + n]
            try:
                out.append(rec.decode("utf-8"))
            except UnicodeDecodeError:
                return None
            i += 12 + n + 4
        return out
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def content_map(files: Sequence[str], limit: int = 100_000) -> dict[str, tuple[str, int]]:
    """Line content -> (file, line) when every line of the files is unique (small files only)."""
    out: dict[str, tuple[str, int]] = {}
    total = 0
    for f in files:
        lines = _records(f)
        if lines is None:
            return {}
        total += len(lines)
        if total > limit:
            return {}
        for i, line in enumerate(lines):
            if line in out:
                return {}
            out[line] = (f, i)
    return out


def _duplicates_status(keys: pd.Series, worker: pd.Series, w: int, shared: int, unique: int) -> str:
    """``"ok"``, or which other workers read some of worker ``w``'s elements too.

    Example:
        >>> keys, workers = pd.Series(["a#0", "a#0", "a#1"]), pd.Series([0, 1, 1])
        >>> _duplicates_status(keys, workers, 0, 1, 1)
        'duplicates: 1 of its 1 element(s) also read by worker 1'
    """
    if not shared:
        return "ok"
    others = sorted({int(o) for o in worker[keys.isin(set(keys[worker == w])) & (worker != w)]})
    return (f"duplicates: {shared} of its {unique} element(s) also read by worker"
            f"{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}")


class ShardComparison:
    """What each worker read under each auto-shard policy.

    Attributes:
        traces: policy -> the merged trace of all workers under that policy
            (``meta["shard_policy"]``, ``meta["files"]``, ``meta["errors"]``).
        errors: policy -> {task: "Type: message"} for workers that failed.
        notes: policy -> an explanation (for example why FILE was not run
            with fewer files than workers).
        files: the input files.
        workers: number of workers.
        global_batch_size: the global batch size.

    Example:
        >>> cmp = ShardComparison({}, files=["a.txt"], workers=2, global_batch_size=4)
        >>> cmp.summary().empty
        True
    """

    def __init__(
        self,
        traces: Mapping[str, Trace],
        *,
        files: Sequence[str],
        workers: int,
        global_batch_size: int,
        errors: Mapping[str, Mapping[str, str]] | None = None,
        notes: Mapping[str, str] | None = None,
        logs: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.traces = dict(traces)
        self.files = [str(f) for f in files]
        self.workers = workers
        self.global_batch_size = global_batch_size
        self.errors = {k: dict(v) for k, v in (errors or {}).items()}
        self.notes = dict(notes or {})
        self.logs = {k: list(v) for k, v in (logs or {}).items()}

    @property
    def policies(self) -> list[str]:
        """Policies in the order they were asked for."""
        seen = list(self.traces) + [p for p in (*self.errors, *self.notes) if p not in self.traces]
        return [p for p in POLICIES if p in seen] + [p for p in seen if p not in POLICIES]

    def summary(self) -> pd.DataFrame:
        """One row per (policy, worker): files read, elements, duplicates, coverage, status.

        ``elements`` counts deliveries, ``unique`` distinct source elements,
        ``shared`` how many of them another worker read too, ``coverage`` the
        fraction of all source elements that *some* worker read under the
        policy, ``imbalance`` max/min elements per worker. ``status`` is the
        worker's error, ``"duplicates: ..."`` when other workers read some of
        its elements too (the ``worker-duplicates`` finding of ``diagnose``),
        or ``"ok"``.
        """
        rows = []
        total = self._total_elements()
        for policy in self.policies:
            t = self.traces.get(policy)
            errs = self.errors.get(policy, {})
            note = self.notes.get(policy, "")
            if t is None:
                for w in range(self.workers):
                    rows.append(dict(policy=policy, worker=w, files=[], elements=0, unique=0, shared=0,
                                     coverage=float("nan"), imbalance=float("nan"),
                                     status=errs.get(f"worker-{w}", "not run: " + note if note else "not run")))
                continue
            e = t.elements
            keys = e["source_file"].astype(str) + "#" + e["source_line"].astype(str)
            readers = pd.DataFrame({"k": keys, "w": e["worker"]}).drop_duplicates().groupby("k")["w"].nunique()
            counts = [int((e["worker"] == w).sum()) for w in range(self.workers)]
            imbalance = (max(counts) / min(counts)) if min(counts) > 0 else float("inf") if max(counts) else float("nan")
            coverage = (keys.nunique() / total) if total else float("nan")
            for w in range(self.workers):
                mine = e[e["worker"] == w]
                mkeys = keys[e["worker"] == w].unique()
                files = sorted({Path(f).name for f in mine["source_file"] if f})
                shared = int(sum(readers.get(k, 0) > 1 for k in mkeys))
                rows.append(dict(
                    policy=policy, worker=w, files=files, elements=len(mine), unique=len(mkeys),
                    shared=shared, coverage=round(coverage, 3),
                    imbalance=round(imbalance, 3) if imbalance == imbalance else imbalance,
                    status=errs.get(f"worker-{w}") or _duplicates_status(keys, e["worker"], w, shared, len(mkeys)),
                ))
        return pd.DataFrame(rows, columns=["policy", "worker", "files", "elements", "unique", "shared",
                                           "coverage", "imbalance", "status"])

    def _total_elements(self) -> int:
        counts = [_records(f) for f in self.files]
        return 0 if any(c is None for c in counts) else sum(len(c) for c in counts if c is not None)

    def worker_values(self, policy: str) -> dict[int, list[str]]:
        """Worker -> the element values it read under ``policy``, in step order.

        Example:
            >>> ShardComparison({}, files=[], workers=2, global_batch_size=4).worker_values("OFF")
            {0: [], 1: []}
        """
        t = self.traces.get(policy)
        out: dict[int, list[str]] = {w: [] for w in range(self.workers)}
        if t is None:
            return out
        e = t.elements.sort_values(["step", "replica", "position"], kind="stable")
        for w, v in zip(e["worker"].tolist(), e["value"].astype(str).tolist(), strict=True):
            out.setdefault(int(w), []).append(v)
        return out

    def split(self, policy: str) -> pd.DataFrame:
        """Steps × replicas table of element values for ``policy`` (like ``Trace.split``)."""
        t = self.traces[policy]
        e = t.elements.sort_values(["step", "replica", "position"], kind="stable")
        table: dict[int, dict[int, list[str]]] = {}
        for s, r, v in zip(e["step"], e["replica"], e["value"].astype(str), strict=True):
            table.setdefault(int(r), {}).setdefault(int(s), []).append(v)
        for b in t.batches.itertuples():
            table.setdefault(int(b.replica), {}).setdefault(int(b.step), [])
        df = pd.DataFrame(table).sort_index()
        df = df[sorted(df.columns)]
        df.index.name, df.columns.name = "step", "replica"
        return df.apply(lambda col: col.map(lambda c: c if isinstance(c, list) else []))

    def plot(self, *, width: float = 11.0, row_height: float = 0.42) -> Figure:
        """A matplotlib figure: one panel per policy, rows the workers, columns the source elements grouped by
        file; a filled cell is an element the worker read (the number in it is the step). Errors and notes
        are printed under their policy's panel.

        Args:
            width: figure width in inches.
            row_height: height per worker row, in inches.

        Example:
            >>> len(ShardComparison({}, files=[], workers=2, global_batch_size=4).plot().axes)
            0
        """
        from vizdist.render.sharding import plot_shard_policies

        fig: Figure = plot_shard_policies(self, width=width, row_height=row_height)
        return fig

    def _repr_html_(self) -> str:
        from vizdist.render.sharding import shard_policies_html

        return shard_policies_html(self)

    def __repr__(self) -> str:
        return (f"ShardComparison(policies={self.policies}, workers={self.workers}, "
                f"files={len(self.files)}, global_batch_size={self.global_batch_size})")
