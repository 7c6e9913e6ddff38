"""Every ``tf.data.Dataset`` transformation, traced on 4 replicas and compared with plain TensorFlow.

Each case builds a small pipeline whose values *encode the source element that produced them*
(``range`` values are their own index, flat_map parts are ``10 * source + part``, file lines read
``"file:line"``, ...), runs it under a real 4-replica ``MirroredStrategy`` once through plain TF and
once through ``vizdist.trace_distribution``, and checks:

1. the values every replica got at every step are identical (tracing is transparent);
2. provenance is **exact** (every row's ``source`` / ``source_id`` / ``source_line`` / ``epoch`` is
   what the value says it came from; the epoch is how many times plain TF had already delivered
   that source element) or **labelled** (``meta["provenance"]`` is ``positional`` or
   ``fingerprint`` and ``diagnose`` says so at ``info``);
3. no ``error`` finding is raised on a trace whose ids are not exact.

The outcomes of all cases are written to ``transformations.json`` in a temporary folder (never the
source tree), and the README's transformation table is generated from that file
(``python .ci/transform_table.py PATH``); the last test fails, naming PATH, when the README block
differs from the outcomes.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import vizdist
from tests.instrument.test_tagging import raw_values

ROOT = Path(__file__).resolve().parents[2]
OUTCOMES = {"exact": "exact", "positional": "positional", "fingerprint": "by content"}


@dataclass
class Case:
    name: str  # the row of the README table
    build: Callable[[Any, Path], Any]  # (tf, tmp folder) -> dataset
    expect: Callable[[Any], dict[str, Any]] | None = None  # element value -> its true provenance
    outcome: str = "exact"
    rows: Callable[[Any], list[Any]] = list  # one replica's JSON result -> one value per element


def _id(v: Any) -> dict[str, Any]:
    return {"source_id": v}


def _pair_rows(result: Any) -> list[Any]:
    return [list(r) for r in zip(*result, strict=True)]


def _two_sources(v: int) -> dict[str, Any]:
    return {"source": int(v >= 100), "source_id": v}  # range ids are their values


def _files(tmp: Path, kind: str, n_files: int = 2, lines: int = 5) -> list[str]:
    import tensorflow as tf

    paths = []
    for f in range(n_files):
        p = tmp / f"{kind}-{f}"
        records = [f"{f}:{j}" for j in range(lines + f)]
        if kind == "tfrecord":
            with tf.io.TFRecordWriter(str(p)) as w:
                for r in records:
                    w.write(r.encode())
        else:
            sep = "," if kind == "csv" else ":"
            p.write_text("".join(r.replace(":", sep) + "\n" for r in records))
        paths.append(str(p))
    return paths


def _file_line(files: list[str]) -> Callable[[str], dict[str, Any]]:
    def expect(v: str) -> dict[str, Any]:
        f, line = (int(x) for x in v.split(":"))
        return {"source_file": files[f], "source_line": line}

    return expect


def _text(tf: Any, tmp: Path) -> Any:
    return tf.data.TextLineDataset(_files(tmp, "text")).batch(4)


def _tfrecord(tf: Any, tmp: Path) -> Any:
    return tf.data.TFRecordDataset(_files(tmp, "tfrecord")).batch(4)


def _csv(tf: Any, tmp: Path) -> Any:
    return tf.data.experimental.CsvDataset(_files(tmp, "csv"), [tf.int64, tf.int64]).batch(4)


_SERVICE: dict[str, Any] = {}


def _service(tf: Any) -> str:
    """A plain in-process tf.data service (dispatcher + one worker), started on first use.

    With one worker the service delivers elements in a fixed order, so the plain and the traced run
    can be compared step by step (two workers interleave differently each run: see test_service.py).
    """
    if not _SERVICE:
        svc = tf.data.experimental.service
        _SERVICE["dispatcher"] = d = svc.DispatchServer()
        _SERVICE["worker"] = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=d.target.split("://")[1]))
    return _SERVICE["dispatcher"].target


@pytest.fixture(scope="module", autouse=True)
def _stop_service():
    yield
    for name in ("worker", "dispatcher"):
        if name in _SERVICE:
            _SERVICE.pop(name)._stop()


def _distributed(tf: Any, ds: Any) -> Any:
    return ds.apply(tf.data.experimental.service.distribute("parallel_epochs", _service(tf)))


def _from_dataset_id(tf: Any, ds: Any) -> Any:
    svc = tf.data.experimental.service
    return svc.from_dataset_id("parallel_epochs", _service(tf), svc.register_dataset(_service(tf), ds))


def _fill(tf: Any, x: Any) -> Any:
    return tf.fill([x % 3 + 1], x)


def _cases() -> list[Case]:
    def r(tf: Any, n: int = 16) -> Any:
        return tf.data.Dataset.range(n)

    def part(v: int) -> dict[str, Any]:
        return {"source_id": v // 10, "source_line": v % 10}

    def two(tf: Any, x: Any) -> Any:
        return tf.data.Dataset.from_tensor_slices([x * 10, x * 10 + 1])

    return [
        Case("range", lambda tf, _: r(tf).batch(8), _id),
        Case("from_tensor_slices", lambda tf, _: tf.data.Dataset.from_tensor_slices(
            tf.range(16, dtype=tf.int64) * 3 + 1).batch(8), lambda v: {"source_id": (v - 1) // 3}),
        Case("from_tensors", lambda tf, _: tf.data.Dataset.from_tensors(tf.constant(5, tf.int64)).batch(4),
             lambda v: {"source_id": 0}),
        Case("from_tensors + repeat (the DistributedIterator docs example)",
             lambda tf, _: tf.data.Dataset.from_tensors(tf.constant([1, 2], tf.int64)).repeat(100).batch(16),
             lambda v: {"source_id": 0}, rows=lambda res: [tuple(x) for x in res]),
        Case("from_generator", lambda tf, _: tf.data.Dataset.from_generator(
            lambda: iter(range(16)), output_signature=tf.TensorSpec([], tf.int64)).batch(8), _id),
        Case("text (TextLineDataset)", _text, "files"),
        Case("TFRecord (TFRecordDataset)", _tfrecord, "files"),
        Case("CSV (CsvDataset)", _csv, None, "positional", rows=_pair_rows),
        Case("batch", lambda tf, _: r(tf).batch(8), _id),
        Case("padded_batch", lambda tf, _: r(tf).map(lambda x: _fill(tf, x)).padded_batch(8),
             _id, rows=lambda res: [row[0] for row in res]),
        Case("ragged_batch", lambda tf, _: r(tf).map(lambda x: _fill(tf, x)).ragged_batch(8),
             _id, rows=lambda res: [row[0] for row in res]),
        Case("rebatch", lambda tf, _: r(tf).batch(8).rebatch(4), _id),
        Case("unbatch", lambda tf, _: r(tf).batch(3).unbatch().batch(8), _id),
        Case("shard", lambda tf, _: r(tf, 32).shard(2, 1).batch(8), _id),
        Case("shuffle", lambda tf, _: r(tf).shuffle(16, seed=3).batch(8), _id),
        Case("repeat", lambda tf, _: r(tf, 8).repeat(3).batch(8), _id),
        Case("take", lambda tf, _: r(tf, 32).take(16).batch(8), _id),
        Case("skip", lambda tf, _: r(tf, 24).skip(8).batch(8), _id),
        Case("filter", lambda tf, _: r(tf, 32).filter(lambda x: x % 3 > 0).batch(8), _id),
        Case("map", lambda tf, _: r(tf).map(lambda x: x * 10).batch(8), lambda v: {"source_id": v // 10}),
        Case("map (parallel)", lambda tf, _: r(tf).map(lambda x: x * 10, num_parallel_calls=2,
                                                       deterministic=True).batch(8),
             lambda v: {"source_id": v // 10}),
        Case("flat_map", lambda tf, _: r(tf, 8).flat_map(lambda x: two(tf, x)).batch(8), part),
        Case("interleave", lambda tf, _: r(tf, 8).interleave(lambda x: two(tf, x), cycle_length=2).batch(8),
             part),
        Case("interleave (parallel)", lambda tf, _: r(tf, 8).interleave(
            lambda x: two(tf, x), cycle_length=2, num_parallel_calls=2, deterministic=True).batch(8), part),
        Case("zip", lambda tf, _: tf.data.Dataset.zip((r(tf), r(tf).map(lambda x: x + 100))).batch(8),
             lambda v: {"source_id": v[0]}, rows=_pair_rows),
        Case("concatenate", lambda tf, _: r(tf, 8).concatenate(tf.data.Dataset.range(100, 108)).batch(8),
             _two_sources),
        Case("enumerate", lambda tf, _: tf.data.Dataset.range(100, 116).enumerate().batch(8),
             lambda v: {"source_id": v[1]}, rows=_pair_rows),
        Case("scan", lambda tf, _: r(tf).scan(tf.constant(0, tf.int64), lambda s, x: (s + 1, x * 10 + s % 2))
             .batch(8), lambda v: {"source_id": v // 10}),
        Case("take_while", lambda tf, _: r(tf).take_while(lambda x: x < 12).batch(4), _id),
        Case("unique", lambda tf, _: tf.data.Dataset.from_tensor_slices(
            tf.constant([0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6, 7], tf.int64)).unique().batch(4), None, "positional"),
        Case("window", lambda tf, _: r(tf).window(4).flat_map(lambda w: w.batch(4)).batch(4), None, "by content"),
        Case("group_by_window", lambda tf, _: r(tf).group_by_window(
            lambda x: x % 2, lambda k, w: w.batch(4), window_size=4), None, "by content"),
        Case("bucket_by_sequence_length", lambda tf, _: r(tf).map(lambda x: _fill(tf, x)).bucket_by_sequence_length(
            lambda x: tf.shape(x)[0], [2, 3], [4, 4, 4]), None, "by content"),
        Case("cache", lambda tf, _: r(tf).cache().batch(8), _id),
        Case("snapshot", lambda tf, tmp: r(tf).snapshot(str(tmp / "snap")).batch(8), _id),
        Case("sample_from_datasets", lambda tf, _: tf.data.Dataset.sample_from_datasets(
            [r(tf, 8), tf.data.Dataset.range(100, 108)], seed=1).batch(4), _two_sources),
        Case("choose_from_datasets", lambda tf, _: tf.data.Dataset.choose_from_datasets(
            [r(tf, 8), tf.data.Dataset.range(100, 108)], tf.data.Dataset.range(2).repeat(8)).batch(4),
             _two_sources),
        Case("prefetch", lambda tf, _: r(tf).batch(8).prefetch(2), _id),
        Case("apply", lambda tf, _: r(tf).apply(lambda d: d.map(lambda x: x * 10)).batch(8),
             lambda v: {"source_id": v // 10}),
        Case("tf.data service: apply(distribute(...))", lambda tf, _: _distributed(
            tf, r(tf).map(lambda x: x * 10)).batch(8), lambda v: {"source_id": v // 10}),
        Case("tf.data service: register_dataset + from_dataset_id", lambda tf, _: _from_dataset_id(
            tf, r(tf).shuffle(16, seed=3)).batch(8), _id),
    ]


CASES = _cases()
_results: dict[str, str] = {}


def _delivered(t: Any, case: Case) -> list[tuple[Any, dict[str, Any]]]:
    """(value, trace row) per delivered element, in (step, replica, position) order."""
    e = t.elements.sort_values(["step", "replica", "position"], kind="stable")
    out = []
    for (s, rep), rows in e.groupby(["step", "replica"], sort=True):
        b = t.batches[(t.batches.step == s) & (t.batches.replica == rep)]
        values = case.rows(json.loads(b["result"].iloc[0]))
        assert len(values) == len(rows), f"step {s} replica {rep}: {len(values)} values, {len(rows)} rows"
        out += list(zip(values, rows.to_dict("records"), strict=True))
    return out


def _exact(t: Any, case: Case, files: list[str] | None) -> bool:
    expect = _file_line(files) if case.expect == "files" else case.expect
    seen: Counter[str] = Counter()
    delivered = _delivered(t, case)
    if len(delivered) != sum(len(case.rows(json.loads(r))) for r in t.batches["result"]):
        return False  # a value TF delivered has no row in the trace
    for value, row in delivered:
        want = {"source": 0, **expect(value)}
        key = json.dumps(value)
        want["epoch"] = seen[key]  # how many times plain TF had already delivered this element
        seen[key] += 1
        if {k: row[k] for k in want} != want:
            return False
    return True


def _outcome(t: Any, case: Case, files: list[str] | None) -> str:
    findings = vizdist.diagnose(t)
    kind = t.meta["provenance"]
    if kind == "tagged":
        return "exact" if _exact(t, case, files) else "WRONG: tagged, but ids differ from plain TF"
    errors = findings[findings.severity == "error"]
    if not errors.empty:
        return f"WRONG: error finding on inexact ids ({', '.join(errors.code)})"
    label = {"positional": "provenance-positional", "fingerprint": "provenance-by-content",
             "ambiguous": "provenance-ambiguous"}.get(kind)
    if label not in set(findings.code):
        return f"WRONG: provenance {kind!r} without a finding saying so"
    return OUTCOMES.get(kind, kind)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_transformation_traced_like_plain_tf(tf, mirrored, tmp_path, case):
    ds = case.build(tf, tmp_path)
    expected = raw_values(tf, mirrored, ds)
    # A twin of the dataset, read for the first time, as ``expected`` was (a second read of a reshuffling
    # dataset gives its next order, traced or not; a snapshot's twin writes to a folder of its own).
    twin = case.build(tf, tmp_path / "traced") if case.name == "snapshot" else case.build(tf, tmp_path)
    t = vizdist.trace_distribution(mirrored, twin, step_fn=lambda v: v)
    got = [[json.loads(x) for x in t.batches[t.batches.step == s].sort_values("replica")["result"]]
           for s in t.steps]
    assert got == expected
    files = sorted(str(p) for p in tmp_path.iterdir() if p.is_file())
    _results[case.name] = _outcome(t, case, files)
    assert _results[case.name] == case.outcome


def _table_script() -> Any:
    spec = importlib.util.spec_from_file_location("transform_table", ROOT / ".ci" / "transform_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_table_is_generated_from_these_results(tmp_path_factory):
    if len(_results) < len(CASES):
        pytest.skip("only part of the transformation cases ran in this session")
    results = {c.name: _results[c.name] for c in CASES}
    out = tmp_path_factory.mktemp("transformations") / "transformations.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    table = _table_script()
    assert table.readme_block((ROOT / "README.md").read_text()) == table.render_table(results), (
        f"README.md's transformation table differs from the test results: run python .ci/transform_table.py {out}")
