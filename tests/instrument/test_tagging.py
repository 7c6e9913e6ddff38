"""Tagging: a traced run yields exactly what an untraced run yields, and ids are true provenance.

The property test builds random pipelines (range / from_tensor_slices / tuples / dicts, map, filter,
seeded shuffle, batch with and without drop_remainder, global batches not divisible by the replica
count) and runs them on 1-4 replicas of a real MirroredStrategy, once through raw TF and once through
vizdist.trace_distribution, and checks:
  1. the per-replica values the step sees are identical;
  2. every delivered element's value is what the pipeline computes from its source id.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vizdist
from vizdist.instrument.run.reader import _to_json

SOURCES = ["range", "slices", "tuple", "dict"]


@st.composite
def pipelines(draw):
    n = draw(st.integers(min_value=0, max_value=40))
    ops = draw(st.lists(st.sampled_from(["add", "mul", "filter", "shuffle"]), max_size=4))
    params = [draw(st.integers(min_value=1, max_value=5)) for _ in ops]
    return {
        "source": draw(st.sampled_from(SOURCES)),
        "n": n,
        "ops": list(zip(ops, params, strict=False)),
        "batch": draw(st.integers(min_value=1, max_value=11)),
        "drop": draw(st.booleans()),
        "replicas": draw(st.integers(min_value=1, max_value=4)),
        "seed": draw(st.integers(min_value=0, max_value=2**16)),
    }


def _source_value(kind: str, i: int) -> int:
    """The primary value of source element i (before any map)."""
    return i if kind == "range" else 3 * i + 1


def _expected(spec, i: int) -> int:
    v = _source_value(spec["source"], i)
    for op, p in spec["ops"]:
        if op == "add":
            v += p
        elif op == "mul":
            v *= p
    return v


def _source(tf, kind: str, n: int):
    """The source dataset of ``n`` elements: ``range``, or values 3i + 1 as slices, a tuple or a dict."""
    arr = np.arange(n, dtype=np.int64) * 3 + 1
    if kind == "range":
        return tf.data.Dataset.range(n)
    if kind == "slices":
        return tf.data.Dataset.from_tensor_slices(arr)
    if kind == "tuple":
        return tf.data.Dataset.from_tensor_slices((arr, arr * 2.0))
    return tf.data.Dataset.from_tensor_slices({"x": arr, "name": [f"e{i}" for i in range(n)]})


def _primary(kind: str):
    """The function that picks the primary value out of an element of this kind."""

    def first(el):
        return el[0] if kind == "tuple" else (el["x"] if kind == "dict" else el)

    return first


def _on_primary(kind: str, fn):
    """A map function that applies ``fn`` to an element's primary value and keeps the rest."""
    if kind == "tuple":
        return lambda a, b: (fn(a), b)
    if kind == "dict":
        return lambda d: {"x": fn(d["x"]), "name": d["name"]}
    return fn


def _apply(ds, op: str, p: int, spec):
    """``ds`` with one op of the spec (add, mul, filter or shuffle, with parameter ``p``) applied."""
    kind = spec["source"]
    if op == "add":
        return ds.map(_on_primary(kind, lambda x: x + p))
    if op == "mul":
        return ds.map(_on_primary(kind, lambda x: x * p))
    if op == "filter" and kind == "tuple":
        return ds.filter(lambda a, b: a % (p + 1) != 0)
    if op == "filter":
        first = _primary(kind)
        return ds.filter(lambda el: first(el) % (p + 1) != 0)
    if op == "shuffle":
        return ds.shuffle(p * 3, seed=spec["seed"])
    return ds


def build(tf, spec):
    """The spec's pipeline, batched, and the function that picks an element's primary value."""
    ds = _source(tf, spec["source"], spec["n"])
    for op, p in spec["ops"]:
        ds = _apply(ds, op, p, spec)
    return ds.batch(spec["batch"], drop_remainder=spec["drop"]), _primary(spec["source"])


def raw_values(tf, strategy, ds):
    out = []
    for x in strategy.experimental_distribute_dataset(ds):
        res = strategy.run(lambda v: v, args=(x,))
        leaves = tf.nest.flatten(res)
        local = [strategy.experimental_local_results(leaf) for leaf in leaves]
        out.append([_to_json(tf.nest.pack_sequence_as(res, [lv[r] for lv in local]))
                    for r in range(strategy.num_replicas_in_sync)])
    return out


@pytest.fixture(scope="module")
def strategies(tf):
    return {n: tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)]) for n in range(1, 5)}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(spec=pipelines())
def test_traced_run_yields_what_untraced_run_yields(tf, strategies, spec):
    strategy = strategies[spec["replicas"]]
    ds, _first = build(tf, spec)
    expected = raw_values(tf, strategy, ds)
    # A second read of a reshuffling dataset gives its next order, traced or not: trace a twin's first read.
    ds, _first = build(tf, spec)
    t = vizdist.trace_distribution(strategy, ds, step_fn=lambda v: v)
    got = [[json.loads(r) for r in t.batches[t.batches.step == s].sort_values("replica")["result"]]
           for s in t.steps]
    assert got == expected

    # Provenance: the value each replica got at each position is the pipeline applied to its source id.
    for s in t.steps:
        rows = t.batches[t.batches.step == s].sort_values("replica")
        for (_, b), delivered in zip(rows.iterrows(), got[t.steps.index(s)], strict=False):
            ids = t.ids(step=s, replica=int(b["replica"]))
            values = delivered[0] if spec["source"] == "tuple" else (
                delivered["x"] if spec["source"] == "dict" else delivered)
            assert values == [_expected(spec, i) for i in ids]
    # Nothing is invented: every id is a real source element.
    assert set(t.elements.source_id) <= set(range(spec["n"]))


def test_shuffle_without_seed_under_global_seed_keeps_order(tf, strategies):
    tf.random.set_seed(7)
    try:
        expected = raw_values(tf, strategies[3], tf.data.Dataset.range(30).shuffle(30).batch(6))
        tf.random.set_seed(7)  # a twin, built from the same global seed and read for the first time
        t = vizdist.trace_distribution(strategies[3], tf.data.Dataset.range(30).shuffle(30).batch(6),
                                       step_fn=lambda v: v)
    finally:
        tf.random.set_seed(None)  # later tests (and other processes they compare with) see no global seed
    got = [[json.loads(r) for r in t.batches[t.batches.step == s].sort_values("replica")["result"]]
           for s in t.steps]
    assert got == expected
    assert [t.ids(step=s, replica=r) for s in t.steps for r in range(3)] == [g for row in got for g in row]


def test_file_tags_keep_tf_file_order_and_lines(tf, tmp_path):
    from vizdist.instrument.core.codes import decode_tags
    from vizdist.instrument.ids.tagging import tag_dataset

    files = []
    for i in range(3):
        p = tmp_path / f"f{i}.txt"
        p.write_text("".join(f"{i}-{j}\n" for j in range(i + 2)))
        files.append(str(p))
    for reads in (None, 2):
        ds = tf.data.TextLineDataset(files, num_parallel_reads=reads)
        t = tag_dataset(ds)
        pairs = [(tag.numpy(), v.numpy().decode()) for tag, v in t.dataset]
        assert [v for _, v in pairs] == [v.numpy().decode() for v in ds]
        dec = decode_tags(np.array([p[0] for p in pairs]), t.info)
        assert [f"{f[-5]}-{ln}" for f, ln in zip(dec["source_file"], dec["source_line"], strict=False)] == [v for _, v in pairs]


def test_unknown_transformation_over_files_falls_back_to_content(tf, tmp_path, strategies):
    p = tmp_path / "a.txt"
    p.write_text("1\n2\n3\n4\n")
    ds = tf.data.TextLineDataset([str(p)]).unique().map(tf.strings.to_number).batch(2)
    t = vizdist.trace_distribution(strategies[2], ds)
    assert t.meta["provenance"] == "fingerprint"
    assert "provenance-by-content" in set(vizdist.diagnose(t).code)


def _colliding_pair(tf, folder) -> tuple[str, str]:
    """Two file paths in ``folder`` whose 24-bit hash buckets collide (the old, inexact file id)."""
    names = [str(folder / f"part-{i:05d}") for i in range(20_000)]
    buckets = tf.strings.to_hash_bucket_fast(names, 1 << 24).numpy()
    seen: dict[int, str] = {}
    for name, b in zip(names, buckets.tolist(), strict=True):
        if b in seen:
            return seen[b], name
        seen[b] = name
    pytest.skip("no colliding pair among 20,000 names (probability about 1e-5)")


def test_colliding_file_names_keep_their_own_identity(tf, tmp_path, strategies):
    a, b = _colliding_pair(tf, tmp_path)  # same 24-bit bucket, by TF's own hash
    for i, path in enumerate((a, b)):
        with open(path, "w") as fh:
            fh.write("".join(f"{i}:{j}\n" for j in range(4)))
    ds = tf.data.TextLineDataset([a, b]).batch(4)
    t = vizdist.trace_distribution(strategies[2], ds, step_fn=lambda v: v)
    e = t.elements.sort_values(["step", "replica", "position"])
    values = [v for s in t.steps for r in sorted(t.batches.replica.unique())
              for v in json.loads(t.batches[(t.batches.step == s) & (t.batches.replica == r)]["result"].iloc[0])]
    # Each line's value says which file (and line) it came from: the trace must say the same.
    assert [f"{[a, b].index(f)}:{ln}" for f, ln in zip(e.source_file, e.source_line, strict=True)] == values
    assert e.source_id.nunique() == 8
    assert "duplicate-elements" not in set(vizdist.diagnose(t).code)


@pytest.mark.parametrize(("scan", "buckets"), [(True, None), (False, None), (False, 3)])
def test_file_index_is_the_position_in_the_list(tf, monkeypatch, scan, buckets):
    """Each name maps to its first position in the list, by comparing names (few files) or by a
    fingerprint search (many), also when fingerprints collide (3 buckets for 40 names); a name not
    in the list gets ``len(files)``."""
    from vizdist.instrument.ids.handlers import files as tagging_files

    if not scan:
        monkeypatch.setattr(tagging_files, "SCAN_FILES", 0)
    if buckets is not None:
        monkeypatch.setattr(tagging_files, "FINGERPRINT_BUCKETS", buckets)
    files = [f"/data/part-{i:03d}" for i in range(40)] + ["/data/part-007"]
    index = tagging_files.file_index_fn(files)
    names = tf.data.Dataset.from_tensor_slices([*files, "/data/other", ""])
    expected = [files.index(f) for f in files] + [len(files), len(files)]
    assert [int(i) for i in names.map(index)] == expected
    assert int(tagging_files.file_index_fn([])(tf.constant("/data/other"))) == 0


def test_file_ids_by_hash_bucket_decode_to_the_files_that_hash_there(tf):
    """Where the list of files could not be read up front, a file id is TF's 24-bit hash bucket of its
    name; decoding names each listed file by its bucket (plain TF's to_hash_bucket_fast) and labels a
    bucket no listed file hashes to."""
    from vizdist.instrument.core.codes import FILE_UNKNOWN, LINE_BITS, decode_tags

    files = ["/data/a.txt", "/data/b.txt"]
    buckets = [int(b) for b in tf.strings.to_hash_bucket_fast(files, FILE_UNKNOWN).numpy()]
    other = next(b for b in range(FILE_UNKNOWN) if b not in buckets)
    info = {"sources": [{"index": 0, "kind": "files", "id_is": "file_line", "files": files,
                         "id_bits": LINE_BITS + 24, "file_ids": "hash"}]}
    tags = np.array([(buckets[1] << LINE_BITS) + 4, (buckets[0] << LINE_BITS) + 2, other << LINE_BITS])
    dec = decode_tags(tags, info)
    assert list(dec["source_file"]) == ["/data/b.txt", "/data/a.txt", f"<file bucket {other}>"]
    assert dec["source_line"].tolist() == [4, 2, 0]


def test_unique_over_repeated_values_is_labelled_positional(tf, strategies):
    values = [0, 0, 1, 1, 2, 3, 3, 4, 4, 4]
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(values, tf.int64)).unique().batch(4)
    t = vizdist.trace_distribution(strategies[2], ds)
    # Plain TF's unique keeps the first occurrence: source indexes 0, 2, 4, 5, 7. The trace must not
    # claim its positional ids 0..4 are those.
    assert t.meta["provenance"] == "positional"
    assert "UniqueDataset" in t.meta["provenance_note"]
    findings = vizdist.diagnose(t)
    assert "provenance-positional" in set(findings.code)
    assert set(findings[findings.severity == "error"].code) == set()


@pytest.mark.filterwarnings("ignore:vizdist.watch is deprecated:DeprecationWarning")
def test_equal_values_matched_by_content_raise_no_error(tf, strategies):
    strategy = strategies[2]

    def value_fn(ctx):
        return tf.constant([7, 7], tf.int64)  # every replica gets equal values, every step

    w = vizdist.watch([strategy.experimental_distribute_values_from_function(value_fn)] * 2, strategy=strategy)
    for _ in w:
        pass
    findings = vizdist.diagnose(w.trace)
    assert "duplicate-elements" not in set(findings.code)
    assert {"ids-ambiguous", "provenance-by-content"} <= set(findings.code)


def test_repeat_ids_tell_epochs_apart(tf, strategies):
    ds = tf.data.Dataset.from_tensors(tf.constant([1, 2], tf.int64)).repeat(100).batch(16)
    t = vizdist.trace_distribution(strategies[4], ds)
    assert t.meta["provenance"] == "tagged"
    assert sorted(t.elements.epoch) == list(range(100))  # plain TF: one source element, 100 times
    assert "duplicate-elements" not in set(vizdist.diagnose(t).code)


def test_keyed_elements_are_the_pairs_tensor_for_tensor(tf):
    """keyed() nests the pair as a dict over the same dataset: every tensor as plain TF yields it."""
    from vizdist.instrument.core.codes import keyed, untag

    pairs = tf.data.Dataset.range(6).map(
        lambda x: (x + 100, {"z": tf.strings.as_string(x), "a": (x * 2, tf.cast(x, tf.float32))})).batch(4)
    got = [untag(e) for e in keyed(pairs).as_numpy_iterator()]
    want = list(pairs.as_numpy_iterator())
    assert len(got) == len(want) == 2
    for (gt, gv), (wt, wv) in zip(got, want, strict=True):
        assert gt.tolist() == wt.tolist()
        assert gv["z"].tolist() == wv["z"].tolist()
        assert [a.tolist() for a in gv["a"]] == [a.tolist() for a in wv["a"]]
    assert keyed(pairs)._variant_tensor is pairs._variant_tensor  # no op added: TF runs the same dataset


def test_an_interleave_in_no_fixed_order_is_rebuilt_in_no_fixed_order(tf):
    """Dataset.interleave keeps ``deterministic`` only in its op: the tagged copy's op says the same."""
    from tensorflow.core.framework import graph_pb2

    from vizdist.instrument.ids.tagging import tag_dataset

    def attr(ds):
        graph = graph_pb2.GraphDef.FromString(ds._as_serialized_graph().numpy())
        return [n.attr["deterministic"].s for n in graph.node if n.op == "ParallelInterleaveDatasetV4"]

    for det in (False, True, None):
        ds = tf.data.Dataset.range(6).interleave(lambda x: tf.data.Dataset.from_tensors(x).repeat(2),
                                                 cycle_length=2, num_parallel_calls=2, deterministic=det)
        assert attr(tag_dataset(ds).dataset) == attr(ds)


def test_decode_tags_reads_one_source_or_several_alike():
    """One source present takes decode's fast path (no per-element mask); the answer is the same."""
    from vizdist.instrument.core.codes import SOURCE_SHIFT, decode_tags

    info = {"sources": [{"index": 0, "kind": "range", "id_is": "value", "id_bits": 8},
                        {"index": 1, "kind": "range", "id_is": "value", "id_bits": 8}]}
    one = np.array([3, 7, 9], dtype=np.int64)
    both = np.concatenate([one, (1 << SOURCE_SHIFT) + one])
    assert decode_tags(one, info)["source_id"].tolist() == one.tolist()
    d = decode_tags(both, info)
    assert d["source_id"].tolist() == one.tolist() * 2 and d["source"].tolist() == [0, 0, 0, 1, 1, 1]
    assert decode_tags(np.array([-1], dtype=np.int64), info)["source"].tolist() == [-1]  # not a tag: no crash
