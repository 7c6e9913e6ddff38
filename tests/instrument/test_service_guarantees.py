"""What TF's tf.data service promises about sharding and lost workers, derived from real runs.

Each test runs plain TensorFlow's own servers (``DispatchServer`` / ``WorkerServer`` in this
process, a worker process where a client must not be its neighbour, ``LocalDataService`` where a
worker has to crash) and derives the expected elements from the dataset's range and the run itself:

* static sharding needs the dispatcher's fixed worker list (TF refuses a job without it), but not
  local reads: a client reading every worker gets every shard; ``target_workers="LOCAL"`` gives it
  its own worker's shard only (``ShardingPolicy`` docs; ``data_service_client.cc``,
  ``ShouldReadFromTask``; ``auto_shard_rewriter.cc``, ``WorkerIndexResolver``);
* a worker restarted under OFF or a static policy starts its copy (its shard) again from the
  beginning (``dispatcher_impl.cc``, ``FindNewTasks``: the task is handed to it again);
* DYNAMIC is at-most-once: the splits a lost worker held never arrive, none arrives twice
  (``dispatcher_impl.cc``, ``GetSplit``: the next split, never one handed out before).
"""

from __future__ import annotations

import collections
import queue
import threading
import time

import psutil
import pytest

import vizdist

pytestmark = pytest.mark.slow

N = 2000  # long enough that no worker has finished its copy when it is stopped
READ_TIMEOUT = 120.0  # seconds for a whole read: generous, a loaded machine is slow, never forever


class Reader:
    """Reads a dataset in a daemon thread, so that every wait of the test has a deadline.

    A tf.data service iterator can block in ``next()`` for ever (a worker that never comes back);
    here the test fails instead.
    """

    def __init__(self, dataset, timeout: float = READ_TIMEOUT) -> None:
        self.deadline = time.monotonic() + timeout
        self.got: list[int] = []
        self._want: queue.Queue[bool] = queue.Queue()
        self._answers: queue.Queue[tuple[str, int, BaseException | None]] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, args=(dataset,), daemon=True,
                                        name="test-service-reader")
        self._thread.start()

    def _serve(self, dataset) -> None:
        it = None
        while self._want.get():
            try:
                it = iter(dataset) if it is None else it
                self._answers.put(("ok", int(next(it)), None))
            except StopIteration:
                self._answers.put(("end", -1, None))
            except Exception as exc:  # handed to the test, which raises it
                self._answers.put(("error", -1, exc))
        del it  # releases the iteration while the dispatcher still runs

    def next(self) -> int | None:
        """The next element, or None at the end of the data; fails the test past the deadline."""
        self._want.put(True)
        try:
            kind, value, error = self._answers.get(timeout=max(0.0, self.deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no element within the deadline after {len(self.got)} elements: {self.got[-10:]}")
        if error is not None:
            raise error
        if kind == "end":
            return None
        self.got.append(value)
        return value

    def until(self, done) -> None:
        """Read until ``done(elements so far)`` holds."""
        while not done(self.got):
            assert self.next() is not None, f"the data ended first: {self.got}"

    def rest(self) -> list[int]:
        """Read to the end; every element read so far."""
        while self.next() is not None:
            pass
        return self.got

    def close(self) -> None:
        self._want.put(False)
        self._thread.join(10)


class PlainService:
    """A dispatcher and ``workers`` WorkerServers of plain TF in this process, each restartable."""

    def __init__(self, tf, workers: int, *, fixed: bool) -> None:
        from vizdist.instrument.processes.supervisor import free_ports

        self.svc = tf.data.experimental.service
        port, *self.ports = free_ports(1 + workers)
        self.dispatcher_address = f"127.0.0.1:{port}"
        self.addresses = [f"127.0.0.1:{p}" for p in self.ports]
        self.dispatcher = self.svc.DispatchServer(self.svc.DispatcherConfig(
            port=port, worker_addresses=self.addresses if fixed else None))
        self.workers: list = []
        try:
            self.workers = [self._worker(p) for p in self.ports]
        except BaseException:
            self.close()
            raise

    def _worker(self, port: int):
        return self.svc.WorkerServer(self.svc.WorkerConfig(
            dispatcher_address=self.dispatcher_address, worker_address="127.0.0.1:%port%", port=port,
            heartbeat_interval_ms=200))

    def restart(self, index: int) -> None:
        """Stop worker ``index`` and start a new one at its address (a restart: its state is gone)."""
        self.workers[index]._stop()
        self.workers[index] = None
        self.workers[index] = self._worker(self.ports[index])

    def distribute(self, dataset, policy: str, **kwargs):
        return dataset.apply(self.svc.distribute(processing_mode=getattr(self.svc.ShardingPolicy, policy),
                                                 service=self.dispatcher.target, **kwargs))

    def close(self) -> None:
        for w in self.workers:
            if w is not None:
                w._stop()
        self.dispatcher._stop()


def live_children() -> set[int]:
    """Processes started (directly or not) by this test process that are still running."""
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


def shard(ids: range, num_workers: int, index: int) -> list[int]:
    """Worker ``index``'s shard of ``ids`` under DATA (TF's rule: element k goes to k mod workers)."""
    return [k for k in ids if k % num_workers == index]


# -- 1. static sharding: the fixed worker list is TF's requirement, local reads are the caller's --
def test_a_static_policy_needs_the_dispatchers_fixed_worker_list(tf):
    s = PlainService(tf, 1, fixed=False)
    reader = Reader(s.distribute(tf.data.Dataset.range(10), "DATA"))
    try:
        with pytest.raises(tf.errors.NotFoundError, match=r"Worker \S+ is not in the workers list"):
            reader.next()
        assert reader.got == []
    finally:
        reader.close()
        s.close()


def test_static_sharding_gives_a_client_one_shard_only_when_it_reads_its_local_worker(tf, tmp_path):
    from vizdist.instrument.processes.supervisor import Supervisor, free_ports

    before = live_children()
    svc = tf.data.experimental.service
    port, local_port, remote_port = free_ports(3)
    addresses = [f"127.0.0.1:{local_port}", f"127.0.0.1:{remote_port}"]  # worker 0 here, worker 1 elsewhere
    dispatcher = svc.DispatchServer(svc.DispatcherConfig(port=port, worker_addresses=addresses))
    local = None
    try:
        local = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=f"127.0.0.1:{port}",
                                                  worker_address="127.0.0.1:%port%", port=local_port))
        (tmp_path / "home").mkdir()
        with Supervisor(tmp_path / "sup", label="remote-worker") as sup:
            remote = sup.spawn("worker-1", "vizdist.instrument.service._service_worker", [
                "--dispatcher", f"127.0.0.1:{port}", "--port", str(remote_port), "--worker-id", "1"],
                cwd=tmp_path / "home")
            state, _ = sup.wait([remote], ("ready",), deadline=time.monotonic() + 120)
            assert state == "ok", sup.failure_text(remote)
            ids = range(40)
            got = {}
            for target in ("LOCAL", "AUTO", "ANY"):
                ds = tf.data.Dataset.range(len(ids)).apply(svc.distribute(
                    processing_mode=svc.ShardingPolicy.DATA, service=dispatcher.target, target_workers=target))
                reader = Reader(ds)
                try:
                    got[target] = sorted(reader.rest())
                finally:
                    reader.close()
    finally:
        if local is not None:
            local._stop()
        dispatcher._stop()
    assert live_children() == before, "the worker process outlived its supervisor"
    # LOCAL: only the worker in this process, so only its shard (its index in worker_addresses).
    assert got["LOCAL"] == shard(ids, len(addresses), addresses.index(f"127.0.0.1:{local_port}"))
    # Reading every worker is allowed: the client gets every worker's shard, the whole range once.
    assert got["AUTO"] == got["ANY"] == sorted(shard(ids, 2, 0) + shard(ids, 2, 1)) == list(ids)


# -- 2. a restarted worker under OFF or a static policy begins its copy (its shard) again --
@pytest.mark.parametrize("policy, workers", [("OFF", 1), ("DATA", 2)])
def test_a_restarted_worker_starts_its_copy_or_shard_again_from_the_beginning(tf, policy, workers):
    s = PlainService(tf, workers, fixed=policy != "OFF")
    restarted = workers - 1
    ids = range(N)
    mine = shard(ids, workers, restarted)  # OFF, one worker: the whole range
    reader = Reader(s.distribute(tf.data.Dataset.range(N), policy))
    try:
        # Restart once the consumer holds elements, at least one of them from the worker to restart.
        reader.until(lambda got: len(got) >= 5 and any(k % workers == restarted for k in got))
        s.restart(restarted)
        got = reader.rest()
    finally:
        reader.close()
        s.close()
    from_it = [k for k in got if k % workers == restarted]  # in the order they arrived
    # Where its stream starts over: the first element that is not the next of its copy (shard).
    sent = next((i for i, k in enumerate(from_it) if i >= len(mine) or k != mine[i]), len(from_it))
    assert 1 <= sent < len(mine), "the worker had finished its copy before the restart: nothing to show"
    # What it had sent before the restart, then its whole copy (shard) again from the first element.
    assert from_it == mine[:sent] + mine
    counts = collections.Counter(got)
    assert {k for k, c in counts.items() if c == 2} == set(mine[:sent]) and max(counts.values()) == 2
    for other in set(range(workers)) - {restarted}:  # the other workers' shards: each element once
        assert sorted(k for k in got if k % workers == other) == shard(ids, workers, other)


# -- 3. DYNAMIC: at most once --
def test_a_worker_restarted_under_dynamic_loses_the_splits_it_held_and_repeats_none(tf):
    s = PlainService(tf, 1, fixed=False)
    reader = Reader(s.distribute(tf.data.Dataset.range(N), "DYNAMIC"))
    try:
        reader.until(lambda got: len(got) >= 5)
        s.restart(0)
        got = reader.rest()
    finally:
        reader.close()
        s.close()
    # One worker, splits handed out in order: the stream ascends, so nothing arrived twice ...
    assert got == sorted(set(got))
    lost = sorted(set(range(N)) - set(got))
    # ... and what the old worker held when it stopped (a run of splits right after the last one it
    # delivered) is gone: the restarted worker asks for the next split, not those again.
    assert lost, "the stopped worker held no split: nothing was lost"
    last = max(k for k in got if k < lost[0])
    assert lost == list(range(last + 1, lost[-1] + 1))
    assert got == list(range(last + 1)) + list(range(lost[-1] + 1, N))


def _crash_worker_1(tf, work, n):
    """A 2-worker distributed_epoch run whose worker 1 is killed after the consumer got 20 elements."""
    before = live_children()
    with vizdist.LocalDataService(workers=2, progress=False) as s:
        t = s.trace(tf.data.Dataset.range(n).map(work), processing_mode="distributed_epoch",
                    stop="worker-1", stop_after=20, stall_timeout=10, progress=False)
        assert s.alive_workers() == [0]
    assert live_children() == before
    return t


def test_a_crashed_worker_under_distributed_epoch_loses_what_it_held_and_nothing_arrives_twice(tf):
    def work(x):  # a few ms per element, so that both workers take splits before the crash
        m = tf.random.uniform([200, 200])
        return x, tf.reduce_sum(m @ m)

    n = 120
    # Which worker the consumer read its first 20 elements from is the machine's scheduling: the case
    # needs worker 1 to have delivered some before the crash, so a run where it did not is run again.
    for _attempt in range(3):
        t = _crash_worker_1(tf, work, n)
        e = t.elements
        dead = sorted(e[e["worker"] == 1]["source_id"])
        if dead:
            break
    assert dead, "in 3 runs worker 1 never delivered an element before it was stopped"
    assert t.meta["stopped_workers"][0]["worker"] == 1  # SIGKILL, as a crash
    counts = collections.Counter(e["source_id"])
    assert max(counts.values()) == 1, "an element arrived twice"
    lost = sorted(set(range(n)) - set(counts))
    assert lost, "nothing was lost"
    # Worker 1 reads its splits in the order the dispatcher handed them (ascending): what it held
    # and never delivered comes after the last element it delivered, and no one delivered it since.
    assert min(lost) > max(dead)
    assert not set(lost) & set(e[e["worker"] == 0]["source_id"])
    # The dead worker's task never ends, so the consumer would wait for ever: vizdist's watchdog
    # reports the stall instead.
    assert "stall" in t.meta
    # diagnose's text (the splits died with worker 1, none re-assigned) is what the run shows.
    d = vizdist.diagnose(t)
    found = d[d["code"] == "service-lost-elements"]
    assert len(found) == 1 and found.iloc[0]["workers"] == [1] and f"{len(lost)} of {n}" in found.iloc[0]["message"]
    assert "service-duplicates" not in d["code"].tolist()
