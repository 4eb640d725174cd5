"""`make bench` is not part of the test suite, but its code is: a smoke run at tiny sizes
(``bench/run.py --smoke``) must run every section and write every result file."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def test_bench_smoke_runs_every_section(tmp_path):
    results = tmp_path / "results"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run.py"), "--smoke",
                        "--workdir", str(tmp_path / "work"), "--results", str(results)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    sections = {"disk", "codec", "ingest", "lookup", "batch", "verify"}
    assert {p.stem for p in results.glob("*.json")} == sections
    for s in sections:
        rows = json.loads((results / f"{s}.json").read_text())["rows"]
        assert rows and all(isinstance(x["value"], (int, float)) and x["value"] > 0 for x in rows), s
    ingest = json.loads((results / "ingest.json").read_text())["rows"]
    assert all(x["ratio"] is not None and x["ratio"] > 0 for x in ingest)
    assert "ingest 20000 msgs (s)" in r.stdout
