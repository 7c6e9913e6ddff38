"""vizdist.topology reads every cluster resolver as TensorFlow does, and says what TF derives from it.

Each resolver is a real ``tf.distribute.cluster_resolver`` object built here (no cluster, cloud or GPU
on this machine); what vizdist shows is compared with what TensorFlow itself reports: the resolver's
``cluster_spec()``, its ``task_type``/``task_id``, ``multi_worker_util.id_in_cluster`` and
``collective_leader``. Kubernetes and GCE resolvers are built with a stand-in for *their* cloud API
client (``override_client=`` / ``service=``, as TF's own tests do); the resolver code that turns the
API's answer into a cluster is TensorFlow's.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

import vizdist
from vizdist.analysis.topology import Topology, resolver_spec

tf = pytest.importorskip("tensorflow")
R = tf.distribute.cluster_resolver
SPEC = {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"], "evaluator": ["h:5"]}
SLURM = {"SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "node[1-3]", "SLURM_STEP_TASKS_PER_NODE": "1(x3)",
         "SLURM_PROCID": "1"}


@pytest.fixture(autouse=True)
def _devices_first(devices):
    """TensorFlow fixes its devices when it starts: let the suite's 4 logical CPUs come first."""



def _pods(*ips: str):
    """Kubernetes API answer (V1PodList shape) for ``list_pod_for_all_namespaces``."""
    return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=f"pod-{i}"),
                                                  status=SimpleNamespace(phase="Running", host_ip=ip))
                                  for i, ip in enumerate(ips)])


def _k8s_client():
    answers = {"job-name=worker": _pods("10.0.0.1", "10.0.0.2"), "job-name=ps": _pods("10.0.0.3")}
    return SimpleNamespace(list_pod_for_all_namespaces=lambda label_selector: answers[label_selector])


class _Request:
    def __init__(self, answer):
        self.answer = answer

    def execute(self):
        return self.answer


def _gce_service():
    """GCE compute API answer (instanceGroups.listInstances / instances.get) for two VMs."""
    ips = {"vm-a": "10.1.0.1", "vm-b": "10.1.0.2"}
    groups = SimpleNamespace(
        listInstances=lambda **kw: _Request({"items": [{"instance": f"zones/z/instances/{n}"} for n in ips]}),
        listInstances_next=lambda **kw: None)
    instances = SimpleNamespace(get=lambda instance, **kw: _Request(
        {"networkInterfaces": [{"networkIP": ips[instance]}]}))
    return SimpleNamespace(instanceGroups=lambda: groups, instances=lambda: instances)


def _resolvers(monkeypatch):
    spec = tf.train.ClusterSpec(SPEC)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": SPEC, "task": {"type": "worker", "index": 1}}))
    yield "tf_config", R.TFConfigClusterResolver()
    yield "simple", R.SimpleClusterResolver(spec, task_type="chief", task_id=0, rpc_layer="grpc")
    yield "union", R.UnionResolver(R.SimpleClusterResolver(tf.train.ClusterSpec({"worker": ["h:2"]}),
                                                           task_type="worker", task_id=0),
                                   R.SimpleClusterResolver(tf.train.ClusterSpec({"ps": ["h:4"]})))
    for k, v in SLURM.items():
        monkeypatch.setenv(k, v)
    yield "slurm", R.SlurmClusterResolver(jobs={"chief": 1, "worker": 2}, auto_set_gpu=False, gpus_per_node=1)
    k8s = R.KubernetesClusterResolver({"worker": ["job-name=worker"], "ps": ["job-name=ps"]},
                                      tf_server_port=2222, override_client=_k8s_client())
    k8s.task_type, k8s.task_id = "worker", 1  # TF: "it cannot retrieve task_type, task_id": set them
    yield "kubernetes", k8s
    yield "gce", R.GCEClusterResolver("project", "zone", "group", 2222, task_type="worker", task_id=1,
                                      service=_gce_service())


def _tf_reports(resolver):
    spec = resolver.cluster_spec().as_dict()
    return {job: list(a.values()) if isinstance(a, dict) else list(a) for job, a in spec.items()}


def test_every_resolver_gives_the_tasks_and_numbers_tf_derives(monkeypatch) -> None:
    from tensorflow.python.distribute import multi_worker_util as mwu

    for name, resolver in _resolvers(monkeypatch):
        topo = vizdist.topology(resolver)
        spec = _tf_reports(resolver)  # after topology(): Slurm sets its task in cluster_spec()
        shown = {job: [t.address for t in topo.tasks if t.job == job] for job in spec}
        assert shown == spec, name
        assert topo.this is not None and topo.this.name == f"{resolver.task_type}:{resolver.task_id}", name
        assert topo.source == type(resolver).__name__
        for t in topo.tasks:
            if t.job in ("chief", "worker"):
                assert t.number == mwu.id_in_cluster(spec, t.job, t.index), (name, t.name)
        if topo.mode == "multi_worker":
            leader = mwu.collective_leader(spec, resolver.task_type, resolver.task_id)
            assert f"/job:{topo.leader.replace(':', '/replica:0/task:')}" == leader, name


def test_tf_config_dict_and_text_read_like_tfconfigclusterresolver(monkeypatch) -> None:
    doc = {"cluster": SPEC, "task": {"type": "ps", "index": 0}, "rpc_layer": "grpc"}
    monkeypatch.setenv("TF_CONFIG", json.dumps(doc))
    resolver = R.TFConfigClusterResolver()
    want = vizdist.topology(resolver).to_dict()
    for source in (doc, json.dumps(doc)):
        got = vizdist.topology(source).to_dict()
        assert {**got, "source": ""} == {**want, "source": ""}
    assert want["rpc_layer"] == resolver.rpc_layer == "grpc"
    monkeypatch.delenv("TF_CONFIG")
    assert (resolver.task_type, resolver.task_id) == (None, None)  # it reads TF_CONFIG whenever asked


def test_a_sparse_cluster_spec_keeps_tf_task_indexes() -> None:
    spec = tf.train.ClusterSpec({"worker": {1: "h:2", 3: "h:4"}})
    topo = vizdist.topology(spec)
    assert [(t.index, t.address) for t in topo.tasks] == [(i, spec.task_address("worker", i))
                                                          for i in spec.task_indices("worker")]


def test_roles_and_links_follow_the_strategy_the_jobs_imply() -> None:
    topo = vizdist.topology(tf.train.ClusterSpec(SPEC))
    assert topo.mode == "parameter_server"  # ps tasks: ParameterServerStrategy
    assert {(lk.src, lk.dst) for lk in topo.links if lk.kind == "variables"} == {
        ("chief:0", "ps:0"), ("worker:0", "ps:0"), ("worker:1", "ps:0")}
    assert topo.links_of("evaluator:0") == []
    mwms = vizdist.topology({"chief": ["h:1"], "worker": ["h:2"]})
    assert [(lk.src, lk.dst, lk.mutual) for lk in mwms.links] == [("chief:0", "worker:0", True)]
    # every TF 2.21 server listens on all interfaces; the spec's address is only advertised
    assert all(t.listens == (f"[::]:{t.address.rsplit(':', 1)[1]}",) and not t.observed for t in mwms.tasks)


def test_tpu_resolvers_that_build_without_a_tpu() -> None:
    r = R.TPUClusterResolver(tpu="grpc://10.0.0.1:8470", coordinator_name="coordinator",
                             coordinator_address="10.0.0.2:9000")
    topo = vizdist.topology(r)
    assert topo.mode == "tpu" and topo.this.name == f"{r.task_type}:{r.task_id}" == "worker:0"
    assert {t.name: t.address for t in topo.tasks} == {
        f"{job}:{i}": a for job, addrs in _tf_reports(r).items() for i, a in enumerate(addrs)}
    assert [(lk.src, lk.dst) for lk in topo.links] == [("coordinator:0", "worker:0")]
    local = vizdist.topology(R.TPUClusterResolver(tpu="local"))
    assert R.TPUClusterResolver(tpu="local").cluster_spec().as_dict() == {} and [t.name for t in local.tasks] == ["client:0"]


def test_what_cannot_be_built_here_fails_in_tf_as_the_readme_says(monkeypatch) -> None:
    with pytest.raises(ImportError, match="pip install kubernetes"):
        R.KubernetesClusterResolver()
    with pytest.raises(ImportError, match="googleapiclient"):
        R.GCEClusterResolver("project", "zone", "group", 2222)
    with pytest.raises(ValueError, match="TPU Name"):
        R.TPUClusterResolver()
    for k, v in SLURM.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if shutil.which("nvidia-smi") is None:  # plain SlurmClusterResolver() counts GPUs with nvidia-smi
        with pytest.raises(FileNotFoundError, match="nvidia-smi"):
            R.SlurmClusterResolver()
    with pytest.raises(ValueError, match="range\\(\\) arg 3"):  # TF's own failure ...
        R.SlurmClusterResolver(auto_set_gpu=False, gpus_per_node=0).cluster_spec()
    with pytest.raises(ValueError, match="gpus_per_node= at least the tasks per node"):  # ... in words
        vizdist.topology(R.SlurmClusterResolver(auto_set_gpu=False, gpus_per_node=0))


def test_kubernetes_resolver_without_a_task_is_refused_by_record_worker_shard(tmp_path) -> None:
    k8s = R.KubernetesClusterResolver({"worker": ["job-name=worker"]}, override_client=_k8s_client())
    assert resolver_spec(k8s)[1:] == (k8s.task_type, k8s.task_id) == (None, None)
    with pytest.raises(ValueError, match="KubernetesClusterResolver never sets them"):
        vizdist.record_worker_shard(vizdist.Trace(), tmp_path, resolver=k8s)


def test_bad_sources_are_clear_errors() -> None:
    with pytest.raises(TypeError, match="topology\\(\\) takes"):
        vizdist.topology(42)
    with pytest.raises(ValueError, match="TF_CONFIG's JSON"):
        vizdist.topology("worker:0")
    with pytest.raises(ValueError, match="mode must be one of"):
        vizdist.topology(SPEC, mode="ring")
    with pytest.raises(TypeError, match="job 'worker'"):
        vizdist.topology({"worker": "h:1"})
    assert isinstance(vizdist.topology(SPEC, mode="cluster"), Topology)


def test_a_task_lost_mid_run_is_named() -> None:
    from vizdist.trace import Trace

    trace = Trace(meta={"kind": "parameter_server", "num_workers": 2, "num_ps": 1,
                        "cluster": {"mode": "ps", "workers": 2, "ps": 1, "chief": 1},
                        "lost_tasks": [{"task": "worker-1", "how": "killed by signal 9", "after_s": 3.2}]})
    topo = vizdist.topology(trace)
    assert topo.task("worker:1").role.endswith("(lost during the run)")
    assert "worker:1 was lost during the run (killed by signal 9, 3 s in)" in topo.notes
