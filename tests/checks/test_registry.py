"""The checks diagnose runs are declared in one ordered list (vizdist/checks/registry.py), not found by import."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import vizdist
import vizdist.checks
from vizdist.checks.registry import BLOCK_CHECKS, CHECKS
from vizdist.trace import Trace

#: The modules of vizdist/checks that hold no check.
NOT_CHECKS = {"finding", "registry"}
TOPICS = sorted(m.name for m in pkgutil.iter_modules(vizdist.checks.__path__) if m.name not in NOT_CHECKS)


def _checks_in(module) -> set:
    """The public functions of a check module that yield findings (``-> Iterator[Finding]``)."""
    return {fn for name, fn in vars(module).items() if inspect.isfunction(fn) and not name.startswith("_")
            and fn.__module__ == module.__name__ and "Finding" in str(inspect.signature(fn).return_annotation)}


def test_every_check_is_listed_once():
    listed = list(CHECKS) + list(BLOCK_CHECKS)
    assert len(listed) == len(set(listed))
    defined = set().union(*(_checks_in(importlib.import_module(f"vizdist.checks.{t}")) for t in TOPICS))
    assert set(listed) == defined, sorted(f.__qualname__ for f in defined ^ set(listed))


def test_the_order_goes_from_the_run_to_its_details():
    """Module by module, in the registry's documented order; each module's checks in its source order."""
    order = ["run", "split", "workers", "service", "parameter_server", "placement", "numerics"]
    assert sorted([*order, "restarts"]) == TOPICS  # restarts: BLOCK_CHECKS, over a whole record() trace
    modules = [fn.__module__.rsplit(".", 1)[1] for fn in CHECKS]
    assert list(dict.fromkeys(modules)) == order
    for topic in order:
        mine = [fn for fn in CHECKS if fn.__module__.endswith(f".{topic}")]
        assert mine == sorted(mine, key=lambda fn: fn.__code__.co_firstlineno), topic


def test_findings_of_one_step_and_code_keep_the_registry_order(monkeypatch):
    """diagnose's table: step, then code, then the order the checks ran in (its docstring says so)."""
    import vizdist.checks.registry as registry
    from vizdist.checks.finding import Finding

    def first(trace):
        yield Finding("same-code", "info", "from the first check", step=1)

    def second(trace):
        yield Finding("same-code", "info", "from the second check", step=1)
        yield Finding("a-code", "info", "earlier code, same step", step=1)
        yield Finding("z-code", "info", "the run as a whole", step=-1)

    monkeypatch.setattr(registry, "CHECKS", (second, first))
    rows = vizdist.diagnose(Trace())[["step", "code", "message"]].values.tolist()
    assert rows == [[-1, "z-code", "the run as a whole"], [1, "a-code", "earlier code, same step"],
                    [1, "same-code", "from the second check"], [1, "same-code", "from the first check"]]


def test_importing_a_check_module_registers_nothing_and_diagnose_loads_no_pandas_before_it_runs():
    code = ("import sys, vizdist; before = 'pandas' in sys.modules\n"
            "import vizdist.checks.registry as r; n = len(r.CHECKS); import vizdist.checks.split\n"
            "print(before, n == len(r.CHECKS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]
