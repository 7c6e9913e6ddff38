"""The topology of real runs: what vizdist shows equals what the real processes did.

Every expectation is read from the running processes by ``psutil`` *inside* the run's network
namespace (vizdist's own reader uses ``/proc/<pid>/net`` instead), and from ``TF_CONFIG`` /
TensorFlow's own objects: which address each TF server advertises, what it really listens on, which
task opened a connection to which, and that the servers live in a private network namespace.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import vizdist
from vizdist.errors import TraceFormatError
from vizdist.trace import Trace

tf = pytest.importorskip("tensorflow")
FAST = dict(timeout=150.0, progress=False)


@pytest.fixture(autouse=True)
def _devices_first(devices):
    """TensorFlow fixes its devices when it starts: let the suite's 4 logical CPUs come first."""


def _probe(tries: int = 50) -> dict:
    """psutil's view of every TCP socket of this network namespace (listeners, open connections).

    psutil maps a socket to its process by scanning every ``/proc/<pid>/fd``; a scan that races a
    busy sibling process leaves that process's sockets with pid ``None`` (seen once under CI load).
    The probe is read again, a bounded number of times, until every socket has its process.
    (Sockets of other users' processes, in a shared namespace, stay ``None``.)
    """
    import time

    for _ in range(tries):
        probe = _probe_once()
        pids = [*probe["listen"], *(str(pid) for pid, _, _ in probe["established"])]
        if "None" not in pids:
            return probe
        time.sleep(0.1)
    return probe  # sockets of processes this user cannot read stay None: _expected leaves them out


def _probe_once() -> dict:
    import psutil

    listen, est = {}, []
    for c in psutil.net_connections("tcp"):
        if c.status == "LISTEN":
            ip = f"[{c.laddr.ip}]" if ":" in c.laddr.ip else c.laddr.ip
            listen.setdefault(str(c.pid), []).append(f"{ip}:{c.laddr.port}")
        elif c.status == "ESTABLISHED" and c.raddr:
            est.append([c.pid, c.laddr.port, c.raddr.port])
    return {"listen": listen, "established": est, "netns": os.readlink("/proc/self/ns/net"), "pid": os.getpid()}


def _own_sockets(shards: list[dict]) -> dict:
    """The probes of every task, each read in that task's own process, each kept to that process's own
    sockets: a task whose run ended first may have closed them before another task's probe looks."""
    listen, est = {}, []
    for shard in shards:
        p = shard["probe"]
        listen.update({k: v for k, v in p["listen"].items() if k == str(p["pid"])})
        est += [c for c in p["established"] if c[0] == p["pid"]]
    return {"listen": listen, "established": est, "netns": shards[0]["probe"]["netns"]}


def _expected(probe: dict, addresses: dict[str, list[str]], pid_task: dict[int, str] | None = None):
    """(task -> listened addresses, {(src, dst)} connections opened) from the psutil probe."""
    port_task = {int(a.rsplit(":", 1)[1]): f"{j}:{i}" for j, v in addresses.items() for i, a in enumerate(v)}
    pid_task = dict(pid_task or {})
    for pid, addrs in probe["listen"].items():
        for a in addrs if pid != "None" else ():
            if int(a.rsplit(":", 1)[1]) in port_task:
                pid_task.setdefault(int(pid), port_task[int(a.rsplit(":", 1)[1])])
    listens = {pid_task[int(p)]: sorted(a) for p, a in probe["listen"].items() if p != "None" and int(p) in pid_task}
    pairs = {(pid_task[pid], port_task[rport]) for pid, lport, rport in probe["established"]
             if pid in pid_task and rport in port_task and lport not in port_task
             and pid_task[pid] != port_task[rport]}
    return listens, pairs


def _observed(topo) -> set[tuple[str, str]]:
    return {(lk.src, lk.dst) for lk in topo.links if lk.seen == "observed"}


def _undirected(pairs) -> set[frozenset]:
    return {frozenset(p) for p in pairs}


# -- LocalCluster ------------------------------------------------------------------------------------
def _mwms(ctx):
    trace = vizdist.trace_distribution(ctx.multi_worker_strategy(), tf.data.Dataset.range(8).batch(4))
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    return Trace(elements=trace.elements, batches=trace.batches,
                 meta={**trace.meta, "probe": _probe(), "tf_config_cluster": cluster})


def _ps(ctx):
    strategy = ctx.parameter_server_strategy()
    with strategy.scope():
        v = tf.Variable(tf.ones([4]))  # the first variable goes to ps:0 (round robin)
    trace = vizdist.trace_parameter_server(strategy, lambda ic: tf.data.Dataset.range(8).batch(2).repeat(),
                                           steps=2, step_fn=lambda b: tf.reduce_sum(v))
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    return Trace(elements=trace.elements, batches=trace.batches,
                 meta={**trace.meta, "probe": _probe(), "tf_config_cluster": cluster})


@pytest.fixture(scope="module")
def mwms_trace() -> Trace:
    with vizdist.LocalCluster(workers=2, **FAST) as cluster:
        return cluster.run(_mwms)


@pytest.fixture(scope="module")
def ps_trace() -> Trace:
    with vizdist.LocalCluster(workers=1, ps=2, **FAST) as cluster:
        return cluster.run(_ps)


@pytest.mark.slow
def test_multi_worker_run_listens_advertises_and_connects_as_the_processes_did(mwms_trace) -> None:
    shard = mwms_trace.meta["shards"][0]
    cluster, probe = shard["tf_config_cluster"], _own_sockets(mwms_trace.meta["shards"])
    topo = vizdist.topology(mwms_trace)
    assert {t.name: t.address for t in topo.tasks if t.address} == {
        f"{j}:{i}": a for j, v in cluster.items() for i, a in enumerate(v)}
    listens, pairs = _expected(probe, cluster)
    assert {t.name: sorted(t.listens) for t in topo.tasks if t.observed} == listens
    assert all(a.startswith("[::]:") for v in listens.values() for a in v)  # all interfaces, not 127.0.0.1
    assert _undirected(_observed(topo)) == _undirected(pairs) == {frozenset({"worker:0", "worker:1"})}
    isolated = probe["netns"] != os.readlink("/proc/self/ns/net")
    assert topo.network == ("private" if isolated else "host") and mwms_trace.meta["network"]["isolated"] is isolated
    assert {lk.src for lk in topo.links if lk.kind == "files"} == {"worker:0", "worker:1"}


@pytest.mark.slow
def test_parameter_server_run_shows_which_ps_a_worker_really_used(ps_trace) -> None:
    cluster, probe = ps_trace.meta["shards"][0]["tf_config_cluster"], ps_trace.meta["shards"][0]["probe"]
    topo = vizdist.topology(ps_trace)
    listens, pairs = _expected(probe, cluster)
    assert {t.name: sorted(t.listens) for t in topo.tasks if t.observed} == listens
    assert _observed(topo) == pairs
    assert ("worker:0", "ps:0") in pairs and ("worker:0", "ps:1") not in pairs  # only the ps holding v
    assert topo.task("ps:0").number is None and topo.task("worker:0").number == 1  # chief 0, then workers
    assert [lk.seen for lk in topo.links if (lk.src, lk.dst) == ("worker:0", "ps:1")] == ["not seen"]


# -- LocalDataService --------------------------------------------------------------------------------
_PROBE_IN_NAMESPACE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for ns, flag in (("user", 0x10000000), ("net", 0x40000000)):
    fd = os.open(f"/proc/{sys.argv[1]}/ns/{ns}", os.O_RDONLY)
    if libc.setns(fd, flag) != 0:
        sys.exit(os.strerror(ctypes.get_errno()))
"""


def _probe_service(service) -> dict:
    if not service.isolated:
        return _probe()
    script = _PROBE_IN_NAMESPACE + inspect.getsource(_probe) + inspect.getsource(_probe_once) + "print(json.dumps(_probe()))\n"
    out = subprocess.run([sys.executable, "-c", script, str(service._ns.pid)],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_data_service_topology_matches_the_running_processes() -> None:
    with vizdist.LocalDataService(workers=2, progress=False) as service:
        trace = service.trace(tf.data.Dataset.range(10), processing_mode="distributed_epoch", progress=False)
        probe = _probe_service(service)
        host = service._host.main_pid
        children = [c.pid for c in service._sup.children]
        netns = {os.readlink(f"/proc/{p}/ns/net") for p in children}
        addresses = {"dispatcher": [service.address], "data_worker": list(service.worker_addresses)}
    topo = vizdist.topology(trace)
    # the dispatcher's process runs the consumer too: its own connections are the consumer's
    listens, pairs = _expected(probe, addresses, pid_task={host: "consumer:0"})
    listens = {("dispatcher:0" if k == "consumer:0" else k): v for k, v in listens.items()}
    assert {t.name: t.address for t in topo.tasks if t.address} == {
        f"{j}:{i}": a for j, v in addresses.items() for i, a in enumerate(v)}
    assert {t.name: sorted(t.listens) for t in topo.tasks if t.observed} == listens
    assert _observed(topo) == pairs
    assert {("consumer:0", "data_worker:0"), ("data_worker:0", "dispatcher:0")} <= pairs
    assert len(netns) == 1 and (netns != {os.readlink("/proc/self/ns/net")}) == service.isolated
    assert topo.network == ("private" if service.isolated else "host")


# -- one real process of your own cluster --------------------------------------------------------------
_EVALUATOR = r"""
import json, os, sys, psutil
import tensorflow as tf
import vizdist
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # an evaluator task: TF starts its server anyway
path = vizdist.record_worker_shard(vizdist.Trace(), sys.argv[1])
listen = sorted(f"[{c.laddr.ip}]:{c.laddr.port}" for c in psutil.Process().net_connections("tcp")
                if c.status == "LISTEN")
print(json.dumps({"psutil": listen, "shard": path.name}), flush=True)
os._exit(0)  # TF's health-check thread keeps probing the absent worker
"""


@pytest.mark.slow
def test_record_worker_shard_records_what_the_process_listens_on(tmp_path, free_port_pair) -> None:
    """An evaluator that builds MultiWorkerMirroredStrategy starts a TF server on [::]:port (TF 2.21)."""
    worker, evaluator = free_port_pair
    cluster = {"worker": [f"127.0.0.1:{worker}"], "evaluator": [f"127.0.0.1:{evaluator}"]}
    env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "evaluator", "index": 0}}))
    out = subprocess.run([sys.executable, "-c", _EVALUATOR, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    told = json.loads(out.stdout.strip().splitlines()[-1])
    shard = vizdist.load_trace(tmp_path / told["shard"])
    net = shard.meta["network"]
    assert net["addresses"] == cluster and net["resolver"] == "TF_CONFIG"
    assert net["listening"] == {"evaluator:0": told["psutil"]} and told["psutil"] == [f"[::]:{evaluator}"]
    topo = vizdist.topology(shard)
    assert topo.task("evaluator:0").observed and topo.task("worker:0").listens == (f"[::]:{worker}",)


@pytest.fixture
def free_port_pair() -> list[int]:
    from vizdist.instrument.processes.supervisor import free_ports

    return free_ports(2)


# -- TPU: the trace format holds hosts and cores ---------------------------------------------------------
def _tpu_topology(hosts: int, cores: int):
    """A real ``tf.tpu.experimental.Topology``: ``hosts`` hosts of ``cores`` cores on a 2-D mesh."""
    coords = np.array([[[h, c // 2, 0, c % 2] for c in range(cores)] for h in range(hosts)], dtype=np.int32)
    return tf.tpu.experimental.Topology(mesh_shape=[hosts, cores // 2, 1, 2], device_coordinates=coords)


def test_a_tpu_shaped_trace_validates_round_trips_and_renders(tmp_path) -> None:
    from vizdist.instrument.observe.topology import tpu_meta

    tpu = _tpu_topology(2, 4)
    meta = tpu_meta(tpu, addresses=["10.0.0.1:8470", "10.0.0.2:8470"], accelerator="v2-8 (shape only)")
    trace = Trace(meta={"kind": "distribution", "strategy": "TPUStrategy", "tpu": meta})
    loaded = vizdist.load_trace(trace.save(tmp_path / "tpu.json"))
    assert loaded.meta["tpu"] == meta
    topo = vizdist.topology(loaded)
    hosts = [t for t in topo.tasks if t.job == "worker"]
    assert len(hosts) == tpu.num_tasks and meta["num_cores"] == tpu.num_tasks * tpu.num_tpus_per_task
    for h in hosts:
        assert list(h.devices) == [tpu.tpu_device_name_at_coordinates(c, job="worker")
                                   for c in tpu.device_coordinates[h.index]]
    assert repr(loaded.plot.topology()).startswith("<Figure: topology (tpu): tasks client:0, worker:0, worker:1")
    assert "TPU v2-8 (shape only): 2 host(s) x 4 core(s), mesh 2x2x1x2" in loaded.show.topology().static_html()


def test_a_tpu_meta_of_the_wrong_shape_is_refused_naming_the_key() -> None:
    with pytest.raises(TraceFormatError, match=re.escape("'tpu.hosts[0].cores[0].coordinates'")):
        Trace(meta={"kind": "distribution", "tpu": {"hosts": [{"cores": [{"coordinates": "0,0"}]}]}})
    with pytest.raises(TraceFormatError, match=re.escape("'tpu.num_cores'")):
        Trace(meta={"tpu": {"num_cores": "8"}})


def test_without_a_chief_worker_0_leads_the_collectives_and_the_coordination_service() -> None:
    """TF's rule, read from TF's own functions (multi_worker_util.collective_leader, coordination_leader), which
    MultiWorkerMirroredStrategy hands to the context (collective_all_reduce_strategy.py, _initialize_multi_worker):
    the chief when the cluster has one, else worker 0; notebook 10's cluster of two workers has no chief."""
    from tensorflow.python.distribute import multi_worker_util as mwu

    workers = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    first_worker = "/job:worker/replica:0/task:0"
    assert {mwu.collective_leader(workers, "worker", i) for i in (0, 1)} == {first_worker}
    assert mwu.coordination_leader(workers) == first_worker
    chief = {"chief": ["127.0.0.1:3"], **workers}
    assert mwu.collective_leader(chief, "worker", 1) == mwu.coordination_leader(chief) == "/job:chief/replica:0/task:0"


def test_the_evaluator_is_numbered_on_its_own_and_leads_no_collective() -> None:
    """TF's rule (multi_worker_util.py): id_in_cluster numbers an evaluator by its own index, beside the
    chief-first numbering of the others, and collective_leader sets none for it (it is not in the training
    cluster's collectives)."""
    from tensorflow.python.distribute import multi_worker_util as mwu

    spec = {"chief": ["h:0"], "worker": ["h:1", "h:2"], "evaluator": ["h:3"]}
    assert [mwu.id_in_cluster(spec, j, i) for j, i in [("chief", 0), ("worker", 0), ("worker", 1)]] == [0, 1, 2]
    assert mwu.id_in_cluster(spec, "evaluator", 0) == 0 and mwu.collective_leader(spec, "evaluator", 0) == ""
