"""Where rows and file kinds may be taken apart, read from the sources with ``ast`` (no storelib module is imported).

Three rules, each a function over a parsed module that returns its offending ``(line, text)``s:

* ``row_json_parses``: ``json.loads`` of a row's JSON column, an argument that reads ``config`` /
  ``detail`` (``x["detail"]``, ``x.get("config")``, ``x.detail``, a name ``detail``). The floor of
  that parse is ``table/`` (``table.rows`` parses each row's columns once, by the one rule
  ``format.filekinds.json_column``): above it, code reads ``row.detail`` / ``batch.config``.
* ``kind_literals``: a file-kind string (``commitlog``, ``consumequeue``, ``index``,
  ``checkpoint``) used as a kind: compared (``==``, ``in``; alone or in a tuple) with a kind
  (``x.kind``, ``x["kind"]``, ``x.get("kind")``, a name ``kind`` / ``*_kind``), given as
  ``kind=``, as the ``"kind"`` of a dict display, as the first argument of ``of_kind`` /
  ``file_row``, or enumerated (a tuple, list or set display, or the keys of a dict display, holding
  two kinds or more). The floor of a kind's spelling is ``format/`` (``format.filekinds.FileKind``).
  The same words as directory names (``store.list_files("commitlog")``), a split's ``"index"``
  or a summary's ``"commitlog"`` notes are not kinds, and are not flagged.
* ``row_subscripts``: ``row["column"]`` on a value that is a manifest or batch row: ``x.batch`` /
  ``x.latest`` (a snapshot's batch), ``x.files.get(..)`` / ``x.files[..]`` / ``x.removed.get(..)``,
  ``x.batches[..]``, ``ManifestRow(..)`` / ``BatchRow(..)`` (``.of``), an element of a row
  sequence (``x.batches``, ``x.files.values()``, ``x.removed.values()``, ``x.of_kind(..)``,
  ``manifest_rows(..)``, ``batch_rows(..)``, and ``sorted`` / ``reversed`` / ``list`` of one), and
  any name bound to one of those in the same function (assignment, ``for`` and comprehension
  targets, a ``key=lambda`` over a row sequence, a parameter annotated ``ManifestRow`` /
  ``BatchRow``). Such a row is read by attribute (``row.valid_bytes``, ``batch.batch_id``).
"""
from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Iterator

# bench/house_counts.py (issue 37's counts) says what a row's JSON and a docstring are: the same rules here.
_spec = importlib.util.spec_from_file_location(
    "house_counts", os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                 "bench", "house_counts.py"))
assert _spec is not None and _spec.loader is not None
_counts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_counts)

FILE_KINDS = _counts.FILE_KINDS
ROW_TYPES = ("ManifestRow", "BatchRow")
_ROW_SEQ_CALLS = ("manifest_rows", "batch_rows")
_ROW_SEQ_ATTRS = ("batches",)
_ROW_ONE_ATTRS = ("batch", "latest")
_ROW_MAPS = ("files", "removed")
_ROW_SEQ_METHODS = ("of_kind",)
_SEQ_WRAPPERS = ("sorted", "reversed", "list", "tuple")


def _line(node: ast.AST) -> tuple[int, str]:
    return node.lineno, ast.unparse(node)


# ---------------------------------------------------------------------------- row JSON
def row_json_parses(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "loads" \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "json" and n.args \
                and _counts._mentions_row_json(n.args[0]):
            out.append(_line(n))
    return sorted(out)


# ---------------------------------------------------------------------------- kind literals
def _is_kind(node: ast.AST | None, docs: set[int]) -> bool:
    return isinstance(node, ast.Constant) and node.value in FILE_KINDS and id(node) not in docs


def _elements(node: ast.AST) -> list[ast.AST]:
    return list(node.elts) if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _reads_kind(e: ast.AST) -> bool:
    """``x.kind``, ``x["kind"]``, ``x.get("kind")``, a name ``kind`` / ``*_kind``."""
    if isinstance(e, ast.Attribute):
        return e.attr == "kind"
    if isinstance(e, ast.Subscript):
        return isinstance(e.slice, ast.Constant) and e.slice.value == "kind"
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "get" and e.args:
        return isinstance(e.args[0], ast.Constant) and e.args[0].value == "kind"
    return isinstance(e, ast.Name) and (e.id == "kind" or e.id.endswith("_kind"))


def kind_literals(tree: ast.AST) -> list[tuple[int, str]]:
    docs = _counts._docstrings(tree)
    used: dict[int, ast.AST] = {}

    def use(nodes: list[ast.AST]) -> None:
        used.update((id(e), e) for e in nodes if _is_kind(e, docs))

    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and any(_reads_kind(side) for side in [n.left, *n.comparators]):
            for side in [n.left, *n.comparators]:
                use(_elements(side))
        elif isinstance(n, ast.Call):
            use([k.value for k in n.keywords if k.arg == "kind"])
            if _call_name(n) in ("of_kind", "file_row") and n.args:
                use([n.args[0]])
        elif isinstance(n, ast.Dict):
            use([v for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant) and k.value == "kind"])
            kinds = [k for k in n.keys if k is not None and _is_kind(k, docs)]
            if len({k.value for k in kinds if isinstance(k, ast.Constant)}) >= 2:
                use(list(kinds))
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            kinds = [e for e in n.elts if _is_kind(e, docs)]
            if len({e.value for e in kinds if isinstance(e, ast.Constant)}) >= 2:
                use(kinds)
    return sorted((getattr(e, "lineno", 0), repr(getattr(e, "value", ""))) for e in used.values())


# ---------------------------------------------------------------------------- row subscripts
class _Rows:
    """Which expressions of one function (or module body) are rows or row sequences."""

    def __init__(self, params: set[str]) -> None:
        self.rows = set(params)         # names bound to one row
        self.seqs: set[str] = set()     # names bound to a sequence of rows

    def is_seq(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.seqs
        if isinstance(e, ast.Attribute):
            return e.attr in _ROW_SEQ_ATTRS
        if isinstance(e, ast.Call):
            name = _call_name(e)
            f = e.func
            if name in _ROW_SEQ_CALLS or name in _ROW_SEQ_METHODS:
                return True
            if name == "values" and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) \
                    and f.value.attr in _ROW_MAPS:
                return True
            if isinstance(f, ast.Name) and name in _SEQ_WRAPPERS and e.args:
                return self.is_seq(e.args[0])
        if isinstance(e, (ast.ListComp, ast.GeneratorExp)):
            return self.is_row(e.elt) and all(self.is_seq(g.iter) for g in e.generators)
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            return self.is_seq(e.left) and self.is_seq(e.right)
        if isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice):
            return self.is_seq(e.value)
        return False

    def is_row(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.rows
        if isinstance(e, ast.Attribute):
            return e.attr in _ROW_ONE_ATTRS
        if isinstance(e, ast.Subscript):
            v = e.value
            if isinstance(v, ast.Attribute) and v.attr in _ROW_MAPS:
                return True
            return not isinstance(e.slice, ast.Slice) and self.is_seq(v)
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name) and f.id in ROW_TYPES:
                return True
            if isinstance(f, ast.Attribute) and f.attr == "of" and isinstance(f.value, ast.Name) \
                    and f.value.id in ROW_TYPES:
                return True
            if isinstance(f, ast.Attribute) and f.attr == "get" and isinstance(f.value, ast.Attribute) \
                    and f.value.attr in _ROW_MAPS:
                return True
            if isinstance(f, ast.Name) and f.id == "next" and e.args and isinstance(e.args[0], ast.GeneratorExp):
                return self.is_row(e.args[0].elt) and all(self.is_seq(g.iter) for g in e.args[0].generators)
        if isinstance(e, ast.IfExp):
            return self.is_row(e.body) or self.is_row(e.orelse)
        return False

    def bind(self, target: ast.AST, row: bool, seq: bool) -> None:
        if isinstance(target, ast.Name):
            if row:
                self.rows.add(target.id)
            if seq:
                self.seqs.add(target.id)


def _annotated_rows(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    out = set()
    for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
        ann = p.annotation
        text = ann.value if isinstance(ann, ast.Constant) and isinstance(ann.value, str) else \
            ast.unparse(ann) if ann is not None else ""
        if any(t in text for t in ROW_TYPES) and "list" not in text and "dict" not in text:
            out.add(p.arg)
    return out


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.GeneratorExp, ast.DictComp)


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` that bind in it: not inside nested functions, classes or comprehensions."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, _SCOPES):
            yield from _own_nodes(child)


def _targets(t: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]


def _bind_scope(scope: ast.AST, rows: _Rows) -> None:
    """Names of ``scope`` every binding of which is a row (or a row sequence) are rows (sequences);
    a name also bound to anything else is neither (flow-insensitive, so never guessed)."""
    for _ in range(2):                                  # a binding may rest on another one
        row_b: dict[str, bool] = {}
        seq_b: dict[str, bool] = {}

        def bind(target: ast.AST, row: bool, seq: bool, row_b: dict[str, bool] = row_b,
                 seq_b: dict[str, bool] = seq_b) -> None:
            simple = isinstance(target, ast.Name)
            for name in _targets(target):
                row_b[name] = row_b.get(name, True) and row and simple
                seq_b[name] = seq_b.get(name, True) and seq and simple

        for n in _own_nodes(scope):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    bind(t, rows.is_row(n.value), rows.is_seq(n.value))
            elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                bind(n.target, rows.is_row(n.value), rows.is_seq(n.value))
            elif isinstance(n, (ast.For, ast.AsyncFor)):
                bind(n.target, rows.is_seq(n.iter), False)
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                for item in n.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars, False, False)
            elif isinstance(n, ast.NamedExpr):
                bind(n.target, rows.is_row(n.value), rows.is_seq(n.value))
        for name, ok in row_b.items():
            (rows.rows.add if ok else rows.rows.discard)(name)
        for name, ok in seq_b.items():
            (rows.seqs.add if ok else rows.seqs.discard)(name)


def _child(rows: _Rows, shadowed: set[str]) -> _Rows:
    inner = _Rows(set())
    inner.rows = rows.rows - shadowed
    inner.seqs = rows.seqs - shadowed
    return inner


def _scan(scope: ast.AST, rows: _Rows, out: list[tuple[int, str]]) -> None:
    _bind_scope(scope, rows)
    for n in _own_nodes(scope):
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and isinstance(n.slice, ast.Constant) \
                and isinstance(n.slice.value, str) and rows.is_row(n.value):
            out.append(_line(n))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = _child(rows, _params(n))
            inner.rows |= _annotated_rows(n)
            _scan(n, inner, out)
        elif isinstance(n, ast.ClassDef):
            _scan(n, _Rows(set()), out)
        elif isinstance(n, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = _child(rows, {t for g in n.generators for t in _targets(g.target)})
            for g in n.generators:
                if isinstance(g.target, ast.Name) and inner.is_seq(g.iter):
                    inner.rows.add(g.target.id)
            _scan(n, inner, out)
        elif isinstance(n, ast.Lambda):
            _scan(n, _child(rows, {a.arg for a in n.args.args}), out)
        elif isinstance(n, ast.Call) and _call_name(n) in ("sorted", "min", "max") and n.args \
                and rows.is_seq(n.args[0]):
            for k in n.keywords:                 # key=lambda r: ... over a row sequence: r is a row
                if k.arg == "key" and isinstance(k.value, ast.Lambda) and k.value.args.args:
                    lam = k.value
                    inner = _child(rows, {a.arg for a in lam.args.args})
                    inner.rows.add(lam.args.args[0].arg)
                    _scan(ast.Expression(body=lam.body), inner, out)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}


def row_subscripts(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    _scan(tree, _Rows(set()), out)
    return sorted(set(out))
