"""The trace.meta contract: kinds, key types, validation on construction and load, version 1 migration."""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path

import pytest

import vizdist
from vizdist import contract
from vizdist.contract import KINDS, validate_meta
from vizdist.trace import Trace, TraceFormatError, load_trace

ROOT = Path(vizdist.__file__).parent


def _all_keys(td: type) -> set[str]:
    return set(typing.get_type_hints(td))


def test_module_docstring_documents_every_key_of_every_kind():
    doc = contract.__doc__ or ""
    for kind, td in KINDS.items():
        assert f"``{kind}``" in doc
        for key in _all_keys(td):
            assert f"``{key}``" in doc, f"{kind}: key {key!r} is not documented in vizdist/contract.py"


def _members(tp: object) -> set[object]:
    import types as pytypes

    return set(typing.get_args(tp)) if typing.get_origin(tp) in (typing.Union, pytypes.UnionType) else {tp}


def test_trace_meta_is_every_key_of_every_kind_with_each_kinds_type():
    """``TraceMeta`` (the type of ``Trace.meta``) is the union of the kinds' ``TypedDict``s, key by key."""
    union = typing.get_type_hints(contract.TraceMeta)
    assert set(union) == set().union(*(_all_keys(td) for td in KINDS.values()))
    assert not contract.TraceMeta.__required_keys__
    for key, tp in union.items():
        per_kind = [typing.get_type_hints(td)[key] for td in KINDS.values() if key in typing.get_type_hints(td)]
        assert _members(tp) == set().union(*map(_members, per_kind)), f"{key!r}: TraceMeta has {tp}, kinds {per_kind}"


def _meta_keys_read(path: Path) -> set[str]:
    """String keys read as ``<x>.meta.get("k")``, ``<x>.meta["k"]``, ``meta.get("k")`` or ``meta["k"]``."""
    keys = set()
    for node in ast.walk(ast.parse(path.read_text())):
        target, key = None, None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target, key = node.func.value, node.args[0] if node.args else None
        elif isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        named = (isinstance(target, ast.Name) and target.id in ("meta", "m")) or (
            isinstance(target, ast.Attribute) and target.attr == "meta")
        if named and isinstance(key, ast.Constant) and isinstance(key.value, str):
            keys.add(key.value)
    return keys


@pytest.mark.parametrize("folder", ["checks", "render", "analysis"])
def test_every_meta_key_checks_and_views_read_is_in_the_contract(folder):
    documented = set().union(*(_all_keys(td) for td in KINDS.values()))
    for path in sorted((ROOT / folder).glob("*.py")):
        unknown = _meta_keys_read(path) - documented
        assert not unknown, f"{path.name} reads meta keys the contract does not define: {sorted(unknown)}"


@pytest.mark.parametrize(
    ("meta", "key"),
    [
        ({"num_replicas": "four"}, "'num_replicas'"),
        ({"num_replicas": True}, "'num_replicas'"),
        ({"devices": "CPU:0"}, "'devices'"),
        ({"kind": "data_service", "stall": {"consumers": [0, "x"], "after_s": 1, "elements_received": 0}}, r"'stall\.consumers\[1\]'"),
        ({"kind": "data_service", "stopped_workers": [{"worker": "w", "after_elements": 0}]}, r"'stopped_workers\[0\]\.worker'"),
        ({"kind": "nonsense"}, "'kind'"),
        ({"kind": ["distribution"]}, "'kind'"),
        ({"kind": ""}, "'kind'"),
        ({"kind": None}, "'kind'"),
        ({"shards": [{"num_replicas": "two"}]}, r"shards\[0\].*'num_replicas'"),
        ({"kind": "data_service", "stall": {"consumers": [0]}}, r"'stall\.after_s'.*missing"),
    ],
)
def test_wrong_types_are_refused_on_construction_naming_the_key(meta, key):
    with pytest.raises(TraceFormatError, match=key):
        Trace(meta=meta)


def test_wrong_type_in_a_file_names_file_and_key(tmp_path):
    doc = Trace(meta={"num_replicas": 4}).to_dict()
    doc["meta"]["num_replicas"] = "four"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"t\.json.*'num_replicas' must be int; got 'four'"):
        load_trace(p)


def test_unknown_keys_are_kept_and_optional_keys_may_be_null():
    t = Trace(meta={"my_instrument_key": object.__name__, "global_batch_size": None, "timeout_s": 3})
    assert t.meta["my_instrument_key"] == "object" and t.meta["kind"] == "distribution"


def test_version_1_files_load_and_get_their_kind_inferred(tmp_path):
    """A file as vizdist 0.x (format version 1, no kind) wrote it."""
    metas = {
        "distribution": {"strategy": "MirroredStrategy", "num_replicas": 2, "api": "experimental_distribute_dataset"},
        "data_service": {"instrument": "tf.data service", "sharding_policy": "OFF", "num_workers": 2},
        "shard_comparison": {"shard_policy": "FILE", "files": ["a.txt"], "auto_shard_log": []},
        "parameter_server": {"strategy": "ParameterServerStrategyV2", "step_workers": [0, 1]},
        "multi_worker": {"cluster": {"mode": "mwms", "workers": 2, "ps": 0, "chief": 0},
                         "shards": [{"worker": 0}, {"worker": 1}]},
    }
    for kind, meta in metas.items():
        doc = Trace(elements=None).to_dict()
        doc["version"], doc["meta"] = 1, meta
        p = tmp_path / f"{kind}.json"
        p.write_text(json.dumps(doc))
        t = load_trace(p)
        assert t.meta == {"kind": kind, **meta}


def test_version_2_file_without_kind_is_damaged(tmp_path):
    doc = Trace().to_dict()
    del doc["meta"]["kind"]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"t\.json.*no 'kind'"):
        load_trace(p)


def test_saved_traces_carry_their_kind_and_the_current_version(tmp_path):
    doc = json.loads(Trace(meta={"kind": "data_service"}).save(tmp_path / "t.json").read_text())
    assert doc["version"] == 2 and doc["meta"]["kind"] == "data_service"


def test_merge_refuses_mixed_kinds_and_makes_distribution_shards_multi_worker():
    a, b = Trace(meta={"kind": "distribution"}), Trace(meta={"kind": "distribution"})
    assert Trace.merge([a, b]).meta["kind"] == "multi_worker"
    assert Trace.merge([a]).meta["kind"] == "distribution"
    with pytest.raises(ValueError, match="different kinds"):
        Trace.merge([a, Trace(meta={"kind": "data_service"})])


def test_validate_meta_returns_a_new_dict():
    meta = {"num_replicas": 2}
    out = validate_meta(meta)
    assert out == {"kind": "distribution", "num_replicas": 2} and meta == {"num_replicas": 2}


def _example(tp, variant):
    """A value of type ``tp`` (variant 0: plain, 1: empty/zero, 2: null where allowed)."""
    import types as pytypes
    from typing import Any, Union, get_args, get_origin

    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, pytypes.UnionType):
        if variant == 2 and type(None) in args:
            return None
        return _example(next(a for a in args if a is not type(None)), variant)
    if typing.is_typeddict(tp):
        return {k: _example(v, variant) for k, v in typing.get_type_hints(tp).items()}
    if origin is list:
        return [] if variant else [_example(args[0], variant)]
    if origin is dict or tp is dict:
        return {}
    return {int: [3, 0, 0], float: [2.5, 0.0, 0.0], str: ["x", "", ""], bool: [True, False, False],
            Any: ["x", 0, None]}[tp][variant]


@pytest.mark.parametrize("variant", [0, 1, 2])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_any_meta_the_contract_accepts_is_diagnosed_and_summarized_without_error(kind, variant, tmp_path):
    """Checks and views may rely on the contract's types and nothing more."""
    from vizdist.cli import main
    from vizdist.diagnose import diagnose

    meta = {k: _example(tp, variant) for k, tp in typing.get_type_hints(KINDS[kind]).items()}
    meta.update(kind=kind, shards=[])
    t = Trace.from_records(
        elements=[dict(step=s, replica=r, worker=r, source_id=s * 2 + r, position=0) for s in range(2) for r in range(2)],
        batches=[dict(step=s, replica=r, worker=r, n_elements=1) for s in range(2) for r in range(2)],
        meta=meta)
    diagnose(t)
    assert main(["summary", str(t.save(tmp_path / "t.json"))]) == 0


@pytest.mark.parametrize(("name", "kind"), [("v1_distribution.json", "distribution"),
                                            ("v1_data_service.json.gz", "data_service")])
def test_files_written_by_the_previous_release_load(name, kind, tmp_path):
    """tests/data/v1_*: saved by vizdist at commit 3fe250c (format version 1, no kind)."""
    import gzip

    path = Path(__file__).parent / "data" / name
    with (gzip.open(path, "rt") if name.endswith(".gz") else path.open()) as fh:
        raw = json.load(fh)
    assert raw["version"] == 1 and "kind" not in raw["meta"]
    t = load_trace(path)
    assert t.meta == {"kind": kind, **raw["meta"]}
    assert t.elements["source_id"].tolist() == raw["tables"]["elements"]["data"]["source_id"]
    assert load_trace(t.save(tmp_path / "t.json")) == t  # and it saves as version 2
