"""bench/house_counts.py counts what it says on a checkout it is given (issue 37's counts)."""
from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "house_counts.py")

MODULE = '''"""doc naming commitlog"""
import json
import sys


def f(row, a: int, b, c, d, e, g, h) -> int:  # noqa: E501
    if row["kind"] == "commitlog":
        return json.loads(row["config"])["x"]
    try:
        return row.get("detail")
    except Exception:
        print("failed", file=sys.stderr)
    return {"kind": "index"}["kind"]
'''


def test_counts_of_a_small_checkout(tmp_path, capsys):
    (tmp_path / "storelib" / "format").mkdir(parents=True)
    (tmp_path / "storelib" / "ops.py").write_text(MODULE)
    (tmp_path / "storelib" / "format" / "k.py").write_text('K = "commitlog"\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("import sys\nsys.path." + "insert(0, 'x')\nsys.path" + "[:0] = ['y']\n")
    spec = importlib.util.spec_from_file_location("house_counts", SCRIPT)
    house_counts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(house_counts)
    c = house_counts.counts(str(tmp_path))
    assert c["str_subscripts"] == 4                      # row["kind"], row["config"], [...]["x"], {...}["kind"]
    assert c["row_json_loads"] == 1 and c["row_json_loads_modules"] == 1
    assert c["kind_literals_used"] == 2 and c["kind_literals_bare"] == 2     # format/ and the docstring not counted
    assert c["noqa_storelib"] == 1
    assert c["functions"] == 1 and c["returns_pct"] == 100.0 and c["params_pct"] == 12.5
    assert c["functions_ge8_params"] == 1
    assert c["catch_and_print"] == 1 and c["except_broad"] == 1
    assert c["sys_path_insert_tests"] == 1 and c["sys_path_edits_tests"] == 2
    assert c["max_module_lines"] == (13, os.path.join("storelib", "ops.py"))
    assert house_counts.main([str(tmp_path / "nowhere")]) == 2
    assert "not a rocketlake checkout" in capsys.readouterr().err
