"""A trace file may come from anyone: what one file may hold is bounded, and every known column is type-checked."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from vizdist.errors import TraceFormatError
from vizdist.trace import EXTRA_COLUMNS, Trace, load_trace


def _doc(**tables: dict) -> dict:
    """A trace document whose tables are given as {column: (dtype, values)}."""
    out = Trace.from_records(elements=[dict(step=0, replica=0, source_id=0)]).to_dict()
    for name, cols in tables.items():
        out["tables"][name] = {"columns": list(cols), "dtypes": [d for d, _ in cols.values()],
                               "data": {c: v for c, (_, v) in cols.items()}}
    return out


def _save(tmp_path: Path, doc: dict, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _events(**extra) -> dict:
    cols = {"lane": ("str", ["w0", "w0"]), "stage": ("str", ["transfer", "consume"]),
            "t_start_ns": ("int64", [0, 5]), "t_end_ns": ("int64", [4, 9])}
    return {**cols, **extra}


@pytest.mark.parametrize("table, cols, col, row, what", [
    ("batches", {"step": ("int64", [0, 1]), "replica_device": ("str", ["/cpu:0", None])},
     "replica_device", 1, "a null where text belongs"),
    ("events", _events(op=("str", ["next(iterator)", None])), "op", 1, "a null where text belongs"),
    ("events", _events(origin=("str", [None, "host"])), "origin", 0, "a null where text belongs"),
    ("elements", {"step": ("float64", [0.0, 1e20]), "source_id": ("int64", [0, 1])},
     "step", 1, "float 1e+20 where a whole number (int64) belongs"),
    ("elements", {"step": ("float64", [0.5]), "source_id": ("int64", [0])},
     "step", 0, "float 0.5 where a whole number (int64) belongs"),
    ("batches", {"step": ("int64", [0, 1]), "empty": ("object", [False, "false"])},
     "empty", 1, "str 'false' where true or false belongs"),
    ("events", _events(depth=("object", [0, True])), "depth", 1, "bool True where a whole number (int64) belongs"),
    ("elements", {"step": ("int64", [0]), "device": ("object", [{"a": 1}])},
     "device", 0, "dict {'a': 1} where text belongs"),
    # issue 36 item 9: a null in an extra text column of any table (summary printed an AttributeError)
    ("elements", {"step": ("int64", [0, 1]), "replica_device": ("str", ["CPU:0", None])},
     "replica_device", 1, "a null where text belongs"),
    ("elements", {"step": ("int64", [0, 1]), "replica_device": ("float64", [None, None])},
     "replica_device", 0, "a null where text belongs"),
    ("elements", {"step": ("int64", [0, 1]), "replica_device": ("object", ["CPU:0", 3])},
     "replica_device", 1, "int 3 where text belongs"),
    # issue 36 item 10's sibling: the columns a service trace's streams view sorts and compares by
    ("elements", {"step": ("int64", [0, 1]), "order": ("object", [0, "x"])},
     "order", 1, "str 'x' where a whole number (int64) belongs"),
    ("elements", {"step": ("int64", [0, 1]), "service_worker": ("object", [0, [1]])},
     "service_worker", 1, "list [1] where a whole number (int64) belongs"),
    # issue 36 item 9: Infinity in a float column (JSON has none; a save would refuse it)
    ("elements", {"step": ("int64", [0, 1]), "weight": ("float64", [0.5, float("inf")])},
     "weight", 1, "float inf where a finite number belongs"),
])
def test_a_wrong_value_names_file_table_column_and_row(tmp_path, table, cols, col, row, what):
    p = _save(tmp_path, _doc(**{table: cols}))
    with pytest.raises(TraceFormatError) as err:
        load_trace(p)
    assert str(err.value) == (f"{str(p)!r} is a damaged vizdist trace: table {table!r} column {col!r} row {row}: "
                              f"{what}.")


def test_vizdist_writes_no_null_it_would_refuse(tmp_path):
    """A merge of shards with and without an extra column fills it with the column's default."""
    with_op = Trace.from_records(events=[dict(lane="w0", stage="transfer", t_start_ns=0, t_end_ns=1, op="x",
                                              buffered=3)])
    without = Trace.from_records(events=[dict(lane="w1", stage="transfer", t_start_ns=0, t_end_ns=1)])
    merged = Trace.merge([with_op, without])
    assert merged.events["op"].tolist() == ["x", ""] and merged.events["buffered"].tolist() == [3, -1]
    assert load_trace(merged.save(tmp_path / "m.json")) == merged


def test_the_timing_recorder_writes_the_traces_event_columns():
    """One list (trace.py's); the recorder's finished events hold each of its columns with its default."""
    pytest.importorskip("tensorflow")
    from vizdist.instrument.observe import timing

    assert timing.EVENT_COLUMNS is EXTRA_COLUMNS["events"]
    recorder = timing.TimingRecorder(anchor={"perf_counter_ns": 0, "unix_ns": 0})
    recorder.add("w0 host", "consume", 1, 2, step=0)
    events, _ = timing.timing_events(recorder)
    assert {c: events[c].iloc[0] for c in EXTRA_COLUMNS["events"]} == {
        **{c: default for c, (_, default) in EXTRA_COLUMNS["events"].items()}, "origin": "host", "op": "step"}


def test_a_gzip_bomb_is_refused_after_max_bytes(tmp_path):
    p = tmp_path / "bomb.json.gz"
    doc = json.dumps(_doc()).encode()
    p.write_bytes(gzip.compress(doc[:-1] + b" " * 3_000_000 + b"}"))  # 3 MB of blanks, a few KB packed
    with pytest.raises(TraceFormatError, match=r"more than max_bytes=1000000 bytes of JSON \(after gunzip\); "
                                               r"to read a trace this big on purpose, pass load_trace\(\.\.\., max_bytes="):
        load_trace(p, max_bytes=1_000_000)
    assert len(load_trace(p).elements) == 1  # the default bound (1 GiB) reads it


def test_too_many_rows_are_refused_and_the_bound_can_be_raised(tmp_path):
    p = _save(tmp_path, _doc(elements={"step": ("int64", list(range(50))), "source_id": ("int64", list(range(50)))}))
    with pytest.raises(TraceFormatError, match=r"table 'elements' has 50 rows, more than max_rows=10; .*max_rows=50"):
        load_trace(p, max_rows=10)
    assert len(load_trace(p, max_rows=50).elements) == 50


def test_a_parquet_table_declaring_30_million_rows_is_refused_before_it_is_read(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    p = Trace.from_records(elements=[dict(step=0, replica=0, source_id=0)]).save(tmp_path / "t.parquet")
    pq.write_table(pa.table({"step": pa.nulls(30_000_000, pa.int64())}), p / "elements.parquet")  # ~60 KB
    with pytest.raises(TraceFormatError, match=r"table 'elements' has 30000000 rows, more than max_rows=10000000"):
        load_trace(p)


def test_too_many_replicas_or_lanes_are_refused(tmp_path):
    n = 30
    p = _save(tmp_path, _doc(events={"lane": ("str", [f"lane {i}" for i in range(n)]),
                                     "t_start_ns": ("int64", [0] * n), "t_end_ns": ("int64", [1] * n)}))
    with pytest.raises(TraceFormatError, match=r"table 'events' column 'lane' has 30 distinct values, more than "
                                               r"max_lanes=20; pass load_trace\(\.\.\., max_lanes=30\)"):
        load_trace(p, max_lanes=20)
    p = _save(tmp_path, _doc(elements={"replica": ("int64", list(range(n)))}), "r.json")
    with pytest.raises(TraceFormatError, match=r"column 'replica' has 30 distinct values"):
        load_trace(p, max_lanes=20)
    assert len(load_trace(p).elements) == n


def test_an_overlong_string_is_refused_naming_its_row(tmp_path):
    p = _save(tmp_path, _doc(elements={"step": ("int64", [0, 1]), "source_file": ("str", ["a.txt", "x" * 500])}))
    with pytest.raises(TraceFormatError, match=r"table 'elements' column 'source_file' row 1 holds a string of 500 "
                                               r"characters, more than max_string=100"):
        load_trace(p, max_string=100)
    assert load_trace(p).elements["source_file"].tolist() == ["a.txt", "x" * 500]


def test_bounds_must_be_positive_ints(tmp_path):
    p = _save(tmp_path, _doc())
    with pytest.raises(ValueError, match="max_rows must be a positive int; got 0"):
        load_trace(p, max_rows=0)


def test_a_count_in_meta_beyond_max_lanes_is_refused(tmp_path):
    """diagnose walks range(meta["num_workers"]): a count of 10**12 would never end."""
    doc = _doc()
    doc["meta"].update(num_workers=10**12)
    p = _save(tmp_path, doc)
    with pytest.raises(TraceFormatError, match=r"meta key 'num_workers' is 1000000000000, more than max_lanes=10000"):
        load_trace(p)


# -- issue 36 item 6: meta strings are bounded at load, and cut wherever vizdist shows them ----------
def test_a_10_mb_meta_string_is_refused_at_load_naming_the_key_and_cut_when_read_on_purpose(tmp_path, capsys):
    from vizdist.cli import main

    big = "S" * 10_000_000
    p = Trace.from_records(elements=[dict(step=0, replica=0, source_id=0, position=0)],
                           meta={"strategy": big, "num_replicas": 1}).save(tmp_path / "t.json")
    with pytest.raises(TraceFormatError, match=r"meta key 'strategy' holds a string of 10000000 characters, more than "
                                               r"max_string=65536; pass load_trace\(\.\.\., max_string=10000000\)"):
        load_trace(p)
    assert main(["summary", str(p)]) == 2
    err = capsys.readouterr().err
    assert len(err) < 1_000 and "max_string" in err
    assert main(["summary", str(p), "--max-string", "10000000"]) == 0  # read on purpose: shown cut, and said so
    out = capsys.readouterr().out
    assert len(out) < 5_000 and ("characters cut]" in out or "…" in out), out[:300]


def test_a_10_mb_kind_is_a_short_error(tmp_path):
    doc = _doc()
    doc["meta"]["kind"] = "K" * 10_000_000
    p = _save(tmp_path, doc)
    for kwargs in ({}, {"max_string": 20_000_000}):
        with pytest.raises(TraceFormatError) as err:
            load_trace(p, **kwargs)
        assert len(str(err.value)) < 1_000 and "'kind'" in str(err.value)


def test_a_meta_key_of_10_mb_is_refused(tmp_path):
    doc = _doc()
    doc["meta"]["k" * 100_000] = 1
    with pytest.raises(TraceFormatError, match=r"meta key 'kkkk.*' is a name of 100000 characters, more than max_string"):
        load_trace(_save(tmp_path, doc))


# -- issue 36 item 8: loading holds at most a few times a trace's real size -------------------------
def _whitespace_bomb(path: Path, blanks: int) -> Path:
    """A real trace with ``blanks`` bytes of whitespace inside it, gzipped (a few hundred KB on disk)."""
    doc = json.dumps(_doc()).encode()
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(doc[:-1])
        block = b" \n\t\r" * (1 << 18)  # 1 MiB
        for _ in range(blanks // len(block)):
            fh.write(block)
        fh.write(b"}")
    return path


def test_a_whitespace_bomb_loads_holding_a_few_times_the_trace_not_its_blanks(tmp_path):
    import tracemalloc

    p = _whitespace_bomb(tmp_path / "bomb.json.gz", 256 << 20)  # 256 MiB of blanks around a 1 KB trace
    assert p.stat().st_size < 1_000_000
    tracemalloc.start()
    try:
        t = load_trace(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(t.elements) == 1
    assert peak < 30_000_000, peak  # holding the blanks took twice their size (512 MiB here)


def test_pretty_printed_json_still_loads(tmp_path):
    """Whitespace inside strings is kept; whitespace between tokens goes (a trace saved with indent=2)."""
    t = Trace.from_records(elements=[dict(step=0, replica=0, source_id=0, source_file='a  b\n c " \\ d.txt')],
                           meta={"note": "two  spaces", "api": "x" * 70_000}, events=[dict(lane="w0   host")])
    p = tmp_path / "pretty.json"
    p.write_text(json.dumps(t.to_dict(), indent=8))
    assert load_trace(p, max_string=100_000) == t


def test_a_folder_of_shards_is_bounded_as_a_whole(tmp_path):
    """Each shard within max_bytes, six of them over it together: refused, naming the folder and the bound."""

    def shard_name(task: str, index: int) -> str:  # the names record_worker_shard writes (vizdist.trace.shard_name)
        return f"worker-{task}-{index:05d}.json"

    for w in range(6):
        Trace.from_records(elements=[dict(step=0, replica=w, source_id=i) for i in range(40)]).save(
            tmp_path / shard_name("worker", w))
    one = (tmp_path / shard_name("worker", 0)).stat().st_size
    limit = 3 * one
    for w in range(6):
        assert len(load_trace(tmp_path / shard_name("worker", w), max_bytes=limit).elements) == 40
    with pytest.raises(TraceFormatError, match=rf"folder .*: its shards hold more than max_bytes={limit} bytes of "
                                               r"JSON together \(after gunzip\)"):
        load_trace(tmp_path, max_bytes=limit)
    with pytest.raises(TraceFormatError, match=r"table 'elements' has 240 rows, more than max_rows=100"):
        load_trace(tmp_path, max_rows=100)
    (tmp_path / shard_name("worker", 9)).write_text(json.dumps(_doc(events=_events(extra=("str", ["a", "b"])))))
    with pytest.raises(TraceFormatError, match=r"has 241 rows, more than max_rows=200"):  # shard by shard, too
        load_trace(tmp_path, max_rows=200)


def test_a_parquet_list_column_is_a_clear_error_naming_file_table_and_column(tmp_path, capsys):
    """Issue 36 item 9: a Parquet list<int> extra column crashed `vizdist merge` with a TypeError traceback."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from vizdist.cli import main

    p = Trace.from_records(elements=[dict(step=0, replica=0, source_id=0)]).save(tmp_path / "t.parquet")
    table = pq.read_table(p / "batches.parquet").append_column("sizes", pa.array([], pa.list_(pa.int64())))
    pq.write_table(table, p / "batches.parquet")
    with pytest.raises(TraceFormatError, match=r"t\.parquet'.* table 'batches' column 'sizes' is a Parquet "
                                               r"list<element: int64> column"):
        load_trace(p)
    assert main(["merge", str(p), str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert "column 'sizes'" in err and "Traceback" not in err
    # and vizdist never writes what it would refuse: a list-valued column saves as JSON only
    t = Trace.from_records(batches=[dict(step=0, replica=0, sizes=[1, 2])])
    with pytest.raises(TraceFormatError, match="table 'batches' column 'sizes' holds values that are not text"):
        t.save(tmp_path / "lists.parquet")
    assert load_trace(t.save(tmp_path / "lists.json")).batches["sizes"].tolist() == [[1, 2]]


def test_a_parquet_dictionary_column_is_bounded_before_it_is_decoded(tmp_path):
    """A few KB of Parquet can hold one long string referenced by every row: bounded by max_bytes decoded."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")

    p = Trace.from_records(elements=[dict(step=0, replica=0, source_id=0)]).save(tmp_path / "t.parquet")
    n = 2_000
    codes = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["x" * 60_000]))
    pq.write_table(pa.table({"step": pa.array(np.zeros(n, np.int64)), "device": codes.cast(pa.string())}),
                   p / "elements.parquet", use_dictionary=True)
    assert (p / "elements.parquet").stat().st_size < 200_000
    with pytest.raises(TraceFormatError, match=r"more than max_bytes=10000000 bytes"):
        load_trace(p, max_bytes=10_000_000)
    assert len(load_trace(p).elements) == n  # 120 MB decoded is within the default bound



# -- issue 36 item 9: Infinity in meta, named at load and at save ------------------------------------
@pytest.mark.parametrize("where, value", [("note", "Infinity"), ("reductions[0].expected", "NaN"),
                                          ("timing.anchor.x", "-Infinity"), ("big", "1e999")])
def test_infinity_in_meta_is_refused_at_load_naming_the_key(tmp_path, where, value):
    doc = _doc()
    text = json.dumps(doc)
    nested = {"note": '"note": %s', "reductions[0].expected": '"reductions": [{"expected": %s}]',
              "timing.anchor.x": '"timing": {"anchor": {"x": %s}}', "big": '"big": %s'}[where] % value
    p = tmp_path / "t.json"
    p.write_text(text.replace('"meta": {', '"meta": {' + nested + ", ", 1))
    with pytest.raises(TraceFormatError, match=rf"meta key '{re.escape(where)}' holds -?(inf|nan), which a trace file "
                                               r"cannot hold"):
        load_trace(p)


@pytest.mark.parametrize("name", ["t.json", "t.parquet"])
def test_a_save_of_infinity_names_the_key_or_the_column(tmp_path, name):
    t = Trace.from_records(elements=[dict(step=0, source_id=0)], meta={"reductions": [{"expected": float("inf")}]})
    with pytest.raises(TraceFormatError, match=r"trace meta key 'reductions\[0\]\.expected' holds Infinity or NaN"):
        t.save(tmp_path / name)
    t = Trace.from_records(elements=[dict(step=0, source_id=0, weight=float("-inf"))])
    with pytest.raises(TraceFormatError, match=r"table 'elements' column 'weight' row 0 holds -inf"):
        t.save(tmp_path / name)
    assert not (tmp_path / name).exists()


# -- issue 36 item 10: record() traces with hostile columns ---------------------------------------
def _record_doc(col: str, dtype: str, value) -> dict:
    rows = [dict(step=s, replica=0, source_id=s, position=0, phase="train", epoch=0, epoch_step=s, dataset=0,
                 repetition=0) for s in range(3)]
    doc = Trace.from_records(elements=rows, batches=[{k: v for k, v in r.items() if k not in ("source_id", "position")}
                                                     for r in rows],
                             meta={"api": "record", "datasets": [{"num_replicas": 1}], "num_replicas": 1}).to_dict()
    for table in ("elements", "batches"):
        t = doc["tables"][table]
        t["dtypes"][t["columns"].index(col)] = dtype
        t["data"][col][1] = value
    return doc


@pytest.mark.parametrize("col, dtype, value, what", [
    ("epoch", "object", "x", "str 'x' where a whole number (int64) belongs"),
    ("epoch", "float64", None, "a null where a whole number (int64) belongs"),
    ("dataset", "object", [1], "list [1] where a whole number (int64) belongs"),
    ("dataset", "object", "a", "str 'a' where a whole number (int64) belongs"),
    ("epoch_step", "float64", 0.5, "float 0.5 where a whole number (int64) belongs"),
    ("repetition", "object", None, "a null where a whole number (int64) belongs"),
    ("phase", "object", None, "a null where text belongs"),
    ("phase", "object", 3, "int 3 where text belongs"),
])
def test_a_record_trace_with_hostile_pass_columns_is_refused_at_load(tmp_path, capsys, col, dtype, value, what):
    """Issue 36 item 10: split(), diagnose(), show() raised raw ValueError/TypeError; summary printed int()'s error."""
    from vizdist.cli import main

    p = _save(tmp_path, _record_doc(col, dtype, value))
    with pytest.raises(TraceFormatError) as err:
        load_trace(p)
    assert str(err.value) == f"{str(p)!r} is a damaged vizdist trace: table 'elements' column {col!r} row 1: {what}."
    assert main(["summary", str(p)]) == 2
    assert f"column {col!r} row 1" in capsys.readouterr().err


def test_a_sound_record_trace_still_loads_and_merges_with_one_without_pass_columns(tmp_path):
    p = _save(tmp_path, _record_doc("epoch", "int32", 0))
    t = load_trace(p)
    assert t.split().index.names == ["step", "phase", "epoch", "epoch_step"]
    plain = Trace.from_records(elements=[dict(step=9, replica=0, source_id=9)], batches=[dict(step=9, replica=0)])
    merged = Trace.merge([t, plain])  # the pass columns of the plain shard are filled, never left null
    assert merged.batches["epoch"].tolist()[-1] == -1 and merged.batches["phase"].tolist()[-1] == ""
    assert load_trace(merged.save(tmp_path / "m.json")) == merged
