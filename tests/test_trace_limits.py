"""A trace file may come from anyone: what one file may hold is bounded, and every known column is type-checked."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

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


def test_extra_columns_match_what_the_timing_recorder_writes():
    pytest.importorskip("tensorflow")
    from vizdist.instrument.observe.timing import EXTRA_COLUMNS as TIMING

    assert EXTRA_COLUMNS["events"] == TIMING


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
