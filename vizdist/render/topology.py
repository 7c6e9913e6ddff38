"""The topology view: a run's tasks, who connects to whom, and what each advertises and listens on.

One layout (:class:`~vizdist.render.topology_layout.TopologyLayout`: nodes with positions, edges, the
network box) feeds every output: the matplotlib figure (:func:`plot_topology`, whose repr says what it
drew), the static HTML table (:func:`topology_html`), the PNG (:func:`topology_png`), all three at once
from one layout (:func:`topology_bundle`, what a ``Topology`` shows in Jupyter) and the live widget
(:meth:`TopologyView.widget`: pick a task, see its links highlighted). Reads only a
:class:`~vizdist.analysis.topology.Topology` (made from a trace, a resolver, a cluster spec or
``TF_CONFIG`` by :func:`vizdist.topology`).

Arrows point from the task that connects to the task that serves (its port
must be reachable); a double arrow is a collective (both ways); dashed grey
is no network at all (results written as files). The grey box is vizdist's
private network namespace (only loopback) when the run was isolated.

Example:
    >>> fig = plot_topology({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
    >>> repr(fig)
    '<Figure: topology (multi_worker): tasks worker:0, worker:1; links collective 1; network not recorded>'
"""

from __future__ import annotations

import base64
import io
import itertools
import math
from collections.abc import Sequence
from html import escape
from typing import Any

from vizdist.render._text import (
    MAX_WIDTH_IN,
    MIN_TEXT_PT,
    TITLE_PT,
    described,
    plain_figure,
    short,
    text_inches,
)
from vizdist.render.topology_layout import (
    BEND,
    LINE_IN,
    SEEN_WORDS,
    TopologyLayout,
    as_topology,
    box_title,
    peak,
    topology_layout,
    wrapped,
)

__all__ = ["TopologyView", "plot_topology", "show_topology", "topology_bundle", "topology_html", "topology_png"]


# -- the figure ---------------------------------------------------------------------------------
def plot_topology(source: Any, *, highlight: str | None = None, title: str | None = None, ax: Any = None) -> Any:
    """Draw the tasks (boxes: advertised address, what they listen on) and who connects to whom.

    One data unit is one inch: the figure is as big as its tasks, legend and title need (rows of
    more than four tasks wrap), every text at least ``MIN_TEXT_PT`` points; a link's line never
    crosses a box it does not join (past a row in its way it bends through a gap of that row); a
    link's label is left out where it would cover a box or another label (the legend names every kind).

    Args:
        source: a :class:`~vizdist.render.topology_layout.TopologyLayout`, a
            :class:`~vizdist.analysis.topology.Topology`, or anything :func:`vizdist.topology` reads (a
            trace, a resolver, a cluster spec, ``TF_CONFIG``).
        highlight: a task name (``"worker:1"``): its links stay bright, the rest fade.
        title: figure title (default: the mode and where it was read from).
        ax: draw into this Axes instead of a new figure.

    Returns:
        The matplotlib ``Figure``; its repr says what it drew.

    Example:
        >>> fig = plot_topology({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}, highlight="ps:0")
        >>> len(fig.axes)
        1
    """
    import matplotlib.pyplot as plt

    lay = topology_layout(source, highlight=highlight)
    half = lay.half
    own = ax is None
    if own:
        fig = plt.figure()
        ax = fig.add_axes((0, 0, 1, 1))
        plt.close(fig)
    fig = ax.figure
    _draw_box(ax, lay.box)
    labels = [_draw_edge(ax, e, label=say) for e, say in zip(lay.edges, _labelled(lay.edges), strict=True)]
    boxes = [_draw_node(ax, n, half) for n in lay.nodes]
    legend = _legend(ax, lay.edges)
    x0, x1, y0, y1 = _extent(lay, half)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or lay.title, fontsize=TITLE_PT)
    if own:
        _fit(fig, ax, legend, x1 - x0, y1 - y0)
    _drop_covering([t for t in labels if t is not None], boxes, fig)
    return described(plain_figure(fig), lay.summary)


def _labelled(edges: list[dict[str, Any]]) -> list[bool]:
    """Which links carry their label: all when there are few (8 or fewer), one per kind and target task.

    Example:
        >>> _labelled([{"kind": "files", "dst": "launcher:0"}, {"kind": "files", "dst": "launcher:0"}])
        [True, False]
    """
    seen: set[tuple[str, str]] = set()
    out = []
    for e in edges:
        key = (e["kind"], e["dst"])
        out.append(len(edges) <= 8 and key not in seen)
        seen.add(key)
    return out


def _extent(lay: TopologyLayout, half: tuple[float, ...]) -> tuple[float, float, float, float]:
    """The drawing's limits, in inches: the boxes, the network box and the links (arcs over a row)."""
    xs = [n["x"] for n in lay.nodes] or [0.0]
    ys = [n["y"] for n in lay.nodes] or [0.0]
    x0, x1 = min(xs) - half[0] - 0.08, max(xs) + half[0] + 0.08
    y0, y1 = min(ys) - half[1] - 0.08, max(ys) + half[1] + 0.08
    if lay.box:
        b = lay.box
        x0, x1, y0, y1 = min(x0, b["x0"] - 0.08), max(x1, b["x1"] + 0.08), min(y0, b["y0"] - 0.08), max(y1, b["y1"] + 0.08)
    for e in (e for e in lay.edges if e["path"]):
        x0, x1 = min([x0, *(p[0] - 0.08 for p in e["path"])]), max([x1, *(p[0] + 0.08 for p in e["path"])])
        y1 = max(y1, peak(e) + 0.1)
    return x0, x1, y0, y1


def _fit(fig: Any, ax: Any, legend: Any, width: float, height: float) -> None:
    """Size ``fig`` to the drawing (one unit an inch), the title above it and the legend below it."""
    renderer = fig._get_renderer()
    title_w, title_h = text_inches(ax.get_title(), TITLE_PT)
    leg_w, leg_h = (0.0, 0.0)
    if legend is not None:
        box = legend.get_window_extent(renderer)
        leg_w, leg_h = box.width / fig.dpi, box.height / fig.dpi + 0.1
    fig_w = min(max(width, leg_w, title_w) + 0.2, max(width + 0.04, MAX_WIDTH_IN))
    fig_h = height + title_h + 0.15 + leg_h + 0.1
    fig.set_size_inches(fig_w, fig_h)
    ax.set_position(((fig_w - width) / 2 / fig_w, (leg_h + 0.1) / fig_h, width / fig_w, height / fig_h))


def _drop_covering(labels: list[Any], boxes: list[Any], fig: Any) -> None:
    """Leave out each link label that covers a task box or a label kept before it."""
    renderer = fig._get_renderer()
    taken = [b.get_window_extent(renderer) for b in boxes]
    for t in labels:
        ext = t.get_window_extent(renderer).expanded(1.05, 1.1)
        if any(ext.overlaps(o) for o in taken):
            t.remove()
        else:
            taken.append(ext)


def _draw_box(ax: Any, box: dict[str, Any] | None) -> None:
    from matplotlib.patches import FancyBboxPatch

    if not box:
        return
    color = "#666666" if box["private"] else "#c44e52"
    ax.add_patch(FancyBboxPatch((box["x0"], box["y0"]), box["x1"] - box["x0"], box["y1"] - box["y0"],
                                boxstyle="round,pad=0.05", facecolor="#f4f4f4" if box["private"] else "none",
                                edgecolor=color, linestyle="--", linewidth=1.2, zorder=0))
    text = "\n".join(wrapped(short(box["label"], 90), width=int((box["x1"] - box["x0"]) / 0.07)))
    ax.text(box["x0"] + 0.08, box["y1"] - 0.06, text, fontsize=MIN_TEXT_PT, color=color, va="top")


def _curve(points: list[list[float]], rad: float) -> Any:
    """The matplotlib ``Path`` of a link's line: an arc (matplotlib's arc3) between two points, else
    straight between them with each corner rounded (by ``BEND``: it stays clear of the boxes)."""
    from matplotlib.path import Path

    if rad:
        (ax, ay), (bx, by) = points
        control = ((ax + bx) / 2 + rad * (by - ay), (ay + by) / 2 - rad * (bx - ax))
        return Path([points[0], control, points[1]], [Path.MOVETO, Path.CURVE3, Path.CURVE3])
    verts: list[Sequence[float]] = [points[0]]
    for p, v, q in zip(points, points[1:], points[2:], strict=False):
        verts += [_toward(v, p, min(BEND, math.dist(v, p) / 2)), v, _toward(v, q, min(BEND, math.dist(v, q) / 2))]
    codes = [Path.MOVETO, *[Path.LINETO, Path.CURVE3, Path.CURVE3] * (len(points) - 2), Path.LINETO]
    return Path([*verts, points[-1]], codes)


def _toward(v: Sequence[float], p: Sequence[float], d: float) -> tuple[float, float]:
    """The point ``d`` from ``v`` towards ``p``."""
    length = math.dist(v, p)
    t = d / length if length else 0.0
    return v[0] + (p[0] - v[0]) * t, v[1] + (p[1] - v[1]) * t


def _middle(points: list[list[float]], rad: float) -> tuple[float, float]:
    """Half-way along a link's line (an arc's: half-way to its control point)."""
    if rad:
        (ax, ay), (bx, by) = points
        return (ax + bx) / 2 + rad * (by - ay) / 2, (ay + by) / 2 - rad * (bx - ax) / 2
    left = sum(math.dist(p, q) for p, q in itertools.pairwise(points)) / 2
    for p, q in itertools.pairwise(points):
        if left <= math.dist(p, q):
            return _toward(p, q, left)
        left -= math.dist(p, q)
    return points[-1][0], points[-1][1]


def _draw_edge(ax: Any, e: dict[str, Any], *, label: bool) -> Any:
    """The arrow of one link along its layout's path, and its label (returned, or None)."""
    from matplotlib.patches import FancyArrowPatch

    if not e["path"]:
        return None
    ax.add_patch(FancyArrowPatch(path=_curve(e["path"], e["rad"]),
                                 arrowstyle="<|-|>" if e["mutual"] else "-|>", mutation_scale=11,
                                 color=e["color"], alpha=0.25 if e["dim"] else 0.9,
                                 linestyle=":" if e["seen"] == "not seen" else "--" if e["dashed"] else "-",
                                 linewidth=1.3, zorder=1.5))
    if not label or e["dim"]:
        return None
    mx, my = _middle(e["path"], e["rad"])
    return ax.text(mx, my, "\n".join(wrapped(short(e["label"], 60), width=26)), fontsize=MIN_TEXT_PT,
                   color=e["color"], ha="center", va="center", zorder=4,
                   bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8})


def _draw_node(ax: Any, n: dict[str, Any], half: tuple[float, ...]) -> Any:
    """A task's box (returned) with its name and lines."""
    from matplotlib.patches import FancyBboxPatch

    alpha = 0.3 if n["dim"] else 1.0
    patch = ax.add_patch(FancyBboxPatch((n["x"] - half[0], n["y"] - half[1]), 2 * half[0], 2 * half[1],
                                        boxstyle="round,pad=0.03", facecolor="white", edgecolor=n["color"],
                                        linewidth=3.0 if n["this"] else 1.6, alpha=alpha, zorder=2))
    title = box_title(n["name"], n["this"])
    top = n["y"] + half[1] - 0.08
    ax.text(n["x"], top, "\n".join(title), ha="center", va="top", fontsize=MIN_TEXT_PT, fontweight="bold",
            color=n["color"], alpha=alpha, zorder=3, linespacing=1.25)
    ax.text(n["x"], top - len(title) * LINE_IN, "\n".join(wrapped(*n["lines"])), ha="center", va="top",
            fontsize=MIN_TEXT_PT, color="#333333", alpha=alpha, zorder=3, linespacing=1.25)
    return patch


def _legend(ax: Any, edges: list[dict[str, Any]]) -> Any:
    """The kinds of link, under the drawing (returned, or None)."""
    from matplotlib.lines import Line2D

    seen: dict[str, dict[str, Any]] = {}
    for e in edges:
        seen.setdefault(e["kind"], e)
    handles = [Line2D([0], [0], color=e["color"], linestyle="--" if e["dashed"] else "-",
                      label=f"{k}: {short(e['label'].split(':')[0], 40)}") for k, e in seen.items()]
    if any(e["seen"] == "not seen" for e in edges):
        handles.append(Line2D([0], [0], color="#999999", linestyle=":", label="dotted: not seen in this run"))
    if not handles:
        return None
    return ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=MIN_TEXT_PT,
                     frameon=False, ncol=2 if len(handles) > 2 else 1, title="arrow: who connects to whom",
                     title_fontsize=MIN_TEXT_PT)


def _png(source: Any, highlight: str | None = None) -> bytes:
    buf = io.BytesIO()
    plot_topology(source, highlight=highlight).savefig(buf, format="png", dpi=72, bbox_inches="tight")
    return buf.getvalue()


def topology_png(source: Any) -> str:
    """The drawing of a topology (or of its layout) as base64 PNG text.

    Example:
        >>> base64.b64decode(topology_png({"worker": ["h:1"]}))[:4]
        b'\x89PNG'
    """
    return base64.b64encode(_png(source)).decode("ascii")


def topology_bundle(source: Any) -> dict[str, str]:
    """The HTML table and the PNG of a topology, both drawn from one layout (what Jupyter shows for a
    ``Topology``, beside its repr).

    Example:
        >>> sorted(topology_bundle({"worker": ["h:1", "h:2"]}))
        ['image/png', 'text/html']
    """
    lay = topology_layout(source)
    return {"text/html": topology_html(lay), "image/png": topology_png(lay)}


# -- HTML ---------------------------------------------------------------------------------------
_TD = "border:1px solid #ccc;padding:2px 6px;font-family:monospace;font-size:12px;vertical-align:top"


def _link_html(e: dict[str, Any]) -> str:
    return (f"<li>{escape(short(e['src']))} {'&harr;' if e['mutual'] else '&rarr;'} {escape(short(e['dst']))}: "
            f"{escape(e['label'])}{escape(SEEN_WORDS.get(e['seen'], ''))}</li>")


def _task_row(n: dict[str, Any]) -> str:
    listens = escape(", ".join(n["listens"])) + (" <small>(observed)</small>" if n["observed"] else
                                                 " <small>(TF rule)</small>" if n["listens"] else "-")
    name = escape(short(n["name"])) + (" <small>(this process)</small>" if n["this"] else "")
    return (f'<tr><td style="{_TD};border-left:6px solid {n["color"]}">{name}</td><td style="{_TD}">'
            f'{escape(n["role"])}</td><td style="{_TD}">{escape(n["address"] or "-")}</td>'
            f'<td style="{_TD}">{listens}</td></tr>')


def topology_html(source: Any) -> str:
    """A table of the tasks (role, advertised, listened on) and a list of the links, escaped; ``source`` is a
    layout, a topology or anything :func:`vizdist.topology` reads.

    Example:
        >>> "&lt;b&gt;:1" in topology_html({"worker": ["<b>:1"]})
        True
    """
    lay = topology_layout(source)
    head = "".join(f'<th style="{_TD}">{h}</th>' for h in ("task", "role", "advertises", "listens on"))
    links = "".join(_link_html(e) for e in lay.edges)
    notes = "".join(f"<li>{escape(n)}</li>" for n in lay.notes)
    leader = f"<br>collective group leader: {escape(lay.leader)}" if lay.leader else ""
    return (f'<div class="vizdist-topology"><b>{escape(lay.title)}</b><br>network: {escape(lay.network)}'
            f'{leader}<table style="border-collapse:collapse"><tr>{head}</tr>'
            f'{"".join(_task_row(n) for n in lay.nodes)}</table>'
            f"<b>who connects to whom</b><ul>{links or '<li>no links</li>'}</ul>"
            + (f"<b>notes</b><ul>{notes}</ul>" if notes else "") + "</div>")


# -- the view -----------------------------------------------------------------------------------
class TopologyView:
    """A topology shown three ways: text, HTML table and PNG (from one layout); :meth:`widget` for the live one.

    Example:
        >>> view = show_topology({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
        >>> view.topology.leader
        'worker:0'
    """

    def __init__(self, source: Any) -> None:
        self.topology = as_topology(source)
        self.layout = topology_layout(self.topology)

    def __repr__(self) -> str:
        return repr(self.topology)

    def static_html(self) -> str:
        """The escaped HTML table (what GitHub and nbval see)."""
        return topology_html(self.layout)

    def widget(self) -> Any:
        """Pick a task: the figure highlights its links and a card lists them."""
        from vizdist._optional import require

        w = require("ipywidgets", pip="ipywidgets", conda="ipywidgets")
        names = [n["name"] for n in self.layout.nodes]
        pick = w.Dropdown(options=["(all)", *names], value="(all)", description="task")
        image = w.Image(value=_png(self.layout), format="png")
        card = w.HTML(self._card(None))

        def render(change: dict[str, Any]) -> None:
            name = None if change["new"] == "(all)" else str(change["new"])
            lay = topology_layout(self.layout, highlight=name)
            image.value = _png(lay)
            card.value = self._card(name, lay)

        pick.observe(render, names="value")
        box = w.VBox([pick, image, card])
        box.add_class("vizdist-topology-widget")
        return box

    def _card(self, name: str | None, lay: TopologyLayout | None = None) -> str:
        if name is None:
            return self.static_html()
        lay = lay or topology_layout(self.layout, highlight=name)
        n = next(n for n in lay.nodes if n["name"] == name)
        links = "".join(_link_html(e) for e in lay.edges if name in (e["src"], e["dst"]))
        return (f"<b>{escape(name)}</b>: {escape(n['role'])}<br>advertises {escape(n['address'] or '-')}; "
                f"listens on {escape(', '.join(n['listens']) or 'nothing')}<ul>{links or '<li>no links</li>'}</ul>")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return {"text/plain": repr(self), **topology_bundle(self.layout)}


def show_topology(source: Any) -> TopologyView:
    """The topology view of a trace, resolver, cluster spec or ``TF_CONFIG``; ``.widget()`` for the live one.

    Example:
        >>> show_topology({"chief": ["h:1"], "ps": ["h:2"]}).topology.mode
        'parameter_server'
    """
    return TopologyView(source)
