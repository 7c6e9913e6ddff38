"""Checks about several workers, on traces built from records (no TensorFlow).

The same checks run on real multi-worker traces in tests/instrument/test_sharding.py.
"""

from __future__ import annotations

from vizdist.diagnose import diagnose
from vizdist.trace import Trace


def _codes(t: Trace) -> list[str]:
    return diagnose(t)["code"].tolist()


def _file_trace(assign: dict[int, list[tuple[str, int]]], policy: str, **meta: object) -> Trace:
    rows = []
    for w, items in assign.items():
        for pos, (f, line) in enumerate(items):
            rows.append(dict(step=pos // 2, replica=w, worker=w, source_file=f, source_line=line,
                             source_id=line, position=pos % 2))
    return Trace.from_records(elements=rows, meta={"num_workers": len(assign), "shard_policy": policy, **meta})


def test_worker_duplicates_flags_shared_elements_under_off() -> None:
    both = [("a.txt", 0), ("a.txt", 1), ("b.txt", 0), ("b.txt", 1)]
    t = _file_trace({0: both, 1: both}, "OFF")
    df = diagnose(t)
    row = df[df["code"] == "worker-duplicates"].iloc[0]
    assert row["severity"] == "warning"
    assert row["workers"] == [0, 1]
    assert "4 of 4 source elements" in row["message"] and "OFF" in row["message"]
    assert "Fix:" in row["message"]


def test_worker_duplicates_silent_when_workers_read_disjoint_data() -> None:
    t = _file_trace({0: [("a.txt", 0), ("a.txt", 1)], 1: [("b.txt", 0), ("b.txt", 1)]}, "FILE")
    assert "worker-duplicates" not in _codes(t)


def test_worker_duplicates_same_worker_twice_is_not_a_worker_duplicate() -> None:
    rows = [dict(step=s, replica=0, worker=0, source_id=1, position=0) for s in range(2)]
    rows += [dict(step=s, replica=1, worker=1, source_id=2, position=0) for s in range(2)]
    assert "worker-duplicates" not in _codes(Trace.from_records(elements=rows, meta={"num_workers": 2}))


def test_worker_duplicates_names_dataset_fn_for_distribute_datasets_from_function() -> None:
    rows = [dict(step=0, replica=w, worker=w, source_id=i, position=i) for w in range(2) for i in range(2)]
    t = Trace.from_records(elements=rows, meta={"api": "distribute_datasets_from_function", "num_workers": 2})
    row = diagnose(t).query("code == 'worker-duplicates'").iloc[0]
    assert "does not shard datasets made by distribute_datasets_from_function" in row["message"]
    assert "input_context.input_pipeline_id" in row["message"]


def test_worker_duplicates_is_info_under_parameter_servers() -> None:
    rows = [dict(step=s, replica=0, worker=w, source_id=s, position=0) for w in range(2) for s in range(2)]
    t = Trace.from_records(elements=rows, meta={"strategy": "ParameterServerStrategyV2", "num_workers": 2})
    row = diagnose(t).query("code == 'worker-duplicates'").iloc[0]
    assert row["severity"] == "info" and "dataset_fn" in row["message"]


def test_worker_starved_names_the_worker_without_input() -> None:
    rows = [dict(step=0, replica=0, worker=0, source_id=i, position=i, source_file="a.txt", source_line=i)
            for i in range(2)]
    batches = [dict(step=0, replica=0, worker=0, n_elements=2), dict(step=0, replica=1, worker=1, n_elements=0, empty=True)]
    t = Trace.from_records(elements=rows, batches=batches,
                           meta={"num_workers": 2, "shard_policy": "FILE", "files": ["a.txt"]})
    row = diagnose(t).query("code == 'worker-starved'").iloc[0]
    assert row["workers"] == [1] and row["severity"] == "error"
    assert "only 1 file(s) for 2 workers" in row["message"]


def test_worker_starved_when_file_sharding_failed_before_any_data() -> None:
    t = Trace.from_records(meta={"num_workers": 2, "shard_policy": "FILE", "files": ["only.txt"],
                                 "errors": {"worker-0": "InvalidArgumentError: Could not apply FILE based sharding"}})
    row = diagnose(t).query("code == 'worker-starved'").iloc[0]
    assert row["workers"] == [1]
    assert "Could not apply FILE based sharding" in row["message"] and "1 worker(s) failed" in row["message"]


def test_worker_starved_lists_parameter_server_errors_which_are_a_list() -> None:
    """``meta["errors"]`` is a list of str in parameter_server traces (the contract); this crashed diagnose()."""
    t = Trace.from_records(elements=[dict(step=0, replica=0, worker=0, source_id=0, position=0)],
                           batches=[dict(step=0, replica=0, worker=0, n_elements=1)],
                           meta={"kind": "parameter_server", "num_workers": 2, "errors": ["worker-1: UnavailableError"]})
    row = diagnose(t).query("code == 'worker-starved'").iloc[0]
    assert row["workers"] == [1] and "Workers also failed: worker-1: UnavailableError." in row["message"]


def test_worker_starved_silent_when_every_worker_has_data() -> None:
    t = _file_trace({0: [("a.txt", 0)], 1: [("b.txt", 0)]}, "FILE")
    assert "worker-starved" not in _codes(t)


def test_file_shard_fallback_only_under_auto_which_alone_falls_back_to_data() -> None:
    """auto_shard.cc (ApplyAutoShard): FILE returns ShardByFile's error, only AUTO applies DATA on NotFound
    (tests/instrument/test_sharding.py::test_enumerate_after_files_makes_auto_fall_back_to_data shows both)."""
    assign = {0: [("a.txt", 0), ("b.txt", 0)], 1: [("a.txt", 1), ("b.txt", 1)]}
    assert "file-shard-fallback" not in _codes(_file_trace(assign, "FILE"))
    a = diagnose(_file_trace(assign, "AUTO", auto_shard_log=["worker 0: AUTO sharding policy will apply DATA sharding policy"]))
    a = a.query("code == 'file-shard-fallback'").iloc[0]
    assert a["severity"] == "info" and "apply DATA sharding" in a["message"] and "['a.txt', 'b.txt']" in a["message"]


def test_file_shard_fallback_silent_for_whole_files_or_data_policy() -> None:
    whole = {0: [("a.txt", 0), ("a.txt", 1)], 1: [("b.txt", 0), ("b.txt", 1)]}
    assert "file-shard-fallback" not in _codes(_file_trace(whole, "FILE"))
    shared = {0: [("a.txt", 0), ("b.txt", 0)], 1: [("a.txt", 1), ("b.txt", 1)]}
    assert "file-shard-fallback" not in _codes(_file_trace(shared, "DATA"))


def test_checks_ignore_single_worker_traces() -> None:
    t = Trace.from_records(elements=[dict(step=0, replica=r, source_id=0, position=0) for r in range(2)])
    codes = _codes(t)
    assert not {"worker-duplicates", "worker-starved", "file-shard-fallback"} & set(codes)


def test_docstring_examples_run() -> None:
    import doctest

    import vizdist.checks.workers as mod

    assert doctest.testmod(mod, optionflags=doctest.ELLIPSIS).failed == 0


def test_file_shard_unshardable_explains_the_refusal() -> None:
    errs = {"worker-0": "NotFoundError: Found an unshardable source dataset",
            "worker-1": "NotFoundError: Found an unshardable source dataset"}
    t = Trace.from_records(meta={"num_workers": 2, "shard_policy": "FILE", "files": ["a", "b"], "errors": errs})
    row = diagnose(t).query("code == 'file-shard-unshardable'").iloc[0]
    assert row["workers"] == [0, 1] and row["severity"] == "error" and "list_files" in row["message"]
    t = Trace.from_records(meta={"num_workers": 2, "shard_policy": "DATA", "errors": errs})
    assert "file-shard-unshardable" not in _codes(t)
