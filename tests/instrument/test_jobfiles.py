"""The launcher <-> worker file protocol is spelled once, in ``vizdist/instrument/processes/jobfiles.py``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import vizdist
from vizdist.instrument.processes import jobfiles

ROOT = Path(vizdist.__file__).parent

#: modules that may still spell a job file's name, each with why.
EXCEPTIONS = {
    "instrument/processes/jobfiles.py": "the one place the names are spelled",
    "_tracefiles.py": "the shard layout a folder merge reads (the trace layer imports no instrument module); "
                "test_the_shard_layout_is_the_trace_file_name checks it is jobfiles.TRACE's",
}

#: a string (an f-string with ``{}`` for each value) that names a job file.
JOB_FILE = re.compile(r"(^|/)(spec\.json|job\.pkl|host\.json)$"
                      r"|(^|/)(worker|result|error|stop|stopped|log|req|res|err|prog)-[^/]*"
                      r"\.(json|request|txt|graph|spec)$"
                      r"|^(result|error|stop|stopped|req|res|err|prog)-$|^\.request$")


def _text(node: ast.AST) -> str | None:
    """A string constant's value, or an f-string with ``{}`` for its values; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, kinds) and n.body and isinstance(n.body[0], ast.Expr)}


def job_file_literals(source: str) -> list[str]:
    """Every string in ``source``'s code (not its docstrings) that spells a job file's name."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    texts = [_text(n) for n in ast.walk(tree) if id(n) not in skip | parts]
    return [t for t in texts if t is not None and JOB_FILE.search(t)]


def test_the_scan_finds_names_and_patterns_but_not_docstrings():
    source = ('"""Writes JOB/spec.json."""\n'
              'a = job / "job.pkl"\nb = f"worker-{task}.json"\nc = job.glob("stop-*.request")\n'
              'd = f"worker-{w}"\ne = name[len("result-"):]\nf = f"{d}/log-{n}.txt"\n')
    assert sorted(job_file_literals(source)) == sorted(
        ["job.pkl", "worker-{}.json", "stop-*.request", "result-", "{}/log-{}.txt"])


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")))
def test_no_job_file_name_is_spelled_outside_jobfiles(path):
    if path in EXCEPTIONS:
        return
    found = job_file_literals((ROOT / path).read_text(encoding="utf-8"))
    assert not found, f"{path} spells job file names {found}: use vizdist.instrument.processes.jobfiles"


def test_task_files_round_trip(tmp_path):
    for kind in (jobfiles.TRACE, jobfiles.RESULT, jobfiles.ERROR, jobfiles.STOP_REQUEST, jobfiles.STOPPED,
                 jobfiles.LOG, jobfiles.REQUEST, jobfiles.PROGRESS, jobfiles.RESPONSE, jobfiles.SERVICE_ERROR):
        for task in ("worker-1", "chief-0"):
            kind.path(tmp_path, task).write_text("x", encoding="utf-8")
        assert [kind.task(p) for p in kind.all(tmp_path)] == ["chief-0", "worker-1"]


def test_the_names_the_processes_exchange_are_unchanged():
    """Old job folders and any tool reading them still see the same names."""
    assert (jobfiles.SPEC, jobfiles.JOB, jobfiles.HOST_CONFIG) == ("spec.json", "job.pkl", "host.json")
    names = [k.name("worker-0") for k in (jobfiles.TRACE, jobfiles.RESULT, jobfiles.ERROR, jobfiles.STOP_REQUEST,
                                          jobfiles.STOPPED, jobfiles.LOG)]
    assert names == ["worker-worker-0.json", "result-worker-0.json", "error-worker-0.json",
                     "stop-worker-0.request", "stopped-worker-0.json", "log-worker-0.txt"]
    assert [k.name("7") for k in (jobfiles.REQUEST, jobfiles.REQUEST_GRAPH, jobfiles.REQUEST_SPEC,
                                  jobfiles.PROGRESS, jobfiles.RESPONSE, jobfiles.SERVICE_ERROR)] == [
        "req-7.json", "req-7.graph", "req-7.spec", "prog-7.txt", "res-7.json", "err-7.json"]


def test_the_shard_layout_is_the_trace_file_name():
    from vizdist.trace import SHARD_NAME, shard_name

    for task, index in (("worker", 0), ("chief", 0), ("ps", 12), ("evaluator", 99999)):
        assert shard_name(task, index) == jobfiles.TRACE.name(f"{task}-{index:05d}")
        assert SHARD_NAME.fullmatch(shard_name(task, index))
    assert not SHARD_NAME.fullmatch("worker-merged.json") and not SHARD_NAME.fullmatch("worker-0.json")
