"""Auto-shard policies side by side: which worker read which file and element.

Renders a :class:`vizdist.analysis.sharding.ShardComparison` (plain data:
per-policy traces, no tensors) as a matplotlib figure or an HTML table.

Example:
    >>> from vizdist.analysis.sharding import ShardComparison
    >>> html = shard_policies_html(ShardComparison({}, files=[], workers=2, global_batch_size=4))
    >>> html.startswith("<div")
    True
"""

from __future__ import annotations

import html as _html
from pathlib import Path
from typing import Any

from vizdist._clip import clip
from vizdist.analysis.sharding import content_map
from vizdist.render._text import described, plain_figure

__all__ = ["element_grid", "plot_shard_policies", "shard_policies_html"]


def _name(path: str) -> str:
    return Path(str(path)).name if path else ""


def element_grid(cmp: Any, policy: str) -> tuple[list[tuple[str, int]], dict[tuple[int, tuple[str, int]], list[int]]]:
    """The (file, line) columns and, per (worker, element), the steps it was read at.

    Example:
        >>> from vizdist.analysis.sharding import ShardComparison
        >>> element_grid(ShardComparison({}, files=[], workers=1, global_batch_size=1), "OFF")
        ([], {})
    """
    universe = sorted(set(content_map(cmp.files).values()), key=lambda fl: (cmp.files.index(fl[0])
                      if fl[0] in cmp.files else len(cmp.files), fl[1]))
    reads: dict[tuple[int, tuple[str, int]], list[int]] = {}
    t = cmp.traces.get(policy)
    if t is not None:
        e = t.elements
        for w, f, ln, s in zip(e["worker"], e["source_file"], e["source_line"], e["step"], strict=True):
            key = (str(f), int(ln))
            reads.setdefault((int(w), key), []).append(int(s))
            if key not in universe:
                universe.append(key)
    return universe, reads


def plot_shard_policies(cmp: Any, *, width: float = 11.0, row_height: float = 0.42) -> Any:
    """One panel per policy: rows are workers, columns source elements, grouped by file.

    A filled cell means the worker read that element; the number in it is
    the step. Cells are coloured by file. Errors and notes are printed
    under the panel of their policy.

    Args:
        cmp: a ShardComparison.
        width: figure width in inches.
        row_height: height per worker row, in inches.

    Returns:
        A matplotlib ``Figure``.

    Example:
        >>> from vizdist.analysis.sharding import ShardComparison
        >>> fig = plot_shard_policies(ShardComparison({}, files=[], workers=2, global_batch_size=4))
        >>> len(fig.axes)
        0
    """
    import matplotlib.pyplot as plt

    policies = cmp.policies
    fig = plt.figure(figsize=(width, max(1.0, len(policies) * (cmp.workers * row_height + 0.9))))
    if not policies:
        plt.close(fig)
        return plain_figure(fig)
    axes = fig.subplots(len(policies), 1, squeeze=False)[:, 0]
    colors = plt.get_cmap("tab10")
    for ax, policy in zip(axes, policies, strict=True):
        universe, reads = element_grid(cmp, policy)
        files = list(dict.fromkeys(f for f, _ in universe))
        for x, (f, ln) in enumerate(universe):
            color = colors(files.index(f) % 10)
            for w in range(cmp.workers):
                steps = reads.get((w, (f, ln)))
                if steps:
                    ax.add_patch(_rect(x, w, color, alpha=0.85))
                    ax.text(x + 0.5, w + 0.5, ",".join(str(s) for s in steps), ha="center", va="center",
                            fontsize=7, color="white")
                else:
                    ax.add_patch(_rect(x, w, "#eeeeee", alpha=1.0))
        ax.set_xlim(0, max(1, len(universe)))
        ax.set_ylim(cmp.workers, 0)
        ax.set_yticks([w + 0.5 for w in range(cmp.workers)], [f"worker {w}" for w in range(cmp.workers)])
        ticks, labels = [], []
        for f in files:
            xs = [i for i, (g, _) in enumerate(universe) if g == f]
            ticks.append((xs[0] + xs[-1] + 1) / 2)
            labels.append(_name(f))
        ax.set_xticks(ticks, labels, fontsize=8)
        ax.tick_params(length=0)
        for side in ("top", "right", "left", "bottom"):
            ax.spines[side].set_visible(False)
        status = ""
        if policy in cmp.errors:
            status = "  —  failed: " + "; ".join(f"{k}: {v[:70]}" for k, v in sorted(cmp.errors[policy].items()))
        elif policy in cmp.notes and policy not in cmp.traces:
            status = "  —  not run: fewer files than workers"
        ax.set_title(f"{policy}{status}", loc="left", fontsize=9)
    fig.suptitle(f"Which worker read which element ({cmp.workers} workers, global batch "
                 f"{cmp.global_batch_size}; numbers are steps)", fontsize=10)
    plain_figure(fig).tight_layout()
    plt.close(fig)  # returned, not auto-shown: appears once in a notebook
    return described(plain_figure(fig), f"shard policies {', '.join(policies)}, {cmp.workers} worker row(s) each")


def _rect(x: int, y: int, color: Any, *, alpha: float) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x + 0.05, y + 0.08), 0.9, 0.84, color=color, alpha=alpha, linewidth=0)


def shard_policies_html(cmp: Any) -> str:
    """An HTML table: one column per policy, one row per worker (files and elements read).

    Every value shown is escaped.
    """
    pols = cmp.policies
    head = "".join(f"<th>{_html.escape(p)}</th>" for p in pols)
    rows = []
    summary = cmp.summary()
    for w in range(cmp.workers):
        cells = []
        for p in pols:
            r = summary[(summary["policy"] == p) & (summary["worker"] == w)]
            values = cmp.worker_values(p).get(w, [])
            if r.empty:
                cells.append("<td></td>")
                continue
            row = r.iloc[0]
            status = str(row["status"])
            files = _html.escape(clip(", ".join(str(f) for f in row["files"]), 2_000))
            body = (f"<div><b>files:</b> {files or '—'}</div>"
                    f"<div><b>elements:</b> {_html.escape(' '.join(values)) or '—'}</div>")
            if status != "ok":
                body += f"<div style='color:#b00'>{_html.escape(clip(status, 2_000))}</div>"
            cells.append(f"<td style='vertical-align:top;text-align:left'>{body}</td>")
        rows.append(f"<tr><th>worker {w}</th>{''.join(cells)}</tr>")
    notes = "".join(f"<p><b>{_html.escape(p)}:</b> {_html.escape(n)}</p>" for p, n in cmp.notes.items())
    return (f"<div class='vizdist-shards'><table><thead><tr><th></th>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{notes}</div>")
