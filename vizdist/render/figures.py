"""Static matplotlib figures of a trace's split."""

from __future__ import annotations

from typing import Any

from vizdist.render._text import described, plain_figure
from vizdist.render.html import ids_text
from vizdist.render.layout import split_layout
from vizdist.trace import Trace

__all__ = ["plot_split"]


def plot_split(
    trace: Trace,
    *,
    max_steps: int = 12,
    max_replicas: int = 16,
    phase: str | None = None,
    epoch: int | None = None,
    cmap: str = "viridis",
    title: str | None = None,
    ax: Any = None,
) -> Any:
    """Draw steps × replicas: each cell lists the element ids that replica got.

    Cells are coloured by the ids' position in source order (dark = early),
    empty batches are hatched and labelled, partial ones are marked.

    Args:
        trace: a recorded run.
        max_steps: draw at most this many steps (the title says how many exist).
        max_replicas: draw at most this many replicas (the first ones; the title says how many exist).
        phase, epoch: for a ``vizdist.record()`` trace, draw only the steps of that phase (``"train"``,
            ``"validation"``, ``"evaluate"``, ``"predict"``, ``"build"``, ``"loop"``) and that epoch; each
            step is labelled with its phase, epoch and step within the epoch either way.
        cmap: matplotlib colormap for source order.
        title: figure title (default: strategy, replicas, global batch).
        ax: draw into this Axes instead of a new figure.

    Returns:
        The matplotlib ``Figure`` (shown once when it is a cell's last value).

    Example:
        >>> import vizdist
        >>> t = vizdist.Trace.from_records(
        ...     elements=[dict(step=0, replica=r, source_id=r, position=0) for r in range(2)])
        >>> fig = plot_split(t)
        >>> len(fig.axes)
        1
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if not isinstance(trace, Trace):
        raise TypeError(f"plot_split takes a vizdist.Trace; got {type(trace).__name__}.")
    lay = split_layout(trace, max_steps=max_steps, max_replicas=max_replicas, phase=phase, epoch=epoch)
    n_rep, n_step = len(lay["replicas"]), len(lay["steps"])
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.2 + 2.1 * max(n_rep, 1), 0.9 + 0.55 * max(n_step, 1)))
        plt.close(fig)  # returned, not auto-shown: appears once in a notebook
    else:
        fig = ax.figure
    colormap = plt.get_cmap(cmap)
    lo, hi = lay["id_range"]
    span = max(hi - lo, 1)
    for row, (_step, cells) in enumerate(zip(lay["steps"], lay["cells"], strict=False)):
        for col, cell in enumerate(cells):
            y = n_step - 1 - row
            if cell["empty"] or not cell["ids"]:
                ax.add_patch(Rectangle((col, y), 1, 1, facecolor="#f2f2f2", edgecolor="#b00", hatch="///",
                                       linewidth=1.0))
                ax.text(col + 0.5, y + 0.5, "empty", ha="center", va="center", color="#b00", fontsize=9,
                        fontweight="bold")
                continue
            mean = sum(cell["ids"]) / len(cell["ids"])
            rgba = colormap(0.15 + 0.7 * (mean - lo) / span)
            ax.add_patch(Rectangle((col, y), 1, 1, facecolor=rgba, edgecolor="white", linewidth=2,
                                   alpha=0.85))
            lum = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2]
            text = ids_text(cell["labels"], limit=6)
            if cell["partial"]:
                text += "\n(partial)"
            ax.text(col + 0.5, y + 0.5, text, ha="center", va="center", fontsize=8,
                    color="black" if lum > 0.5 else "white", wrap=True)
    ax.set_xlim(0, max(n_rep, 1))
    ax.set_ylim(0, max(n_step, 1))
    ax.set_xticks([c + 0.5 for c in range(n_rep)])
    ax.set_xticklabels([f"replica {r['id']}\n{r['device']}" for r in lay["replicas"]], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks([n_step - 1 - i + 0.5 for i in range(n_step)])
    ax.set_yticklabels([f"step {s}" + (f"\n{label}" if label else "")
                        for s, label in zip(lay["steps"], lay["step_labels"], strict=True)], fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title((title or lay["title"]) + _shown(lay), fontsize=10, pad=28)
    plain_figure(fig).tight_layout()
    return described(plain_figure(fig), _split_summary(lay))


def _shown(lay: dict[str, Any]) -> str:
    """What the title says a split figure left out (the first steps and replicas are drawn)."""
    n_rep, n_step = len(lay["replicas"]), len(lay["steps"])
    shown = "" if lay["total_steps"] <= n_step else f"  (first {n_step} of {lay['total_steps']} steps)"
    if lay["total_replicas"] > n_rep:
        shown += f"  (first {n_rep} of {lay['total_replicas']} replicas)"
    return shown


def _split_summary(lay: dict[str, Any]) -> str:
    """What plot_split drew, in words: the grid, the elements, the empty and partial cells."""
    cells = [(s, r["id"], c) for s, row in zip(lay["steps"], lay["cells"], strict=True)
             for r, c in zip(lay["replicas"], row, strict=True)]
    n = sum(len(c["ids"]) for _, _, c in cells)
    empty = [(s, r) for s, r, c in cells if c["empty"] or not c["ids"]]
    partial = [(s, r) for s, r, c in cells if c["partial"] and not c["empty"]]
    reps = len(lay["replicas"])
    of = f" of {lay['total_replicas']}" if lay.get("total_replicas", reps) > reps else ""
    return (f"split of {len(lay['steps'])} of {lay['total_steps']} step(s) x {reps}{of} replica(s), "
            f"{n} element(s); empty (step, replica): {empty or 'none'}; partial: {partial or 'none'}")
