"""The docs' maps of the code name only what exists, and their links resolve: every ``storelib/...`` path, every dotted
``storelib.x.y`` name and every ``*.py`` file the Markdown documents name (README.md, docs/, the
READMEs under tests/ and bench/). A module moved or renamed without its docs fails here, with the
document, the line and the name."""
from __future__ import annotations

import ast
import functools
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = sorted({os.path.relpath(p, ROOT) for pattern in ("*.md", "docs/*.md", "tests/**/*.md", "bench/**/*.md", "conf/**/*.md")
               for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)})
SKIP_DIRS = {".git", ".venv", ".cache", "node_modules", "__pycache__"}
FILE_SUFFIXES = (".py", ".md", ".zip", ".json", ".jar", ".txt")     # storelib.zip and the like: files, not names

# storelib/ paths (files or folders), dotted names, and file names ending in .py
PATH_RE = re.compile(r"(?<![\w/.-])(storelib(?:/[\w.-]+)+/?)")
DOTTED_RE = re.compile(r"(?<![\w.])(storelib(?:\.[A-Za-z_]\w*)+)")
PYFILE_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.py)\b")


@functools.lru_cache(maxsize=None)
def repo_py_files() -> tuple[set[str], set[str]]:
    """(relative paths, base names) of the checkout's .py files."""
    rels, names = set(), set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for f in filenames:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
                rels.add(rel.replace(os.sep, "/"))
                names.add(f)
    return rels, names


@functools.lru_cache(maxsize=None)
def top_level_names(path: str) -> frozenset[str]:
    """Names a module defines or imports at its top level (and its lazy ``__getattr__`` table, if any)."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
            value = node.value
            if isinstance(value, ast.Dict):          # storelib/__init__.py's lazy public names
                names.update(k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _module_path(parts: list[str]) -> str | None:
    base = os.path.join(ROOT, *parts)
    if os.path.isfile(base + ".py"):
        return base + ".py"
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return os.path.join(base, "__init__.py")
    return None


def dotted_problem(name: str) -> str | None:
    """Why ``storelib.a.b.c`` names nothing: its longest module prefix, then one name defined there
    (a class's or a function's attributes after that are not followed)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        path = _module_path(parts[:k])
        if path is None:
            continue
        if k == len(parts):
            return None
        if parts[k] in top_level_names(path):
            return None
        mod = ".".join(parts[:k])
        return f"{mod} has no {parts[k]!r}" if k > 1 or len(parts) > 2 else f"no module {name}"
    return f"no module {name}"


def references(doc: str) -> list[tuple[int, str, str]]:
    """(line number, kind, name) of every code reference in a document."""
    out = []
    with open(os.path.join(ROOT, doc), encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            for m in PATH_RE.finditer(line):
                out.append((i, "path", m.group(1).rstrip(".")))
            for m in DOTTED_RE.finditer(line):
                name = m.group(1)
                if not name.endswith(FILE_SUFFIXES):
                    out.append((i, "dotted", name))
            for m in PYFILE_RE.finditer(line):
                if not m.group(1).startswith("storelib/"):
                    out.append((i, "pyfile", m.group(1)))
    return out


def problem(kind: str, name: str) -> str | None:
    rels, names = repo_py_files()
    if kind == "path":
        return None if os.path.exists(os.path.join(ROOT, name.rstrip("/"))) else "no such file or folder"
    if kind == "dotted":
        return dotted_problem(name)
    if "/" in name:      # from the checkout, or (as docs/HOUSE.md writes them) from storelib/
        return None if {name, f"storelib/{name}"} & rels else "no such file"
    return None if name in names else "no such file anywhere in the checkout"


@pytest.mark.parametrize("doc", DOCS)
def test_every_module_a_document_names_exists(doc):
    bad = [f"{doc}:{i}: {name}: {why}" for i, kind, name in references(doc) if (why := problem(kind, name))]
    assert not bad, "\n".join(bad)


LINK_RE = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS)
def test_every_relative_link_resolves(doc):
    """A link to another document or file of the checkout (one operations document: links to a
    merged or moved page fail here)."""
    bad = []
    with open(os.path.join(ROOT, doc), encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            for m in LINK_RE.finditer(line):
                target = m.group(1)
                if "://" not in target and not target.startswith("mailto:") \
                        and not os.path.exists(os.path.join(ROOT, os.path.dirname(doc), target)):
                    bad.append(f"{doc}:{i}: {target}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_stale_names(tmp_path):
    """The rules catch what moved: a flat module gone into a wing, a dotted error path gone since
    errors.py, a file name no longer anywhere."""
    assert problem("path", "storelib/encode_stage.py")
    assert problem("path", "storelib/ingest/encode.py") is None
    assert problem("dotted", "storelib.io.StorePathError")
    assert problem("dotted", "storelib.errors.StorePathError") is None
    assert problem("dotted", "storelib.open_store") is None
    assert problem("dotted", "storelib.querycli")
    assert problem("pyfile", "metapaths.py")
    assert problem("pyfile", "jobs/ingest.py") is None
    assert problem("pyfile", "read/splits.py") is None
    assert problem("pyfile", "tests/test_cluster_multihost.py")
