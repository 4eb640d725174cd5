"""The package's public surface: ``storelib.__all__`` (cheap to import), ``__all__`` of every
module, and the one exit-code table of the jobs (``storelib.cli.common``)."""
from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from house.importgraph import MODULES as ALL_MODULES, PACKAGES, path_of  # noqa: E402

MODULES = [m for m in ALL_MODULES if m != "__init__" and m not in PACKAGES]
HEAVY = ("pyspark", "numba", "deltalake")


def _fresh(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.parametrize("module", ["storelib", "storelib.cli.common"])
def test_import_is_cheap(module):
    """``import storelib`` (and the jobs' shared cli) loads none of pyspark, numba, deltalake."""
    out = _fresh(f"import json, sys, {module}\n"
                 f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))")
    assert json.loads(out) == []


def test_public_names_resolve():
    import storelib
    assert storelib.__all__ and len(set(storelib.__all__)) == len(storelib.__all__)
    for name in storelib.__all__:
        assert getattr(storelib, name) is not None, name
    assert issubclass(storelib.CorruptStore, storelib.StoreError)
    with pytest.raises(AttributeError):
        storelib.no_such_name    # noqa: B018
    from storelib.ops import adopt   # a submodule is still a submodule
    assert adopt.__name__ == "storelib.ops.adopt"


def _defines_all(path: str) -> bool:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    return any(isinstance(node, (ast.Assign, ast.AnnAssign))
               and any(isinstance(t, ast.Name) and t.id == "__all__"
                       for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
               for node in tree.body)


def test_every_module_defines_all():
    missing = [m for m in MODULES if not _defines_all(path_of(m))]
    assert not missing, f"storelib modules without __all__: {missing}"


@pytest.mark.parametrize("module", MODULES)
def test_all_names_exist(module):
    mod = importlib.import_module(f"storelib.{module}")
    names = getattr(mod, "__all__", None)
    if names is None:
        pytest.skip(f"storelib.{module} has no __all__ (test_every_module_defines_all reports it)")
    assert len(set(names)) == len(names), f"duplicates in storelib.{module}.__all__"
    assert [n for n in names if not hasattr(mod, n)] == []


def test_exit_table_names_real_classes():
    from storelib import errors
    for cls, code, _in_task in errors.EXIT_TABLE:
        assert isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "storelib.errors", cls
        assert isinstance(code, errors.ExitCode)
    later = [c for c, _, _ in errors.EXIT_TABLE]
    for i, cls in enumerate(later):        # first match wins: no class after one of its bases
        assert not any(issubclass(cls, base) for base in later[:i]), cls


def test_exit_codes():
    from storelib import errors as errors_mod
    from storelib.cli import common as cli
    from storelib.errors import InputError
    from storelib.errors import ConfigError
    from storelib.errors import CorruptStore
    from storelib.errors import IngestError
    from storelib.errors import ConcurrentWriteError
    from storelib.errors import StorePathError
    from storelib.errors import TopicsError
    assert [int(c) for c in cli.ExitCode] == [0, 1, 2, 3]
    cases = [(InputError(["row 1: x"]), 2), (ConfigError("x"), 2), (TopicsError("x"), 2),
             (ConcurrentWriteError("x"), 3), (IngestError("x"), 1), (StorePathError("x"), 1),
             (CorruptStore("commitlog/0", 1, "x"), 1), (RuntimeError("x"), 1), (KeyError("x"), 1)]
    for exc, code in cases:
        assert cli.exit_code(exc) == code, exc
    assert cli.exit_code(errors_mod.NoSuchBatch("no such batch")) == 2
    assert str(errors_mod.NoSuchBatch("no such batch")) == "no such batch"
    # Raised inside a Spark task: the Py4J error's text holds the Python traceback, with the note
    # that names the class (tests/cli/test_task_errors.py raises each class in a real task).
    import traceback
    text = "".join(traceback.format_exception(InputError(["f line 3: x"])))
    wrapped = RuntimeError(f"An error occurred while calling o1.collect.\n{text}\n\tat ...")
    assert cli.exit_code(wrapped) == 2
    assert errors_mod.task_error(wrapped) == (2, "1 bad input row problem(s):\n  f line 3: x")
    assert isinstance(errors_mod.from_task(wrapped), InputError)
    # A module path in the text is not a class: only the note is.
    assert cli.exit_code(RuntimeError("...\nstorelib.errors.StorePathError: nope\n\n")) == 1
    assert errors_mod.from_task(RuntimeError("...\nstorelib.errors.InputError: nope\n\n")) is None


def test_public_functions_name_the_store_store():
    """One name for the store a public function works on: ``store`` (not ``store_uri``, not ``uri``),
    read from the sources (nothing imported)."""
    import storelib
    lazy = ast.literal_eval(next(
        n.value for n in ast.parse(open(path_of("__init__"), encoding="utf-8").read()).body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in n.targets)))
    takes_store = set()
    for public, (module, name) in lazy.items():
        with open(os.path.join(ROOT, *module.split(".")) + ".py", encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if fn is None:                   # a class or a constant
            continue
        params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
        assert not {"store_uri", "uri", "store_path"} & set(params), (public, params)
        if "store" in params:
            takes_store.add(public)
    assert takes_store >= {"open_store", "run_ingest", "ingest_dataframe", "rocketlake_batch_writer",
                           "verify_store", "expire_store", "adopt_store"}, takes_store
    assert set(lazy) == set(storelib.__all__)
