"""Single-process findings, on traces built by hand (the instrument tests check real runs)."""

from __future__ import annotations

import pytest

import vizdist
from vizdist.trace import Trace


def make(counts, *, global_batch, api="experimental_distribute_dataset", ids=None, meta=None):
    elements, batches, it = [], [], iter(ids if ids is not None else range(10_000))
    for step, row in enumerate(counts):
        for r, n in enumerate(row):
            for pos in range(n):
                elements.append(dict(step=step, replica=r, source_id=next(it), position=pos))
            batches.append(dict(step=step, replica=r, n_elements=n, empty=n == 0))
    m = {"num_replicas": len(counts[0]), "global_batch_size": global_batch, "api": api,
         "provenance": "tagged", "stopped": "end_of_data"}
    m.update(meta or {})
    return Trace.from_records(elements=elements, batches=batches, meta=m)


def codes(t):
    return vizdist.diagnose(t)["code"].tolist()


def test_clean_run_has_no_findings():
    assert codes(make([[2, 2], [2, 2]], global_batch=4)) == []


def test_not_divisible_names_the_split_and_a_fix():
    f = vizdist.diagnose(make([[3, 3, 3, 1]], global_batch=10))
    row = f[f.code == "batch-not-divisible"].iloc[0]
    assert row["severity"] == "warning"
    assert "3, 3, 3, 1" in row["message"] and "multiple of 4 (e.g. 8 or 12)" in row["message"]


def test_empty_and_partial_on_last_step():
    f = vizdist.diagnose(make([[1, 1, 1, 1], [1, 1, 0, 0]], global_batch=4))
    assert f["code"].tolist() == ["empty-replica", "partial-batch"]
    assert f.iloc[0]["replicas"] == [2, 3] and f.iloc[0]["step"] == 1


def test_uneven_split_without_empties():
    f = vizdist.diagnose(make([[2, 2, 2, 2], [2, 2, 1, 1]], global_batch=8))
    assert "uneven-split" in f["code"].tolist()


def test_duplicates_without_repeat_are_errors():
    t = make([[1, 1]], global_batch=2, ids=[7, 7])
    f = vizdist.diagnose(t)
    assert f.iloc[0]["code"] == "duplicate-elements" and f.iloc[0]["severity"] == "error"
    assert "element 7: step 0 replica 0, step 0 replica 1" in f.iloc[0]["message"]


def test_repeat_allows_an_element_in_a_later_step():
    t = make([[1, 1], [1, 1]], global_batch=2, ids=[0, 1, 0, 1],
             meta={"pipeline_flags": {"repeat": True}})
    assert "duplicate-elements" not in codes(t)


def test_missing_elements_blames_drop_remainder():
    t = make([[1, 1], [1, 1]], global_batch=2, ids=[0, 1, 2, 3], meta={
        "sources": [{"index": 0, "kind": "range", "id_is": "value", "start": 0, "stop": 5, "step": 1}],
        "pipeline_flags": {"drop_remainder": True}})
    f = vizdist.diagnose(t)
    row = f[f.code == "missing-elements"].iloc[0]
    assert "(4)" in row["message"] and "drop_remainder=True" in row["message"]


def test_missing_is_not_claimed_when_the_run_stopped_early():
    t = make([[1, 1]], global_batch=2, ids=[0, 1], meta={
        "stopped": "steps",
        "sources": [{"index": 0, "kind": "range", "id_is": "value", "start": 0, "stop": 5, "step": 1}]})
    assert "missing-elements" not in codes(t)


def test_severity_filter_and_bad_arguments():
    t = make([[1, 1, 1, 1], [1, 1, 0, 0]], global_batch=4)
    assert vizdist.diagnose(t, severity="warning")["code"].tolist() == ["empty-replica"]
    with pytest.raises(ValueError, match="severity must be one of"):
        vizdist.diagnose(t, severity="fatal")
    with pytest.raises(TypeError, match=r"takes a vizdist.Trace"):
        vizdist.diagnose("trace.json")


@pytest.mark.parametrize("pass_column", ["phase", "dataset", "repetition"])
def test_an_element_again_in_another_pass_is_no_duplicate(pass_column):
    # e.g. a Keras run's validation phase reading the training data again (vizdist.checks.workers.PASS_COLUMNS)
    rows = [dict(step=s, replica=0, source_id=0, position=0, **{pass_column: s}) for s in range(2)]
    t = Trace.from_records(elements=rows, meta={"num_replicas": 1, "provenance": "tagged"})
    assert "duplicate-elements" not in codes(t)
    assert "duplicate-elements" in codes(Trace.from_records(elements=[dict(r, **{pass_column: 0}) for r in rows],
                                                             meta={"num_replicas": 1, "provenance": "tagged"}))
