"""Service findings on hand-built traces (the shapes LocalDataService.trace records)."""

from __future__ import annotations

import vizdist
from vizdist.trace import Trace


def svc(elements, **meta):
    base = {"kind": "data_service", "num_workers": 2, "complete": True, "steps": None,
            "stopped_workers": [], "worker_attribution": "worker-process-file"}
    base.update(meta)
    return Trace.from_records(elements=elements, meta=base)


def codes(t: Trace) -> list[str]:
    return [c for c in vizdist.diagnose(t)["code"] if c.startswith("service-")]


def test_parallel_epochs_copies_are_expected_not_flagged():
    rows = [dict(worker=w, source_id=i, consumer=0) for w in (0, 1) for i in range(5)]
    t = svc(rows, sharding_policy="OFF", expected_source_ids=list(range(5)))
    d = vizdist.diagnose(t)
    row = d[d["code"] == "service-copies"].iloc[0]
    assert row["severity"] == "info" and row["workers"] == [0, 1]
    assert "5 of 5 source elements arrived 2 times" in row["message"]
    assert codes(t) == ["service-copies"]


def test_distributed_epoch_duplicate_is_an_error_naming_workers():
    rows = [dict(worker=i % 2, source_id=i) for i in range(5)] + [dict(worker=1, source_id=2)]
    t = svc(rows, sharding_policy="DYNAMIC", expected_source_ids=list(range(5)))
    d = vizdist.diagnose(t)
    row = d[d["code"] == "service-duplicates"].iloc[0]
    assert row["severity"] == "error"
    assert "element 2 came 2 times (from workers [0, 1])" in row["message"]
    assert "at most once" in row["message"]


def test_repeat_in_pipeline_is_not_a_duplicate():
    rows = [dict(worker=0, source_id=i) for i in (0, 1, 0, 1)]
    t = svc(rows, sharding_policy="DYNAMIC", expected_source_ids=[0, 0, 1, 1])
    assert codes(t) == []


def test_lost_elements_name_the_stopped_worker_distributed():
    rows = [dict(worker=0, source_id=i) for i in range(6)]
    stopped = [{"worker": 1, "after_elements": 3, "t_ns": 5}]
    t = svc(rows, sharding_policy="DYNAMIC", expected_source_ids=list(range(8)), stopped_workers=stopped,
            complete=False, stall={"consumers": [0], "after_s": 4, "elements_received": 6})
    d = vizdist.diagnose(t)
    lost = d[d["code"] == "service-lost-elements"].iloc[0]
    assert lost["workers"] == [1] and "Worker 1 stopped" in lost["message"] and "(6, 7)" in lost["message"]
    stall = d[d["code"] == "service-stall"].iloc[0]
    assert "waited 4 s" in stall["message"] and stall["workers"] == [1]


def test_lost_copies_per_worker_under_parallel_epochs():
    rows = [dict(worker=0, source_id=i) for i in range(4)] + [dict(worker=1, source_id=0)]
    stopped = [{"worker": 1, "after_elements": 2, "t_ns": 5}]
    t = svc(rows, sharding_policy="OFF", expected_source_ids=list(range(4)), stopped_workers=stopped,
            complete=False)
    d = vizdist.diagnose(t)
    lost = d[d["code"] == "service-lost-elements"]
    assert len(lost) == 1 and lost.iloc[0]["workers"] == [1]
    assert "3 of 4 elements never arrived (1, 2, 3)" in lost.iloc[0]["message"]


def test_missing_without_stop_is_a_warning_and_partial_runs_are_quiet():
    rows = [dict(worker=0, source_id=i) for i in range(3)]
    t = svc(rows, sharding_policy="DATA", expected_source_ids=list(range(4)))
    assert codes(t) == ["service-missing-elements"]
    assert codes(svc(rows, sharding_policy="DATA", expected_source_ids=list(range(4)), steps=3)) == []


def test_unknown_workers_get_an_info_finding():
    rows = [dict(worker=-1, source_id=i) for i in range(3)]
    t = svc(rows, sharding_policy="DYNAMIC", expected_source_ids=[0, 1, 2],
            worker_attribution="unavailable: in-process")
    assert codes(t) == ["service-no-worker-attribution"]


def test_non_service_traces_are_ignored():
    t = Trace.from_records(elements=[dict(worker=0, source_id=0), dict(worker=0, source_id=0)],
                           meta={"sharding_policy": "DYNAMIC", "expected_source_ids": [0]})
    assert codes(t) == []


# -- a trace_distribution trace of a pipeline that reads from the service (meta["services"]) ---------------
def read_trace(rows, policy, provenance="tagged"):
    """Distribution rows (step, replica, source_id, service_worker) of a pipeline with one service read."""
    return Trace.from_records(elements=rows, meta={
        "kind": "distribution", "provenance": provenance, "num_replicas": 2,
        "services": [{"sharding_policy": policy, "worker_attribution": "worker-process-file"}]})


def test_parallel_epochs_read_one_copy_per_service_worker_is_info_not_error():
    # TF's documented rule (ShardingPolicy.OFF): every worker processes the whole dataset.
    rows = [dict(step=s, replica=w, source_id=i, service_worker=w) for w in (0, 1) for s, i in enumerate(range(4))]
    d = vizdist.diagnose(read_trace(rows, "OFF"))
    assert "service-copies" in d["code"].tolist() and (d["severity"] != "error").all(), d
    msg = d[d["code"] == "service-copies"].iloc[0]["message"]
    assert "4 of 4 source elements arrived 2 times (each copy from a different worker; workers 0, 1)" in msg
    assert "Element 3 arrived at: step 3 replica 0 from service worker 0; step 3 replica 1 from service worker 1" in msg


def test_parallel_epochs_read_two_copies_from_one_worker_is_still_a_duplicate():
    rows = [dict(step=s, replica=0, source_id=i, service_worker=0) for s, i in enumerate([0, 1, 1])]
    rows += [dict(step=s, replica=1, source_id=i, service_worker=1) for s, i in enumerate([0, 1])]
    d = vizdist.diagnose(read_trace(rows, "OFF"))
    dup = d[d["code"] == "duplicate-elements"]
    assert len(dup) == 1 and dup.iloc[0]["severity"] == "error" and "element 1" in dup.iloc[0]["message"]


def test_distributed_epoch_read_copies_from_two_workers_are_a_duplicate():
    # ShardingPolicy.DYNAMIC: each element at most once, whichever worker sends it.
    rows = [dict(step=0, replica=0, source_id=0, service_worker=0), dict(step=1, replica=0, source_id=0,
                                                                          service_worker=1)]
    d = vizdist.diagnose(read_trace(rows, "DYNAMIC"))
    dup = d[d["code"] == "duplicate-elements"].iloc[0]
    assert dup["severity"] == "error" and "job_name" in dup["message"]


def test_parallel_epochs_read_with_unknown_workers_explains_the_copies_without_error():
    rows = [dict(step=s, replica=0, source_id=i, service_worker=-1) for s, i in enumerate([0, 1, 0, 1])]
    d = vizdist.diagnose(read_trace(rows, "OFF"))
    assert {"service-copies", "service-no-worker-attribution"} <= set(d["code"]), d
    assert "duplicate-elements" not in d["code"].tolist() and (d["severity"] != "error").all()


def test_watch_trace_of_a_service_read_has_no_worker_column_and_no_error():
    rows = [dict(step=s, replica=0, source_id=i) for s, i in enumerate([0, 1, 0, 1])]
    d = vizdist.diagnose(read_trace(rows, "OFF", provenance="fingerprint"))
    assert "service-copies" in d["code"].tolist() and (d["severity"] != "error").all(), d
