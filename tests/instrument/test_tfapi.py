"""TensorFlow's and Keras's private side is reached through one door: ``vizdist/instrument/tfapi/``.

* One test per entry of the declared table (:data:`vizdist.instrument.tfapi.table.TABLE`): the private name
  exists where the table says, in the installed TensorFlow/Keras. Marked ``smoke``: ``make smoke`` runs it on
  TF 2.15.1 (Keras 2) and TF 2.16.2 (Keras 3) too, which is what makes that range of versions safe.
* The scan (AST) of every vizdist module outside ``tfapi/``: no private TF/Keras module is imported, no
  private TF/Keras method is overridden, and, in modules that import TF, Keras or the adapter, no
  ``__class__`` is swapped, no ``_``-prefixed attribute is read off an object but ``self``'s and vizdist's own (a name
  vizdist itself defines: ``self._x = ...``, ``def _x``, ``__slots__``), and no private TF/Keras name is
  matched as a string. The planted examples below show each rule fails.
* Inside ``tfapi/``, every private name used is declared in the table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import vizdist
from vizdist.instrument.tfapi import datasets, keras
from vizdist.instrument.tfapi.table import KERAS3, TABLE, Symbol, present

ROOT = Path(vizdist.__file__).parent
ADAPTER = ROOT / "instrument" / "tfapi"
#: Imports of these (or of any module path with a ``_``-prefixed part under them) are private.
PRIVATE_MODULES = ("tensorflow.python", "tensorflow.core", "tensorflow.compat.v1._", "tensorflow._api",
                   "keras.src", "tf_keras.src", "keras._tf_keras")
FRAMEWORKS = ("tensorflow", "keras", "tf_keras", "vizdist.instrument.tfapi")
DECLARED = frozenset(s.name for s in TABLE)
#: TF's graph op types that start with an underscore (``_Retval``: a function's return node). They name ops
#: in a GraphDef, not Python attributes.
OP_TYPES = frozenset({"_Arg", "_Retval", "_HostSend", "_HostRecv", "_Send", "_Recv"})
_GETATTRS = ("getattr", "hasattr", "setattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and not name.startswith("_vizdist")


def _keras_major() -> int:
    import keras as installed

    return int(installed.__version__.split(".")[0])


# -- one test per private name --------------------------------------------------------------------------------
@pytest.mark.smoke
@pytest.mark.parametrize("entry", TABLE, ids=lambda s: f"{s.name}@{s.places()[0]}")
def test_symbol_exists_in_installed_tensorflow(entry: Symbol):
    if entry.versions == KERAS3 and _keras_major() < 3:
        pytest.skip(f"{entry.name} is Keras 3's; this TF has Keras 2 (vizdist records what Keras 2 builds)")
    assert present(entry), (
        f"{entry.name} ({entry.kind}) is not in {entry.where} of this TensorFlow/Keras: vizdist uses it for "
        f"{entry.use} ({entry.versions}). Adapt vizdist/instrument/tfapi/ to this version.")


@pytest.mark.smoke
def test_the_table_check_can_fail():
    """A name TF does not have is reported missing, for each kind of entry."""
    for entry in (Symbol("_NoSuchDataset", "attr", "tensorflow.python.data.ops.dataset_ops", "-"),
                  Symbol("_no_such_field", "member", "tensorflow.python.data.ops.map_op:_MapDataset", "-"),
                  Symbol("tensorflow.python.no_such_module", "module", "tensorflow.python.no_such_module", "-"),
                  Symbol("_no_such_function", "name", "tensorflow.python.data.ops.multi_device_iterator_ops", "-")):
        assert not present(entry), entry


def test_each_name_is_declared_once():
    keys = [(s.name, s.kind, s.where) for s in TABLE]
    assert len(keys) == len(set(keys))
    assert all(s.use and s.versions for s in TABLE)


def test_declared_fields_are_in_the_table():
    """``datasets.field(ds, "x")`` and ``keras.adapter_field(a, "x")`` read only declared names."""
    assert {f"_{f}" for f in datasets.FIELDS | keras.ADAPTER_FIELDS} <= DECLARED
    with pytest.raises(KeyError, match="not a declared field"):
        datasets.field(object(), "undeclared_thing")


# -- the scan --------------------------------------------------------------------------------------------------
def _defined(tree: ast.AST) -> set[str]:
    """Private names a module defines itself: ``self.x = ...``, ``def x`` / ``x = ...`` in a class, ``__slots__``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    out.add(item.name)
                targets = item.targets if isinstance(item, ast.Assign) else \
                    [item.target] if isinstance(item, ast.AnnAssign) else []
                out |= {t.id for t in targets if isinstance(t, ast.Name)}
                if isinstance(item, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                        for t in item.targets):
                    out |= {c.value for c in ast.walk(item.value) if isinstance(c, ast.Constant)
                            and isinstance(c.value, str)}
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id == "self":
            out.add(node.attr)
    return {n for n in out if n.startswith("_")}


def _imports(tree: ast.AST) -> dict[str, str]:
    """Local name -> module, for every ``import x`` / ``from m import x`` (x a module or a name)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {(a.asname or a.name).split(".")[0]: a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    return out


def _private_module(module: str) -> bool:
    return module.startswith(PRIVATE_MODULES) or (
        module.split(".")[0] in ("tensorflow", "keras", "tf_keras") and any(p.startswith("_") for p in module.split(".")))


def _is_self(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in ("self", "cls")) or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super")


def scan(source: str, vizdist_own: frozenset[str] = frozenset()) -> list[str]:
    """What one module (outside ``tfapi/``) does to TF's or Keras's private side, one line per finding.

    ``vizdist_own``: private names vizdist's own classes define (not TF's: not in the table).
    """
    tree = ast.parse(source)
    imported = _imports(tree)
    framework = any(m.startswith(FRAMEWORKS) for m in imported.values())
    own = _defined(tree) | (vizdist_own - DECLARED)  # a declared name is TF's, unless this module defines it
    overrides = _tf_overrides(tree)
    stdlib = {name for name, module in imported.items() if not module.startswith(("tensorflow", "keras", "tf_keras"))}
    found = []

    def private_use(name: str, base: ast.expr | None) -> bool:
        if not _private(name) or name in own or name in OP_TYPES:
            return False
        return not (base is not None and (_is_self(base) or (isinstance(base, ast.Name) and base.id in stdlib)))

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{line}: imports {m}" for m in modules if _private_module(m)]
        elif framework and isinstance(node, ast.Attribute) and node.attr == "__class__" and \
                isinstance(node.ctx, ast.Store):
            found.append(f"{line}: swaps {ast.unparse(node)}")
        elif isinstance(node, ast.FunctionDef) and id(node) in overrides:
            found.append(f"{line}: overrides TF's private {node.name}")
        elif framework and isinstance(node, ast.Attribute) and private_use(node.attr, node.value):
            found.append(f"{line}: reads {ast.unparse(node)}")
        elif framework and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in _GETATTRS and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and \
                isinstance(node.args[1].value, str) and private_use(node.args[1].value, node.args[0]):
            found.append(f"{line}: {node.func.id}(..., {node.args[1].value!r})")
        elif framework and isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value in DECLARED and private_use(node.value, None):
            found.append(f"{line}: matches TF's private name {node.value!r}")
    return sorted(set(found), key=lambda f: int(f.split(":")[0]))


def _tf_overrides(tree: ast.AST) -> set[int]:
    """The private methods (ids of their nodes) that classes extending a TF/Keras class define: overrides of
    TF's private protocol, which belong in the adapter."""
    imported = _imports(tree)
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                imported.get(ast.unparse(b).split(".")[0], "").startswith(("tensorflow", "keras", "tf_keras"))
                for b in node.bases):
            out |= {id(f) for f in node.body if isinstance(f, ast.FunctionDef) and _private(f.name)}
    return out


OUTSIDE = sorted(p for p in ROOT.rglob("*.py") if ADAPTER not in p.parents)
VIZDIST_OWN = frozenset().union(*(_defined(ast.parse(p.read_text(encoding="utf-8"))) for p in OUTSIDE))


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_tensorflow_outside_the_adapter(path: Path):
    found = scan(path.read_text(encoding="utf-8"), VIZDIST_OWN)
    assert not found, (f"{path.relative_to(ROOT.parent)} reaches TF's/Keras's private side around "
                       f"vizdist/instrument/tfapi/: {found}. Add a function to the adapter (and the name to its "
                       "table) and call it.")


PLANTED = '''
import os
import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops          # 4: a private module
from vizdist.instrument.tfapi import datasets as tfd


class Mine:
    __slots__ = ("_slot",)

    def __init__(self):
        self._mine = 1

    def _type_spec(self):                                    # 14: vizdist's own class: its own method
        return self._mine, self._slot


def f(ds, spec):
    ds.__class__ = spec                                      # 19: a class swap
    a = ds._input_dataset                                    # 20: a declared TF field, read around the adapter
    b = ds._brand_new_private                                # 21: an undeclared private attribute
    c = getattr(ds, "_seed", None)                           # 22: by getattr
    d = type(ds).__name__ == "_MapDataset"                   # 23: a private class matched by name
    e = tfd.field(ds, "input_dataset"), os._exit, Mine()._mine, "_Retval"   # 24: all fine
    return a, b, c, d, e


class Recorded(tf.data.Dataset):
    def _type_spec(self):                                    # 29: overrides TF's private method
        return None
'''


def test_the_scan_fails_on_a_planted_module():
    found = scan(PLANTED)
    lines = sorted({int(f.split(":")[0]) for f in found})
    assert lines == [4, 19, 20, 21, 22, 23, 29], found


def test_the_scan_passes_the_planted_module_once_fixed():
    """Each finding removed (the adapter's calls instead), the scan is quiet: the rules are not blanket."""
    fixed = "\n".join(line for n, line in enumerate(PLANTED.splitlines(), 1)
                      if n not in (4, 19, 20, 21, 22, 23) and not line.startswith("class Recorded")
                      and "return None" not in line and "def _type_spec(self):   " not in line)
    assert scan(fixed) == []


# -- inside the adapter: every private name it uses is declared -------------------------------------------------
def _adapter_uses(tree: ast.AST) -> set[str]:
    """Private TF/Keras names an adapter module uses: imported private modules, ``x._name`` (not on ``self``,
    and not the module's own helpers), and private names as strings."""
    helpers = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)} | {
        t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _private_module(node.module):
            out |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in DECLARED else node.module
                    for a in node.names}
        elif isinstance(node, ast.Attribute) and _private(node.attr) and not _is_self(node.value) \
                and node.attr not in helpers:
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"_[A-Za-z]\w*", node.value) and _private(node.value) and node.value not in helpers:
            out.add(node.value)
    return out


@pytest.mark.parametrize("path", sorted(ADAPTER.glob("*.py")), ids=lambda p: p.name)
def test_every_private_name_the_adapter_uses_is_declared(path: Path):
    missing = sorted(_adapter_uses(ast.parse(path.read_text(encoding="utf-8"))) - DECLARED)
    assert not missing, f"{path.name} uses private TF/Keras names not declared in tfapi/table.py: {missing}"


def test_the_adapter_imports_nothing_of_vizdist_but_errors():
    for path in ADAPTER.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad = [n for n in names if n.startswith("vizdist") and not n.startswith(("vizdist.errors",
                                                                                      "vizdist.instrument.tfapi"))]
            assert not bad, f"{path.name} imports {bad}: the adapter is instrument's lowest layer"


def test_every_keras_function_hooked_is_declared():
    """Each (module, name) of ``tfapi.keras.KERAS_NAMES`` is a table entry (the one the per-symbol test checks)."""
    declared = {(s.name, place) for s in TABLE for place in s.places()}
    for places in keras.KERAS_NAMES.values():
        for module, path in places:
            assert (path, module) in declared or (path.rpartition(".")[2], f"{module}:{path.rpartition('.')[0]}") \
                in declared, f"{module}:{path} is hooked but not declared in tfapi/table.py"
