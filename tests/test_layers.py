"""The layers stay clean: who may import whom, checked on the source (AST), at any depth.

    instrument/ (the only TensorFlow importer)  ->  trace (trace.py, _tables.py, _head.py, _tracefiles.py,
                                                             contract.py, _metavalues.py, _jsontypes.py, errors.py)
        ->  analysis (analysis/, diagnose.py, checks/)  ->  render/

Data flows along the arrows; imports go against them: ``render`` reads the
trace and analysis results, ``analysis`` reads the trace, the trace imports
no other layer, and nothing but ``instrument`` imports TensorFlow. Function
-local imports count. ``vizdist/__init__.py`` (the public facade), ``experiments.py``
(joins instrument's what-if runs to render's widget) and ``cli.py`` sit above the
layers and may import any of them.

One arrow goes up, in the open: a view. ``trace.plot.split()`` and the other methods of the
trace's accessors (``vizdist/views.py``, pandas' ``PlotAccessor``), and the ``plot()`` / ``show()``
/ ``_repr_*_`` of the analysis results that draw themselves, import their renderer inside the
method. Only the modules :data:`LAZY_UP` names may, only lazily (in a function, or under ``if
TYPE_CHECKING:``), so importing them loads no renderer; the scan sees each such arrow.

At package level (the end of this file): the sub-packages of ``instrument/`` form layers of their own
(:data:`INSTRUMENT_ORDER`, lowest first: ``tfapi``, ``core``, ``ids``, ``observe``, ``processes``, ``service``,
``run``, ``strategies``, ``experiments``), and so do ``analysis/`` < ``checks/`` < ``diagnose.py`` <
``trace_diff.py`` (:data:`ANALYSIS_ORDER`). A module imports only its own unit or a lower one, and no two
packages import each other, directly or around a ring (a cycle of modules of different packages, which the
module-level scan would not call a cycle).

No module takes another module's private name (``from m import _x`` or ``m._x``): what two
modules share is public in the lower one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vizdist

ROOT = Path(vizdist.__file__).parent

#: layer -> the layers its modules may import.
ALLOWED = {
    "trace": {"trace"},
    "analysis": {"trace", "analysis"},
    "render": {"trace", "analysis", "render"},
    # instrument builds traces and analysis objects (compare_shard_policies returns a
    # ShardComparison, what_if an Experiment); it never imports render (experiments.py joins them).
    "instrument": {"trace", "analysis", "instrument"},
    "entry": {"trace", "analysis", "render", "instrument", "entry"},
}


#: module -> the higher layers it may import lazily (inside a function or under ``if TYPE_CHECKING:``): its
#: views import their renderer (or analysis) when called. Only these.
LAZY_UP = {
    "vizdist.views": {"analysis", "render"},  # trace.plot, trace.show, trace.timing, trace.to_chrome_trace
    "vizdist.analysis.sharding": {"render"},  # ShardComparison.plot(), ._repr_html_()
    "vizdist.analysis.topology_model": {"render"},  # Topology.plot(), .show(), ._repr_mimebundle_()
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer(module: str) -> str:
    """The layer of a vizdist module (or package) name."""
    first = module.split(".")[1] if "." in module else ""
    if first == "instrument":
        return "instrument"
    if first == "render":
        return "render"
    if first in ("analysis", "diagnose", "checks", "trace_diff"):
        return "analysis"
    if first in ("trace", "contract", "errors", "_optional", "_version", "_files", "_loadcheck", "views", "accessor",
                 "_clip", "_storage", "_parts", "_tables", "_head", "_tracefiles", "_metavalues", "_jsontypes"):
        return "trace"
    return "entry"  # the package itself and cli.py


def imports(module: str) -> set[str]:
    """Every module ``module`` imports, anywhere in its source (relative imports resolved)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(package, node)
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_at_load(module: str) -> set[str]:
    """The modules ``module`` imports when it is itself imported: not those inside a function, nor those
    under ``if TYPE_CHECKING:`` (class bodies run, so theirs count)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(package, node)
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return out


def _resolve(package: str, node: ast.ImportFrom) -> str:
    """The absolute module a from-import reads from (relative imports resolved against ``package``)."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return base


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _bound_modules(tree: ast.AST, package: str) -> dict[str, str]:
    """Local name -> vizdist module, for every vizdist module the source binds to a name."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname or a.name: a.name for a in node.names if a.name.startswith("vizdist")}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(package, node)
            bound |= {a.asname or a.name: f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
    return bound


def _attribute_owner(node: ast.Attribute, bound: dict[str, str]) -> str | None:
    """The vizdist module ``node`` reads an attribute of (``mod._x``, ``pkg.mod._x``), else None."""
    value, parts = node.value, []
    while isinstance(value, ast.Attribute):
        parts.insert(0, value.attr)
        value = value.value
    if isinstance(value, ast.Name) and value.id in bound:
        return ".".join([bound[value.id], *parts])
    return None


def private_reach_ins(module: str) -> set[tuple[str, str]]:
    """(other module, private name) for each private name ``module`` imports or reads off another module."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound, out = _bound_modules(tree, package), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _resolve(package, node).startswith("vizdist"):
            base = _resolve(package, node)
            out |= {(base, a.name) for a in node.names
                    if _is_private(a.name) and f"{base}.{a.name}" not in MODULES}
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            owner = _attribute_owner(node, bound)
            out |= {(owner, node.attr)} if owner else set()
    return {(owner, name) for owner, name in out if owner != module}


def _vizdist_imports(module: str) -> set[str]:
    return {m for m in imports(module) if m == "vizdist" or m.startswith("vizdist.")}


def test_the_scan_sees_every_kind_of_import():
    """The scanner itself: function-local and from-imports are found (so the rules below can fail)."""
    assert "vizdist.instrument.processes.cluster" in imports("vizdist.instrument.experiments.sharding")  # function-local import
    assert "tensorflow" in imports("vizdist.instrument.core.devices")
    assert {"vizdist.trace", "vizdist.checks.finding"} <= imports("vizdist.checks.split")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_instrument_imports_tensorflow(module):
    if layer(module) == "instrument":
        return
    tf = sorted(m for m in imports(module) if m.split(".")[0] in ("tensorflow", "keras", "tf_keras"))
    assert not tf, f"{module} imports {tf}: only vizdist/instrument may import TensorFlow"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_layers(module):
    mine = layer(module)
    lazy = LAZY_UP.get(module, set())
    at_load = imports_at_load(module)
    bad = sorted(m for m in _vizdist_imports(module) if layer(m) not in ALLOWED[mine]
                 and not (layer(m) in lazy and m not in at_load))
    assert not bad, f"{module} ({mine} layer) imports {bad} ({[layer(m) for m in bad]} layer)" + (
        " when it is imported: a view imports its renderer inside the method" if lazy else "")


def test_the_scan_sees_the_views_arrows_up():
    """trace -> render is in the open: the accessors' renderers are imports the scan reads, none made at load."""
    assert {"vizdist.render.figures", "vizdist.render.explorer", "vizdist.analysis.timeline"} <= imports("vizdist.views")
    assert "vizdist.views" in imports_at_load("vizdist.trace")
    assert not {m for m in imports_at_load("vizdist.views") if m.startswith("vizdist.") and layer(m) != "trace"}
    assert "vizdist.render.topology" in imports("vizdist.analysis.topology_model")
    assert "vizdist.render.topology" not in imports_at_load("vizdist.analysis.topology_model")


def test_modules_that_reach_up_load_no_renderer():
    """Importing the trace, its accessors or a result that draws itself imports no renderer (and no TensorFlow)."""
    import subprocess
    import sys

    code = ("import sys, " + ", ".join(sorted(LAZY_UP)) + ", vizdist.trace; print(sorted(m for m in sys.modules "
            "if m.startswith(('vizdist.render', 'tensorflow', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


#: (importer, owner, private name) -> why it is still allowed. Only these, each to go when its reason does.
PRIVATE_EXCEPTIONS: dict[tuple[str, str, str], str] = {}


def test_the_private_scan_sees_imports_and_attributes(tmp_path, monkeypatch):
    """The scanner itself: a private from-import and a ``module._name`` reach-in are both found."""
    source = ("from vizdist.trace import _x\nimport vizdist.contract as c\nfrom vizdist import errors\n"
              "c._y, errors._z, errors.__name__\nfrom vizdist import _files\n")
    (tmp_path / "probe.py").write_text(source, encoding="utf-8")
    monkeypatch.setitem(MODULES, "vizdist.probe", tmp_path / "probe.py")
    assert private_reach_ins("vizdist.probe") == {
        ("vizdist.trace", "_x"), ("vizdist.contract", "_y"), ("vizdist.errors", "_z")}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_crosses_modules(module):
    found = {(module, owner, name) for owner, name in private_reach_ins(module)}
    bad = sorted(found - PRIVATE_EXCEPTIONS.keys())
    assert not bad, f"{module} uses private names of other modules {bad}: make them public where they live"


def _cycles() -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan).

    A module of :data:`LAZY_UP` counts with the imports it makes at load only: its lazy ones (a view's
    renderer, which reads the trace back) run once everything they name is loaded.
    """
    graph = {m: sorted(i for i in (imports_at_load(m) if m in LAZY_UP else _vizdist_imports(m))
                       if i in MODULES and i != m) for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for m in graph:
        if m not in index:
            visit(m)
    return found


def test_no_import_cycles():
    cycles = [sorted(c) for c in _cycles()]
    assert not cycles, f"modules that import each other (directly or in a ring): {cycles}"


def test_import_vizdist_loads_no_tensorflow_pandas_or_matplotlib():
    """``import vizdist`` stays light (issue 14): heavy libraries load where first needed."""
    import subprocess
    import sys

    code = ("import sys, vizdist; print(sorted(m for m in ('tensorflow', 'pandas', 'matplotlib', 'numpy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


# --- Package level: the sub-packages of instrument/, and analysis / checks / diagnose, in one declared order ---

#: The sub-packages of ``vizdist/instrument/``, lowest first. A module imports only from its own sub-package or a
#: lower one (function-local imports count). ``tfapi`` (every private TensorFlow/Keras name, behind one door; it
#: imports nothing of vizdist but ``vizdist.errors``) is the lowest; ``core`` holds
#: what every other sub-package needs (the row builder, the id codes, the tf.data-service registry, the run
#: engine, devices, storage, versions). ``vizdist.instrument`` itself (its ``__init__``) sits above them all.
INSTRUMENT_ORDER = ("tfapi", "core", "ids", "observe", "processes", "service", "run", "strategies", "experiments")

#: The analysis layer, lowest first: the analyses of a trace, the checks built on them, ``diagnose`` that runs the
#: checks, and ``trace_diff`` that compares two runs' findings.
ANALYSIS_ORDER = ("analysis", "checks", "diagnose", "trace_diff")

#: What ``tfapi`` may import of vizdist beside its own modules (nothing else).
TFAPI_ALLOWED = {"vizdist.errors"}


def unit(module: str) -> str:
    """The package-level unit of a vizdist module: ``instrument.<sub-package>``, else vizdist's top-level name.

    Example: ``vizdist.instrument.run.reader`` -> ``instrument.run``, ``vizdist.checks.split`` -> ``checks``,
    ``vizdist.diagnose`` -> ``diagnose``, ``vizdist.instrument`` -> ``instrument``.
    """
    parts = module.split(".")
    if parts[1:2] == ["instrument"]:
        return "instrument." + parts[2] if len(parts) > 2 else "instrument"
    return parts[1] if len(parts) > 1 else "vizdist"


def _rank(u: str) -> tuple[str, int] | None:
    """(the ordered group, the position in it) of a unit, None for a unit no order ranks."""
    if u.startswith("instrument."):
        name = u.split(".", 1)[1]
        return ("instrument", INSTRUMENT_ORDER.index(name) if name in INSTRUMENT_ORDER else -1)
    if u == "instrument":
        return ("instrument", len(INSTRUMENT_ORDER))
    return ("analysis", ANALYSIS_ORDER.index(u)) if u in ANALYSIS_ORDER else None


def upward_imports(module: str) -> list[str]:
    """The vizdist modules ``module`` imports from a higher unit of its own ordered group."""
    mine = _rank(unit(module))
    if mine is None:
        return []
    return sorted(m for m in _vizdist_imports(module)
                  if (theirs := _rank(unit(m))) is not None and theirs[0] == mine[0] and theirs[1] > mine[1])


def test_every_instrument_module_is_in_a_declared_sub_package():
    """A new sub-package (or a module left at the top of instrument/) must take its place in the order first."""
    units = {unit(m) for m in MODULES if m.startswith("vizdist.instrument.")}
    undeclared = sorted(u for u in units if u.split(".", 1)[1] not in INSTRUMENT_ORDER)
    assert not undeclared, f"{undeclared}: add each to INSTRUMENT_ORDER (a sub-package) or move it into one"
    assert {unit(m) for m in MODULES if layer(m) == "analysis"} <= set(ANALYSIS_ORDER)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _rank(unit(m)) is not None))
def test_sub_packages_import_only_downward(module):
    bad = upward_imports(module)
    assert not bad, (f"{module} ({unit(module)}) imports {bad} ({sorted({unit(m) for m in bad})}): a sub-package "
                     f"imports only its own or lower ones; lowest first: {INSTRUMENT_ORDER} and {ANALYSIS_ORDER}")


def tfapi_violations(module: str) -> list[str]:
    """What a module of ``tfapi`` imports of vizdist beyond itself and :data:`TFAPI_ALLOWED`."""
    return sorted(m for m in _vizdist_imports(module) if m not in TFAPI_ALLOWED and unit(m) != "instrument.tfapi")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if unit(m) == "instrument.tfapi"))
def test_tfapi_imports_only_errors(module):
    bad = tfapi_violations(module)
    assert not bad, f"{module} imports {bad}: the TF adapter imports nothing of vizdist but itself and {TFAPI_ALLOWED}"


def _package_cycles() -> list[list[str]]:
    """Rings of units (sub-packages, top-level modules) that import each other, directly or around a ring.

    The same graph as :func:`_cycles`, each module replaced by its unit: two modules of two packages that
    never import each other's importers still make a package cycle.
    """
    graph: dict[str, set[str]] = {}
    for m in MODULES:
        found = imports_at_load(m) if m in LAZY_UP else _vizdist_imports(m)
        graph.setdefault(unit(m), set()).update(unit(i) for i in found if i in MODULES and unit(i) != unit(m))
    return _strongly_connected(graph)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (by reachability; the graph is small)."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {u: reach(u) for u in graph}
    rings = {frozenset({u} | {v for v in reached[u] if u in reached.get(v, set())}) for u in graph}
    return sorted(sorted(r) for r in rings if len(r) > 1)


def test_no_package_cycles():
    cycles = _package_cycles()
    assert not cycles, f"packages that import each other (directly or in a ring): {cycles}"


def test_the_package_scan_sees_an_upward_import_and_a_package_cycle(tmp_path, monkeypatch):
    """The scanner itself: a planted upward import (core -> run, checks -> diagnose) is seen, and makes a ring;
    a planted import of the trace in ``tfapi`` is seen."""
    (tmp_path / "probe.py").write_text("def f():\n    from vizdist.instrument.run import user_run\n", encoding="utf-8")
    (tmp_path / "check_probe.py").write_text("from vizdist.diagnose import diagnose\n", encoding="utf-8")
    monkeypatch.setitem(MODULES, "vizdist.instrument.core.probe", tmp_path / "probe.py")
    monkeypatch.setitem(MODULES, "vizdist.checks.probe", tmp_path / "check_probe.py")
    assert upward_imports("vizdist.instrument.core.probe") == ["vizdist.instrument.run.user_run"]
    assert upward_imports("vizdist.checks.probe") == ["vizdist.diagnose"]
    cycles = _package_cycles()
    assert any({"instrument.core", "instrument.run"} <= set(c) for c in cycles), cycles
    assert any({"checks", "diagnose"} <= set(c) for c in cycles), cycles
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    (tmp_path / "tf_probe.py").write_text("from vizdist import errors, trace\nfrom vizdist.instrument.tfapi import x\n",
                                          encoding="utf-8")
    monkeypatch.setitem(MODULES, "vizdist.instrument.tfapi.probe", tmp_path / "tf_probe.py")
    assert tfapi_violations("vizdist.instrument.tfapi.probe") == ["vizdist.trace"]
