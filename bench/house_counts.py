"""The house counts of issue 37, read from a checkout's source with ``ast`` (nothing is imported):

    .venv/bin/python bench/house_counts.py [CHECKOUT] [--json]

CHECKOUT defaults to this file's own checkout. Run it on main and on a branch to compare them.
Each count says what it counts; ``storelib`` means every ``*.py`` under CHECKOUT/storelib.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from collections.abc import Iterator

FILE_KINDS = ("commitlog", "consumequeue", "index", "checkpoint")
ROW_JSON_KEYS = ("config", "detail")
PRINT_TARGETS = ("stderr",)
MANY_PARAMS = 8


def _py_files(root: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".cache", ".venv"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                yield os.path.join(dirpath, name)


def _parse(path: str) -> tuple[ast.Module, str]:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return ast.parse(text, filename=path), text


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the Constant nodes that are docstrings (never counted as literals)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> list[ast.arg]:
    a = fn.args
    params = [*a.posonlyargs, *a.args]
    if method and params and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        params = params[1:]                       # self / cls
    params += a.kwonlyargs
    params += [p for p in (a.vararg, a.kwarg) if p is not None]
    return params


def _functions(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """Every def, with whether it is a method (directly in a class body)."""
    def walk(node: ast.AST, in_class: bool) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child, in_class
                yield from walk(child, False)
            else:
                yield from walk(child, isinstance(child, ast.ClassDef))
    yield from walk(tree, False)


def _mentions_row_json(node: ast.AST) -> bool:
    """A row's config/detail: ``x["config"]``, ``x.get("detail")``, ``x.config`` or a name ending so."""
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value in ROW_JSON_KEYS:
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args \
                and isinstance(n.args[0], ast.Constant) and n.args[0].value in ROW_JSON_KEYS:
            return True
        if isinstance(n, ast.Attribute) and n.attr in ROW_JSON_KEYS:
            return True
        if isinstance(n, ast.Name) and n.id in ROW_JSON_KEYS:
            return True
    return False


def _is_call(node: ast.AST, dotted: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    parts = dotted.split(".")
    f = node.func
    for part in reversed(parts[1:]):
        if not (isinstance(f, ast.Attribute) and f.attr == part):
            return False
        f = f.value
    return isinstance(f, ast.Name) and f.id == parts[0]


def _prints_to_stderr(node: ast.AST) -> bool:
    """``print(..., file=sys.stderr)`` or ``sys.stderr.write(...)`` (not inside a nested def)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if _is_call(n, "print") and any(k.arg == "file" and _is_call_target_stderr(k.value) for k in n.keywords):
            return True
        if _is_call(n, "sys.stderr.write"):
            return True
        stack.extend(ast.iter_child_nodes(n))
    return False


def _is_call_target_stderr(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "stderr"


def _kind_literal_sites(tree: ast.Module, docs: set[int]) -> tuple[int, int]:
    """(bare literals, literals used as a kind): a file-kind string constant anywhere (not a docstring),
    and those compared (``==``, ``in``), given as ``kind=``, or as the value of a ``"kind"`` dict key."""
    bare = 0
    used = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and n.value in FILE_KINDS and id(n) not in docs:
            bare += 1
        if isinstance(n, ast.Compare):
            for side in [n.left, *n.comparators]:
                elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                used.update(id(e) for e in elts if isinstance(e, ast.Constant) and e.value in FILE_KINDS)
        if isinstance(n, ast.Call):
            used.update(id(k.value) for k in n.keywords
                        if k.arg == "kind" and isinstance(k.value, ast.Constant) and k.value.value in FILE_KINDS)
        if isinstance(n, ast.Dict):
            used.update(id(v) for k, v in zip(n.keys, n.values)
                        if isinstance(k, ast.Constant) and k.value == "kind"
                        and isinstance(v, ast.Constant) and v.value in FILE_KINDS)
    return bare, len(used)


def counts(checkout: str) -> dict:
    storelib = os.path.join(checkout, "storelib")
    fmt = os.path.join(storelib, "format") + os.sep
    c: dict = {"str_subscripts": 0, "row_json_loads": 0, "row_json_loads_modules": 0,
               "kind_literals_bare": 0, "kind_literals_used": 0, "noqa_storelib": 0,
               "returns_hinted": 0, "functions": 0, "params_hinted": 0, "params": 0,
               "functions_ge8_params": 0, "catch_and_print": 0, "except_broad": 0,
               "max_module_lines": (0, ""), "max_function_lines": (0, "")}
    json_modules = set()
    for path in _py_files(storelib):
        tree, text = _parse(path)
        rel = os.path.relpath(path, checkout)
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        c["max_module_lines"] = max(c["max_module_lines"], (lines, rel))
        c["noqa_storelib"] += len(re.findall(r"#\s*noqa\b", text))
        docs = _docstrings(tree)
        if not path.startswith(fmt):
            bare, used = _kind_literal_sites(tree, docs)
            c["kind_literals_bare"] += bare
            c["kind_literals_used"] += used
        for n in ast.walk(tree):
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                c["str_subscripts"] += 1
            elif _is_call(n, "json.loads") and n.args and _mentions_row_json(n.args[0]):
                c["row_json_loads"] += 1
                json_modules.add(rel)
            elif isinstance(n, ast.ExceptHandler):
                if _prints_to_stderr(ast.Module(body=n.body, type_ignores=[])):
                    c["catch_and_print"] += 1
                if n.type is None or (isinstance(n.type, ast.Name) and n.type.id in ("Exception", "BaseException")):
                    c["except_broad"] += 1
        for fn, method in _functions(tree):
            params = _params(fn, method)
            c["functions"] += 1
            c["returns_hinted"] += fn.returns is not None
            c["params"] += len(params)
            c["params_hinted"] += sum(p.annotation is not None for p in params)
            c["functions_ge8_params"] += len(params) >= MANY_PARAMS
            span = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            c["max_function_lines"] = max(c["max_function_lines"], (span, f"{rel}:{fn.lineno} {fn.name}"))
    c["row_json_loads_modules"] = len(json_modules)
    tests = os.path.join(checkout, "tests")
    texts = [_parse(p)[1] for p in _py_files(tests)] if os.path.isdir(tests) else []
    c["sys_path_insert_tests"] = sum(len(re.findall(r"sys\.path\.insert\(", t)) for t in texts)
    c["sys_path_edits_tests"] = sum(len(re.findall(r"sys\.path\.(?:insert|append|extend)\(|sys\.path\[[^]]*\]\s*=", t))
                                    for t in texts)
    c["returns_pct"] = round(100 * c["returns_hinted"] / max(c["functions"], 1), 1)
    c["params_pct"] = round(100 * c["params_hinted"] / max(c["params"], 1), 1)
    return c


LABELS = [
    ("str_subscripts", 'x["key"] subscripts in storelib (ast.Subscript with a str constant)'),
    ("row_json_loads", "json.loads(...) of a row's config/detail in storelib"),
    ("row_json_loads_modules", "  ... in this many modules"),
    ("kind_literals_used", "file-kind literals used as a kind outside format/ (compared, kind=, {'kind': ...})"),
    ("kind_literals_bare", "file-kind literals outside format/ (any str constant, docstrings excepted)"),
    ("noqa_storelib", "# noqa markers in storelib"),
    ("returns_pct", "% of functions with a return annotation (storelib)"),
    ("params_pct", "% of parameters annotated (storelib; self/cls excepted)"),
    ("functions", "  functions (defs) in storelib"),
    ("sys_path_insert_tests", "sys.path.insert( in tests/ (code and code strings)"),
    ("sys_path_edits_tests", "  ... any sys.path edit in tests/ (insert, append, extend, sys.path[...] =)"),
    ("functions_ge8_params", f"functions with >= {MANY_PARAMS} parameters (storelib)"),
    ("catch_and_print", "except handlers that print to stderr themselves (storelib)"),
    ("except_broad", "except handlers catching Exception/BaseException/bare (storelib)"),
    ("max_module_lines", "longest module (lines)"),
    ("max_function_lines", "longest function (lines)"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", nargs="?", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    args = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(args.checkout, "storelib")):
        print(f"error: {args.checkout}: not a rocketlake checkout (no storelib/)", file=sys.stderr)
        return 2
    c = counts(args.checkout)
    if args.json:
        print(json.dumps(c, indent=1))
        return 0
    for key, label in LABELS:
        v = c[key]
        shown = f"{v[0]}  ({v[1]})" if isinstance(v, tuple) else v
        print(f"{label:<95} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
