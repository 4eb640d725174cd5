"""The shape of ``storelib``'s import graph, read from the sources (tests/house/importgraph.py).

* the wings import in one direction only (``DIRECTION``): ``errors`` and ``format`` import nothing
  heavy; ``compute`` over ``format``; ``io`` and ``codec`` over those; ``table`` over ``io``;
  ``read``, ``ingest`` and ``verify`` never import each other; ``ops`` over them; ``cli`` over
  everything; ``ui`` over ``cli`` (``rocketlake ui`` is registered by module name); ``jobs/`` over
  ``cli`` only;
* no import cycle between modules, counting module-level and function-local imports;
* the cheap layers (``errors``, ``format``) import no third-party package but numpy at module level;
* no module longer than ``MAX_MODULE_LINES`` lines, no function longer than ``MAX_FUNCTION_LINES``;
* no module uses another storelib module's private names.
"""
from __future__ import annotations

import ast
import os

import pytest

from house.importgraph import (IMPORTS, MODULES, PACKAGES, PKG, ROOT, Imports, path_of, run_nodes, tree,
                              wing_of)

MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80

# What each wing may import (besides itself). Listed bottom up.
DIRECTION = {
    "errors": set(),
    "format": {"errors"},
    "compute": {"errors", "format"},
    "runtime": {"errors", "format"},
    "io": {"errors", "format", "compute"},
    "codec": {"errors", "format", "compute"},
    "table": {"errors", "format", "compute", "io", "runtime"},
    "read": {"errors", "format", "compute", "io", "codec", "table", "runtime"},
    "ingest": {"errors", "format", "compute", "io", "codec", "table", "runtime"},
    "verify": {"errors", "format", "compute", "io", "codec", "table", "runtime"},
    "ops": {"errors", "format", "compute", "io", "codec", "table", "runtime", "read", "ingest", "verify"},
    "cli": {"errors", "format", "compute", "io", "codec", "table", "runtime", "read", "ingest", "verify", "ops"},
    # the store browser: the command line's own answers, CSV and one-line errors on a web page
    "ui": {"errors", "format", "compute", "io", "codec", "table", "runtime", "read", "ingest", "verify", "ops",
           "cli"},
}
CHEAP = ("errors", "format")
CHEAP_THIRD_PARTY = {"numpy"}


def test_every_wing_has_a_place_in_the_direction():
    top = {m for m in MODULES if "." not in m and m not in PACKAGES and m != "__init__"}
    assert set(DIRECTION) == set(PACKAGES) | top


def test_the_graph_sees_every_import_form():
    """Module-level, function-local, relative and absolute imports are all edges."""
    src = ("import storelib.codec.messages\nimport storelib.compute.kernels as k\nfrom storelib.table import manifest\n"
           "from storelib.format.config import StoreConfig\nfrom typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    from ..read.query import StoreReader\n"
           "def f():\n    from ..io import storage\n    from ..errors import CorruptStore\n    from .write import x\n")
    g = Imports("ingest.driver", ast.parse(src))
    assert set(g.edges) == {"codec.messages", "compute.kernels", "table.manifest", "format.config", "io.storage",
                            "errors", "ingest.write"}
    assert g.module_names == {"k": "compute.kernels", "manifest": "table.manifest", "storage": "io.storage"}
    assert "format.commitlog" in IMPORTS["compute.kernels"].edges


def test_wings_import_in_one_direction():
    wrong = []
    for m, imp in IMPORTS.items():
        if m == "__init__":
            assert not imp.edges, "storelib/__init__.py serves its names lazily (importlib), never statically"
            continue
        for target, line in sorted(imp.edges.items()):
            a, b = wing_of(m), wing_of(target)
            if a != b and b not in DIRECTION[a]:
                wrong.append(f"{os.path.relpath(path_of(m), ROOT)}:{line}: {a} -> {b} ({target})")
    assert not wrong, "imports against the direction of the wings:\n  " + "\n  ".join(wrong)


def test_jobs_import_only_the_cli():
    wrong = []
    jobs = os.path.join(ROOT, "jobs")
    for name in sorted(os.listdir(jobs)):
        if not name.endswith(".py"):
            continue
        path = os.path.join(jobs, name)
        for node in run_nodes(ast.parse(open(path, encoding="utf-8").read(), path)):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for mod in mods:
                if mod.startswith("storelib.") and not mod.startswith("storelib.cli"):
                    if not any(x.startswith("storelib.cli") for x in mods):
                        wrong.append(f"jobs/{name}:{node.lineno}: {mod}")
                    break
    assert not wrong, "jobs/ are thin: they import storelib.cli only\n  " + "\n  ".join(wrong)


@pytest.mark.parametrize("module", [m for m in MODULES if wing_of(m) in CHEAP])
def test_cheap_layers_import_nothing_heavy(module):
    heavy = []
    for node in tree(module).body:            # module level only: function-local imports are lazy
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for n in names:
            top = n.split(".")[0]
            if top not in CHEAP_THIRD_PARTY and top != "storelib" and top not in _stdlib():
                heavy.append(f"line {node.lineno}: {n}")
    assert not heavy, f"storelib.{module} must stay cheap to import: {heavy}"


def _stdlib() -> frozenset:
    import sys
    return frozenset(sys.stdlib_module_names) | {"__future__"}


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


def test_no_import_cycles():
    graph = {m: {t: line for t, line in imp.edges.items() if t not in PACKAGES} for m, imp in IMPORTS.items()}
    cycles = _cycles(graph)
    detail = [" <-> ".join(comp) for comp in cycles]
    assert not cycles, "import cycles in storelib:\n  " + "\n  ".join(detail)


@pytest.mark.parametrize("module", ["format.commitlog", "format.indexfile", "format.consumequeue"])
def test_layout_modules_do_not_import_kernels(module):
    assert "compute.kernels" not in IMPORTS[module].edges


def test_module_length():
    too_long = []
    for m in MODULES:
        with open(path_of(m), encoding="utf-8") as fh:
            n = sum(1 for _ in fh)
        if n > MAX_MODULE_LINES:
            too_long.append(f"{os.path.relpath(path_of(m), ROOT)}: {n} lines")
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines:\n  " + "\n  ".join(too_long)


def test_function_length():
    too_long = []
    for m in MODULES:
        for node in ast.walk(tree(m)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    too_long.append(f"{os.path.relpath(path_of(m), ROOT)}:{node.lineno}: {node.name} ({n} lines)")
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines:\n  " + "\n  ".join(too_long)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_names_across_modules():
    found = []
    for m, imp in IMPORTS.items():
        for target, name, line in imp.from_names:
            if _private(name) and target != m:
                found.append(f"storelib.{m}:{line}: from {target} import {name}")
        if not imp.module_names:
            continue
        for node in ast.walk(tree(m)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
                target = imp.module_names.get(node.value.id)
                if target is not None and target != m:
                    found.append(f"storelib.{m}:{node.lineno}: {node.value.id}.{node.attr} (private name of "
                                 f"storelib.{target})")
    assert not found, "private names used across storelib modules:\n  " + "\n  ".join(sorted(set(found)))


def test_the_package_is_where_the_graph_looks():
    assert os.path.isfile(os.path.join(PKG, "__init__.py")) and len(MODULES) > 60
