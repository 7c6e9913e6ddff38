"""vizdist.diff against what plain TensorFlow delivers in two runs."""

from __future__ import annotations

import pytest

import vizdist


def _plain_split(strategy, dataset) -> dict[int, tuple[int, int]]:
    """Source value -> (step, replica) where plain TF delivered it (each value once here)."""
    where = {}
    for step, batch in enumerate(strategy.experimental_distribute_dataset(dataset)):
        for replica, part in enumerate(strategy.experimental_local_results(batch)):
            for v in part.numpy().tolist():
                where[v] = (step, replica)
    return where


def test_diff_names_what_moved_went_and_emptied_as_plain_tf_says(tf, mirrored):
    ds_a = tf.data.Dataset.range(10).batch(4)
    ds_b = tf.data.Dataset.range(10).batch(4, drop_remainder=True)
    a, b = _plain_split(mirrored, ds_a), _plain_split(mirrored, ds_b)
    d = vizdist.diff(vizdist.trace_distribution(mirrored, ds_a), vizdist.trace_distribution(mirrored, ds_b))
    assert sorted(d.gone["source_id"]) == sorted(set(a) - set(b))
    assert d.moved.empty and d.appeared.empty
    plain_replicas = len(mirrored.extended.worker_devices)
    steps_a = {s for s, _ in a.values()}
    emptied_before = {(s, r) for s in steps_a for r in range(plain_replicas)} - set(a.values())
    assert set(map(tuple, d.no_longer_empty.values.tolist())) == emptied_before
    assert "empty-replica" in d.findings_gone["code"].tolist()


def test_diff_tracks_elements_that_change_replica(tf, mirrored):
    ds_a, ds_b = tf.data.Dataset.range(8).batch(4), tf.data.Dataset.range(8).batch(8)
    a, b = _plain_split(mirrored, ds_a), _plain_split(mirrored, ds_b)
    d = vizdist.diff(vizdist.trace_distribution(mirrored, ds_a), vizdist.trace_distribution(mirrored, ds_b))
    expected = {v for v in a if a[v] != b[v]}
    assert set(d.moved["source_id"]) == expected
    for _, row in d.moved.iterrows():
        v = row["source_id"]
        assert (row["step_before"], row["replica_before"]) == a[v]
        assert (row["step_after"], row["replica_after"]) == b[v]
    assert "moved" in d.summary() and "<b>moved</b>" in d._repr_html_()


def test_diff_compares_runs_on_different_devices(tf, mirrored, devices):
    """4 replicas, then 3 (another device set): what moved is where plain TF put each element."""
    three = tf.distribute.MirroredStrategy(devices[:3])
    ds = tf.data.Dataset.range(8).batch(4)
    a, b = _plain_split(mirrored, ds), _plain_split(three, ds)
    d = vizdist.diff(vizdist.trace_distribution(mirrored, ds), vizdist.trace_distribution(three, ds))
    assert set(d.moved["source_id"]) == {v for v in a if a[v] != b[v]}
    empty = lambda where, n: {(s, r) for s, _ in where.values() for r in range(n)} - set(where.values())  # noqa: E731
    assert {(int(s), int(r)) for s, r in d.became_empty.values.tolist()} == empty(b, 3) - empty(a, 4)
    assert len(d.became_empty) > 0  # 4 over 3 replicas is 2, 2, 0


def test_diff_refuses_what_is_not_a_trace():
    with pytest.raises(TypeError, match=r"two vizdist\.Trace objects"):
        vizdist.diff(vizdist.Trace(), "run.json")
