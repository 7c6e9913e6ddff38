"""The one row builder: rules checked against TensorFlow's own numbering and decoding, storage is columnar."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import vizdist.instrument.core.rows as record
from vizdist.instrument.core.rows import Recorder, mark_partial, partial_flags, strategy_name, task_number
from vizdist.trace import Trace


@pytest.mark.parametrize("spec", [
    {"worker": ["a:1", "a:2", "a:3"]},
    {"chief": ["a:0"], "worker": ["a:1", "a:2"]},
    {"chief": ["a:0"], "worker": ["a:1"], "ps": ["a:9"]},
])
def test_task_numbers_are_tensorflows_ids_in_cluster(tf, spec):
    from tensorflow.python.distribute import multi_worker_util

    for task_type in ("chief", "worker"):
        for i in range(len(spec.get(task_type, []))):
            assert task_number(task_type, i, spec) == multi_worker_util.id_in_cluster(spec, task_type, i)
    numbers = [task_number(t, i, spec) for t in ("chief", "worker") for i in range(len(spec.get(t, [])))]
    assert len(set(numbers)) == len(numbers)  # no two tasks share a number


def test_evaluators_come_after_every_training_task():
    spec = {"chief": ["a:0"], "worker": ["a:1", "a:2"], "evaluator": ["a:3"]}
    training = {task_number("chief", 0, spec), task_number("worker", 0, spec), task_number("worker", 1, spec)}
    assert task_number("evaluator", 0, spec) not in training
    with pytest.raises(ValueError, match="reads no data"):
        task_number("ps", 0, spec)


def test_strategy_name_is_the_name_tf_exports(tf, mirrored):
    public = [n for n in dir(tf.distribute) if getattr(tf.distribute, n) is type(mirrored)]
    assert strategy_name(mirrored) in public
    mwms = tf.distribute.MultiWorkerMirroredStrategy
    assert mwms.__name__ != "MultiWorkerMirroredStrategy"  # why the name needs mapping at all
    assert strategy_name(mwms.__new__(mwms)) == "MultiWorkerMirroredStrategy"


def test_chunked_decoding_equals_decoding_everything_at_once(tf, monkeypatch):
    from vizdist.instrument.core.codes import decode_tags
    from vizdist.instrument.ids.tagging import tag_dataset

    tagged = tag_dataset(tf.data.Dataset.range(50).batch(7))
    batches = [t.numpy() for t, _ in tagged.dataset]
    monkeypatch.setattr(record, "DECODE_CHUNK", 10)  # many chunks
    rec = Recorder(decode=lambda t: decode_tags(t, tagged.info))
    for s, tags in enumerate(batches):
        rec.add(s, 0, tags=tags, device="/device:CPU:0")
    e, _ = rec.tables()
    whole = decode_tags(np.concatenate(batches), tagged.info)
    assert e["source_id"].tolist() == whole["source_id"].tolist()
    assert e["source_line"].tolist() == whole["source_line"].tolist()
    assert e["position"].tolist() == [p for b in batches for p in range(len(b))]


def test_more_decoded_columns_become_element_columns_chunk_by_chunk(monkeypatch):
    # A decoder may give more int columns than the standard ones (decode_tags: service_worker).
    def decode(tags):
        return {"source_id": tags % 100, "service_worker": tags // 100}

    monkeypatch.setattr(record, "DECODE_CHUNK", 3)  # several chunks
    rec = Recorder(decode=decode)
    for s, tags in enumerate([[5, 106], [7, 108, 9], [110]]):
        rec.add(s, 0, tags=np.array(tags), device="/device:CPU:0")
    e, _ = rec.tables()
    assert e["source_id"].tolist() == [5, 6, 7, 8, 9, 10]
    assert e["service_worker"].tolist() == [0, 1, 0, 1, 0, 1]


def test_text_columns_are_categorical_and_survive_the_trace_and_parquet(tmp_path):
    rec = Recorder(worker=0)
    for s in range(3):
        for r in range(2):
            rec.add(s, r, ids=np.arange(2) + 10 * s, device=f"/device:CPU:{r}",
                    sources={"source_file": np.array(["a.txt", "b.txt"], dtype=object),
                             "source_line": np.array([s, s])})
    e, b = rec.tables(global_batch_size=4)
    t = Trace(elements=e, batches=b, meta={"kind": "distribution"})
    for col in ("device", "source_file"):
        assert isinstance(t.elements[col].dtype, pd.CategoricalDtype)
    assert t.elements["source_file"].tolist() == ["a.txt", "b.txt"] * 6
    back = vizdist_load(t.save(tmp_path / "t.parquet"))
    assert back == t and isinstance(back.elements["device"].dtype, pd.CategoricalDtype)
    assert vizdist_load(t.save(tmp_path / "t.json")) == t  # JSON stores text; equality compares values


def vizdist_load(p):
    from vizdist.trace import load_trace

    return load_trace(p)


def test_partial_is_a_property_of_the_global_step():
    # worker 0 saw a full share at step 1, worker 1 an empty one: the global batch was short
    steps, n = np.array([0, 0, 1, 1]), np.array([2, 2, 2, 0])
    assert partial_flags(steps, n, 4).tolist() == [False, False, True, False]
    rec = Recorder(worker=0)
    rec.add(0, 0, ids=[0, 1])
    rec.add(1, 0, ids=[4, 5])
    _, local = rec.tables(global_batch_size=4, totals=np.array([4, 2]))  # totals summed over workers
    assert local["partial"].tolist() == [False, True]
    merged = pd.DataFrame({"step": steps, "n_elements": n})
    assert mark_partial(merged, 4)["partial"].tolist() == [False, False, True, False]


def test_extra_columns_and_per_element_workers():
    rec = Recorder(worker=3)
    rec.add(0, -1, ids=[7, 8], worker=np.array([0, 1]), elements={"order": np.array([0, 1])}, batch={"consumer": 0})
    rec.add(1, -1, ids=[9], batch={"consumer": 1})
    e, b = rec.tables()
    assert e["worker"].tolist() == [0, 1, 3] and e["order"].tolist()[:2] == [0, 1]
    assert b["consumer"].tolist() == [0, 1] and b["worker"].tolist() == [-1, 3]


def test_add_rejects_ids_and_tags_together_and_tags_without_decoder():
    rec = Recorder()
    with pytest.raises(ValueError, match="exactly one"):
        rec.add(0, 0, ids=[1], tags=[1])
    with pytest.raises(ValueError, match="decode"):
        rec.add(0, 0, tags=[1])
