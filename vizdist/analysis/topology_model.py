"""The topology of a run as data: its :class:`Task` s, its :class:`Link` s, and the :class:`Topology`
that holds them and draws itself (no TensorFlow).

:func:`vizdist.topology` (:mod:`vizdist.analysis.topology`) reads a trace, a resolver, a cluster spec or
``TF_CONFIG`` into one of these; :mod:`vizdist.render.topology` draws it, imported by
:meth:`Topology.plot`, :meth:`Topology.show` and its Jupyter display when they are called (the one way
this module reaches a renderer: ``tests/test_layers.py``'s ``LAZY_UP``).

Example:
    >>> Task("worker", 1, "h:2").name
    'worker:1'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vizdist._clip import clip

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from vizdist.render.topology import TopologyView

__all__ = ["ANY_ADDRESS", "MAX_LINKED", "MODES", "NETWORK_WORDS", "ROLES", "TF_JOBS", "Link", "Task", "Topology"]


MODES = ("multi_worker", "parameter_server", "data_service", "tpu", "single", "cluster")
TF_JOBS = ("chief", "worker", "ps", "evaluator")
ANY_ADDRESS = "[::]"

ROLES = {
    ("multi_worker", "chief"): "a worker that also saves checkpoints: replicas, collectives",
    ("multi_worker", "worker"): "runs your program: replicas, collectives with its peers",
    ("parameter_server", "chief"): "coordinator: runs your program, schedules functions on workers",
    ("parameter_server", "worker"): "runs the functions the coordinator schedules",
    ("parameter_server", "ps"): "holds variables (shards)",
    ("any", "evaluator"): "side-car evaluation: not in the training cluster",
    ("any", "dispatcher"): "tf.data service dispatcher: hands out jobs and splits",
    ("any", "data_worker"): "tf.data service worker: runs the input pipeline",
    ("any", "consumer"): "reads elements from the tf.data service workers",
    ("any", "launcher"): "this notebook's process: starts the tasks, reads their results as files",
    ("tpu", "worker"): "TPU host: feeds its TPU cores",
    ("tpu", "coordinator"): "the client: runs your program, drives the TPU hosts",
    ("tpu", "client"): "the client: runs your program, drives the TPU hosts",
    ("single", "localhost"): "one process: every replica is a local device",
}

NETWORK_WORDS = {
    "private": "private network namespace with only loopback: nothing outside can connect",
    "host": "the machine's network: anyone who can reach this machine can connect while it runs",
    "": "not recorded",
}


#: TF's rules link every pair of workers (collectives) or every worker to every ps: a cluster of 10,000
#: tasks has 50 million such links. Links are listed among the first this many tasks of each job; a note
#: says so.
MAX_LINKED = 64


@dataclass(frozen=True)
class Task:
    """One process of a run (or of a cluster spec).

    Attributes:
        job: ``chief``, ``worker``, ``ps``, ``evaluator``, ``dispatcher``,
            ``data_worker``, ``consumer``, ``launcher``, ``client`` or any job name of the spec.
        index: index in its job.
        address: the address it advertises (cluster spec / ``worker_address``); ``""`` when none.
        listens: the addresses it listens on.
        observed: ``listens`` was read from the real process (else: TF's rule, ``[::]:port``).
        role: what it does, in words.
        number: its number in traces (chief 0, then workers, then evaluators), or ``None``.
        this: the task the resolver (or ``TF_CONFIG``) says this process is.
        devices: its devices (TPU cores, replicas), when known.
        isolated: ``True`` inside vizdist's private network namespace, ``False`` outside, ``None``: unknown.
    """

    job: str
    index: int
    address: str = ""
    listens: tuple[str, ...] = ()
    observed: bool = False
    role: str = ""
    number: int | None = None
    this: bool = False
    devices: tuple[str, ...] = ()
    isolated: bool | None = None

    @property
    def name(self) -> str:
        """``"<job>:<index>"``, e.g. ``"worker:1"``."""
        return f"{self.job}:{self.index}"


@dataclass(frozen=True)
class Link:
    """``src`` connects to ``dst`` (``dst`` is the server whose port must be reachable).

    ``kind`` is ``collective``, ``schedule``, ``variables``, ``register``, ``tasks``,
    ``data``, ``tpu``, ``health``, ``files`` (no network: results written to a folder) or ``other``
    (a connection the run made that no rule here expects); ``mutual`` links connect both
    ways (collectives). ``seen`` is ``"observed"`` (the run had this connection open),
    ``"not seen"`` (the run recorded the connections of ``src`` and this was not one) or
    ``""`` (not recorded: the link is TensorFlow's rule).
    """

    src: str
    dst: str
    kind: str
    label: str
    mutual: bool = False
    seen: str = ""


@dataclass
class Topology:
    """Tasks and links of a run; display it, or read ``tasks`` / ``links`` / :meth:`table`.

    Attributes:
        tasks: every :class:`Task`.
        links: every :class:`Link`.
        mode: ``multi_worker``, ``parameter_server``, ``data_service``, ``tpu``, ``single`` or ``cluster``.
        source: where it was read from (a resolver's class, ``TF_CONFIG``, ``cluster spec``, ``trace``).
        network: ``"private"`` (vizdist's namespace), ``"host"`` or ``""`` (not recorded).
        leader: the collective group leader (``MultiWorkerMirroredStrategy``), e.g. ``"worker:0"``.
        rpc_layer: the resolver's RPC layer (``grpc``), when known.
        notes: caveats, in words.
    """

    tasks: list[Task]
    links: list[Link]
    mode: str
    source: str
    network: str = ""
    leader: str = ""
    rpc_layer: str = ""
    notes: list[str] = field(default_factory=list)

    def task(self, name: str) -> Task:
        """The task called ``name`` (``"worker:1"``)."""
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"no task {name!r} in this topology; it has {[t.name for t in self.tasks]}.")

    def links_of(self, name: str) -> list[Link]:
        """The links that start or end at task ``name``."""
        return [lk for lk in self.links if name in (lk.src, lk.dst)]

    @property
    def this(self) -> Task | None:
        """The task this process is (from the resolver or ``TF_CONFIG``), if known."""
        return next((t for t in self.tasks if t.this), None)

    def table(self) -> Any:
        """One row per task: role, advertised address, what it listens on, and whom it connects to."""
        import pandas as pd

        rows = [{"task": t.name, "role": t.role, "advertises": t.address or "-",
                 "listens on": ", ".join(t.listens) or "-",
                 "seen": "observed" if t.observed else ("TF rule" if t.listens else "-"),
                 "connects to": ", ".join(sorted({lk.dst for lk in self.links if lk.src == t.name}
                                                 | {lk.src for lk in self.links if lk.dst == t.name and lk.mutual}))
                 or "-"} for t in self.tasks]
        return pd.DataFrame(rows).set_index("task")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: tasks, links and the rest."""
        return {"mode": self.mode, "source": self.source, "network": self.network, "leader": self.leader,
                "rpc_layer": self.rpc_layer, "notes": list(self.notes),
                "tasks": [dict(vars(t), name=t.name, listens=list(t.listens), devices=list(t.devices))
                          for t in self.tasks],
                "links": [dict(vars(lk)) for lk in self.links]}

    def summary(self) -> str:
        """One line: mode, tasks, links by kind, network."""
        kinds: dict[str, int] = {}
        for lk in self.links:
            kinds[lk.kind] = kinds.get(lk.kind, 0) + 1
        links = ", ".join(f"{k} {n}" for k, n in kinds.items()) or "none"
        names = ", ".join(clip(t.name, 60) for t in self.tasks[:MAX_LINKED])
        more = f" and {len(self.tasks) - MAX_LINKED:,} more" if len(self.tasks) > MAX_LINKED else ""
        return (f"topology ({self.mode}, from {self.source}): {len(self.tasks)} tasks "
                f"({names}{more}); links: {links}; network: {self.network or 'not recorded'}")

    def __repr__(self) -> str:
        """The summary, then each task and link (the first :data:`MAX_LINKED` tasks and their links; long
        addresses cut, saying so)."""
        lines = [self.summary()]
        for t in self.tasks[:MAX_LINKED]:
            seen = "observed" if t.observed else "TF rule"
            listens = f"listens {clip(', '.join(t.listens), 200)} ({seen})" if t.listens else "listens on nothing"
            lines.append(f"  {clip(t.name, 60)}{' (this process)' if t.this else ''}: advertises "
                         f"{clip(t.address or '-', 200)}; {listens}; {t.role}")
        shown = {t.name for t in self.tasks[:MAX_LINKED]}
        links_shown = [lk for lk in self.links if lk.src in shown and lk.dst in shown][:MAX_LINKED * 4]
        lines += [f"  {clip(lk.src, 60)} {'<->' if lk.mutual else '->'} {clip(lk.dst, 60)}: {lk.label}"
                  + {"observed": " [observed]", "not seen": " [not seen in this run]"}.get(lk.seen, "")
                  for lk in links_shown]
        if len(self.tasks) > MAX_LINKED or len(links_shown) < len(self.links):
            lines.append(f"  ({len(self.tasks) - min(len(self.tasks), MAX_LINKED):,} more tasks and "
                         f"{len(self.links) - len(links_shown):,} more links: see .table() and .links)")
        lines += [f"  note: {clip(n, 500)}" for n in self.notes]
        return "\n".join(lines)

    # -- views: the renderer (vizdist.render.topology) is imported when one is asked for ----------------
    def plot(self, *, highlight: str | None = None, title: str | None = None, ax: Axes | None = None) -> Figure:
        """Draw the tasks (boxes: advertised address, what they listen on) and who connects to whom.

        Args:
            highlight: a task name (``"worker:1"``): its links stay bright, the rest fade.
            title: figure title (default: the mode and where it was read from).
            ax: draw into this Axes instead of a new figure.

        Example:
            >>> import vizdist
            >>> vizdist.topology({"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]}).plot(highlight="ps:0")
            <Figure: topology (parameter_server): tasks chief:0, worker:0, ps:0; links schedule 1, variables 2; network not recorded>
        """
        from vizdist.render.topology import plot_topology

        fig: Figure = plot_topology(self, highlight=highlight, title=title, ax=ax)
        return fig

    def show(self) -> TopologyView:
        """The view: text, HTML table and PNG (what GitHub and nbval see); ``.widget()`` to pick a task and
        see its links.

        Example:
            >>> import vizdist
            >>> vizdist.topology({"worker": ["h:1", "h:2"]}).show().static_html().startswith('<div class="vizdist-topology">')
            True
        """
        from vizdist.render.topology import show_topology

        return show_topology(self)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        from vizdist.render.topology import topology_bundle

        return {"text/plain": repr(self), **topology_bundle(self)}
