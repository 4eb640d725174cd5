"""The shape of ``storelib``'s module graph, read from the sources with ``ast`` (no imports, no Spark).

* no import cycle between storelib modules, counting module-level AND function-local imports
  (``import storelib.x``, ``from storelib import x``, ``from storelib.x import y``, ``from . import x``,
  ``from .x import y``); imports under ``if TYPE_CHECKING:`` are not run and are ignored. The layout
  modules (``commitlog``, ``indexfile``) stay leaves because ``kernels`` imports their constants at
  module level (numba compiles module globals as constants);
* no module longer than ``MAX_MODULE_LINES`` lines, no function (or method) longer than
  ``MAX_FUNCTION_LINES`` lines;
* no module uses another storelib module's private names: neither ``mod._name`` on an imported
  storelib module nor ``from .mod import _name``.

Names the package ``__init__`` serves lazily (``from storelib import StoreConfig``) are not modules and
add no edge: ``__init__`` imports its modules with ``importlib`` on first use, never statically.
"""
from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG_NAME = "storelib"
PKG = os.path.join(ROOT, PKG_NAME)
MODULES = sorted(f[:-3] for f in os.listdir(PKG) if f.endswith(".py") and f != "__init__.py")
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def _path(module: str) -> str:
    return os.path.join(PKG, f"{module}.py")


def _tree(module: str) -> ast.Module:
    with open(_path(module), encoding="utf-8") as fh:
        return ast.parse(fh.read(), _path(module))


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (their ``else`` branch is kept)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


class Imports:
    """What one module imports from storelib: edges, local names bound to storelib modules, and
    names imported from storelib modules (with their line)."""

    def __init__(self, module: str):
        self.module = module
        self.edges: dict[str, int] = {}                     # storelib module -> first line
        self.module_names: dict[str, str] = {}              # local name -> storelib module
        self.from_names: list[tuple[str, str, int]] = []    # (storelib module, name, line)
        for node in _run_nodes(_tree(module)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._absolute_import(alias, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                self._import_from(node)

    def _edge(self, target: str, line: int) -> None:
        if target in MODULES and target != self.module:
            self.edges.setdefault(target, line)

    def _absolute_import(self, alias: ast.alias, line: int) -> None:
        parts = alias.name.split(".")
        if parts[0] != PKG_NAME or len(parts) < 2:
            return
        self._edge(parts[1], line)
        if alias.asname and len(parts) == 2:
            self.module_names[alias.asname] = parts[1]        # import storelib.x as y

    def _import_from(self, node: ast.ImportFrom) -> None:
        if node.level > 1:
            return                                          # outside the (flat) package
        if node.level == 1:
            base = node.module or ""
        elif node.module and (node.module == PKG_NAME or node.module.startswith(PKG_NAME + ".")):
            base = node.module[len(PKG_NAME) + 1:]
        else:
            return
        if base:                                            # from .x import y / from storelib.x import y
            target = base.split(".")[0]
            self._edge(target, node.lineno)
            for alias in node.names:
                self.from_names.append((target, alias.name, node.lineno))
        else:                                               # from . import x / from storelib import x
            for alias in node.names:
                if alias.name in MODULES:
                    self._edge(alias.name, node.lineno)
                    self.module_names[alias.asname or alias.name] = alias.name


IMPORTS = {m: Imports(m) for m in MODULES}


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a self-loop), by Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, {}):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_every_import_form():
    """The scanner finds module-level, function-local, relative and absolute imports (known edges)."""
    assert "commitlog" in IMPORTS["kernels"].edges and "indexfile" in IMPORTS["kernels"].edges
    assert "kernels" in IMPORTS["codec"].edges
    g = Imports.__new__(Imports)
    g.module, g.edges, g.module_names, g.from_names = "probe", {}, {}, []
    src = ("import storelib.codec\nimport storelib.kernels as k\nfrom storelib import manifest\n"
           "from storelib.config import StoreConfig\nfrom typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    from .query import StoreReader\n"
           "def f():\n    from . import storage\n    from .errors import CorruptStore\n")
    for node in _run_nodes(ast.parse(src)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                g._absolute_import(alias, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            g._import_from(node)
    assert set(g.edges) == {"codec", "kernels", "manifest", "config", "storage", "errors"}
    assert g.module_names == {"k": "kernels", "manifest": "manifest", "storage": "storage"}


def test_no_import_cycles():
    graph = {m: imp.edges for m, imp in IMPORTS.items()}
    cycles = _cycles(graph)
    detail = []
    for comp in cycles:
        members = set(comp)
        detail.append(" <-> ".join(comp) + ": " + ", ".join(
            f"{m} -> {t} (line {line})" for m in comp for t, line in sorted(graph[m].items()) if t in members))
    assert not cycles, "import cycles in storelib:\n  " + "\n  ".join(detail)


@pytest.mark.parametrize("module", ["commitlog", "indexfile", "consumequeue"])
def test_layout_modules_do_not_import_kernels(module):
    assert "kernels" not in IMPORTS[module].edges


def test_module_length():
    too_long = []
    for m in MODULES:
        with open(_path(m), encoding="utf-8") as fh:
            n = sum(1 for _ in fh)
        if n > MAX_MODULE_LINES:
            too_long.append(f"storelib/{m}.py: {n} lines")
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines:\n  " + "\n  ".join(too_long)


def test_function_length():
    too_long = []
    for m in MODULES:
        for node in ast.walk(_tree(m)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1        # from ``def`` to the last line, decorators not counted
                if n > MAX_FUNCTION_LINES:
                    too_long.append(f"storelib/{m}.py:{node.lineno}: {node.name} ({n} lines)")
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines:\n  " + "\n  ".join(too_long)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_names_across_modules():
    found = []
    for m, imp in IMPORTS.items():
        for target, name, line in imp.from_names:
            if _private(name) and target != m:
                found.append(f"storelib/{m}.py:{line}: from .{target} import {name}")
        if not imp.module_names:
            continue
        for node in ast.walk(_tree(m)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                target = imp.module_names.get(node.value.id)
                if target is not None and target != m:
                    found.append(f"storelib/{m}.py:{node.lineno}: {node.value.id}.{node.attr} "
                                 f"(private name of storelib.{target})")
    assert not found, "private names used across storelib modules:\n  " + "\n  ".join(sorted(set(found)))
