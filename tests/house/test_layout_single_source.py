"""Each on-disk layout is defined once, by the module that owns it (no Spark, no store).

Owners: ``commitlog.py`` (the record, BLANK, hosts, msgId), ``consumequeue.py`` (the unit),
``indexfile.py`` (header, slot, entry), ``checkpoint.py``. Every other module of ``storelib`` must
take offsets, sizes, dtypes and pack/parse helpers from them, so this test scans the sources for:

* ``struct`` calls with a literal format (``struct.pack(">q", ...)``, ``struct.Struct(">ii")``, ...);
* big-endian numpy dtype / struct format strings (``">i4"``, ``">q"``, ``">qiq"``) anywhere, which
  covers ``np.dtype([("phys", ">i8"), ...])``, ``.view(">i4")`` and ``astype(">i4")``;
* integer literals in the position or width arguments of the byte readers and writers
  (``gather_int(buf, s + 28, 8)``, ``_get32(data, s + 36)``, ``parse_i64(raw, 56)``, ...): a field
  offset or size written as a number instead of the owner's constant.
"""
from __future__ import annotations

import ast
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWNERS = {f"storelib/format/{n}.py" for n in ("commitlog", "consumequeue", "indexfile", "checkpoint")}
STRUCT_CALLS = {"pack", "pack_into", "unpack", "unpack_from", "iter_unpack", "calcsize", "Struct"}
# big-endian struct formats and numpy type strings: ">q", ">iqii", ">i8", "!H", ...
BIG_ENDIAN = re.compile(r"^[>!][0-9xcbB?hHiIlLqQnNefdspPu]+$")
# functions that read or write a field at a position (args after the buffer: position, width, value)
BYTE_ACCESS = {"gather_int", "_gather_int", "read_be", "_get32", "_get64", "_put32", "_put64", "parse_i32",
               "parse_i64", "parse_size_magic", "parse_fixed", "parse_unit", "parse_entry", "parse_slot",
               "parse_blank", "unpack_from", "pack_into"}
SOURCES = sorted(glob.glob(os.path.join(ROOT, "storelib", "**", "*.py"), recursive=True))


def _rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _int_literals(node: ast.AST) -> list[int]:
    """Integer literals >= 2 in an expression, not inside a nested call (``np.array([...])`` is data)."""
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Constant) and type(n.value) is int and n.value >= 2:
            out.append(n.value)
        elif isinstance(n, (ast.Call, ast.Subscript)) and n is not node:
            continue
        else:
            stack.extend(ast.iter_child_nodes(n))
    return out


def layout_literals(path: str) -> list[str]:
    """Every layout literal of one source file, as 'file:line: what'."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    rel = os.path.relpath(path, ROOT)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "struct":
            found.append(f"{rel}:{node.lineno}: from struct import ...")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and BIG_ENDIAN.match(node.value):
            found.append(f"{rel}:{node.lineno}: big-endian format {node.value!r}")
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "struct" and name in STRUCT_CALLS:
            if node.args and isinstance(node.args[0], ast.Constant):
                found.append(f"{rel}:{node.lineno}: struct.{name}({node.args[0].value!r}, ...)")
            else:
                found.append(f"{rel}:{node.lineno}: struct.{name}(...)")
        if name in BYTE_ACCESS and len(node.args) >= 2:
            lits = [v for a in node.args[1:] for v in _int_literals(a)]
            if lits:
                found.append(f"{rel}:{node.lineno}: {name}(...) with literal offset/width {lits}")
    return found


def test_the_owners_exist_and_are_scanned():
    names = {_rel(p) for p in SOURCES}
    assert OWNERS <= names
    # the scanner finds what it is meant to find
    owner = os.path.join(ROOT, "storelib", "format", "commitlog.py")
    assert any("big-endian format" in f for f in layout_literals(owner))


@pytest.mark.parametrize("path", [p for p in SOURCES if _rel(p) not in OWNERS], ids=_rel)
def test_no_layout_literals_outside_the_owning_modules(path):
    found = layout_literals(path)
    assert not found, "layout defined outside commitlog/consumequeue/indexfile/checkpoint:\n  " + "\n  ".join(found)
