"""One calling convention (README, "One calling convention"), read from every public signature.

Every public function or method of ``vizdist.__all__`` that takes ``timeout``, ``progress`` or ``steps``
gives it the same default: ``timeout=DEFAULT_TIMEOUT`` (a bound on the whole call, or on its wait for the
closures), ``progress=None``, ``steps=None`` — except where a parameter-server run schedules closures (TF
advises repeated datasets there, ``ClusterCoordinator.create_per_worker_dataset``'s docstring, so a count
is needed) and ``predict_split``, whose steps are required. Options come after the data, keyword-only.
"""

from __future__ import annotations

import inspect
import time

import pytest

import vizdist
from vizdist.instrument.processes import supervisor

#: (name, default) pairs that differ from the rule on purpose, each for the reason in the docstring above.
EXCEPTIONS = {("trace_parameter_server", "steps"), ("record_parameter_server", "steps"),
              ("predict_split", "steps"),
              ("LocalDataService.trace", "timeout")}  # the deprecated spelling of stall_timeout= (one release)
RULE = {"timeout": supervisor.DEFAULT_TIMEOUT, "progress": None, "steps": None}


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


def test_a_task_of_a_cluster_ends_its_runs_before_the_cluster_stops_it(monkeypatch):
    assert supervisor.bounded_timeout(30.0) == 30.0 and supervisor.bounded_timeout(None) is None
    monkeypatch.setattr(supervisor, "_task_deadline", time.time() + 100)
    assert supervisor.bounded_timeout(None) == pytest.approx(100 - supervisor.TASK_MARGIN_S, abs=2)
    assert supervisor.bounded_timeout(30.0) == 30.0
    assert supervisor.bounded_timeout(300.0) == pytest.approx(100 - supervisor.TASK_MARGIN_S, abs=2)
