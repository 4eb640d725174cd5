"""SIGTERM to a Spark `rocketlake ingest` in its read, write or commit stage: one line, exit 143,
nothing committed; no PySpark ``EOFError`` trace, no Spark ``ERROR`` / ``TaskKilled`` lines.
The write stage runs in `make test`; the others with ROCKETLAKE_LONG=1."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

SAMPLE = os.path.join(ROOT, "samples", "messages.jsonl")
LONG = os.environ.get("ROCKETLAKE_LONG") == "1"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("point", [
    pytest.param("encode-split", marks=pytest.mark.skipif(not LONG, reason="ROCKETLAKE_LONG=1")),
    "mid-segment-write",
    pytest.param("before-delta-commit", marks=pytest.mark.skipif(not LONG, reason="ROCKETLAKE_LONG=1")),
])
def test_sigterm_in_a_stage_says_one_line(tmp_path, point):
    gate, store = str(tmp_path / "gate"), tmp_path / "s"
    env = dict(os.environ, ROCKETLAKE_HOLD=f"{point}:{gate}", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    p = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "ingest", "--store", str(store), "--input", SAMPLE,
                          "--local", "never"], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 400
        while not os.path.exists(gate + ".reached") and p.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert os.path.exists(gate + ".reached"), "the job never reached " + point
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=300)
    finally:
        open(gate, "w").close()                      # a held task that outlived the job lets go
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143, err[-3000:]
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("[rocketlake")]
    assert len(lines) == 1 and lines[0].startswith("interrupted (SIGTERM): nothing was committed"), err[-3000:]
    assert "EOFError" not in err and "Traceback" not in err and "ERROR" not in err
    assert "status=committed" not in out
