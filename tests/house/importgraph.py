"""``storelib``'s import graph read from the sources with ``ast`` (nothing is imported).

A module is named by its dotted path under ``storelib`` (``format.commitlog``, ``errors``); its
package (wing) is the first part. Every import form counts, module-level and function-local:
``import storelib.x.y``, ``from storelib.x import y``, ``from storelib.x.y import z``, ``from . import y``,
``from ..x import y``, ``from ..x.y import z``. Imports under ``if TYPE_CHECKING:`` are never run and
are left out. ``storelib/__init__.py`` serves its public names lazily (``importlib``), adding no edge.
"""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG_NAME = "storelib"
PKG = os.path.join(ROOT, PKG_NAME)


def _modules() -> list[str]:
    out = []
    for dirpath, dirs, files in os.walk(PKG):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        rel = os.path.relpath(dirpath, PKG)
        prefix = "" if rel == "." else rel.replace(os.sep, ".") + "."
        for f in sorted(files):
            if f.endswith(".py"):
                name = f[:-3]
                out.append(prefix[:-1] if name == "__init__" and prefix else prefix + name)
    return sorted(out)


MODULES = _modules()                      # "__init__" is the package's own __init__
PACKAGES = sorted({m.split(".")[0] for m in MODULES if "." in m})


def path_of(module: str) -> str:
    if module == "__init__":
        return os.path.join(PKG, "__init__.py")
    base = os.path.join(PKG, *module.split("."))
    return os.path.join(base, "__init__.py") if os.path.isdir(base) else base + ".py"


def wing_of(module: str) -> str:
    """The package a module lives in (a top-level module is its own)."""
    return module.split(".")[0]


def _is_package(module: str) -> bool:
    return module in PACKAGES or module == "__init__"


def tree(module: str) -> ast.Module:
    with open(path_of(module), encoding="utf-8") as fh:
        return ast.parse(fh.read(), path_of(module))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def run_nodes(node: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (their ``else`` branch is kept)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, ast.If) and _is_type_checking(n.test):
            stack.extend(n.orelse)
            continue
        stack.extend(ast.iter_child_nodes(n))


class Imports:
    """What one module imports from storelib: edges (module -> first line), local names bound to
    storelib modules, and names imported from storelib modules."""

    def __init__(self, module: str, source: ast.AST | None = None):
        self.module = module
        self.edges: dict[str, int] = {}
        self.module_names: dict[str, str] = {}
        self.from_names: list[tuple[str, str, int]] = []
        for node in run_nodes(source if source is not None else tree(module)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._absolute(alias, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                self._from(node)

    def _edge(self, target: str, line: int) -> None:
        if target and target != self.module and target != "__init__":
            self.edges.setdefault(target, line)

    def _absolute(self, alias: ast.alias, line: int) -> None:
        parts = alias.name.split(".")
        if parts[0] != PKG_NAME or len(parts) < 2:
            return
        target = ".".join(parts[1:])
        self._edge(target, line)
        if alias.asname:
            self.module_names[alias.asname] = target

    def _base(self, node: ast.ImportFrom) -> str | None:
        """The storelib-relative dotted name ``node`` imports from ('' = storelib itself)."""
        if node.level:
            here = self.module.split(".")
            package = here if _is_package(self.module) and self.module != "__init__" else here[:-1]
            if self.module == "__init__":
                package = []
            if node.level - 1 > len(package):
                return None
            package = package[:len(package) - (node.level - 1)]
            return ".".join(package + ([node.module] if node.module else []))
        if node.module == PKG_NAME:
            return ""
        if node.module and node.module.startswith(PKG_NAME + "."):
            return node.module[len(PKG_NAME) + 1:]
        return None

    def _from(self, node: ast.ImportFrom) -> None:
        base = self._base(node)
        if base is None:
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}" if base else alias.name
            if sub in MODULES:                      # from pkg import module
                self._edge(sub, node.lineno)
                self.module_names[alias.asname or alias.name] = sub
            else:                                   # from module import name
                self._edge(base, node.lineno)
                self.from_names.append((base, alias.name, node.lineno))


IMPORTS = {m: Imports(m) for m in MODULES}
