"""Rows and file kinds are taken apart on their own floor only (tests/house/rowfloors.py has the rules):

* a row's JSON (``config`` / ``detail``) is parsed in ``table/`` (``table.rows``, by
  ``format.filekinds.json_column``), nowhere else: above it code reads ``row.detail``;
* a file kind is spelled in ``format/`` (``format.filekinds.FileKind``), nowhere else;
* above ``table/`` a manifest or batch row is read by attribute (``row.path``, ``batch.batch_id``),
  never as ``row["path"]``.
"""
from __future__ import annotations

import ast
import os

import pytest

from house import rowfloors
from house.importgraph import PKG, ROOT

# Not yet moved (modules another change owns): each leaves this list when it holds the rule.
KIND_PENDING = {"table/rowcheck.py"}            # _PREFIX keyed by kind literals
# Row subscripts above table/ in read/ and verify/: bounded at what they hold (never more).
SUBSCRIPT_BOUND = {"verify/driver.py": 2}
ABOVE_TABLE = ("read", "ingest", "verify", "ops", "cli", "ui")


def _modules(skip: tuple[str, ...] = ()) -> list[str]:
    out = []
    for dirpath, dirs, files in os.walk(PKG):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, f), PKG).replace(os.sep, "/")
            if f.endswith(".py") and not rel.startswith(skip):
                out.append(rel)
    return out


def _tree(rel: str) -> ast.Module:
    with open(os.path.join(PKG, rel), encoding="utf-8") as fh:
        return ast.parse(fh.read(), filename=rel)


def _where(rel: str, found: list[tuple[int, str]]) -> str:
    return "\n".join(f"storelib/{rel}:{line}: {text}" for line, text in found)


@pytest.mark.parametrize("rel", _modules(skip=("table/", "format/")))
def test_no_row_json_parsed_off_its_floor(rel):
    found = rowfloors.row_json_parses(_tree(rel))
    assert not found, ("a row's JSON parsed outside table/ (read row.detail / batch.config):\n"
                       + _where(rel, found))


@pytest.mark.parametrize("rel", _modules(skip=("format/",)))
def test_no_file_kind_literal_off_its_floor(rel):
    found = rowfloors.kind_literals(_tree(rel))
    if rel in KIND_PENDING:
        assert found, f"storelib/{rel} holds the rule now: take it off KIND_PENDING"
        return
    assert not found, "a file kind spelled outside format/ (use format.filekinds.FileKind):\n" + _where(rel, found)


@pytest.mark.parametrize("rel", [m for m in _modules() if m.split("/")[0] in ABOVE_TABLE])
def test_rows_read_by_attribute_above_table(rel):
    found = rowfloors.row_subscripts(_tree(rel))
    bound = SUBSCRIPT_BOUND.get(rel, 0)
    assert len(found) <= bound, (f"rows subscripted above table/ ({len(found)}, at most {bound}; read them by "
                                 "attribute: row.path, batch.batch_id):\n" + _where(rel, found))


def test_the_bounds_are_tight():
    """A module that went under its bound gets the lower bound (the bound only ever falls)."""
    for rel, bound in SUBSCRIPT_BOUND.items():
        n = len(rowfloors.row_subscripts(_tree(rel)))
        assert n == bound, f"storelib/{rel} holds {n} row subscripts now: set its SUBSCRIPT_BOUND to {n}"


# ---------------------------------------------------------------------------- the rules themselves
SAMPLE = '''
import json

def f(snap, store, rows: list, one: "ManifestRow"):
    """commitlog in a docstring is no kind"""
    a = json.loads(snap.batch["config"])                   # json + sub
    b = json.loads(one.get("detail") or "{}")              # json
    c = json.loads(store.read("x"))                         # not a row's JSON
    for r in snap.of_kind("index"):                        # kind
        r["path"]                                          # sub
    segs = sorted(snap.files.values(), key=lambda r: r["base_offset"])   # sub (the key lambda)
    last = segs[-1]
    last["valid_bytes"]                                    # sub
    one["kind"] == "commitlog"                             # kind + sub
    [b["batch_id"] for b in snap.batches]                  # sub
    for s in rows:                                         # rows: not known to be rows
        s["path"]
    k not in ("findings", "commitlog")                     # a summary key, not a kind
    store.list_files("consumequeue")                       # a directory, not a kind
    {"commitlog": 1, "index": 2}                           # kind x2 (a table by kind)
    {"index": 3, "rows": 4}                                # a split's index
    for k in ("commitlog", "consumequeue"):                # kind x2
        pass
    x = snap.batch
    x = 5
    x["y"]                                                 # x is also a number: not known to be a row
'''


def test_the_rules_find_what_they_say():
    tree = ast.parse(SAMPLE)
    assert [line for line, _ in rowfloors.row_json_parses(tree)] == [6, 7]
    assert sorted(text for _, text in rowfloors.kind_literals(tree)) == sorted(
        ["'index'", "'commitlog'", "'commitlog'", "'index'", "'commitlog'", "'consumequeue'"])
    subs = [text for _, text in rowfloors.row_subscripts(tree)]
    assert subs == ["snap.batch['config']", "r['path']", "r['base_offset']", "last['valid_bytes']", "one['kind']",
                    "b['batch_id']"]


def test_the_rules_read_the_checkout():
    assert os.path.isdir(os.path.join(ROOT, "storelib", "format")) and len(_modules()) > 100
