"""LocalDataService against a real tf.data service: attribution, modes, policies, consumers, faults."""

from __future__ import annotations

import collections
import itertools
import socket
import threading

import numpy as np
import psutil
import pytest

import vizdist
from vizdist.errors import TracingError

pytestmark = pytest.mark.slow


def live_children() -> set[int]:
    """Processes started (directly or not) by this test process that are still running."""
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


@pytest.fixture(scope="module")
def service(tf):
    s = vizdist.LocalDataService(workers=2, progress=False)
    yield s
    procs = list(s._procs)
    s.close()
    assert all(p.poll() is not None for p in procs), "a worker process outlived close()"


@pytest.fixture(scope="module")
def plain(tf):
    """A plain TF service in this process (no vizdist): dispatcher + 2 workers, fixed worker list."""
    from vizdist.instrument.processes.supervisor import free_ports

    svc = tf.data.experimental.service
    d_port, *w_ports = free_ports(3)
    addresses = [f"127.0.0.1:{p}" for p in w_ports]
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=d_port, worker_addresses=addresses))
    workers = [svc.WorkerServer(svc.WorkerConfig(dispatcher_address=f"127.0.0.1:{d_port}",
                                                 worker_address="127.0.0.1:%port%", port=p)) for p in w_ports]
    yield dispatcher
    for w in workers:
        w._stop()
    dispatcher._stop()


def raw(tf, ds, plain, mode):
    """What plain TF delivers through a service of the same shape, without vizdist."""
    out = ds.apply(tf.data.experimental.service.distribute(processing_mode=mode, service=plain.target))
    return sorted(int(v) for v in out.as_numpy_iterator())


def raw_batched(tf, ds, plain):
    out = ds.apply(tf.data.experimental.service.distribute(processing_mode="distributed_epoch",
                                                            service=plain.target))
    return sorted(int(v) for b in out.as_numpy_iterator() for v in b)


@pytest.mark.smoke
def test_parallel_epochs_each_element_once_per_worker(tf, service, plain):
    ds = tf.data.Dataset.range(20)
    t = service.trace(ds, processing_mode="parallel_epochs", progress=False)
    e = t.elements
    assert sorted(e["source_id"]) == raw(tf, ds, plain, "parallel_epochs")
    assert sorted(e["source_id"]) == sorted(list(range(20)) * 2)
    for w in (0, 1):
        assert sorted(e[e["worker"] == w]["source_id"]) == list(range(20))
    assert t.meta["sharding_policy"] == "OFF" and t.meta["complete"] is True
    codes = vizdist.diagnose(t)["code"].tolist()
    assert "service-copies" in codes and "service-duplicates" not in codes


@pytest.mark.smoke
def test_distributed_epoch_each_element_once(tf, service, plain):
    ds = tf.data.Dataset.range(20)
    t = service.trace(ds, processing_mode="distributed_epoch", progress=False)
    ids = t.elements["source_id"].tolist()
    assert sorted(ids) == raw(tf, ds, plain, "distributed_epoch") == list(range(20))
    assert set(t.elements["worker"]) <= {0, 1}
    d = vizdist.diagnose(t)
    assert not d["code"].str.startswith("service-").any(), d


def test_distributed_epoch_tags_ride_with_their_batch(tf, service, plain):
    # Under DYNAMIC sharding the dispatcher hands out splits of the source and each worker batches
    # what it got; the tag must come from the same split as the value, so ids stay exactly once.
    for _ in range(2):
        ds = tf.data.Dataset.range(24).map(lambda x: x * 1).batch(4)
        t = service.trace(ds, processing_mode="distributed_epoch", progress=False)
        assert sorted(t.elements["source_id"]) == raw_batched(tf, ds, plain) == list(range(24))


def test_worker_attribution_matches_data_sharding_ground_truth(tf, service):
    # DATA sharding: worker i (its index in DispatcherConfig.worker_addresses) keeps element k
    # when k % num_workers == i. That is TF's rule, independent of how vizdist reads the worker.
    t = service.trace(tf.data.Dataset.range(20), sharding_policy="DATA", progress=False)
    e = t.elements
    assert sorted(e["source_id"]) == list(range(20))
    assert (e["worker"] == e["source_id"] % 2).all(), e[["source_id", "worker"]]


def test_file_or_data_and_hint_policies(tf, service):
    e = service.trace(tf.data.Dataset.range(10), sharding_policy="FILE_OR_DATA", progress=False).elements
    assert (e["worker"] == e["source_id"] % 2).all()  # no files: falls back to DATA
    e = service.trace(tf.data.Dataset.range(10), sharding_policy="HINT", progress=False).elements
    assert sorted(e[e["worker"] == 0]["source_id"]) == sorted(e[e["worker"] == 1]["source_id"]) == list(range(10))
    hinted = tf.data.Dataset.range(10).shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT)
    e = service.trace(hinted, sharding_policy="HINT", progress=False).elements
    assert sorted(e["source_id"]) == list(range(10)) and (e["worker"] == e["source_id"] % 2).all()


def test_values_are_untouched_and_batches_keep_their_worker(tf, service, plain):
    ds = tf.data.Dataset.range(10).map(lambda x: x * 3).batch(4)
    t = service.trace(ds, sharding_policy="DATA", progress=False)
    # What plain TF's consumer receives through a service of the same shape: the real values.
    out = ds.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.DATA, service=plain.target))
    plain_batches = [b for b in out.as_numpy_iterator()]
    e = t.elements.sort_values(["consumer", "step", "position"])
    traced = [g["source_id"].tolist() for _, g in e.groupby(["consumer", "step"])]
    # Each traced batch holds the ids of one real batch: value = 3 * id, in the same order.
    assert sorted(traced) == sorted([(b // 3).tolist() for b in plain_batches])
    assert all((b % 3 == 0).all() for b in plain_batches)
    assert sorted(t.batches["shape"]) == sorted(str(list(b.shape)) for b in plain_batches)
    assert set(t.batches["dtype"]) == {b.dtype.name for b in plain_batches}
    # DATA shards the *batches*: batch k goes to worker k % 2 (TF's rule, by worker_addresses index).
    for ids in traced:
        k = ids[0] // 4
        assert set(e[e["source_id"].isin(ids)]["worker"]) == {k % 2}


def test_file_policy_gives_whole_files_to_workers(tf, service, tmp_path):
    files = []
    for k in range(4):
        f = tmp_path / f"part-{k}.txt"
        f.write_text("".join(f"{k}-{j}\n" for j in range(3)))
        files.append(str(f))
    ds = tf.data.TextLineDataset(files)
    t = service.trace(ds, sharding_policy="FILE", progress=False)
    e = t.elements
    assert len(e) == 12
    per_file = e.groupby("source_file")["worker"].agg(lambda w: sorted(set(w)))
    assert all(len(ws) == 1 for ws in per_file), per_file
    assert set(per_file.map(lambda ws: ws[0])) == {0, 1}


def test_two_consumers_share_one_job(tf, service):
    t = service.trace(tf.data.Dataset.range(20), processing_mode="distributed_epoch", consumers=2,
                      progress=False)
    e = t.elements
    assert sorted(e["source_id"]) == list(range(20))
    assert set(e["consumer"]) <= {0, 1}
    assert t.meta["api"] == "register_dataset+from_dataset_id" and t.meta["job_name"]


def test_coordinated_reads(tf, service):
    t = service.trace(tf.data.Dataset.range(1000).repeat(), processing_mode="parallel_epochs",
                      consumers=2, num_consumers=2, steps=3, progress=False)
    e = t.elements
    assert sorted(collections.Counter(e["consumer"]).items()) == [(0, 3), (1, 3)]
    assert t.meta["coordinated_reads"] is True


@pytest.mark.smoke
def test_service_to_mirrored_replicas_in_one_trace(tf, service, mirrored):
    n = mirrored.num_replicas_in_sync
    ds = tf.data.Dataset.range(4 * n).batch(2 * n)
    t = service.trace(ds, processing_mode="distributed_epoch", strategy=mirrored, progress=False)
    e = t.elements
    assert sorted(e["source_id"]) == list(range(4 * n))
    assert sorted(e["replica"].unique()) == list(range(n))
    assert set(e["worker"]) <= {0, 1} and (e["worker"] >= 0).all()
    # A global batch is one worker's batch of the splits it read, in the order it read them (ascending
    # range indexes); TF's rebatch gives replica r its r-th slice, so in replica order the ids ascend.
    for _, step in e.groupby("step"):
        ids = step.sort_values(["replica", "position"])["source_id"].tolist()
        assert ids == sorted(ids), ids
    assert all(d.endswith(f"CPU:{r}") for d, r in zip(e["device"], e["replica"], strict=True))


def test_explorer_cards_name_the_service_worker_of_each_step(tf, service, mirrored):
    """Not one worker per replica: under DATA, global batch k comes from worker k % 2 (TF's rule)."""
    t = service.trace(tf.data.Dataset.range(16).batch(4), sharding_policy="DATA", strategy=mirrored, progress=False)
    ex = t.show()
    e = t.elements
    checked = 0
    for step in sorted(set(e["step"])):
        ex.step = int(step)
        for r, card in enumerate(ex.cards.children):
            ids = e[(e["step"] == step) & (e["replica"] == r)]["source_id"]
            if len(ids):
                w = int(ids.min()) // 4 % 2
                assert f"made by service worker {w}<" in card.value and f"worker {1 - w}" not in card.value, card.value
                checked += 1
    assert checked == 16


def test_bad_knobs_are_clear_errors(tf, service):
    ds = tf.data.Dataset.range(3)
    with pytest.raises(ValueError, match="parallel_epochs"):
        service.trace(ds, processing_mode="parallel")
    with pytest.raises(ValueError, match="OFF, DYNAMIC"):
        service.trace(ds, sharding_policy="SOMETIMES")
    with pytest.raises(ValueError, match="one knob"):
        service.trace(ds, processing_mode="parallel_epochs", sharding_policy="DATA")


def test_py_function_dataset_cannot_run_on_worker_processes(tf, service):
    ds = tf.data.Dataset.range(3).map(lambda x: tf.py_function(lambda v: v, [x], tf.int64))
    with pytest.raises(TracingError, match="py_function"):
        service.trace(ds, processing_mode="parallel_epochs", progress=False)


def test_enumerated_sources_under_dynamic_are_refused_not_mislabelled(tf, service):
    # enumerate() ids would come from other splits than the data under DYNAMIC sharding.
    ds = tf.data.Dataset.range(10).unique()  # unique's outputs are numbered (positional ids)
    with pytest.raises(TracingError, match="distributed_epoch"):
        service.trace(ds, processing_mode="distributed_epoch", progress=False)
    t = service.trace(ds, processing_mode="parallel_epochs", progress=False)
    assert sorted(t.elements["source_id"]) == sorted(list(range(10)) * 2)


def test_flat_map_parts_keep_their_source_ids_under_distributed_epoch(tf, service):
    # flat_map outputs carry the id of the element their function was called on (+ their part).
    ds = tf.data.Dataset.range(5).flat_map(lambda x: tf.data.Dataset.range(x))
    t = service.trace(ds, processing_mode="distributed_epoch", progress=False)
    got = sorted(zip(t.elements["source_id"], t.elements["source_line"], strict=True))
    assert got == [(x, j) for x in range(5) for j in range(x)]


def test_tensor_slices_keep_their_ids_under_distributed_epoch(tf, service):
    # The ids are sliced from the source tensor itself, so DYNAMIC splits keep id and value together.
    ds = tf.data.Dataset.from_tensor_slices(tf.range(100, 130, dtype=tf.int64))
    t = service.trace(ds, processing_mode="distributed_epoch", progress=False)
    assert sorted(t.elements["source_id"]) == list(range(30))


def test_unreachable_dispatcher_is_a_clear_error(tf):
    from vizdist.instrument.processes.cluster import free_ports

    port = free_ports(1)[0]
    with pytest.raises(TracingError, match=r"no tf\.data service dispatcher answers"):
        vizdist.LocalDataService(workers=0, dispatcher=f"127.0.0.1:{port}")


def test_in_process_workers_say_attribution_is_unavailable(tf):
    from vizdist.instrument.processes.cluster import IsolationWarning

    with pytest.warns(IsolationWarning, match="cannot put in a private network namespace.*run code in them"), \
            vizdist.LocalDataService(workers=2, in_process=True) as s:
        t = s.trace(tf.data.Dataset.range(10), processing_mode="parallel_epochs", progress=False)
    assert sorted(t.elements["source_id"]) == sorted(list(range(10)) * 2)
    assert (t.elements["worker"] == -1).all()
    assert t.meta["worker_attribution"].startswith("unavailable")
    assert "service-no-worker-attribution" in vizdist.diagnose(t)["code"].tolist()


@pytest.mark.parametrize("fault_tolerant", [False, True])
def test_stopped_worker_is_reported_not_hung(tf, tmp_path, fault_tolerant):
    before = live_children()
    with vizdist.LocalDataService(workers=2, fault_tolerant=fault_tolerant, work_dir=tmp_path) as s:
        procs = list(s._procs)
        t = s.trace(tf.data.Dataset.range(200), processing_mode="parallel_epochs", stop="worker-1", stop_after=5,
                    stall_timeout=4, progress=False)
        assert s.alive_workers() == [0]
    assert all(p.poll() is not None for p in procs)
    # Nothing vizdist started outlives close(): no consumer thread here, no process.
    assert not [th.name for th in threading.enumerate() if th.name.startswith("vizdist-")]
    assert live_children() == before
    e = t.elements
    assert t.meta["stopped_workers"][0]["worker"] == 1
    # Worker 0 is alive: it delivers its whole copy; worker 1's copy is cut short.
    assert sorted(e[e["worker"] == 0]["source_id"]) == list(range(200))
    got_1 = set(e[e["worker"] == 1]["source_id"])
    assert len(got_1) < 200
    assert "stall" in t.meta  # the dead worker's task never ends: next() would keep waiting
    d = vizdist.diagnose(t)
    lost = d[d["code"] == "service-lost-elements"]
    assert len(lost) == 1 and lost.iloc[0]["workers"] == [1]
    assert "Worker 1" in lost.iloc[0]["message"]
    assert "service-stall" in d["code"].tolist()


def test_trace_round_trips_json(tf, service, tmp_path):
    t = service.trace(tf.data.Dataset.range(6), processing_mode="parallel_epochs", progress=False)
    assert vizdist.load_trace(t.save(tmp_path / "svc.json")) == t
    assert np.array_equal(np.sort(t.elements["order"]), np.arange(12))


def test_error_inside_with_block_stops_every_server(tf):
    import socket

    # isolate=False: the dispatcher is reachable from here, so the check below can fail.
    with pytest.raises(RuntimeError, match="boom"), vizdist.LocalDataService(workers=1, isolate=False) as s:
        procs, address = list(s._procs), s.address
        raise RuntimeError("boom")
    assert all(p.poll() is not None for p in procs), "worker process left running"
    host, port = address.rsplit(":", 1)
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=2).close()


def test_bad_sizes_and_types_are_refused_before_anything_starts():
    before = live_children()
    with pytest.raises(ValueError, match="max_workers=100"):
        vizdist.LocalDataService(workers=100)
    with pytest.raises(TypeError, match="a bool"):
        vizdist.LocalDataService(workers=True)
    with pytest.raises(TypeError, match="start_timeout must be a number"):
        vizdist.LocalDataService(workers=1, start_timeout="60")
    assert live_children() == before


def test_planted_module_in_work_dir_never_runs(tf, tmp_path):
    # python -m puts the working directory first on sys.path; vizdist starts workers with -P in a
    # private folder, so files in the user's work_dir (or this process's cwd) are never imported.
    marker = tmp_path / "planted-ran"
    plant = f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit('planted module imported')\n"
    for folder in (tmp_path / "work" / "worker-0", tmp_path / "work"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "argparse.py").write_text(plant)
    with vizdist.LocalDataService(workers=1, work_dir=tmp_path / "work", progress=False) as s:
        t = s.trace(tf.data.Dataset.range(4), processing_mode="parallel_epochs", progress=False)
    assert sorted(t.elements["source_id"]) == [0, 1, 2, 3] and set(t.elements["worker"]) == {0}
    assert not marker.exists(), "a file planted in work_dir ran inside a worker"


def non_loopback_ipv4() -> str | None:
    """A non-loopback IPv4 address of this machine (an interface that is up), or None."""
    stats = psutil.net_if_stats()
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127.") and stats[name].isup:
                return a.address
    return None


def reachable(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=2).close()
    except OSError:
        return False
    return True


def service_ports(s):
    return [int(a.rsplit(":", 1)[1]) for a in [s.address, *s.worker_addresses]]


def test_isolated_service_is_unreachable_from_the_network_and_traces_the_same(tf):
    address = non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    ds = tf.data.Dataset.range(12).batch(3)
    traces = {}
    for isolate in (False, True):
        with vizdist.LocalDataService(workers=2, isolate=isolate, progress=False) as s:
            assert s.isolated is isolate  # isolate=True is kept or refused (IsolationError), never dropped
            ports = service_ports(s)
            # The control (isolate=False) proves the probe can succeed: TF binds [::]:port.
            assert [reachable(address, p) for p in ports] == [not isolate] * len(ports), (isolate, ports)
            assert [reachable("127.0.0.1", p) for p in ports] == [not isolate] * len(ports)
            traces[isolate] = s.trace(ds, sharding_policy="DATA", progress=False)
    cols = ["source_id", "worker", "position"]  # step is the arrival index: it varies run to run
    same = [t.elements[cols].sort_values(cols).values.tolist() for t in traces.values()]
    assert same[0] == same[1]


# -- your own service pipeline (distribute / register_dataset + from_dataset_id) through trace_distribution --
@pytest.fixture(scope="module")
def open_service(tf):
    """A LocalDataService this process can read with its own pipeline (isolate=False), 2 worker processes."""
    s = vizdist.LocalDataService(workers=2, isolate=False, progress=False)
    yield s
    s.close()


def delivered(t):
    """(value the replica got, its trace row) per element, from step_fn=lambda v: v results."""
    import json

    out = []
    e = t.elements.sort_values(["step", "replica", "position"], kind="stable")
    for (s, r), rows in e.groupby(["step", "replica"]):
        b = t.batches[(t.batches.step == s) & (t.batches.replica == r)]
        out += list(zip(json.loads(b["result"].iloc[0]), rows.to_dict("records"), strict=True))
    return out


def plain_values(tf, ds):
    """Every value plain TF delivers (each batch flattened)."""
    return [int(v) for b in ds.as_numpy_iterator() for v in np.atleast_1d(b)]


def test_own_parallel_epochs_pipeline_shows_each_element_once_per_worker(tf, open_service, mirrored):
    svc = tf.data.experimental.service
    ds = tf.data.Dataset.range(8).map(lambda x: x * 10).apply(svc.distribute("parallel_epochs", open_service.target))
    plain = collections.Counter(plain_values(tf, ds.batch(4)))
    t = vizdist.trace_distribution(mirrored, ds.batch(4), step_fn=lambda v: v)
    rows = delivered(t)
    # Exact: every value a replica got is 10 x the source id of its row, and the copies are plain TF's.
    assert all(v == 10 * row["source_id"] for v, row in rows)
    assert collections.Counter(v for v, _ in rows) == plain == collections.Counter({10 * i: 2 for i in range(8)})
    per_id = t.elements.groupby("source_id")["service_worker"].agg(sorted)
    assert per_id.tolist() == [[0, 1]] * 8  # one copy from each worker process
    assert t.meta["provenance"] == "tagged" and t.meta["services"][0]["exact"] is True
    assert t.meta["services"][0]["sharding_policy"] == "OFF" and t.meta["services"][0]["num_workers"] == 2
    d = vizdist.diagnose(t)
    assert "service-copies" in d["code"].tolist() and (d["severity"] != "error").all(), d


def test_own_register_and_from_dataset_id_pipeline_under_distributed_epoch(tf, open_service, mirrored):
    svc = tf.data.experimental.service
    dataset_id = svc.register_dataset(open_service.target, tf.data.Dataset.range(12))
    ds = svc.from_dataset_id("distributed_epoch", open_service.target, dataset_id).batch(4)
    plain = collections.Counter(plain_values(tf, ds))
    t = vizdist.trace_distribution(mirrored, ds, step_fn=lambda v: v)
    rows = delivered(t)
    assert all(v == row["source_id"] for v, row in rows)
    assert collections.Counter(v for v, _ in rows) == plain == collections.Counter(range(12))
    assert set(t.elements["service_worker"]) <= {0, 1}
    d = vizdist.diagnose(t)
    assert not d["code"].str.startswith("service-").any() and (d["severity"] != "error").all(), d


def test_own_readers_sharing_a_job_name_share_it_in_the_trace(tf, open_service):
    svc = tf.data.experimental.service
    dataset_id = svc.register_dataset(open_service.target, tf.data.Dataset.range(16))

    def dataset_fn(ctx):  # every replica's pipeline reads one shared job
        return svc.from_dataset_id("distributed_epoch", open_service.target, dataset_id, job_name="shared").batch(2)

    # Plain TF, two readers of one job: together they deliver each element once.
    readers = [iter(dataset_fn(None)), iter(dataset_fn(None))]
    plain = []
    for r in itertools.cycle(readers):
        try:
            plain += next(r).numpy().tolist()
        except StopIteration:
            break
    plain += [int(v) for r in readers for b in r for v in b.numpy()]
    options = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_fetch_to_device=False)
    # A strategy of its own: in TF 2.21 a PER_REPLICA run leaves a MirroredStrategy reading one copy of
    # every later experimental_distribute_dataset per replica (mirrored_strategy._input_workers_with_options).
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    t = vizdist.trace_distribution(strategy, dataset_fn=dataset_fn, options=options, step_fn=lambda v: v)
    assert all(v == row["source_id"] for v, row in delivered(t))
    assert sorted(t.elements["source_id"]) == sorted(plain) == list(range(16))
    read = t.meta["services"][0]
    assert read["job_name"].endswith("/shared") and read["traced_job_name"].startswith(read["job_name"])
    assert (vizdist.diagnose(t)["severity"] != "error").all()


def test_own_pipeline_on_a_plain_tf_service_says_the_worker_is_unknown(tf, plain, mirrored):
    svc = tf.data.experimental.service
    ds = tf.data.Dataset.range(6).apply(svc.distribute("parallel_epochs", plain.target)).batch(4)
    want = collections.Counter(plain_values(tf, ds))
    t = vizdist.trace_distribution(mirrored, ds, step_fn=lambda v: v)
    rows = delivered(t)
    assert all(v == row["source_id"] for v, row in rows)
    assert collections.Counter(v for v, _ in rows) == want == collections.Counter({i: 2 for i in range(6)})
    assert (t.elements["service_worker"] == -1).all()
    assert t.meta["services"][0]["worker_attribution"].startswith("unknown")
    d = vizdist.diagnose(t)
    assert {"service-copies", "service-no-worker-attribution"} <= set(d["code"]) and (d["severity"] != "error").all()


def test_own_service_read_vizdist_did_not_see_is_labelled_positional(tf, plain, mirrored):
    from vizdist.instrument.core import service_registry as registry

    svc = tf.data.experimental.service
    registry.uninstall()
    try:  # as if the pipeline had been built before vizdist was loaded
        ds = tf.data.Dataset.range(6).apply(svc.distribute("parallel_epochs", plain.target)).batch(4)
    finally:
        registry.install()
    want = collections.Counter(plain_values(tf, ds))
    t = vizdist.trace_distribution(mirrored, ds, step_fn=lambda v: v)
    assert collections.Counter(v for v, _ in delivered(t)) == want  # the values stay exact
    assert t.meta["provenance"] == "positional" and "did not see" in t.meta["provenance_note"]
    d = vizdist.diagnose(t)
    assert "provenance-positional" in d["code"].tolist() and (d["severity"] != "error").all()


def test_own_distributed_epoch_over_enumerated_source_is_labelled(tf, plain, mirrored):
    # from_tensors is numbered with enumerate(); under DYNAMIC the dispatcher would split the numbering
    # and the data separately, so the read is numbered by position instead, and says so.
    svc = tf.data.experimental.service
    ds = tf.data.Dataset.from_tensors(tf.constant(5, tf.int64)).repeat(6)
    ds = ds.apply(svc.distribute("distributed_epoch", plain.target)).batch(4)
    want = collections.Counter(plain_values(tf, ds))
    t = vizdist.trace_distribution(mirrored, ds, step_fn=lambda v: v)
    assert collections.Counter(v for v, _ in delivered(t)) == want
    assert t.meta["provenance"] == "positional" and "distributed_epoch" in t.meta["provenance_note"]
    assert (vizdist.diagnose(t)["severity"] != "error").all()


@pytest.mark.filterwarnings("ignore:vizdist.watch is deprecated:DeprecationWarning")
def test_watch_over_own_service_pipeline_explains_the_copies(tf, open_service, mirrored):
    svc = tf.data.experimental.service
    ds = tf.data.Dataset.range(8).apply(svc.distribute("parallel_epochs", open_service.target)).batch(4)
    w = vizdist.watch(mirrored.experimental_distribute_dataset(ds))
    seen = [int(v) for batch in w for part in mirrored.experimental_local_results(batch) for v in part.numpy()]
    assert sorted(seen) == sorted(t for t in list(range(8)) * 2)
    t = w.trace
    assert sorted(t.elements["source_id"]) == sorted(seen)  # ids are the values (watch reads content)
    d = vizdist.diagnose(t)
    assert "service-copies" in d["code"].tolist() and (d["severity"] != "error").all(), d


def test_own_pipeline_on_a_closed_dispatcher_is_a_clear_error(tf, mirrored):
    svc = tf.data.experimental.service
    d = svc.DispatchServer()
    w = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=d.target.split("://")[1]))
    ds = tf.data.Dataset.range(4).apply(svc.distribute("parallel_epochs", d.target)).batch(4)
    w._stop()
    d._stop()
    with pytest.raises(TracingError, match=r"no tf\.data service dispatcher answers"):
        vizdist.trace_distribution(mirrored, ds)


def test_own_pipeline_on_an_isolated_service_is_refused_not_hung(tf, service):
    if not service.isolated:
        pytest.skip("user + network namespaces are unavailable here, so the service is reachable")
    svc = tf.data.experimental.service
    ds = tf.data.Dataset.range(8)
    calls = {
        "distribute": lambda: ds.apply(svc.distribute("parallel_epochs", service.target)),
        "register_dataset": lambda: svc.register_dataset(service.target, ds),
        "from_dataset_id": lambda: svc.from_dataset_id("parallel_epochs", service.target, "0",
                                                       element_spec=ds.element_spec),
    }
    for name, call in calls.items():
        outcome = {}

        def run(call=call, outcome=outcome):
            try:
                call()
            except Exception as exc:  # the test checks which
                outcome["error"] = exc

        th = threading.Thread(target=run, daemon=True)
        th.start()
        th.join(60)  # TensorFlow itself would wait forever for this dispatcher
        assert not th.is_alive(), f"{name} hung on an isolated service's target"
        assert isinstance(outcome.get("error"), TracingError), (name, outcome)
        msg = str(outcome["error"])
        assert "service.trace(" in msg and "isolate=False" in msg
