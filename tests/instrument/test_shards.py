"""record_worker_shard reads the task from any TensorFlow ClusterResolver, as TF itself derives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vizdist import load_trace
from vizdist.instrument.processes.shards import record_worker_shard, task_from_resolver
from vizdist.trace import Trace

tf = pytest.importorskip("tensorflow")
R = tf.distribute.cluster_resolver
SLURM = {"SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "localhost", "SLURM_STEP_TASKS_PER_NODE": "3"}


def _tf_number(resolver) -> int:
    """TensorFlow's own number for the resolver's task (multi_worker_util.id_in_cluster)."""
    from tensorflow.python.distribute import multi_worker_util

    spec = resolver.cluster_spec()
    return multi_worker_util.id_in_cluster(spec, resolver.task_type, resolver.task_id)


def _one(tmp_path: Path, resolver) -> tuple[Path, Trace]:
    path = record_worker_shard(Trace.from_records(elements=[dict(step=0, source_id=7)]), tmp_path, resolver=resolver)
    return path, load_trace(path)


def _resolvers():
    spec = tf.train.ClusterSpec({"chief": ["h:1"], "worker": ["h:2", "h:3"]})
    yield "simple", R.SimpleClusterResolver(spec, task_type="worker", task_id=1)
    yield "union", R.UnionResolver(R.SimpleClusterResolver(spec, task_type="worker", task_id=0),
                                   R.SimpleClusterResolver(tf.train.ClusterSpec({"ps": ["h:4"]})))


@pytest.mark.parametrize("name, resolver", list(_resolvers()))
def test_task_and_number_come_from_the_resolver(tmp_path: Path, name, resolver) -> None:
    path, trace = _one(tmp_path, resolver)
    assert path.name == f"worker-{resolver.task_type}-{resolver.task_id:05d}.json"
    assert trace.elements["worker"].tolist() == [_tf_number(resolver)]


def test_tf_config_resolver(tmp_path: Path, monkeypatch) -> None:
    cfg = {"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"]}, "task": {"type": "chief", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cfg))
    resolver = R.TFConfigClusterResolver()
    # TFConfigClusterResolver reads TF_CONFIG when asked (TF's behaviour), so it stays set
    path, trace = _one(tmp_path, resolver)
    assert (path.name, trace.elements["worker"].tolist()) == ("worker-chief-00000.json", [_tf_number(resolver)])


def test_tf_config_resolver_reads_tf_config_each_time_it_is_asked(monkeypatch) -> None:
    """Plain TF (tfconfig_cluster_resolver.py: task_type, task_id and cluster_spec() each read TF_CONFIG when
    called): one resolver follows the variable, so notebook 10 asks it inside the block that sets it."""
    def config(index: int) -> str:
        return json.dumps({"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": index}})

    monkeypatch.setenv("TF_CONFIG", config(0))
    resolver = R.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("worker", 0)
    monkeypatch.setenv("TF_CONFIG", config(1))
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    monkeypatch.delenv("TF_CONFIG")
    assert resolver.cluster_spec().as_dict() == {} and resolver.task_type is None


def test_slurm_resolver_from_slurm_variables(tmp_path: Path, monkeypatch) -> None:
    for k, v in {**SLURM, "SLURM_PROCID": "2"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    resolver = R.SlurmClusterResolver(jobs={"chief": 1, "worker": 2}, auto_set_gpu=False, gpus_per_node=3)
    path, trace = _one(tmp_path, resolver)
    assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert path.name == "worker-worker-00001.json" and trace.elements["worker"].tolist() == [_tf_number(resolver)]


def test_slurm_with_too_few_gpus_per_node_says_what_to_pass(monkeypatch) -> None:
    for k, v in {**SLURM, "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match="range\\(\\) arg 3"):  # TF's own failure, as plain TF raises it
        R.SlurmClusterResolver(auto_set_gpu=False, gpus_per_node=0).cluster_spec()
    with pytest.raises(ValueError, match="gpus_per_node= at least the tasks per node"):
        task_from_resolver(R.SlurmClusterResolver(auto_set_gpu=False, gpus_per_node=0))


def test_a_resolver_without_a_task_is_refused(tmp_path: Path) -> None:
    bare = R.SimpleClusterResolver(tf.train.ClusterSpec({"worker": ["h:1"]}))
    with pytest.raises(ValueError, match="names no task"):
        record_worker_shard(Trace(), tmp_path, resolver=bare)
    with pytest.raises(TypeError, match="ClusterResolver"):
        record_worker_shard(Trace(), tmp_path, resolver="worker:0")
    assert not list(tmp_path.iterdir())


def test_public_name_and_old_import_path() -> None:
    import vizdist
    from vizdist.instrument.processes import cluster

    assert vizdist.record_worker_shard is record_worker_shard is cluster.record_worker_shard


_CHILD = """
import json, sys
import tensorflow as tf
from tensorflow.python.distribute import multi_worker_util
import vizdist
r = tf.distribute.cluster_resolver.SlurmClusterResolver(jobs={"chief": 1, "worker": 2}, auto_set_gpu=False,
                                                        gpus_per_node=3)
spec = r.cluster_spec()
trace = vizdist.Trace.from_records(elements=[dict(step=0, source_id=int(sys.argv[2]))])
path = vizdist.record_worker_shard(trace, sys.argv[1], resolver=r)
print(json.dumps([r.task_type, r.task_id, multi_worker_util.id_in_cluster(spec, r.task_type, r.task_id), path.name]))
"""


@pytest.mark.slow
def test_slurm_style_processes_write_the_shards_tf_derives(tmp_path: Path) -> None:
    """Three real processes started with Slurm's variables (no Slurm, no TF_CONFIG)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path), str(i)], stdout=subprocess.PIPE,
                              env={**env, **SLURM, "SLURM_PROCID": str(i)}, text=True) for i in range(3)]
    told = []
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0
        told.append(json.loads(out.strip().splitlines()[-1]))
    assert [t[:2] for t in told] == [["chief", 0], ["worker", 0], ["worker", 1]]
    merged = load_trace(tmp_path).elements.sort_values("source_id")
    assert merged["worker"].tolist() == [t[2] for t in told]
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(t[3] for t in told)


def test_shards_carry_the_cluster_and_a_folder_of_them_has_its_topology(tmp_path: Path) -> None:
    spec = tf.train.ClusterSpec({"chief": ["h:1"], "worker": ["h:2", "h:3"]})
    for job, index in (("chief", 0), ("worker", 0), ("worker", 1)):
        resolver = R.SimpleClusterResolver(spec, task_type=job, task_id=index)
        record_worker_shard(Trace.from_records(elements=[dict(step=0, source_id=index)]), tmp_path, resolver=resolver)
        net = load_trace(tmp_path / f"worker-{job}-{index:05d}.json").meta["network"]
        assert net["addresses"] == spec.as_dict() and net["resolver"] == "SimpleClusterResolver"
    import vizdist

    topo = vizdist.topology(load_trace(tmp_path))
    assert [t.name for t in topo.tasks] == [f"{j}:{i}" for j in spec.jobs for i in spec.task_indices(j)]
    assert topo.leader == "chief:0" and topo.mode == "multi_worker"


# -- issue 36 item 3: two shards for one task never replace each other --------------------------
def test_a_second_shard_for_the_same_task_is_refused_not_silently_replaced(tmp_path: Path, monkeypatch) -> None:
    """Two workers whose TF_CONFIG both say worker:0 (a launcher mistake): the second write is refused."""
    cfg = {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cfg))
    first = record_worker_shard(Trace.from_records(elements=[dict(step=0, source_id=1)]), tmp_path)
    with pytest.raises(FileExistsError, match=r"a shard for task worker:0 is already in .*worker-worker-00000\.json.*"
                                              r"overwrite=True"):
        record_worker_shard(Trace.from_records(elements=[dict(step=0, source_id=2)]), tmp_path)
    assert load_trace(first).elements["source_id"].tolist() == [1]  # the first worker's data is kept
    assert os.listdir(tmp_path) == [first.name]
    record_worker_shard(Trace.from_records(elements=[dict(step=0, source_id=3)]), tmp_path, overwrite=True)
    assert load_trace(first).elements["source_id"].tolist() == [3]


def test_racing_writers_of_one_shard_leave_exactly_one(tmp_path: Path) -> None:
    import threading

    results: list[object] = []

    def write(i: int) -> None:
        try:
            results.append(record_worker_shard(Trace.from_records(elements=[dict(step=0, source_id=i)]), tmp_path,
                                               task_type="worker", task_index=0))
        except FileExistsError as exc:
            results.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    written = [r for r in results if isinstance(r, Path)]
    assert len(results) == 8 and len(written) == 1, results
    assert os.listdir(tmp_path) == [written[0].name]
