"""SIGTERM to a Spark `rocketlake ingest` in its read, write or commit stage: one line, exit 143,
nothing committed; no PySpark ``EOFError`` trace, no Spark ``ERROR`` / ``TaskKilled`` lines
(ROCKETLAKE_LONG=1). In `make test`: a signal that breaks a Py4J call is still the interrupt."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from support.longrun import long_test

SAMPLE = os.path.join(ROOT, "samples", "messages.jsonl")


@pytest.mark.slow
@long_test("a Spark job per stage")
@pytest.mark.parametrize("point", ["encode-split", "mid-segment-write", "before-delta-commit"])
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


CUT_CALL = r'''
import os, signal, sys, time
from storelib.cli import common
from storelib.errors import Interrupted

def body(spark, cfg):
    cut = False
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except Interrupted:
        cut = True
    if cut:     # what Py4J raises, unchained, for the call a signal cut
        raise RuntimeError("Answer from Java side is empty")
    return 0

sys.exit(common.run_job("ingest", None, body, config=object(), session=object(), state=lambda: "nothing was committed"))
'''


def test_an_interrupt_that_breaks_a_call_is_still_the_interrupt(tmp_path):
    """The signal lands in a Py4J call, which then fails with its own error: the interrupt's line, 143."""
    p = subprocess.run([sys.executable, "-c", CUT_CALL], capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (ROOT, os.environ.get("PYTHONPATH")) if x)))
    assert p.returncode == 143, p.stderr
    assert p.stderr.strip().splitlines() == ["interrupted (SIGTERM): nothing was committed"], p.stderr
