"""The topology of a run: its tasks, who talks to whom, and what each listens on (no TensorFlow).

:func:`topology` reads any of

- a recorded :class:`~vizdist.trace.Trace` (``LocalCluster``, ``trace_parameter_server`` /
  ``record_parameter_server``, ``LocalDataService.trace``, shards written by
  ``record_worker_shard``, a TPU run's ``meta["tpu"]``): tasks, and the
  addresses they advertised and *really* listened on (``meta["network"]``);
- a cluster resolver (anything with ``cluster_spec()``: ``TFConfigClusterResolver``,
  ``SimpleClusterResolver``, ``SlurmClusterResolver``, ``TPUClusterResolver``, ...),
  a ``tf.train.ClusterSpec``, a ``{job: [addresses]}`` dict, or ``TF_CONFIG``
  (its dict or its JSON text);

and returns a :class:`Topology`: :class:`Task` s (chief, worker, ps, evaluator,
tf.data service dispatcher / workers / consumers, TPU hosts and cores) and
:class:`Link` s (collectives between ``MultiWorkerMirroredStrategy`` workers,
functions scheduled on workers and variables read from parameter servers,
tf.data service registrations and element streams).

Rules it uses, each TensorFlow's (tests compare them with TF itself):

- a task's number in traces is TF's ``multi_worker_util.id_in_cluster`` (chief 0,
  then the workers); evaluators come after them;
- the collective group leader is ``/job:chief/replica:0/task:0`` when there is a chief,
  else ``worker:0`` (``multi_worker_util.collective_leader``); an evaluator is
  not in the training cluster;
- every TensorFlow 2.21 server (gRPC servers of cluster tasks, tf.data service
  dispatcher and workers) listens on all interfaces, ``[::]:port``; the
  address in the cluster spec (or ``worker_address``) is only *advertised*.
  Where a trace recorded what a process listened on, that is shown instead
  (``observed``).

Which links a bare cluster spec implies depends on the strategy you run on
it: with ``ps`` tasks it is read as ``ParameterServerStrategy``, otherwise
as ``MultiWorkerMirroredStrategy`` (pass ``mode=`` to say otherwise).

Example:
    >>> topo = topology({"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]})
    >>> [t.name for t in topo.tasks], topo.mode
    (['chief:0', 'worker:0', 'worker:1', 'ps:0'], 'parameter_server')
    >>> [(l.src, l.dst) for l in topo.links_of("ps:0")]
    [('chief:0', 'ps:0'), ('worker:0', 'ps:0'), ('worker:1', 'ps:0')]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from vizdist.analysis.topology_model import (
    ANY_ADDRESS,
    MAX_LINKED,
    MODES,
    NETWORK_WORDS,
    ROLES,
    Link,
    Task,
    Topology,
)
from vizdist.trace import Trace

# Task, Link and Topology are vizdist.analysis.topology_model's (the data), here beside what reads them.
__all__ = ["NETWORK_WORDS", "Link", "Task", "Topology", "resolver_spec", "task_number", "topology"]


# -- TensorFlow's rules ----------------------------------------------------------------------
def task_number(job: str, index: int, cluster: Mapping[str, Any]) -> int | None:
    """A task's number in traces: TF's ``id_in_cluster`` for chief and workers, evaluators after them.

    Example:
        >>> spec = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "evaluator": ["h:4"], "ps": ["h:5"]}
        >>> [task_number(j, i, spec) for j, i in [("chief", 0), ("worker", 1), ("evaluator", 0), ("ps", 0)]]
        [0, 2, 3, None]
    """
    n_chief, n_worker = len(cluster.get("chief", ())), len(cluster.get("worker", ()))
    offsets = {"chief": 0, "worker": n_chief, "evaluator": n_chief + n_worker}
    return offsets[job] + int(index) if job in offsets else None


def _leader(cluster: Mapping[str, Any], mode: str) -> str:
    """TF's ``multi_worker_util.collective_leader``: chief:0 if there is a chief, else worker:0."""
    if mode != "multi_worker":
        return ""
    return "chief:0" if cluster.get("chief") else ("worker:0" if cluster.get("worker") else "")


def _infer_mode(cluster: Mapping[str, Any]) -> str:
    if cluster.get("ps"):
        return "parameter_server"
    if cluster.get("chief") or cluster.get("worker"):
        return "multi_worker"
    return "cluster"


def _rule_listens(address: str) -> tuple[str, ...]:
    port = address.rpartition(":")[2]
    return (f"{ANY_ADDRESS}:{port}",) if port.isdigit() else ()


def _role(mode: str, job: str) -> str:
    return ROLES.get((mode, job)) or ROLES.get(("any", job)) or f"a {job} task"


# -- reading the sources -----------------------------------------------------------------------
def _jobs(spec: Any) -> dict[str, dict[int, str]]:
    """``{job: {index: address}}`` from a dict of lists / sparse dicts, or anything with ``as_dict()``."""
    raw = spec.as_dict() if callable(getattr(spec, "as_dict", None)) else spec
    if not isinstance(raw, Mapping):
        raise TypeError(f"a cluster spec must map job names to addresses; got {type(raw).__name__}.")
    out: dict[str, dict[int, str]] = {}
    for job, addrs in raw.items():
        if isinstance(addrs, Mapping):
            out[str(job)] = {int(i): str(a) for i, a in sorted(addrs.items(), key=lambda kv: int(kv[0]))}
        elif isinstance(addrs, (list, tuple)):
            out[str(job)] = {i: str(a) for i, a in enumerate(addrs)}
        else:
            raise TypeError(f"job {job!r}: expected a list of 'host:port' addresses; got {addrs!r}.")
    return out


_SLURM_GPU_HINT = (
    "SlurmClusterResolver could not share the node's GPUs among its tasks (TF: {exc}). Pass "
    "gpus_per_node= at least the tasks per node (SLURM_STEP_TASKS_PER_NODE), with auto_set_gpu=False "
    "on a machine without GPUs (plain SlurmClusterResolver() runs nvidia-smi to count them)."
)


def resolver_spec(resolver: Any) -> tuple[dict[str, list[str]], str | None, int | None]:
    """``(cluster, task_type, task_id)`` as a TensorFlow ``ClusterResolver`` reports them.

    ``cluster_spec()`` is called first (``SlurmClusterResolver`` sets its task there).
    A ``SlurmClusterResolver`` given fewer GPUs per node than tasks per node fails inside TF with
    ``range() arg 3 must not be zero``; this says what to pass instead.

    Example:
        >>> class Fixed:  # any object with cluster_spec() reads like a resolver
        ...     task_type, task_id = "worker", 1
        ...     def cluster_spec(self):
        ...         return {"worker": ["h:1", "h:2"]}
        >>> resolver_spec(Fixed())
        ({'worker': ['h:1', 'h:2']}, 'worker', 1)
    """
    if not callable(getattr(resolver, "cluster_spec", None)):
        raise TypeError(f"resolver must be a tf.distribute.cluster_resolver.ClusterResolver; got "
                        f"{type(resolver).__name__}.")
    try:
        spec = resolver.cluster_spec()
    except ValueError as exc:
        if "range() arg 3" in str(exc):
            raise ValueError(_SLURM_GPU_HINT.format(exc=exc)) from exc
        raise
    cluster = {job: list(addrs.values()) for job, addrs in _jobs(spec).items()}
    ttype, tid = getattr(resolver, "task_type", None), getattr(resolver, "task_id", None)
    return cluster, (None if ttype is None else str(ttype)), (None if tid is None else int(tid))


def _tf_config(doc: Mapping[str, Any]) -> tuple[dict[str, dict[int, str]], tuple[str, int] | None, str]:
    task = doc.get("task") or {}
    this = (str(task["type"]), int(task.get("index", 0))) if isinstance(task, Mapping) and "type" in task else None
    return _jobs(doc.get("cluster") or {}), this, str(doc.get("rpc_layer", ""))


def _cluster_tasks(jobs: Mapping[str, Mapping[int, str]], mode: str, *, this: tuple[str, int] | None = None,
                   listening: Mapping[str, list[str]] | None = None, isolated: bool | None = None) -> list[Task]:
    plain = {j: list(a.values()) for j, a in jobs.items()}
    order = [j for j in ("chief", "coordinator", "worker", "ps", "evaluator") if j in jobs]
    order += [j for j in jobs if j not in order]
    tasks = []
    for job in order:
        for index, address in jobs[job].items():
            seen = (listening or {}).get(f"{job}:{index}")
            tasks.append(Task(job, index, address, tuple(seen) if seen is not None else _rule_listens(address),
                              seen is not None, _role(mode, job), task_number(job, index, plain),
                              this == (job, index), isolated=isolated))
    return tasks


def _pairs(names: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def _links_note(tasks: list[Task]) -> list[str]:
    big = {j: n for j in dict.fromkeys(t.job for t in tasks) if (n := sum(t.job == j for t in tasks)) > MAX_LINKED}
    if not big:
        return []
    jobs = ", ".join(f"{n:,} {j}" for j, n in big.items())
    return [f"links are listed among the first {MAX_LINKED} tasks of each job only ({jobs} tasks; TF's rule links "
            "the others the same way)"]


def _cluster_links(tasks: list[Task], mode: str) -> list[Link]:
    names = {j: [t.name for t in tasks if t.job == j][:MAX_LINKED] for j in {t.job for t in tasks}}
    if mode == "multi_worker":
        group = names.get("chief", []) + names.get("worker", [])
        return ([Link(a, b, "collective", "collectives (all-reduce)", mutual=True) for a, b in _pairs(group)]
                + [Link(e, g, "health", "checks it is alive (GetStatus)") for e in names.get("evaluator", [])
                   for g in group])
    if mode == "parameter_server":
        chief = names.get("chief", [])
        return ([Link(c, w, "schedule", "schedules functions") for c in chief for w in names.get("worker", [])]
                + [Link(c, p, "variables", "creates variables") for c in chief for p in names.get("ps", [])]
                + [Link(w, p, "variables", "reads and updates variables")
                   for w in names.get("worker", []) for p in names.get("ps", [])])
    if mode == "tpu":
        clients = names.get("coordinator", []) + names.get("client", [])
        hosts = [t.name for t in tasks if t.job not in ("coordinator", "client")]
        return [Link(c, h, "tpu", "sends TPU programs and input") for c in clients for h in hosts]
    return []


def _notes(jobs: Mapping[str, Any], mode: str, source: str) -> list[str]:
    notes = []
    leader = _leader(jobs, mode)
    if leader:
        notes.append(f"{leader} leads the collective group and runs TF's coordination service (every chief and "
                     "worker task sends it heartbeats)")
    if jobs.get("evaluator"):
        notes.append("the evaluator is not part of the training cluster (TF leaves it out of collectives and "
                     "numbers it on its own); it evaluates the checkpoints the chief writes. If it builds "
                     "MultiWorkerMirroredStrategy it still starts a server and checks the workers are alive")
    if mode == "parameter_server" and not jobs.get("chief"):
        notes.append("ParameterServerStrategy needs a chief (the coordinator); this cluster has none")
    if "TPU" in source:
        notes.append("TPUClusterResolver names task worker:0 (the TPU host it drives), but the process that "
                     "holds it is the client")
    return notes


def _from_cluster(jobs: dict[str, dict[int, str]], *, source: str, mode: str | None,
                  this: tuple[str, int] | None = None, rpc_layer: str = "") -> Topology:
    plain = {j: list(a.values()) for j, a in jobs.items()}
    mode = mode or ("tpu" if "TPU" in source else _infer_mode(plain))
    if mode == "tpu" and not plain.get("coordinator"):
        jobs = {**jobs, "client": {0: ""}}
    tasks = _cluster_tasks(jobs, mode, this=this)
    return Topology(tasks, _cluster_links(tasks, mode), mode, source, leader=_leader(plain, mode),
                    rpc_layer=rpc_layer, notes=_notes(plain, mode, source) + _links_note(tasks))


def topology(source: Any, *, mode: str | None = None) -> Topology:
    """The tasks of a run or cluster, who connects to whom, and what each advertises and listens on.

    Args:
        source: a :class:`~vizdist.trace.Trace`; a TensorFlow ``ClusterResolver`` (anything with
            ``cluster_spec()``); a ``tf.train.ClusterSpec``; a ``{job: [addresses]}`` dict; or
            ``TF_CONFIG`` as a dict or JSON text (``{"cluster": ..., "task": ...}``).
        mode: how to read a bare cluster: ``"multi_worker"``, ``"parameter_server"``, ``"tpu"``,
            ``"cluster"`` (no links). Default: ``parameter_server`` when it has ``ps`` tasks, else
            ``multi_worker``.

    Returns:
        A :class:`Topology` (shown as a drawing in Jupyter once ``vizdist.render.topology`` is imported,
        which ``vizdist.topology`` does).

    Raises:
        TypeError: ``source`` is none of those.
        ValueError: ``TF_CONFIG`` text is not JSON, ``mode`` is unknown, or the resolver cannot build
            its cluster (the reason in words).

    Example:
        >>> topo = topology('{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}')
        >>> topo.this.name, topo.leader, topo.task("worker:1").listens
        ('worker:1', 'worker:0', ('[::]:2',))
    """
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}.")
    if isinstance(source, Trace):
        return _from_trace(source)
    if isinstance(source, str):
        try:
            source = json.loads(source)
        except ValueError as exc:
            raise ValueError(f"a text source must be TF_CONFIG's JSON; it is not JSON ({exc}).") from None
    if callable(getattr(source, "cluster_spec", None)):
        cluster, ttype, tid = resolver_spec(source)
        this = (ttype, tid) if ttype is not None and tid is not None else None
        return _from_cluster(_jobs(cluster), source=type(source).__name__, mode=mode, this=this,
                             rpc_layer=str(getattr(source, "rpc_layer", "") or ""))
    if isinstance(source, Mapping) and "cluster" in source:
        jobs, this, rpc = _tf_config(source)
        return _from_cluster(jobs, source="TF_CONFIG", mode=mode, this=this, rpc_layer=rpc)
    if isinstance(source, Mapping) or callable(getattr(source, "as_dict", None)):
        return _from_cluster(_jobs(source), source="cluster spec", mode=mode)
    raise TypeError(
        "topology() takes a vizdist.Trace, a tf.distribute.cluster_resolver.ClusterResolver, a "
        f"tf.train.ClusterSpec, a {{job: [addresses]}} dict or TF_CONFIG; got {type(source).__name__}.")


# -- from a recorded trace ---------------------------------------------------------------------
def _network(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta["network"]`` merged with every shard's (addresses from the first, listeners from all)."""
    parts = [m.get("network") for m in [meta, *(meta.get("shards") or [])] if isinstance(m, Mapping)]
    out: dict[str, Any] = {"addresses": {}, "listening": {}, "connections": {}, "isolated": None}
    for net in (p for p in parts if isinstance(p, Mapping)):
        for task, addrs in (net.get("connections") or {}).items():
            if isinstance(addrs, list):
                out["connections"].setdefault(str(task), [str(a) for a in addrs])
        for job, addrs in (net.get("addresses") or {}).items():
            if isinstance(addrs, list):
                out["addresses"].setdefault(str(job), [str(a) for a in addrs])
        for task, addrs in (net.get("listening") or {}).items():
            if isinstance(addrs, list):
                out["listening"].setdefault(str(task), [str(a) for a in addrs])
        if out["isolated"] is None and isinstance(net.get("isolated"), bool):
            out["isolated"] = net["isolated"]
        out.setdefault("resolver", net.get("resolver", ""))
    return out


def _counted(n: Any) -> int:
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def _trace_jobs(meta: Mapping[str, Any], net: Mapping[str, Any], mode: str) -> dict[str, dict[int, str]]:
    """Jobs from the recorded addresses, else from the counts the trace kept (addresses unknown)."""
    if net["addresses"]:
        return {j: dict(enumerate(a)) for j, a in net["addresses"].items()}
    cluster: Mapping[str, Any] = c if isinstance(c := meta.get("cluster"), Mapping) else {}
    if mode == "parameter_server":
        counts = {"chief": _counted(cluster.get("chief")) or 1,
                  "worker": _counted(cluster.get("workers")) or _counted(meta.get("num_workers")),
                  "ps": _counted(cluster.get("ps")) or _counted(meta.get("num_ps"))}
    else:
        counts = {"worker": _counted(cluster.get("workers")) or _counted(meta.get("num_workers"))
                  or len({str(s.get("task")) for s in meta.get("shards") or [] if isinstance(s, Mapping)})}
    return {j: dict.fromkeys(range(n), "") for j, n in counts.items() if n}


def _trace_mode(meta: Mapping[str, Any]) -> str:
    cluster: Mapping[str, Any] = c if isinstance(c := meta.get("cluster"), Mapping) else {}
    if meta.get("kind") == "parameter_server" or cluster.get("mode") == "ps":
        return "parameter_server"
    if isinstance(meta.get("tpu"), Mapping):
        return "tpu"
    if meta.get("kind") == "multi_worker" or cluster or _network(meta)["addresses"]:
        return "multi_worker"
    return "single"


def _from_trace(trace: Trace) -> Topology:
    meta = trace.meta
    if meta.get("kind") == "data_service":
        return _service(meta)
    mode = _trace_mode(meta)
    if mode == "tpu":
        return _tpu(meta)
    if mode == "single":
        return _single(meta)
    net = _network(meta)
    jobs = _trace_jobs(meta, net, mode)
    plain = {j: list(a.values()) for j, a in jobs.items()}
    tasks = _cluster_tasks(jobs, mode, listening=net["listening"], isolated=net["isolated"])
    links = _observe(_annotate(_cluster_links(tasks, mode), meta), tasks, net["connections"])
    notes = _notes(plain, mode, "") + _links_note(tasks)
    if not net["addresses"]:
        notes.append("this trace recorded no addresses (recorded by an older vizdist, or not through "
                     "LocalCluster / record_worker_shard): tasks are counted, addresses unknown")
    if isinstance(meta.get("cluster"), Mapping):
        tasks, links = _with_launcher(tasks, links, [t.name for t in tasks if t.job in (
            ("chief",) if mode == "parameter_server" else ("chief", "worker"))])
    tasks, lost = _lost(tasks, meta)
    return Topology(tasks, links, mode, "trace", _words(net["isolated"]), _leader(plain, mode),
                    notes=notes + lost)


def _lost(tasks: list[Task], meta: Mapping[str, Any]) -> tuple[list[Task], list[str]]:
    """Tasks ``LocalCluster`` recorded as lost mid-run (``meta["lost_tasks"]``): marked, and a note each."""
    lost = {str(x["task"]).replace("-", ":"): x for x in meta.get("lost_tasks") or [] if isinstance(x, Mapping)}
    notes = [f"{name} was lost during the run ({x.get('how', '?')}, {x.get('after_s', 0):.0f} s in)"
             for name, x in lost.items()]
    return [replace(t, role=f"{t.role} (lost during the run)") if t.name in lost else t for t in tasks], notes


def _words(isolated: bool | None) -> str:
    return "" if isolated is None else ("private" if isolated else "host")


def _annotate(links: list[Link], meta: Mapping[str, Any]) -> list[Link]:
    """Parameter servers: how many steps each worker ran, which variable shards each ps holds."""
    steps: dict[int, int] = {}
    for w in meta.get("step_workers") or []:
        if isinstance(w, int) and w >= 0:
            steps[w] = steps.get(w, 0) + 1
    held: dict[int, list[str]] = {}
    for v in meta.get("variables") or []:
        if isinstance(v, Mapping) and v.get("job") == "ps" and isinstance(v.get("task"), int):
            held.setdefault(v["task"], []).append(f"{v.get('variable', '?')}/{v.get('shard', 0)}")
    out = []
    for lk in links:
        index = lk.dst.partition(":")[2]
        if lk.kind == "schedule" and steps:
            lk = replace(lk, label=f"{lk.label}: {steps.get(int(index), 0)} steps")
        elif lk.kind == "variables" and held.get(int(index)):
            lk = replace(lk, label=f"{lk.label}: {', '.join(held[int(index)])}")
        out.append(lk)
    return out


def _connected_pairs(tasks: list[Task], connections: Mapping[str, list[str]]) -> tuple[set[str], set[tuple[str, str]]]:
    """(tasks whose connections were recorded, (src, dst) pairs they had open), by advertised address.

    A remote address names a task when it equals the task's advertised address, or when its port is
    advertised by that task alone (servers seen from inside a namespace, IPv4 vs names).
    """
    by_address = {t.address: t.name for t in tasks if t.address}
    ports: dict[str, list[str]] = {}
    for t in tasks:
        if t.address:
            ports.setdefault(t.address.rpartition(":")[2], []).append(t.name)
    recorded: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    for key, remotes in connections.items():
        sources = [key] if ":" in key else [t.name for t in tasks if t.job == key]
        recorded.update(sources)
        for remote in remotes:
            owners = ports.get(remote.rpartition(":")[2], [])
            dst = by_address.get(remote) or (owners[0] if len(owners) == 1 else None)
            pairs.update((src, dst) for src in sources if dst is not None and dst != src)
    return recorded, pairs


def _observe(links: list[Link], tasks: list[Task], connections: Mapping[str, list[str]]) -> list[Link]:
    """Mark each link observed / not seen where the run recorded connections; add unexpected ones."""
    if not connections:
        return links
    recorded, pairs = _connected_pairs(tasks, connections)
    out = []
    for lk in links:
        if lk.src in recorded or (lk.mutual and lk.dst in recorded):
            hit = (lk.src, lk.dst) in pairs or (lk.mutual and (lk.dst, lk.src) in pairs)
            lk = replace(lk, seen="observed" if hit else "not seen")
        out.append(lk)
    known = {(lk.src, lk.dst) for lk in links} | {(lk.dst, lk.src) for lk in links if lk.mutual}
    others = sorted(pairs - known)
    return out + [Link(a, b, "other", "connected (no rule here expects it)", seen="observed")
                  for a, b in others[:MAX_LINKED * MAX_LINKED]]  # a recorded meta may list millions


def _with_launcher(tasks: list[Task], links: list[Link], senders: list[str]) -> tuple[list[Task], list[Link]]:
    launcher = Task("launcher", 0, role=_role("any", "launcher"), isolated=False)
    return ([*tasks, launcher],
            [*links, *(Link(s, launcher.name, "files", "results as files (no network)") for s in senders)])


def _single(meta: Mapping[str, Any]) -> Topology:
    devices = tuple(str(d) for d in meta.get("devices") or [])
    task = Task("localhost", 0, role=_role("single", "localhost"), devices=devices, number=0)
    return Topology([task], [], "single", "trace", notes=["one process: replicas are devices of this "
                                                         "process, and no TensorFlow server was started"])


def _service(meta: Mapping[str, Any]) -> Topology:
    net = _network(meta)
    in_process = meta.get("workers_in_process") is True
    addrs = net["addresses"]
    n_workers = len(addrs.get("data_worker", [])) or _counted(meta.get("num_workers"))
    jobs = {"dispatcher": dict(enumerate(addrs.get("dispatcher") or [""])),
            "data_worker": {i: (addrs.get("data_worker") or [""] * n_workers)[i] for i in range(n_workers)}}
    tasks = _cluster_tasks(jobs, "data_service", listening=net["listening"], isolated=net["isolated"])
    consumers = [Task("consumer", i, role=_role("any", "consumer"), isolated=net["isolated"])
                 for i in range(_counted(meta.get("consumers")) or 1)]
    links = ([Link(t.name, "dispatcher:0", "register", "registers, sends heartbeats")
              for t in tasks if t.job == "data_worker"]
             + [Link(c.name, "dispatcher:0", "tasks", "asks which workers serve its job") for c in consumers]
             + [Link(c.name, t.name, "data", "reads elements") for c in consumers for t in tasks
                if t.job == "data_worker"])
    tasks += consumers
    links = _observe(links, tasks, net["connections"])
    notes = []
    if in_process:
        notes.append("in_process=True: dispatcher, workers and consumers all run in this notebook's process")
    else:
        notes.append("the consumers run in the dispatcher's process (inside the namespace when isolated)")
        tasks, links = _with_launcher(tasks, links, [c.name for c in consumers])
    return Topology(tasks, links, "data_service", "trace", _words(net["isolated"]), notes=notes)


def _tpu(meta: Mapping[str, Any]) -> Topology:
    tpu = meta["tpu"]
    job = str(tpu.get("job") or "worker")
    hosts = [h for h in tpu.get("hosts") or [] if isinstance(h, Mapping)]
    tasks = [Task("client", 0, role=_role("tpu", "client"))]
    for i, h in enumerate(hosts):
        address = str(h.get("address", ""))
        cores = tuple(str(c.get("device", "")) for c in h.get("cores") or [] if isinstance(c, Mapping))
        tasks.append(Task(job, int(h.get("task", i)), address, _rule_listens(address), role=_role("tpu", "worker"),
                          devices=cores))
    links = _cluster_links(tasks, "tpu")
    shape = "x".join(str(x) for x in tpu.get("mesh_shape") or [])
    tpu_notes = _links_note(tasks)
    notes = [f"TPU {tpu.get('accelerator') or ''}: {_counted(tpu.get('num_hosts')) or len(hosts)} host(s) x "
             f"{_counted(tpu.get('cores_per_host'))} core(s), mesh {shape or '?'}; the cores of all hosts "
             "all-reduce over the TPU interconnect, not over the network"]
    return Topology(tasks, links, "tpu", "trace", notes=notes + tpu_notes)
