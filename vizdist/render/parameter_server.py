"""Parameter-server views: variable shards per ps task, and closures per worker.

Both read a ``parameter_server`` trace (or its plain rows); neither touches
TensorFlow. Each returns a matplotlib ``Figure`` whose ``repr`` says what it
drew (nbval compares that line; the PNG it cannot).

* :func:`plot_variable_shards`: one bar per variable along its first
  dimension, cut where TF's partitioner cut it, each shard coloured by the
  ps task that holds it and labelled with its shape and bytes
  (``meta["variables"]``, read from ``ShardedVariable.variables``).
* :func:`plot_closures`: one row per worker, one box per closure attempt in
  the order the worker ran them, coloured by outcome (done, rescheduled
  after its worker was lost, retried, failed, cancelled), the closure's
  number in the box (``meta["closures"]``).

Example:
    >>> rows = [dict(variable="w", partitioner="Fixed(2)", shard=i, shards=2, shape=[4, 4], rows=f"{4*i}:{4*i+4}",
    ...              bytes=64, job="ps", task=i) for i in range(2)]
    >>> fig = plot_variable_shards(rows)
    >>> fig
    <Figure: 1 variable(s) over 2 ps task(s): Fixed(2): 2 shard(s) [4, 4]@ps0 [4, 4]@ps1; bytes per ps: ps0 64, ps1 64>
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vizdist.render._text import MIN_TEXT_PT, TITLE_PT, described, plain_figure, short

__all__ = ["OUTCOME_COLORS", "closure_rows", "plot_closures", "plot_variable_shards", "shard_rows"]

#: Attempt outcome -> colour (Okabe-Ito).
OUTCOME_COLORS: dict[str, str] = {
    "done": "#0072B2",
    "rescheduled": "#E69F00",
    "retried": "#F0E442",
    "failed": "#D55E00",
    "cancelled": "#999999",
    "aborted": "#999999",
    "running": "#CC79A7",
}


#: What the parameter-server figures draw at most (the first ones; each says how many more there are).
MAX_VARIABLES, MAX_PS, MAX_WORKER_ROWS, MAX_ATTEMPTS = 40, 32, 32, 400


def _meta(source: Any) -> Mapping[str, Any]:
    meta = getattr(source, "meta", None)
    return meta if isinstance(meta, Mapping) else {}


def shard_rows(source: Any) -> list[dict[str, Any]]:
    """The variable-shard rows of a trace (``meta["variables"]``) or of a list of rows, as dicts.

    Example:
        >>> shard_rows([{"variable": "v", "shard": 0}])
        [{'variable': 'v', 'shard': 0}]
    """
    rows = _meta(source).get("variables") if hasattr(source, "meta") else source
    if rows is None:
        raise ValueError("this trace has no meta['variables']: record it with vizdist.record_parameter_server, "
                         "or pass the rows of vizdist.instrument.strategies.parameter_server.variable_shards(...).")
    return [dict(r) for r in rows]


def _label(row: Mapping[str, Any]) -> str:
    return str(row.get("partitioner") or row.get("variable", ""))


def _by_label(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The shard rows of each variable, in first-seen order (one pass)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(_label(r), []).append(r)
    return out


def _bytes_by_task(rows: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """ps task -> (bytes, shards) it holds (one pass)."""
    out: dict[int, tuple[int, int]] = {}
    for r in rows:
        t = int(r.get("task", -1))
        b, n = out.get(t, (0, 0))
        out[t] = (b + int(r.get("bytes", 0)), n + 1)
    return dict(sorted(out.items()))


def _summary(rows: list[dict[str, Any]]) -> str:
    groups = _by_label(rows)
    held = _bytes_by_task(rows)
    parts = []
    for name, mine in list(groups.items())[:MAX_VARIABLES]:
        cells = " ".join(f"{list(r.get('shape', []))}@{short(r.get('job', ''), 20)}{r.get('task', '')}"
                         for r in mine[:MAX_PS])
        parts.append(f"{short(name, 60)}: {len(mine)} shard(s) {cells}" + (" ..." if len(mine) > MAX_PS else ""))
    if len(groups) > MAX_VARIABLES:
        parts.append(f"and {len(groups) - MAX_VARIABLES:,} more variables")
    per = ", ".join(f"ps{t} {b}" for t, (b, _) in list(held.items())[:MAX_PS])
    per += f", and {len(held) - MAX_PS:,} more" if len(held) > MAX_PS else ""
    return f"{len(groups)} variable(s) over {len(held)} ps task(s): {'; '.join(parts)}; bytes per ps: {per}"


def plot_variable_shards(source: Any, *, width: float = 10.0, row_height: float = 0.7) -> Any:
    """Draw how each variable was cut into shards and which ps task holds each shard.

    Args:
        source: a ``parameter_server`` trace (``meta["variables"]``) or the
            rows of :func:`vizdist.instrument.strategies.parameter_server.variable_shards`.
        width: figure width in inches.
        row_height: height per variable, in inches.

    Returns:
        A matplotlib ``Figure``; its ``repr`` lists the shards (shape and ps
        task) of every variable and the bytes each ps task holds.

    Example:
        >>> fig = plot_variable_shards([dict(variable="v", shard=0, shards=1, shape=[8], rows="0:8", bytes=32,
        ...                                  job="ps", task=0)])
        >>> len(fig.axes)   # the shards, and the bytes per ps task
        2
    """
    import matplotlib.pyplot as plt

    rows = shard_rows(source)
    groups = _by_label(rows)
    names = list(groups)[:MAX_VARIABLES]  # the first ones; the title says how many there are
    fig, (ax, side) = plt.subplots(1, 2, figsize=(width, max(1.8, len(names) * row_height + 1.2)),
                                   gridspec_kw={"width_ratios": [4, 1]})
    colors = plt.get_cmap("tab10")
    _bytes_per_task(side, rows, colors)
    inside: list[tuple[Any, Any, str]] = []  # (text, its bar, a shorter text)
    for y, name in enumerate(names):
        for r in groups[name][:MAX_PS]:
            lo, hi = (int(x) for x in str(r.get("rows", "0:1")).split(":"))
            task = int(r.get("task", -1))
            ax.barh(y, hi - lo, left=lo, height=0.7, color=colors(task % 10) if task >= 0 else "#cccccc",
                    edgecolor="white", linewidth=2)
            inside.append((ax.text((lo + hi) / 2, y, f"{r.get('job', '')}:{task}\n{list(r.get('shape', []))} · "
                                   f"{r.get('bytes', 0)} B", ha="center", va="center", fontsize=MIN_TEXT_PT,
                                   color="white"), ax.patches[-1], f"{task}"))
    ax.set_yticks(range(len(names)), [short(n, 80).replace("(", "\n(", 1) for n in names], fontsize=MIN_TEXT_PT)
    ax.tick_params(axis="x", labelsize=MIN_TEXT_PT)
    ax.invert_yaxis()
    ax.set_xlabel("rows of the variable (its first dimension), cut where the partitioner cut it", fontsize=MIN_TEXT_PT)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    more = f" (first {len(names)} of {len(groups):,} variables)" if len(groups) > len(names) else ""
    ax.set_title("Variable shards: colour = the ps task that holds the shard" + more, loc="left", fontsize=TITLE_PT)
    plain_figure(fig).tight_layout()
    _fit_inside(fig, inside)
    plt.close(fig)
    return described(plain_figure(fig), _summary(rows))


def _bytes_per_task(ax: Any, rows: list[dict[str, Any]], colors: Any) -> None:
    """Right panel: bytes (and shards) each ps task holds."""
    held = list(_bytes_by_task(rows).items())
    tasks = [t for t, _ in held[:MAX_PS]]
    for y, (t, (total, n)) in enumerate(held[:MAX_PS]):
        ax.barh(y, total, color=colors(t % 10) if t >= 0 else "#cccccc")
        ax.text(total, y, f" {total} B\n {n} shard(s)", va="center", fontsize=MIN_TEXT_PT)
    ax.set_yticks(range(len(tasks)), [f"ps:{t}" for t in tasks], fontsize=MIN_TEXT_PT)
    ax.set_xlim(0, 1.8 * max([1, *(total for _, (total, _) in held[:MAX_PS])]))
    ax.invert_yaxis()
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title("held per ps task" + (f" (first {MAX_PS} of {len(held):,})" if len(held) > MAX_PS else ""),
                 loc="left", fontsize=MIN_TEXT_PT + 1)


def _fit_inside(fig: Any, inside: list[tuple[Any, Any, str]]) -> int:
    """Each text wider than its bar takes its shorter text, or is left out if that is wider too.

    Returns how many texts were left out (none cut by a neighbour: every text stays at ``MIN_TEXT_PT``).
    """
    renderer = fig._get_renderer()
    dropped = 0
    for text, bar, shorter in inside:
        room = bar.get_window_extent(renderer).width
        if text.get_window_extent(renderer).width > room:
            text.set_text(shorter)
            if not shorter or text.get_window_extent(renderer).width > room:
                text.remove()
                dropped += 1
    return dropped


# -- closures ------------------------------------------------------------------------------------
def closure_rows(source: Any) -> list[dict[str, Any]]:
    """One dict per closure attempt (``closure``, ``worker``, ``outcome``, ``t_start_ns``), in start order.

    Example:
        >>> closure_rows({"closures": [{"closure": 0, "worker": 1, "status": "done",
        ...                             "attempts": [{"worker": 1, "outcome": "done", "t_start_ns": 5}]}]})
        [{'closure': 0, 'worker': 1, 'outcome': 'done', 't_start_ns': 5}]
    """
    meta = _meta(source) if hasattr(source, "meta") else source
    out = []
    for c in meta.get("closures") or []:
        attempts = c.get("attempts") or []
        if not attempts:  # attempts not recorded (or never started): the closure's own status
            attempts = [{"worker": c.get("worker", -1), "outcome": c.get("status", ""), "t_start_ns": -1}]
        for a in attempts:
            out.append({"closure": int(c["closure"]), "worker": int(a.get("worker", -1)),
                        "outcome": str(a.get("outcome", "")), "t_start_ns": int(a.get("t_start_ns", -1))})
    return sorted(out, key=lambda r: (r["t_start_ns"], r["closure"]))


def _closure_summary(rows: list[dict[str, Any]], meta: Mapping[str, Any]) -> str:
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    n = len({r["closure"] for r in rows})
    workers = sorted({r["worker"] for r in rows if r["worker"] >= 0})
    lost = [str(t.get("task")) for t in meta.get("lost_tasks") or []]
    what = ", ".join(f"{short(k, 40)} {v}" for k, v in sorted(outcomes.items())[:20])
    shown = str(workers) if len(workers) <= MAX_WORKER_ROWS else f"{workers[:MAX_WORKER_ROWS]} and {len(workers) - MAX_WORKER_ROWS:,} more"
    return (f"{n} closure(s), {len(rows)} attempt(s) on worker(s) {shown}; outcomes: {what}"
            + (f"; lost: {short(', '.join(lost), 200)}" if lost else ""))


def _worker_rows(meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[int]:
    n = meta.get("num_workers")
    seen = {int(r["worker"]) for r in rows if r["worker"] >= 0}
    return sorted(seen | set(range(min(n, 1 << 20) if isinstance(n, int) else 0)))


def plot_closures(source: Any, *, width: float = 10.0, row_height: float = 0.6) -> Any:
    """Draw which worker ran each closure, attempt by attempt (a lost worker's closure runs twice).

    Args:
        source: a ``parameter_server`` trace (or its meta).
        width: figure width in inches.
        row_height: height per worker, in inches.

    Returns:
        A matplotlib ``Figure``: one row per worker, one box per attempt in
        the order the worker started them; the number is the closure (its
        ``schedule`` order), the colour its outcome. Its ``repr`` counts
        closures, attempts and outcomes, and names lost tasks.

    Example:
        >>> fig = plot_closures({"num_workers": 2, "closures": [
        ...     {"closure": 0, "worker": 0, "status": "done", "attempts": [
        ...         {"worker": 1, "outcome": "rescheduled", "t_start_ns": 1},
        ...         {"worker": 0, "outcome": "done", "t_start_ns": 2}]}]})
        >>> fig
        <Figure: 1 closure(s), 2 attempt(s) on worker(s) [0, 1]; outcomes: done 1, rescheduled 1>
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    meta = _meta(source) if hasattr(source, "meta") else source
    rows = closure_rows(meta)
    all_workers = _worker_rows(meta, rows)
    workers = all_workers[:MAX_WORKER_ROWS]  # the first ones; the title says how many more there are
    row_of = {w: y for y, w in enumerate(workers)}
    lost = {str(t.get("task")) for t in meta.get("lost_tasks") or []}
    fig, ax = plt.subplots(figsize=(width, max(1.6, len(workers) * row_height + 1.2)))
    slots: dict[int, int] = {}
    inside: list[tuple[Any, Any, str]] = []  # (closure number, its box, "": left out when it does not fit)
    drawn = [r for r in rows if r["worker"] in row_of][:MAX_ATTEMPTS]
    for r in drawn:
        w = r["worker"]
        x = slots.get(w, 0)
        slots[w] = x + 1
        y = row_of[w]
        ax.barh(y, 0.9, left=x, height=0.7, color=OUTCOME_COLORS.get(r["outcome"], "#cccccc"))
        inside.append((ax.text(x + 0.45, y, str(r["closure"]), ha="center", va="center", fontsize=MIN_TEXT_PT,
                               color="black" if r["outcome"] in ("retried", "rescheduled") else "white"),
                       ax.patches[-1], ""))
    ax.set_yticks(range(len(workers)),
                  [f"worker {w}" + (" (lost)" if f"worker-{w}" in lost else "") for w in workers], fontsize=MIN_TEXT_PT)
    ax.tick_params(axis="x", labelsize=MIN_TEXT_PT)
    ax.invert_yaxis()
    ax.set_xlim(0, max([1, *slots.values()]))
    ax.set_xlabel("attempts, in the order each worker started them (number = closure, in schedule order)",
                  fontsize=MIN_TEXT_PT)
    present = [k for k in OUTCOME_COLORS if any(r["outcome"] == k for r in rows)]
    ax.legend(handles=[Patch(color=OUTCOME_COLORS[k], label=k) for k in present], fontsize=MIN_TEXT_PT,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    title = "Closures per worker (ClusterCoordinator.schedule)"
    if lost:
        title += f"; lost during the run: {short(', '.join(sorted(lost)), 200)}"
    if len(all_workers) > len(workers) or len(drawn) < len([r for r in rows if r["worker"] >= 0]):
        title += f"\n(first {len(workers)} of {len(all_workers):,} workers, {len(drawn)} of {len(rows):,} attempts drawn)"
    ax.set_title(title, loc="left", fontsize=TITLE_PT)
    plain_figure(fig).tight_layout()
    if _fit_inside(fig, inside):
        ax.set_xlabel(ax.get_xlabel() + "; numbers left out: too narrow", fontsize=MIN_TEXT_PT)
        fig.tight_layout()
    plt.close(fig)
    return described(plain_figure(fig), _closure_summary(rows, meta))
