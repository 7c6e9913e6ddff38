"""The topology view: a run's tasks, who connects to whom, and what each advertises and listens on.

One layout (:func:`topology_layout`, plain JSON: nodes with positions, edges,
the network box) feeds every output: the matplotlib figure
(:func:`plot_topology`, whose repr says what it drew), the static HTML table
(:func:`topology_html`) and the live widget (:meth:`TopologyView.widget`: pick
a task, see its links highlighted). Reads only a
:class:`~vizdist.analysis.topology.Topology` (made from a trace, a resolver,
a cluster spec or ``TF_CONFIG`` by :func:`vizdist.topology`).

Arrows point from the task that connects to the task that serves (its port
must be reachable); a double arrow is a collective (both ways); dashed grey
is no network at all (results written as files). The grey box is vizdist's
private network namespace (only loopback) when the run was isolated.

Example:
    >>> import vizdist
    >>> fig = plot_topology({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
    >>> repr(fig)
    '<Figure: topology (multi_worker): tasks worker:0, worker:1; links collective 1; network not recorded>'
"""

from __future__ import annotations

import base64
import io
import re
from html import escape
from typing import Any

from vizdist.analysis.topology import NETWORK_WORDS, Topology, topology
from vizdist.render._text import (
    MAX_WIDTH_IN,
    MIN_TEXT_PT,
    TITLE_PT,
    described,
    plain_figure,
    short,
    text_inches,
)

__all__ = ["TopologyView", "plot_topology", "show_topology", "topology", "topology_html", "topology_layout"]

JOB_COLORS = {
    "chief": "#4c78a8", "worker": "#54a24b", "ps": "#b279a2", "evaluator": "#9d755d",
    "dispatcher": "#e45756", "data_worker": "#f58518", "consumer": "#72b7b2", "launcher": "#9d9d9d",
    "client": "#4c78a8", "coordinator": "#4c78a8", "localhost": "#54a24b",
}
KIND_STYLE = {  # color, dashed
    "collective": ("#54a24b", False), "schedule": ("#4c78a8", False), "variables": ("#b279a2", False),
    "register": ("#e45756", False), "tasks": ("#ff9da6", False), "data": ("#f58518", False),
    "tpu": ("#4c78a8", False), "health": ("#9d755d", False), "files": ("#9d9d9d", True),
    "other": ("#c44e52", False),
}
SEEN_WORDS = {"observed": " [observed]", "not seen": " [not seen in this run]", "": ""}
ROWS = {
    "multi_worker": {"chief": 0, "worker": 0, "evaluator": 1},
    "parameter_server": {"chief": 0, "worker": 1, "ps": 2, "evaluator": 3},
    "data_service": {"dispatcher": 0, "data_worker": 1, "consumer": 2},
    "tpu": {"client": 0, "coordinator": 0},
}
# Positions are in inches (the figure draws one data unit per inch): a task's box holds its lines at
# MIN_TEXT_PT; rows of more than MAX_PER_ROW tasks wrap, so a figure stays within a notebook's width.
HALF_W = 0.85  # half a task box's width
WRAP = 22  # characters per line in a task box
LINE_IN = MIN_TEXT_PT * 1.25 / 72
GAP_X, GAP_Y = 0.3, 0.75  # between boxes (rows leave room for the links' labels)
DX = 2 * HALF_W + GAP_X
MAX_PER_ROW = 4
PAD = 0.15  # the network box around the tasks


def _topology(source: Any) -> Topology:
    return source if isinstance(source, Topology) else topology(source)


def _row(topo: Topology, job: str, jobs: list[str]) -> int:
    rows = ROWS.get(topo.mode, {})
    if job in rows:
        return rows[job]
    if topo.mode == "tpu":
        return 1
    return max(rows.values(), default=-1) + 1 + jobs.index(job)


def _lines(task: Any) -> list[str]:
    lines = [f"advertises {task.address}" if task.address else "advertises nothing"]
    if task.listens:
        lines.append(f"listens {', '.join(task.listens)}" + ("" if task.observed else " (TF rule)"))
    elif task.job in ("consumer", "launcher", "client"):
        lines.append("listens on nothing")
    if task.devices:
        lines.append(f"{len(task.devices)} device(s)")
    return lines


def topology_layout(source: Any, *, highlight: str | None = None) -> dict[str, Any]:
    """Plain JSON: nodes (name, lines, position, colour), edges, the network box, title, notes.

    Positions are in inches (``half``: a task box's half width and height), so the figure's text
    fits its boxes at ``MIN_TEXT_PT``.

    Example:
        >>> lay = topology_layout({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]})
        >>> [(n["name"], n["y"]) for n in lay["nodes"]]
        [('chief:0', 0.0), ('worker:0', -1.615), ('ps:0', -3.23)]
    """
    topo = _topology(source)
    inside = [t for t in topo.tasks if t.job != "launcher"]
    jobs = list(dict.fromkeys(t.job for t in inside))
    rows: dict[int, list[Any]] = {}
    for t in inside:
        rows.setdefault(_row(topo, t.job, jobs), []).append(t)
    half_h = max(len(_title(t.name, t.this)) + len(_wrapped(*_lines(t))) for t in topo.tasks) * LINE_IN / 2 + 0.12
    dy = 2 * half_h + GAP_Y
    lines = [members[i:i + MAX_PER_ROW] for _, members in sorted(rows.items())
             for i in range(0, len(members), MAX_PER_ROW)]
    nodes = [_node(t, (i - (len(members) - 1) / 2) * DX, -r * dy, highlight)
             for r, members in enumerate(lines) for i, t in enumerate(members)]
    width = max((abs(n["x"]) for n in nodes), default=0.0) + HALF_W + PAD
    depth = -min((n["y"] for n in nodes), default=0.0) + half_h + PAD
    label = NETWORK_WORDS.get(topo.network, topo.network)
    label_h = len(_wrapped(label, width=int(2 * width / 0.07))) * LINE_IN + 0.1
    senders = [n["y"] for n in nodes if any(lk.kind == "files" and lk.src == n["name"] for lk in topo.links)]
    for t in topo.tasks:
        if t.job == "launcher":  # beside its one sender's row, else below them (lines stay clear of boxes)
            y = senders[0] if len(senders) == 1 else min(senders, default=0.0) - dy
            nodes.append(_node(t, width + GAP_X + HALF_W, y, highlight))
    edges = [_edge(lk, highlight) for lk in topo.links]
    box = None
    if topo.network:
        box = {"x0": -width, "x1": width, "y0": -depth, "y1": half_h + max(PAD, _rise(nodes, topo.links)) + label_h,
               "private": topo.network == "private", "label": label}
    nodes.sort(key=lambda n: [t.name for t in topo.tasks].index(n["name"]))  # in the topology's order
    return {"title": f"{topo.mode} topology (from {topo.source})", "mode": topo.mode, "nodes": nodes,
            "half": [HALF_W, round(half_h, 3)],
            "edges": edges, "box": box, "network": NETWORK_WORDS.get(topo.network, topo.network),
            "leader": topo.leader, "notes": list(topo.notes), "summary": _summary(topo), "highlight": highlight}


def _rise(nodes: list[dict[str, Any]], links: list[Any]) -> float:
    """How far the arcs between tasks of the top row rise above it (the network's label goes above them)."""
    at = {n["name"]: n for n in nodes}
    spans = [abs(at[lk.src]["x"] - at[lk.dst]["x"]) for lk in links if lk.kind != "files"
             and lk.src in at and lk.dst in at and at[lk.src]["y"] == at[lk.dst]["y"] == 0]
    return max([0.15 * (d - 0.6) + 0.15 for d in spans if d > DX + 1e-9], default=0.0)


def _title(name: str, this: bool) -> list[str]:
    """A task box's title lines (bold)."""
    return _wrapped(name) + (["(this process)"] if this else [])


def _wrapped(*lines: str, width: int = WRAP) -> list[str]:
    """``lines`` wrapped to ``width`` characters (a parenthesis stays whole), for the figure."""
    import textwrap

    out = []
    for line in lines:
        kept = re.sub(r"\(([^)]*)\)", lambda m: "(" + m.group(1).replace(" ", "\xa0") + ")", str(line))
        out += textwrap.wrap(kept, width, break_on_hyphens=False) or [""]
    return "\n".join(out).split("\n")


def _node(task: Any, x: float, y: float, highlight: str | None) -> dict[str, Any]:
    return {"name": task.name, "job": task.job, "x": round(x, 3), "y": round(y, 3), "lines": _lines(task),
            "role": task.role, "address": task.address, "listens": list(task.listens), "observed": task.observed,
            "this": task.this, "color": JOB_COLORS.get(task.job, "#8c8c8c"),
            "dim": highlight is not None and highlight != task.name}


def _edge(lk: Any, highlight: str | None) -> dict[str, Any]:
    color, dashed = KIND_STYLE.get(lk.kind, ("#8c8c8c", False))
    return {"src": lk.src, "dst": lk.dst, "kind": lk.kind, "label": lk.label, "mutual": lk.mutual,
            "seen": lk.seen, "color": color, "dashed": dashed,
            "dim": lk.seen == "not seen" or (highlight is not None and highlight not in (lk.src, lk.dst))}


def _summary(topo: Topology) -> str:
    kinds: dict[str, int] = {}
    for lk in topo.links:
        kinds[lk.kind] = kinds.get(lk.kind, 0) + 1
    links = ", ".join(f"{k} {n}" for k, n in kinds.items()) or "none"
    seen = sum(lk.seen == "observed" for lk in topo.links)
    if any(lk.seen for lk in topo.links):
        links += f" ({seen} observed, {sum(lk.seen == 'not seen' for lk in topo.links)} not seen)"
    net = {"private": "private namespace", "host": "host network"}.get(topo.network, "not recorded")
    return (f"topology ({topo.mode}): tasks {', '.join(t.name for t in topo.tasks)}; links {links}; "
            f"network {net}")


# -- the figure ---------------------------------------------------------------------------------
def plot_topology(source: Any, *, highlight: str | None = None, title: str | None = None, ax: Any = None) -> Any:
    """Draw the tasks (boxes: advertised address, what they listen on) and who connects to whom.

    One data unit is one inch: the figure is as big as its tasks, legend and title need (rows of
    more than four tasks wrap), every text at least ``MIN_TEXT_PT`` points; a link's label is
    left out where it would cover a box or another label (the legend names every kind).

    Args:
        source: a :class:`~vizdist.analysis.topology.Topology`, or anything :func:`vizdist.topology`
            reads (a trace, a resolver, a cluster spec, ``TF_CONFIG``).
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
    half = tuple(lay["half"])
    where = {n["name"]: (n["x"], n["y"]) for n in lay["nodes"]}
    own = ax is None
    if own:
        fig = plt.figure()
        ax = fig.add_axes((0, 0, 1, 1))
        plt.close(fig)
    fig = ax.figure
    _draw_box(ax, lay["box"])
    labels = [_draw_edge(ax, e, where, half, label=len(lay["edges"]) <= 8) for e in lay["edges"]]
    boxes = [_draw_node(ax, n, half) for n in lay["nodes"]]
    legend = _legend(ax, lay["edges"])
    x0, x1, y0, y1 = _extent(lay, where, half)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or lay["title"], fontsize=TITLE_PT)
    if own:
        _fit(fig, ax, legend, x1 - x0, y1 - y0)
    _drop_covering([t for t in labels if t is not None], boxes, fig)
    return described(plain_figure(fig), lay["summary"])


def _extent(lay: dict[str, Any], where: dict[str, tuple[float, float]], half: tuple[float, ...]
            ) -> tuple[float, float, float, float]:
    """The drawing's limits, in inches: the boxes, the network box and the arcs over a row."""
    xs = [n["x"] for n in lay["nodes"]] or [0.0]
    ys = [n["y"] for n in lay["nodes"]] or [0.0]
    x0, x1 = min(xs) - half[0] - 0.08, max(xs) + half[0] + 0.08
    y0, y1 = min(ys) - half[1] - 0.08, max(ys) + half[1] + 0.08
    if lay["box"]:
        b = lay["box"]
        x0, x1, y0, y1 = min(x0, b["x0"] - 0.08), max(x1, b["x1"] + 0.08), min(y0, b["y0"] - 0.08), max(y1, b["y1"] + 0.08)
    for e in lay["edges"]:
        if e["src"] in where and e["dst"] in where:
            a, b, rad = _ends(where[e["src"]], where[e["dst"]], half, straight=e["kind"] == "files")
            y1 = max(y1, a[1] + abs(rad) / 2 * abs(b[0] - a[0]) + 0.1)  # an arc's peak
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
    text = "\n".join(_wrapped(short(box["label"], 90), width=int((box["x1"] - box["x0"]) / 0.07)))
    ax.text(box["x0"] + 0.08, box["y1"] - 0.06, text, fontsize=MIN_TEXT_PT, color=color, va="top")


def _rim(x0: float, y0: float, x1: float, y1: float, half: tuple[float, ...]) -> tuple[float, float]:
    """Where the straight line from box centre (x0, y0) towards (x1, y1) leaves the box."""
    dx, dy = x1 - x0, y1 - y0
    t = min(half[0] / abs(dx) if dx else float("inf"), half[1] / abs(dy) if dy else float("inf"))
    return x0 + dx * t * 1.04, y0 + dy * t * 1.04


def _ends(p: tuple[float, float], q: tuple[float, float], half: tuple[float, ...], *, straight: bool = False
          ) -> tuple[tuple[float, float], tuple[float, float], float]:
    """Start, end and curvature of an edge between two boxes (same row: over the top, as an arc,
    unless they are neighbours or ``straight``)."""
    (x0, y0), (x1, y1) = p, q
    if abs(y0 - y1) < 1e-9:
        side = 1 if x1 > x0 else -1
        if straight or abs(x1 - x0) <= DX + 1e-9:  # neighbours: straight, side to side
            return (x0 + side * half[0], y0), (x1 - side * half[0], y1), 0.0
        return (x0 + side * 0.3, y0 + half[1]), (x1 - side * 0.3, y1 + half[1]), -0.3 * side
    return _rim(x0, y0, x1, y1, half), _rim(x1, y1, x0, y0, half), 0.0


def _draw_edge(ax: Any, e: dict[str, Any], where: dict[str, tuple[float, float]], half: tuple[float, ...], *,
               label: bool) -> Any:
    """The arrow of one link, and its label (returned, or None)."""
    from matplotlib.patches import FancyArrowPatch

    if e["src"] not in where or e["dst"] not in where:
        return None
    a, b, rad = _ends(where[e["src"]], where[e["dst"]], half, straight=e["kind"] == "files")
    ax.add_patch(FancyArrowPatch(a, b, connectionstyle=f"arc3,rad={rad}",
                                 arrowstyle="<|-|>" if e["mutual"] else "-|>", mutation_scale=11,
                                 shrinkA=0, shrinkB=0, color=e["color"], alpha=0.25 if e["dim"] else 0.9,
                                 linestyle=":" if e["seen"] == "not seen" else "--" if e["dashed"] else "-",
                                 linewidth=1.3, zorder=1.5))  # under the boxes (white): crossings hide
    if not label or e["dim"]:
        return None
    # the middle of matplotlib's arc3 curve: half-way to its control point
    mx = (a[0] + b[0]) / 2 + rad * (b[1] - a[1]) / 2
    my = (a[1] + b[1]) / 2 - rad * (b[0] - a[0]) / 2
    return ax.text(mx, my, "\n".join(_wrapped(short(e["label"], 60), width=26)), fontsize=MIN_TEXT_PT,
                   color=e["color"], ha="center", va="center", zorder=4,
                   bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8})


def _draw_node(ax: Any, n: dict[str, Any], half: tuple[float, ...]) -> Any:
    """A task's box (returned) with its name and lines."""
    from matplotlib.patches import FancyBboxPatch

    alpha = 0.3 if n["dim"] else 1.0
    patch = ax.add_patch(FancyBboxPatch((n["x"] - half[0], n["y"] - half[1]), 2 * half[0], 2 * half[1],
                                        boxstyle="round,pad=0.03", facecolor="white", edgecolor=n["color"],
                                        linewidth=3.0 if n["this"] else 1.6, alpha=alpha, zorder=2))
    title = _title(n["name"], n["this"])
    top = n["y"] + half[1] - 0.08
    ax.text(n["x"], top, "\n".join(title), ha="center", va="top", fontsize=MIN_TEXT_PT, fontweight="bold",
            color=n["color"], alpha=alpha, zorder=3, linespacing=1.25)
    ax.text(n["x"], top - len(title) * LINE_IN, "\n".join(_wrapped(*n["lines"])), ha="center", va="top",
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


# -- HTML ---------------------------------------------------------------------------------------
_TD = "border:1px solid #ccc;padding:2px 6px;font-family:monospace;font-size:12px;vertical-align:top"


def _link_html(e: dict[str, Any]) -> str:
    return (f"<li>{escape(e['src'])} {'&harr;' if e['mutual'] else '&rarr;'} {escape(e['dst'])}: "
            f"{escape(e['label'])}{escape(SEEN_WORDS.get(e['seen'], ''))}</li>")


def _task_row(n: dict[str, Any]) -> str:
    listens = escape(", ".join(n["listens"])) + (" <small>(observed)</small>" if n["observed"] else
                                                 " <small>(TF rule)</small>" if n["listens"] else "-")
    name = escape(n["name"]) + (" <small>(this process)</small>" if n["this"] else "")
    return (f'<tr><td style="{_TD};border-left:6px solid {n["color"]}">{name}</td><td style="{_TD}">'
            f'{escape(n["role"])}</td><td style="{_TD}">{escape(n["address"] or "-")}</td>'
            f'<td style="{_TD}">{listens}</td></tr>')


def topology_html(source: Any) -> str:
    """A table of the tasks (role, advertised, listened on) and a list of the links, escaped.

    Example:
        >>> "&lt;b&gt;:1" in topology_html({"worker": ["<b>:1"]})
        True
    """
    lay = topology_layout(source)
    head = "".join(f'<th style="{_TD}">{h}</th>' for h in ("task", "role", "advertises", "listens on"))
    links = "".join(_link_html(e) for e in lay["edges"])
    notes = "".join(f"<li>{escape(n)}</li>" for n in lay["notes"])
    leader = f"<br>collective group leader: {escape(lay['leader'])}" if lay["leader"] else ""
    return (f'<div class="vizdist-topology"><b>{escape(lay["title"])}</b><br>network: {escape(lay["network"])}'
            f'{leader}<table style="border-collapse:collapse"><tr>{head}</tr>'
            f'{"".join(_task_row(n) for n in lay["nodes"])}</table>'
            f"<b>who connects to whom</b><ul>{links or '<li>no links</li>'}</ul>"
            + (f"<b>notes</b><ul>{notes}</ul>" if notes else "") + "</div>")


# -- the view -----------------------------------------------------------------------------------
class TopologyView:
    """A topology shown three ways: text, HTML table and PNG; :meth:`widget` for the live one.

    Example:
        >>> view = show_topology({"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
        >>> view.topology.leader
        'worker:0'
    """

    def __init__(self, source: Any) -> None:
        self.topology = _topology(source)

    def __repr__(self) -> str:
        return repr(self.topology)

    def static_html(self) -> str:
        """The escaped HTML table (what GitHub and nbval see)."""
        return topology_html(self.topology)

    def widget(self) -> Any:
        """Pick a task: the figure highlights its links and a card lists them."""
        from vizdist._optional import require

        w = require("ipywidgets", pip="ipywidgets", conda="ipywidgets")
        names = [t.name for t in self.topology.tasks]
        pick = w.Dropdown(options=["(all)", *names], value="(all)", description="task")
        image = w.Image(value=_png(self.topology), format="png")
        card = w.HTML(self._card(None))

        def render(change: dict[str, Any]) -> None:
            name = None if change["new"] == "(all)" else str(change["new"])
            image.value = _png(self.topology, highlight=name)
            card.value = self._card(name)

        pick.observe(render, names="value")
        box = w.VBox([pick, image, card])
        box.add_class("vizdist-topology-widget")
        return box

    def _card(self, name: str | None) -> str:
        if name is None:
            return self.static_html()
        lay = topology_layout(self.topology, highlight=name)
        n = next(n for n in lay["nodes"] if n["name"] == name)
        links = "".join(_link_html(e) for e in lay["edges"] if name in (e["src"], e["dst"]))
        return (f"<b>{escape(name)}</b>: {escape(n['role'])}<br>advertises {escape(n['address'] or '-')}; "
                f"listens on {escape(', '.join(n['listens']) or 'nothing')}<ul>{links or '<li>no links</li>'}</ul>")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return {"text/plain": repr(self), "text/html": self.static_html(),
                "image/png": base64.b64encode(_png(self.topology)).decode("ascii")}


def show_topology(source: Any) -> TopologyView:
    """The topology view of a trace, resolver, cluster spec or ``TF_CONFIG``; ``.widget()`` for the live one.

    Example:
        >>> show_topology({"chief": ["h:1"], "ps": ["h:2"]}).topology.mode
        'parameter_server'
    """
    return TopologyView(source)


def topology_png(source: Any) -> str:
    """The drawing of a topology as base64 PNG text (what Jupyter shows for a ``Topology``)."""
    return base64.b64encode(_png(source)).decode("ascii")
