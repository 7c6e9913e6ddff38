"""The launcher <-> task documents (processes/documents.py): each round-trips, and a malformed one fails clearly.

A task reading a malformed ``spec.json`` reports it (``error-<task>.json``) naming the file and the field, instead
of a ``KeyError`` from deep inside; the launcher reading a malformed report does the same.
"""

from __future__ import annotations

import json

import pytest

from vizdist.instrument.processes import _worker_main, jobfiles
from vizdist.instrument.processes.documents import JobDocumentError, RunSpec, Stopped, TaskError, TaskResult

SPEC = RunSpec(mode="mwms", workers=2, ps=0, layout={"chief": 0, "worker": 2, "ps": 0}, timeout=60.0,
               collective_timeout=30.0, cluster={"worker": ["127.0.0.1:5001", "127.0.0.1:5002"]}, deadline=12.5)


@pytest.mark.parametrize("doc", [
    SPEC,
    TaskResult(value={"loss": [0.5, 0.25], "ok": True}),
    TaskError(type="ValueError", message="bad", traceback="Traceback ...", task="worker-0",
              partial_trace={"meta": {}, "elements": []}),
    Stopped(task="worker-1", how="killed on request with SIGTERM, then SIGKILL", after_s=1.25),
])
def test_every_document_round_trips_through_json(doc):
    assert type(doc).from_json(doc.to_json()) == doc
    assert json.loads(doc.to_json()) == doc.to_dict()


def test_a_stopped_answer_is_a_lost_task_entry():
    """``meta["lost_tasks"]`` entries are Stopped documents: the contract's LostTask fields, no more."""
    from vizdist.contract import LostTask

    assert set(Stopped(task="ps-0", how="not running", after_s=-1.0).to_dict()) == set(LostTask.__annotations__)


@pytest.mark.parametrize(("text", "says"), [
    ("{not json", "it is not JSON"),
    ("[1, 2]", "it holds a list, not an object"),
    ('{"mode": "mwms"}', "field 'workers' is missing (an integer)"),
    (json.dumps({**SPEC.to_dict(), "workers": "2"}), "field 'workers' is '2', not an integer"),
    (json.dumps({**SPEC.to_dict(), "workers": True}), "field 'workers' is True, not an integer"),
    (json.dumps({**SPEC.to_dict(), "layout": {"worker": 2.5}}), "field 'layout' is {'worker': 2.5}, not an object of integers"),
    (json.dumps({**SPEC.to_dict(), "cluster": {"worker": "h:1"}}), "not an object of lists of strings"),
])
def test_a_malformed_spec_fails_naming_the_file_and_the_field(text, says):
    with pytest.raises(JobDocumentError, match="not a valid RunSpec document") as err:
        RunSpec.from_json(text, source="/job/spec.json")
    assert str(err.value).startswith("/job/spec.json is not a valid RunSpec document: ")
    assert says in str(err.value)


def test_optional_fields_may_be_left_out_and_integers_are_numbers():
    spec = RunSpec.from_json(json.dumps({k: v for k, v in SPEC.to_dict().items() if k != "deadline"} | {"timeout": 60}))
    assert spec.deadline == 0.0 and spec.timeout == 60.0 and isinstance(spec.timeout, float)
    assert TaskError.from_json('{"type": "E", "message": "m", "traceback": "t"}').partial_trace is None
    with pytest.raises(JobDocumentError, match="field 'after_s' is missing"):
        Stopped.from_json('{"task": "worker-1", "how": "not running"}')


def test_a_task_reports_a_malformed_spec_by_its_field(tmp_path, capsys):
    """The task process's own entry point: a spec without ``workers`` ends it with an error report saying so."""
    spec = {k: v for k, v in SPEC.to_dict().items() if k != "workers"}
    (tmp_path / jobfiles.SPEC).write_text(json.dumps(spec), encoding="utf-8")
    assert _worker_main.main([str(tmp_path), "worker", "0"]) == 1
    report = TaskError.from_json(jobfiles.ERROR.path(tmp_path, "worker-0").read_text(encoding="utf-8"))
    assert report.type == "JobDocumentError" and report.task == "worker-0"
    assert "spec.json is not a valid RunSpec document: field 'workers' is missing" in report.message
    assert "JobDocumentError" in capsys.readouterr().err


def test_an_error_report_keeps_the_partial_trace():
    from vizdist.trace import Trace

    class Failed(RuntimeError):
        partial_trace = Trace(meta={"kind": "distribution"})

    try:
        raise Failed("collective timed out")
    except Failed as exc:
        doc = TaskError.of(exc, task="worker-1")
    back = TaskError.from_json(doc.to_json())
    assert back.summary() == "Failed: collective timed out"
    assert Trace.from_dict(back.partial_trace).meta["kind"] == "distribution"
    assert "raise Failed" in back.traceback
