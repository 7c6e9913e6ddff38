"""The layout of the topology view: where each task's box goes and where each link's line runs.

One :class:`TopologyLayout` (plain data, positions in inches) is what every output of the topology
view draws: the matplotlib figure, the HTML table, the PNG a :class:`~vizdist.analysis.topology.Topology`
shows in Jupyter and the live widget (:mod:`vizdist.render.topology`), as ``TimelineLayout`` is for the
timeline. A task's box holds its lines at ``MIN_TEXT_PT``; rows of more than four tasks wrap; a link's
line never crosses a box it does not join.

Example:
    >>> lay = topology_layout({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]})
    >>> [(n["name"], n["y"]) for n in lay.nodes]
    [('chief:0', 0.0), ('worker:0', -1.615), ('ps:0', -3.23)]
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from vizdist.analysis.topology import NETWORK_WORDS, Topology, topology
from vizdist.render._text import MAX_LABEL, MIN_TEXT_PT, short

__all__ = ["BEND", "JOB_COLORS", "KIND_STYLE", "LINE_IN", "MAX_TASKS", "SEEN_WORDS", "TopologyLayout", "as_topology",
           "box_title", "drawable", "peak", "topology_layout", "wrapped"]

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


def as_topology(source: Any) -> Topology:
    """``source`` if it is a :class:`Topology`, else :func:`vizdist.topology` of it."""
    return source if isinstance(source, Topology) else topology(source)


def drawable(topo: Topology) -> Topology:
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


@dataclass
class TopologyLayout:
    """Where everything of one topology goes (positions in inches): what every output of the view draws.

    Attributes:
        topology: the topology drawn (at most :data:`MAX_TASKS` tasks, a note saying how many more there are).
        title: the default title (the mode and where the topology was read from).
        nodes: one dict per task, in the topology's order: ``name``, ``job``, ``x``, ``y`` (its box's
            centre), ``lines`` (what the box says), ``role``, ``address``, ``listens``, ``observed``,
            ``this``, ``color``, ``dim``.
        half: a task box's half width and half height.
        edges: one dict per link: ``src``, ``dst``, ``kind``, ``label``, ``mutual``, ``seen``, ``color``,
            ``dashed``, ``path`` (the points its line passes, clear of every box but its ends), ``rad``
            (the curvature of an arc over a row, else 0), ``dim``.
        box: the network box round the tasks (``x0``, ``x1``, ``y0``, ``y1``, ``private``, ``label``), or None.
        network: the network, in words.
        leader: the collective group leader ("" when none).
        notes: what the topology says beside its tasks and links.
        summary: one line saying what is drawn (the figure's repr).
        highlight: the task whose links stay bright (None: all).
    """

    topology: Topology
    title: str
    nodes: list[dict[str, Any]]
    half: tuple[float, float]
    edges: list[dict[str, Any]]
    box: dict[str, Any] | None
    network: str
    leader: str
    notes: list[str]
    summary: str
    highlight: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The layout as plain JSON (the topology as its own ``to_dict()``)."""
        out = dataclasses.asdict(self)
        out["topology"] = self.topology.to_dict()
        out["half"] = list(self.half)
        return out


def topology_layout(source: Any, *, highlight: str | None = None) -> TopologyLayout:
    """The layout of a topology, or of anything :func:`vizdist.topology` reads (a trace, a resolver, a spec).

    Example:
        >>> lay = topology_layout({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]})
        >>> [(n["name"], n["y"]) for n in lay.nodes]
        [('chief:0', 0.0), ('worker:0', -1.615), ('ps:0', -3.23)]
        >>> [len(e["path"]) for e in lay.edges]  # chief:0 -> ps:0 passes beside worker:0
        [2, 4, 2]
    """
    if isinstance(source, TopologyLayout):
        return source if source.highlight == highlight else topology_layout(source.topology, highlight=highlight)
    topo = drawable(as_topology(source))
    half_h = max(len(box_title(t.name, t.this)) + len(wrapped(*_lines(t))) for t in topo.tasks) * LINE_IN / 2 + 0.12
    rows = _rows(topo, 2 * half_h + GAP_Y, highlight)
    grid = _Grid(rows, (HALF_W, half_h))
    nodes = [n for row in rows for n in row]
    edges = [_edge(lk, highlight, *grid.route(lk.src, lk.dst)) for lk in topo.links]
    nodes.sort(key=lambda n: [t.name for t in topo.tasks].index(n["name"]))  # in the topology's order
    return TopologyLayout(topology=topo, title=f"{topo.mode} topology (from {topo.source})", nodes=nodes,
                          half=(HALF_W, round(half_h, 3)), edges=edges,
                          box=_network_box(topo, rows, edges, half_h),
                          network=NETWORK_WORDS.get(topo.network, topo.network), leader=topo.leader,
                          notes=list(topo.notes), summary=_summary(topo), highlight=highlight)


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
    label_h = len(wrapped(label, width=int(2 * width / 0.07))) * LINE_IN + 0.1
    top = max([half_h + PAD, *(peak(e) + 0.15 for e in edges if e["path"])])  # over the top row's arcs
    return {"x0": -width, "x1": width, "y0": min(inside, default=0.0) - half_h - PAD, "y1": top + label_h,
            "private": topo.network == "private", "label": label}


def peak(e: dict[str, Any]) -> float:
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


def box_title(name: str, this: bool) -> list[str]:
    """A task box's title lines (bold)."""
    return wrapped(short(name, 60)) + (["(this process)"] if this else [])


def wrapped(*lines: str, width: int = WRAP) -> list[str]:
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


