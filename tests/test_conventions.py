"""One calling convention (README, "One calling convention"), read from every public signature.

Every public function or method of ``vizdist.__all__`` that takes ``timeout``, ``progress`` or ``steps``
gives it the same default: ``timeout=DEFAULT_TIMEOUT`` (a bound on the whole call, or on its wait for the
closures), ``progress=None``, ``steps=None`` — except where a parameter-server run schedules closures (TF
advises repeated datasets there, ``ClusterCoordinator.create_per_worker_dataset``'s docstring, so a count
is needed) and ``predict_split``, whose steps are required. Options come after the data, keyword-only.

Each option name has one type everywhere (the table's "type" column): ``stop`` is always a task's name
(``"worker-1"``), never an index; ``timeout`` always seconds.
"""

from __future__ import annotations

import inspect
import re
import time
from pathlib import Path

import pytest

import vizdist
from vizdist.instrument.processes import limits, supervisor

#: (name, default) pairs that differ from the rule on purpose, each for the reason in the docstring above.
EXCEPTIONS = {("trace_parameter_server", "steps"), ("record_parameter_server", "steps"),
              ("predict_split", "steps"),
              ("LocalDataService.trace", "timeout")}  # the deprecated spelling of stall_timeout= (one release)
RULE = {"timeout": supervisor.DEFAULT_TIMEOUT, "progress": None, "steps": None}
#: Option -> its one type (the annotation, ``| None`` aside: where None is allowed it says so in the table).
TYPES = {"steps": "int", "timeout": "float", "progress": "bool", "stop": "str", "stop_after": "int",
         "timing": "bool", "placement": "bool | str"}
#: (function, option) whose type is not yet the table's, each with why (and where it is to be fixed).
TYPE_EXCEPTIONS = {
    ("trace_distribution", "timing"): "also takes a number of steps to profile (bool | int); its own name for "
                                      "that belongs in vizdist/instrument/run/distribution.py (issue 38, left)",
}


def _public_callables():
    for name in vizdist.__all__:
        obj = getattr(vizdist, name)
        if inspect.isclass(obj):
            yield f"{name}()", obj.__init__
            yield from ((f"{name}.{m}", getattr(obj, m)) for m in vars(obj)
                        if not m.startswith("_") and inspect.isfunction(getattr(obj, m)))
        elif callable(obj):
            yield name, obj


def test_same_names_same_defaults_everywhere():
    seen, wrong = set(), []
    for name, fn in _public_callables():
        for p in inspect.signature(fn).parameters.values():
            if p.name in RULE and (name, p.name) not in EXCEPTIONS:
                seen.add(p.name)
                if p.default != RULE[p.name]:
                    wrong.append(f"{name}({p.name}={p.default!r}), not {RULE[p.name]!r}")
                if p.kind is not p.KEYWORD_ONLY:
                    wrong.append(f"{name}: {p.name} is not keyword-only")
    assert seen == set(RULE) and not wrong, wrong


def _base(annotation: object) -> str:
    """The annotation as written, without ``| None``."""
    return " | ".join(part for part in str(annotation).split(" | ") if part != "None")


def test_one_type_per_option_name():
    seen, wrong = set(), []
    for name, fn in _public_callables():
        for p in inspect.signature(fn).parameters.values():
            if p.name in TYPES and (name, p.name) not in TYPE_EXCEPTIONS:
                seen.add(p.name)
                if _base(p.annotation) != TYPES[p.name]:
                    wrong.append(f"{name}({p.name}: {p.annotation}), not {TYPES[p.name]}")
    assert seen == set(TYPES) and not wrong, wrong


def test_the_readme_table_gives_each_options_type():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme.split("### One calling convention", 1)[1].split("\n\n| option", 1)[1].split("\n\n", 1)[0]
    cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row)] for row in table.splitlines()[2:]]
    rows = {c[1]: c[2] for c in cells}
    for option, kind in TYPES.items():
        assert rows.get(f"`{option}`", "").startswith(f"`{kind}"), (option, rows.get(f"`{option}`"))


def test_old_spellings_are_gone():
    """Removed in 0.2.0 (CHANGELOG.md): one spelling per option."""
    from vizdist.instrument.service.local import LocalDataService

    assert not {"stop_worker", "timeout"} & set(inspect.signature(LocalDataService.trace).parameters)
    assert not {"lose", "lose_after"} & set(inspect.signature(vizdist.record_parameter_server).parameters)


def test_a_task_of_a_cluster_ends_its_runs_before_the_cluster_stops_it(monkeypatch):
    assert supervisor.bounded_timeout(30.0) == 30.0 and supervisor.bounded_timeout(None) is None
    monkeypatch.setattr(limits, "_task_deadline", time.time() + 100)  # what set_task_deadline sets
    assert supervisor.bounded_timeout(None) == pytest.approx(100 - supervisor.TASK_MARGIN_S, abs=2)
    assert supervisor.bounded_timeout(30.0) == 30.0
    assert supervisor.bounded_timeout(300.0) == pytest.approx(100 - supervisor.TASK_MARGIN_S, abs=2)


#: The most lines a module of vizdist may have: past it, a module holds more than one concern (split it where
#: one separates, as ids/handlers/ and the trace's _tables.py / _head.py / _tracefiles.py were).
MAX_MODULE_LINES = 600


def test_every_module_is_short_enough_to_hold_one_concern():
    package = Path(vizdist.__file__).parent
    long = {str(p.relative_to(package)): n for p in package.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
