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
import dataclasses
import io
import itertools
import math
import re
from collections.abc import Sequence
from html import escape
from typing import Any

from vizdist.analysis.topology import NETWORK_WORDS, Topology, topology
from vizdist.render._text import (
    MAX_LABEL,
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
# A link never crosses a box it does not join: between neighbours in a row it runs straight, over a
# row as an arc, between rows in the gap between them, and past a row in its way through a gap of
# that row (midway between two boxes, or as far past its end box), bent round the boxes.
HALF_W = 0.85  # half a task box's width
WRAP = 22  # characters per line in a task box
LINE_IN = MIN_TEXT_PT * 1.25 / 72
GAP_X, GAP_Y = 0.3, 0.75  # between boxes (rows leave room for the links' labels)
DX = 2 * HALF_W + GAP_X
MAX_PER_ROW = 4
PAD = 0.15  # the network box around the tasks (and around a link passing an end box)
RIM = 0.03  # the rounded rim matplotlib draws round a task box (its boxstyle's pad)
CLEAR = 0.12  # how far a link passing a row bends above and below its boxes
BEND = 0.1  # a bend's radius (less than CLEAR: a rounded corner stays clear of the boxes)
ARC_IN = 0.3  # how far in from a box's side an arc over its row starts
ARC_RAD = 0.3  # an arc's curvature (its height is ARC_RAD / 2 of its span)
RISE = GAP_Y - 2 * RIM - CLEAR  # the highest an arc over a lower row may rise (under the row above)


#: The most tasks a drawing (and its HTML table) shows: the first ones; a note says how many more there are.
MAX_TASKS = 64


def _topology(source: Any) -> Topology:
    return source if isinstance(source, Topology) else topology(source)


def _drawable(topo: Topology) -> Topology:
    """``topo`` with at most :data:`MAX_TASKS` tasks (and the links between them), saying how many it left out."""
    if len(topo.tasks) <= MAX_TASKS:
        return topo
    tasks = topo.tasks[:MAX_TASKS]
    names = {t.name for t in tasks}
    links = [lk for lk in topo.links if lk.src in names and lk.dst in names]
    note = (f"{len(topo.tasks) - MAX_TASKS:,} more tasks not drawn (a drawing shows the first {MAX_TASKS}; "
            "topology(...).table() lists them all)")
    return dataclasses.replace(topo, tasks=tasks, links=links, notes=[*topo.notes, note])


def _row(topo: Topology, job: str, jobs: list[str]) -> int:
    rows = ROWS.get(topo.mode, {})
    if job in rows:
        return rows[job]
    if topo.mode == "tpu":
        return 1
    return max(rows.values(), default=-1) + 1 + jobs.index(job)


def _lines(task: Any) -> list[str]:
    lines = [f"advertises {short(task.address, 60)}" if task.address else "advertises nothing"]
    if task.listens:
        listens = [short(a, 60) for a in task.listens[:3]] + ([f"and {len(task.listens) - 3} more"]
                                                              if len(task.listens) > 3 else [])
        lines.append(f"listens {', '.join(listens)}" + ("" if task.observed else " (TF rule)"))
    elif task.job in ("consumer", "launcher", "client"):
        lines.append("listens on nothing")
    if task.devices:
        lines.append(f"{len(task.devices)} device(s)")
    return lines


def topology_layout(source: Any, *, highlight: str | None = None) -> dict[str, Any]:
    """Plain JSON: nodes (name, lines, position, colour), edges (with the points their lines pass), the
    network box, title, notes.

    Positions are in inches (``half``: a task box's half width and height), so the figure's text
    fits its boxes at ``MIN_TEXT_PT``. An edge's ``path`` runs clear of every box but its two ends
    (``rad``: the curvature of an arc over a row, else 0).

    Example:
        >>> lay = topology_layout({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]})
        >>> [(n["name"], n["y"]) for n in lay["nodes"]]
        [('chief:0', 0.0), ('worker:0', -1.615), ('ps:0', -3.23)]
        >>> [len(e["path"]) for e in lay["edges"]]  # chief:0 -> ps:0 passes beside worker:0
        [2, 4, 2]
    """
    topo = _drawable(_topology(source))
    half_h = max(len(_title(t.name, t.this)) + len(_wrapped(*_lines(t))) for t in topo.tasks) * LINE_IN / 2 + 0.12
    rows = _rows(topo, 2 * half_h + GAP_Y, highlight)
    grid = _Grid(rows, (HALF_W, half_h))
    nodes = [n for row in rows for n in row]
    edges = [_edge(lk, highlight, *grid.route(lk.src, lk.dst)) for lk in topo.links]
    nodes.sort(key=lambda n: [t.name for t in topo.tasks].index(n["name"]))  # in the topology's order
    return {"title": f"{topo.mode} topology (from {topo.source})", "mode": topo.mode, "nodes": nodes,
            "half": [HALF_W, round(half_h, 3)], "edges": edges, "box": _network_box(topo, rows, edges, half_h),
            "network": NETWORK_WORDS.get(topo.network, topo.network),
            "leader": topo.leader, "notes": list(topo.notes), "summary": _summary(topo), "highlight": highlight}


def _rows(topo: Topology, dy: float, highlight: str | None) -> list[list[dict[str, Any]]]:
    """The task boxes row by row, each row centred and left to right; the launcher outside, at the right."""
    inside = [t for t in topo.tasks if t.job != "launcher"]
    jobs = list(dict.fromkeys(t.job for t in inside))
    by_role: dict[int, list[Any]] = {}
    for t in inside:
        by_role.setdefault(_row(topo, t.job, jobs), []).append(t)
    lines = [members[i:i + MAX_PER_ROW] for _, members in sorted(by_role.items())
             for i in range(0, len(members), MAX_PER_ROW)]
    rows = [[_node(t, (i - (len(m) - 1) / 2) * DX, -r * dy, highlight) for i, t in enumerate(m)]
            for r, m in enumerate(lines)]
    for t in topo.tasks:
        if t.job == "launcher":  # in its one sender's row, else in the row under the senders'
            senders = [r for r, row in enumerate(rows) for n in row
                       if any(lk.kind == "files" and (lk.src, lk.dst) == (n["name"], t.name) for lk in topo.links)]
            r = senders[0] if len(senders) == 1 else max(senders, default=-1) + 1
            if r == len(rows):
                rows.append([])
            rows[r].append(_node(t, _width(rows) + GAP_X + HALF_W, -r * dy, highlight))
    return rows


def _width(rows: list[list[dict[str, Any]]]) -> float:
    """Half the network box's width: the tasks inside, and room for a link to pass the widest row's ends."""
    return max((abs(n["x"]) for row in rows for n in row if n["job"] != "launcher"), default=0.0) + DX / 2 + PAD


def _network_box(topo: Topology, rows: list[list[dict[str, Any]]], edges: list[dict[str, Any]],
                 half_h: float) -> dict[str, Any] | None:
    """The network box round the tasks (not the launcher), its label above the arcs over the top row."""
    if not topo.network:
        return None
    width = _width(rows)
    inside = [n["y"] for row in rows for n in row if n["job"] != "launcher"]
    label = NETWORK_WORDS.get(topo.network, topo.network)
    label_h = len(_wrapped(label, width=int(2 * width / 0.07))) * LINE_IN + 0.1
    top = max([half_h + PAD, *(_peak(e) + 0.15 for e in edges if e["path"])])  # over the top row's arcs
    return {"x0": -width, "x1": width, "y0": min(inside, default=0.0) - half_h - PAD, "y1": top + label_h,
            "private": topo.network == "private", "label": label}


def _peak(e: dict[str, Any]) -> float:
    """The highest point of an edge's line (an arc rises ``rad / 2`` of its span over its ends)."""
    (x0, _), (x1, _) = e["path"][0], e["path"][-1]
    return max(p[1] for p in e["path"]) + abs(e["rad"]) * abs(x1 - x0) / 2


class _Grid:
    """The task boxes in rows, and where the line of a link between two of them runs (clear of the rest)."""

    def __init__(self, rows: list[list[dict[str, Any]]], half: tuple[float, float]) -> None:
        self.rows, self.half = rows, half
        self.at = {n["name"]: (r, i) for r, row in enumerate(rows) for i, n in enumerate(row)}

    def route(self, src: str, dst: str) -> tuple[list[list[float]], float]:
        """The points the line from ``src`` to ``dst`` passes, and its curvature (an arc over a row)."""
        if src not in self.at or dst not in self.at:
            return [], 0.0
        (ra, ia), (rb, ib) = self.at[src], self.at[dst]
        a, b = self.rows[ra][ia], self.rows[rb][ib]
        if ra == rb:
            return _along(a, b, abs(ia - ib) == 1, ra == 0, self.half)
        if ra < rb:
            return self._down(a, b, ra, rb), 0.0
        return self._down(b, a, rb, ra)[::-1], 0.0

    def _down(self, a: dict[str, Any], b: dict[str, Any], ra: int, rb: int) -> list[list[float]]:
        """From ``a`` down to ``b``: through the gap of each row between that is nearest the straight line."""
        via: list[list[float]] = []
        reach = self.half[1] + RIM + CLEAR
        for k in range(ra + 1, rb):
            ideal = a["x"] + (b["x"] - a["x"]) * (k - ra) / (rb - ra)
            gap = min(self._gaps(k), key=lambda g: (abs(g - ideal), abs(g)))  # a tie: nearer the middle
            y = self.rows[k][0]["y"]
            via += [[gap, y + reach], [gap, y - reach]]
        start = _port(a, via[0] if via else [b["x"], b["y"]], self.half)
        return [start, *via, _port(b, via[-1] if via else [a["x"], a["y"]], self.half)]

    def _gaps(self, k: int) -> list[float]:
        """Where a line may pass row ``k``: midway between two boxes, or as far past an end box."""
        return sorted({round(n["x"] + side * DX / 2, 3) for n in self.rows[k] for side in (-1, 1)})


def _along(a: dict[str, Any], b: dict[str, Any], neighbours: bool, top: bool, half: tuple[float, float]
           ) -> tuple[list[list[float]], float]:
    """A line within a row: straight between neighbours, else an arc over the boxes between (over a
    lower row, no higher than the gap under the row above)."""
    side = 1 if b["x"] > a["x"] else -1
    if neighbours:
        return [[a["x"] + side * (half[0] + RIM), a["y"]], [b["x"] - side * (half[0] + RIM), b["y"]]], 0.0
    y = a["y"] + half[1] + RIM
    span = abs(b["x"] - a["x"]) - 2 * ARC_IN
    rad = ARC_RAD if top else min(ARC_RAD, 2 * RISE / span)
    return [[a["x"] + side * ARC_IN, y], [b["x"] - side * ARC_IN, y]], -rad * side


def _port(n: dict[str, Any], toward: list[float], half: tuple[float, float]) -> list[float]:
    """Where a line towards a point above or below leaves box ``n``: its top or bottom edge, where the
    line from the box's centre crosses it, kept off the corners."""
    y = n["y"] + (half[1] + RIM) * (1 if toward[1] > n["y"] else -1)
    x = n["x"] + (toward[0] - n["x"]) * (y - n["y"]) / (toward[1] - n["y"])
    inset = half[0] - 0.15  # off the rounded corners, and clear of a neighbour whatever the line's slope
    return [round(min(max(x, n["x"] - inset), n["x"] + inset), 3), round(y, 3)]


def _title(name: str, this: bool) -> list[str]:
    """A task box's title lines (bold)."""
    return _wrapped(short(name, 60)) + (["(this process)"] if this else [])


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
            "role": task.role, "address": short(task.address, MAX_LABEL),
            "listens": [short(a, MAX_LABEL) for a in task.listens[:8]] + (
                [f"and {len(task.listens) - 8} more"] if len(task.listens) > 8 else []), "observed": task.observed,
            "this": task.this, "color": JOB_COLORS.get(task.job, "#8c8c8c"),
            "dim": highlight is not None and highlight != task.name}


def _edge(lk: Any, highlight: str | None, path: list[list[float]], rad: float) -> dict[str, Any]:
    color, dashed = KIND_STYLE.get(lk.kind, ("#8c8c8c", False))
    return {"src": lk.src, "dst": lk.dst, "kind": lk.kind, "label": lk.label, "mutual": lk.mutual,
            "seen": lk.seen, "color": color, "dashed": dashed, "path": path, "rad": round(rad, 4),
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
    more than four tasks wrap), every text at least ``MIN_TEXT_PT`` points; a link's line never
    crosses a box it does not join (past a row in its way it bends through a gap of that row); a
    link's label is left out where it would cover a box or another label (the legend names every kind).

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
    own = ax is None
    if own:
        fig = plt.figure()
        ax = fig.add_axes((0, 0, 1, 1))
        plt.close(fig)
    fig = ax.figure
    _draw_box(ax, lay["box"])
    labels = [_draw_edge(ax, e, label=say) for e, say in zip(lay["edges"], _labelled(lay["edges"]), strict=True)]
    boxes = [_draw_node(ax, n, half) for n in lay["nodes"]]
    legend = _legend(ax, lay["edges"])
    x0, x1, y0, y1 = _extent(lay, half)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title or lay["title"], fontsize=TITLE_PT)
    if own:
        _fit(fig, ax, legend, x1 - x0, y1 - y0)
    _drop_covering([t for t in labels if t is not None], boxes, fig)
    return described(plain_figure(fig), lay["summary"])


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


def _extent(lay: dict[str, Any], half: tuple[float, ...]) -> tuple[float, float, float, float]:
    """The drawing's limits, in inches: the boxes, the network box and the links (arcs over a row)."""
    xs = [n["x"] for n in lay["nodes"]] or [0.0]
    ys = [n["y"] for n in lay["nodes"]] or [0.0]
    x0, x1 = min(xs) - half[0] - 0.08, max(xs) + half[0] + 0.08
    y0, y1 = min(ys) - half[1] - 0.08, max(ys) + half[1] + 0.08
    if lay["box"]:
        b = lay["box"]
        x0, x1, y0, y1 = min(x0, b["x0"] - 0.08), max(x1, b["x1"] + 0.08), min(y0, b["y0"] - 0.08), max(y1, b["y1"] + 0.08)
    for e in (e for e in lay["edges"] if e["path"]):
        x0, x1 = min([x0, *(p[0] - 0.08 for p in e["path"])]), max([x1, *(p[0] + 0.08 for p in e["path"])])
        y1 = max(y1, _peak(e) + 0.1)
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
        names = [t.name for t in _drawable(self.topology).tasks]
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
