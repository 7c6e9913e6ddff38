"""LocalCluster: real TF worker processes on loopback, merged traces, bounded failures, no leftovers.

Multi-process tests are marked slow (they still run in CI). Every test checks
that no process it started is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from vizdist.errors import TracingError
from vizdist.instrument.processes.cluster import LocalCluster, WorkerContext, free_ports, record_worker_shard
from vizdist.trace import Trace, load_trace
from vizdist.trace import load_trace as vizdist_load

FAST = dict(timeout=90.0, progress=False)


def _children() -> list[int]:
    """Live child processes of this test process (what LocalCluster started)."""
    out = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True, check=False)
    pids = [int(p) for p in out.stdout.split()]
    alive = []
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(p)
    return alive


@pytest.fixture(autouse=True)
def no_leftover_processes():
    before = set(_children())
    yield
    deadline = time.monotonic() + 5
    while set(_children()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(_children()) - before == set(), "LocalCluster left processes behind"


# -- fast: no TensorFlow processes ----------------------------------------------------
def test_free_ports_are_distinct_and_bindable() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_port_in_use_is_a_clear_error_and_starts_nothing() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cluster = LocalCluster(workers=2, ports=[port, free_ports(1)[0]], **FAST)
        with pytest.raises(OSError, match=rf"port\(s\) \[{port}\].*already in use"):
            cluster.run(lambda ctx: None)
        assert cluster.pids == []
        cluster.close()


def test_job_folders_go_with_a_cluster_that_is_never_closed() -> None:
    import gc

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cluster = LocalCluster(workers=1, ports=[busy.getsockname()[1]], **FAST)
        with pytest.raises(OSError, match="already in use"):
            cluster.run(lambda ctx: None)
    job = cluster.job_dir
    assert job is not None and job.is_dir()
    del cluster  # no with, no close()
    gc.collect()
    assert not job.exists()


def test_ports_inconsistent_with_layout_are_rejected() -> None:
    with pytest.raises(ValueError, match="3 ports given for 2 tasks"):
        LocalCluster(workers=2, ports=[1, 2, 3])
    with pytest.raises(ValueError, match=r"needs \{'worker': 2, 'ps': 1, 'chief': 1\}|needs \{'chief': 1, 'worker': 2, 'ps': 1\}"):
        LocalCluster(workers=2, ps=1, ports={"worker": [1, 2], "ps": [3]})
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        LocalCluster(workers=0)


def test_record_worker_shard_reads_task_from_tf_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
    for w in (1, 0):  # as two machines of a real cluster would, each with its own TF_CONFIG
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": w}}))
        t = Trace.from_records(elements=[dict(step=0, replica=w, source_id=10 + w, position=0)])
        path = record_worker_shard(t, tmp_path)
        assert path.name == f"worker-worker-{w:05d}.json"
    merged = load_trace(tmp_path)
    assert merged.elements[["worker", "source_id"]].values.tolist() == [[0, 10], [1, 11]]
    assert [s["task"] for s in merged.meta["shards"]] == ["worker-0", "worker-1"]


def test_record_worker_shard_rejects_bad_tf_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG is not set"):
        record_worker_shard(Trace(), tmp_path)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}))
    with pytest.raises(ValueError, match="names task worker:3"):
        record_worker_shard(Trace(), tmp_path)


@pytest.mark.parametrize("task_type, task_index", [("../../etc", 0), ("worker/../..", 0), ("Worker", 0),
                                                     ("worker", -1), ("worker", True), ("worker", "1")])
def test_record_worker_shard_accepts_only_tf_task_types_and_whole_indexes(tmp_path: Path, task_type, task_index):
    inner = tmp_path / "shards"
    with pytest.raises(ValueError, match=r"task_type must be one of|task_index must be a whole number"):
        record_worker_shard(Trace(), inner, task_type=task_type, task_index=task_index)
    assert not any(tmp_path.rglob("*.json")), "nothing may be written for a refused task"


def test_record_worker_shard_does_not_follow_a_planted_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    shards = tmp_path / "shards"
    shards.mkdir()
    for name in ("worker-worker-00000.json.tmp", ".worker-worker-00000.json.tmp"):  # old fixed temp names: ignored
        (shards / name).symlink_to(victim)
    record_worker_shard(Trace.from_records(elements=[dict(step=0, source_id=1)]), shards,
                        task_type="worker", task_index=0)
    assert vizdist_load(shards / "worker-worker-00000.json").elements["source_id"].tolist() == [1]
    target = shards / "worker-worker-00001.json"
    target.symlink_to(victim)  # a link at the shard's own name: refused, even with overwrite=True
    for overwrite in (False, True):
        with pytest.raises(OSError, match="is a symbolic link"):
            record_worker_shard(Trace.from_records(elements=[dict(step=0, source_id=2)]), shards,
                                task_type="worker", task_index=1, overwrite=overwrite)
    assert victim.read_text() == "keep me" and target.is_symlink()


def test_worker_context_names_its_task() -> None:
    assert WorkerContext("chief", 0, num_workers=2, num_ps=1).task == "chief-0"


# -- slow: real processes ------------------------------------------------------------------
def _mwms_work(ctx: WorkerContext, shard_dir: str) -> Trace:
    """Raw TF and vizdist.trace_distribution in the same worker, plus a shard for a 'real cluster'."""
    import tensorflow as tf

    import vizdist
    from vizdist.instrument.processes.cluster import record_worker_shard

    strategy = ctx.multi_worker_strategy()
    ds = tf.data.Dataset.range(16).batch(4)
    raw = []
    for batch in strategy.experimental_distribute_dataset(ds):
        raw.append([t.numpy().tolist() for t in strategy.experimental_local_results(batch)])
    trace = vizdist.trace_distribution(strategy, ds, progress=False)
    record_worker_shard(trace, shard_dir)

    def dataset_fn(ic: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = ic.get_per_replica_batch_size(4)
        return tf.data.Dataset.range(16).shard(ic.num_input_pipelines, ic.input_pipeline_id).batch(per_replica)

    raw_fn = [[t.numpy().tolist() for t in strategy.experimental_local_results(b)]
              for b in strategy.distribute_datasets_from_function(dataset_fn)]
    from_fn = vizdist.trace_distribution(strategy, dataset_fn=dataset_fn, progress=False)
    record_worker_shard(from_fn, os.path.join(shard_dir, "from_function"))
    meta = dict(trace.meta, raw=raw, raw_fn=raw_fn, replicas_in_sync=int(strategy.num_replicas_in_sync))
    return Trace(elements=trace.elements, batches=trace.batches, events=trace.events, meta=meta)


@pytest.mark.slow
@pytest.mark.smoke
def test_mwms_run_merges_worker_traces_matching_raw_tf(tmp_path: Path) -> None:
    with LocalCluster(workers=2, **FAST) as cluster:
        trace = cluster.run(_mwms_work, str(tmp_path / "shared"))
        assert cluster.pids == []
    shards = {s["task"]: s for s in trace.meta["shards"]}
    assert set(shards) == {"worker-0", "worker-1"}
    assert trace.meta["cluster"] == {"mode": "mwms", "workers": 2, "ps": 0, "chief": 0}
    for w in (0, 1):
        raw = shards[f"worker-{w}"]["raw"]  # what TF delivered on that worker: one replica per worker on CPU
        assert shards[f"worker-{w}"]["replicas_in_sync"] == 2
        e = trace.elements[trace.elements["worker"] == w].sort_values(["step", "position"])
        got = [e[e["step"] == s]["source_id"].tolist() for s in sorted(e["step"].unique())]
        assert got == [r[0] for r in raw]
        assert set(e["replica"]) == {w}
    # DATA sharding of range (AUTO falls back to DATA): the workers alternate batches
    assert sorted(trace.elements["source_id"].tolist()) == list(range(16))
    assert trace.ids(step=0, replica=0) == [0, 1] and trace.ids(step=0, replica=1) == [2, 3]
    # the "beyond one machine" path: shards written by each worker merge to the same elements
    merged = load_trace(tmp_path / "shared")
    cols = ["step", "replica", "worker", "source_id"]
    assert merged.elements[cols].values.tolist() == trace.elements[cols].values.tolist()
    # distribute_datasets_from_function across workers: each worker's pipeline is its InputContext shard
    from_fn = load_trace(tmp_path / "shared" / "from_function")
    for w in (0, 1):
        e = from_fn.elements[from_fn.elements["worker"] == w].sort_values(["step", "position"])
        got = [e[e["step"] == s]["source_id"].tolist() for s in sorted(e["step"].unique())]
        assert got == [r[0] for r in shards[f"worker-{w}"]["raw_fn"]]
        assert set(e["source_id"]) == set(range(w, 16, 2))
    assert from_fn.meta["shards"][1]["input_contexts"][0]["input_pipeline_id"] == 1
    from vizdist.diagnose import diagnose

    assert "worker-duplicates" not in diagnose(from_fn)["code"].tolist()


def _fail_on_worker_1(ctx: WorkerContext) -> Any:
    if ctx.task_index == 1:
        raise ValueError("boom from the user's callable")
    return {"ok": ctx.task_index}


@pytest.mark.slow
def test_callable_that_raises_shows_worker_traceback() -> None:
    with LocalCluster(workers=2, **FAST) as cluster, pytest.raises(TracingError) as info:
        cluster.run(_fail_on_worker_1)
    msg = str(info.value)
    assert "worker-1 failed" in msg and "ValueError: boom from the user's callable" in msg
    assert "--- traceback from worker-1 ---" in msg and "_fail_on_worker_1" in msg


def _killed_mid_run(ctx: WorkerContext) -> Trace:
    import signal

    import tensorflow as tf

    from vizdist.errors import TracingError

    strategy = ctx.multi_worker_strategy()
    rows = []
    try:
        for step, batch in enumerate(strategy.experimental_distribute_dataset(tf.data.Dataset.range(40).batch(4))):
            if step == 1 and ctx.task_index == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            for v in strategy.experimental_local_results(batch)[0].numpy().tolist():
                rows.append(dict(step=step, replica=ctx.task_index, source_id=v))
    except Exception as exc:
        raise TracingError(f"worker {ctx.task_index} lost its peer: {exc}",
                           partial_trace=Trace.from_records(elements=rows)) from exc
    return Trace.from_records(elements=rows)


@pytest.mark.slow
def test_worker_killed_mid_run_gives_named_error_and_partial_trace() -> None:
    t0 = time.monotonic()
    with LocalCluster(workers=2, collective_timeout=5, **FAST) as cluster, pytest.raises(TracingError) as info:
        cluster.run(_killed_mid_run)
    assert time.monotonic() - t0 < 60
    msg = str(info.value)
    assert "worker-1 (pid" in msg and "killed by signal 9" in msg
    partial = info.value.partial_trace
    assert isinstance(partial, Trace) and partial.meta["partial"] is True
    # worker 0 recorded step 0 (and perhaps step 1) before its collective failed
    w0 = partial.elements[partial.elements["worker"] == 0]
    assert w0[w0["step"] == 0]["source_id"].tolist() == [0, 1]


def _peer_never_starts(ctx: WorkerContext) -> None:
    if ctx.task_index == 1:
        time.sleep(600)  # never joins: worker 0's strategy constructor waits for it
    ctx.multi_worker_strategy()


@pytest.mark.slow
def test_cluster_that_never_forms_is_bounded() -> None:
    t0 = time.monotonic()
    with LocalCluster(workers=2, timeout=25, progress=False) as cluster, pytest.raises(TracingError) as info:
        cluster.run(_peer_never_starts)
    assert time.monotonic() - t0 < 45
    msg = str(info.value)
    # each task named with its state: under load a task may still be importing TensorFlow ("starting") at 25 s
    assert "within timeout=25s" in msg
    assert all(re.search(rf"worker-{i} \((running|starting)\)", msg) for i in (0, 1)), msg


def _sleep_forever(ctx: WorkerContext) -> None:
    time.sleep(600)


@pytest.mark.slow
def test_keyboard_interrupt_kills_every_process() -> None:
    import _thread

    cluster = LocalCluster(workers=2, **FAST)
    seen: list[int] = []

    def interrupt() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if cluster.job_dir and len(list(cluster.job_dir.glob("status-*.txt"))) == 2 and all(
                    p.read_text() == "running" for p in cluster.job_dir.glob("status-*.txt")):
                seen.extend(cluster.pids)
                break
            time.sleep(0.1)
        _thread.interrupt_main()

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        cluster.run(_sleep_forever)
    assert len(seen) == 2
    assert not any(Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split(")")[-1][:3]
                   for p in seen)
    cluster.close()


def _detach_sleeps(ctx: WorkerContext, token: str) -> list[int]:
    from vizdist.instrument.processes._demo_child import detached_sleeps

    return detached_sleeps(token)


@pytest.mark.slow
def test_processes_the_function_detaches_do_not_outlive_the_run() -> None:
    """A sleep in a session of its own and a double-forked one, started by the user's function, end with the run."""
    from tests.instrument.test_supervisor import still_running

    token = f"{time.time() % 1000 + 300:.6f}"  # a unique command line: pids may be reused
    with LocalCluster(workers=1, **FAST) as cluster:
        trace = cluster.run(_detach_sleeps, token)
    pids = trace.meta["results"]["worker-0"]
    assert len(pids) == 2
    assert still_running(pids, ["sleep", token]) == []


def test_docstring_examples_run() -> None:
    import doctest

    import vizdist.instrument.processes.cluster

    assert doctest.testmod(vizdist.instrument.processes.cluster, optionflags=doctest.ELLIPSIS).failed == 0


_ORPHAN_LAUNCHER = r"""
import sys, threading, time
from pathlib import Path
from vizdist.trace import load_trace as vizdist_load
from vizdist.instrument.processes.cluster import LocalCluster

out = Path(sys.argv[1])
cluster = LocalCluster(workers=2, timeout=120, progress=False)

def report():
    while True:
        jd = cluster.job_dir
        if jd and len([p for p in jd.glob("status-*.txt") if p.read_text() == "running"]) == 2:
            out.write_text(" ".join(map(str, cluster.pids)))
            return
        time.sleep(0.1)

threading.Thread(target=report, daemon=True).start()

def sleepy(ctx):
    import time
    time.sleep(600)

cluster.run(sleepy)
"""


@pytest.mark.slow
def test_workers_exit_when_the_launching_process_is_killed(tmp_path: Path) -> None:
    import signal
    import sys

    script = tmp_path / "launcher.py"
    script.write_text(_ORPHAN_LAUNCHER)
    pids_file = tmp_path / "pids.txt"
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the killed launcher cannot delete its job folder
    launcher = subprocess.Popen([sys.executable, str(script), str(pids_file)], cwd=os.getcwd(), env=env)
    try:
        deadline = time.monotonic() + 90
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = [int(p) for p in pids_file.read_text().split()]
        assert len(pids) == 2
        launcher.send_signal(signal.SIGKILL)  # like a kernel that dies: no finally, no atexit
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(Path(f"/proc/{p}").exists() for p in pids), "orphaned workers kept running"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)


_DRIVER = r"""
import sys
from vizdist.instrument.processes.cluster import LocalCluster

def detach_and_wait(ctx, state, token):
    import json, os, time
    from vizdist.instrument.processes._demo_child import detached_sleeps

    doc = json.dumps({"job": ctx.job_dir, "sleeps": detached_sleeps(token)})
    with open(state + ".tmp", "w") as fh:
        fh.write(doc)
    os.rename(state + ".tmp", state)
    time.sleep(600)

with LocalCluster(workers=1, timeout=300, progress=False) as cluster:
    cluster.run(detach_and_wait, sys.argv[1], sys.argv[2])
"""


def _gone(procs: list[Any]) -> bool:
    import psutil

    def running(p: Any) -> bool:  # is_running() compares the start time too: a reused pid does not count
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    return not any(running(p) for p in procs)


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_a_killed_driver_leaves_no_process_and_no_job_folder(tmp_path: Path, sig: str) -> None:
    """Kill the process that opened a LocalCluster mid-run: its workers, what they detached, the
    janitor, and the job folder (job file, logs, status files) all go within a bounded time."""
    import signal
    import sys

    import psutil

    script, state = tmp_path / "driver.py", tmp_path / "state.json"
    script.write_text(_DRIVER)
    token = f"{time.time() % 1000 + 300:.6f}"  # the detached sleeps' unique command line
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the job folder is made under tmp_path
    driver = subprocess.Popen([sys.executable, str(script), str(state), token], cwd=os.getcwd(), env=env)
    tree: list[Any] = []
    try:
        deadline = time.monotonic() + 150
        while not state.exists() and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        doc = json.loads(state.read_text())
        job = Path(doc["job"])
        tree = psutil.Process(driver.pid).children(recursive=True)
        assert set(doc["sleeps"]) <= {p.pid for p in tree} and job.is_dir() and job.is_relative_to(tmp_path)
        assert len(tree) >= 5, tree  # janitor, namespace holder, keeper, worker, two sleeps
        driver.send_signal(getattr(signal, sig))
        driver.wait(timeout=30)
        deadline = time.monotonic() + 40
        while not (_gone(tree) and not job.exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _gone(tree), [p for p in tree if not _gone([p])]
        assert not job.exists(), sorted(p.name for p in job.iterdir())
    finally:
        for p in [psutil.Process(driver.pid), *tree] if driver.poll() is None else tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
        driver.wait(timeout=30)


# -- input bounds and network isolation ------------------------------------------------------
def test_sizes_and_types_are_validated_before_anything_starts() -> None:
    with pytest.raises(ValueError, match=r"workers \+ ps=100 would start 100 TensorFlow processes.*max_workers=100"):
        LocalCluster(workers=100)
    LocalCluster(workers=100, max_workers=100).close()  # forced on purpose: accepted (nothing starts yet)
    with pytest.raises(TypeError, match=r"workers must be an int; got True \(a bool\)"):
        LocalCluster(workers=True)
    with pytest.raises(TypeError, match=r"timeout must be a number of seconds .*got '60' \(str\)"):
        LocalCluster(workers=2, timeout="60")
    with pytest.raises(ValueError, match="positive, finite"):
        LocalCluster(workers=2, timeout=float("nan"))
    # issue 36 item 9: LocalCluster(ports=[99999]) gave a raw OverflowError
    for ports in ([99999], [0], [-1], [True], ["8080"], {"worker": [70000]}):
        with pytest.raises(ValueError, match=r"ports must be whole numbers from 1 to 65535; got .*"):
            LocalCluster(workers=1, ports=ports)


def _ports_then_trace(ctx: WorkerContext, probe: str) -> Trace:
    """Record a real MWMS run; before that, worker 0 says which ports the cluster serves on."""
    import tensorflow as tf

    import vizdist

    strategy = ctx.multi_worker_strategy()
    if ctx.task_index == 0:
        spec = json.loads((Path(ctx.job_dir) / "spec.json").read_text())
        tmp = Path(probe) / "ports.json.tmp"  # written whole, then renamed: the probe never reads half a file
        tmp.write_text(json.dumps(spec["cluster"]))
        os.replace(tmp, Path(probe) / "ports.json")
        deadline = time.monotonic() + 60
        while not (Path(probe) / "probed").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    return vizdist.trace_distribution(strategy, tf.data.Dataset.range(8).batch(4), progress=False)


def _probe_while_running(tmp: Path, address: str) -> list[bool]:
    deadline = time.monotonic() + 120
    while not (tmp / "ports.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    ports = [int(a.rsplit(":", 1)[1]) for v in json.loads((tmp / "ports.json").read_text()).values() for a in v]
    out = []
    for p in ports:
        try:
            socket.create_connection((address, p), timeout=2).close()
            out.append(True)
        except OSError:
            out.append(False)
    (tmp / "probed").write_text("")
    return out


@pytest.mark.slow
def test_isolated_cluster_is_unreachable_from_the_network_and_traces_the_same(tmp_path: Path) -> None:
    import psutil

    address = next((a.address for n, addrs in psutil.net_if_addrs().items() for a in addrs
                    if a.family == socket.AF_INET and not a.address.startswith("127.")
                    and psutil.net_if_stats()[n].isup), None)
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    traces, probes = {}, {}
    for isolate in (False, True):
        probe = tmp_path / str(isolate)
        probe.mkdir()
        with LocalCluster(workers=2, isolate=isolate, **FAST) as cluster:
            seen: list[list[bool]] = []
            t = threading.Thread(target=lambda p=probe, s=seen: s.append(_probe_while_running(p, address)))
            t.start()
            traces[isolate] = cluster.run(_ports_then_trace, str(probe))
            t.join(10)
            assert cluster.isolated is isolate  # isolate=True is kept or refused (IsolationError), never dropped
        probes[isolate] = seen[0]
    # The control run (isolate=False) proves the probe can connect: TF binds [::]:port.
    assert probes == {False: [True, True], True: [False, False]}
    cols = ["worker", "step", "replica", "position", "source_id"]
    assert traces[True].elements[cols].values.tolist() == traces[False].elements[cols].values.tolist()


def _stalls_after_two(ctx: WorkerContext) -> Trace:
    """A pipeline that gives two elements, then blocks (a stalled reader), traced with the default timeout."""
    import tensorflow as tf

    import vizdist

    def gen():
        yield from (0, 1)
        time.sleep(3600)

    ds = tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec((), tf.int64)).batch(1)
    return vizdist.trace_distribution(None, ds, progress=False)


@pytest.mark.slow
def test_a_stalled_run_in_a_task_returns_its_trace_before_the_cluster_stops_it() -> None:
    """The default timeout is cut to end TASK_MARGIN_S before the cluster's: the partial trace comes back."""
    from vizdist.instrument.processes.supervisor import TASK_MARGIN_S

    with LocalCluster(workers=1, timeout=TASK_MARGIN_S + 25, progress=False) as cluster:
        trace = cluster.run(_stalls_after_two)
    assert trace.meta["stopped"] == "timeout" and trace.meta["steps_run"] == 2
    assert trace.meta["timeout_s"] < 25


# -- issue 36: a failed run keeps what a user needs, says where, and no pickled code -------------
@pytest.mark.slow
def test_a_failed_task_keeps_its_logs_where_the_error_says_but_not_the_pickled_callable() -> None:
    """Issue 36 item 5: the job folder of a plain exception was kept (or not) with job.pkl, and the error said nothing."""
    import shutil

    with LocalCluster(workers=2, **FAST) as cluster, pytest.raises(TracingError) as info:
        cluster.run(_fail_on_worker_1)
    job = cluster.job_dir
    assert job is not None
    try:
        assert f"{job} (kept for you" in str(info.value)
        kept = sorted(p.name for p in job.iterdir())
        assert {"spec.json", "error-worker-1.json", "log-worker-0.txt", "log-worker-1.txt"} <= set(kept), kept
        assert "job.pkl" not in kept and not [k for k in kept if k.startswith(("tmp-", "import"))], kept
    finally:
        shutil.rmtree(job, ignore_errors=True)


def _writes_a_shard_into_the_job_folder(ctx: WorkerContext) -> Trace:
    from vizdist.instrument.processes.cluster import record_worker_shard

    trace = Trace.from_records(elements=[dict(step=0, replica=ctx.task_index, source_id=ctx.task_index)])
    record_worker_shard(trace, ctx.job_dir, task_type=ctx.task_type, task_index=ctx.task_index)
    return trace


@pytest.mark.slow
def test_the_cluster_merges_only_what_its_tasks_returned() -> None:
    """A callable that writes a shard into ctx.job_dir: the cluster's merge reads only the tasks' own files."""
    with LocalCluster(workers=2, **FAST) as cluster:
        trace = cluster.run(_writes_a_shard_into_the_job_folder)
    assert sorted(trace.elements["source_id"].tolist()) == [0, 1]
