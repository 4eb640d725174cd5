"""`rocketlake` with Spark from a new user's shell: no PYSPARK_PYTHON, no spark-submit on PATH.

The command starts Spark in its own process (``--local never``), its Python workers run the same
interpreter (without that they start PATH's python3, which lacks pyarrow), Spark's logging stays
quiet, and Ctrl-C ends the job with one line and exit 130, without Py4J's tracebacks.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

SAMPLE = os.path.join(ROOT, "samples", "messages.jsonl")
DEMO_CONF = os.path.join(ROOT, "conf", "demo.properties")

pytestmark = pytest.mark.slow


def fresh_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PATH"] = "/usr/bin:/bin"                      # no .venv/bin: rocketlake finds Spark itself
    return env


def rocketlake(*argv) -> list:
    return [sys.executable, "-m", "storelib.cli.main", *map(str, argv)]


def test_spark_ingest_from_a_fresh_shell(tmp_path):
    ten = tmp_path / "ten.jsonl"
    ten.write_text("".join(open(SAMPLE).readlines()[:10]))
    s = tmp_path / "s"
    p = subprocess.run(rocketlake("ingest", "--store", s, "--input", ten, "--config", DEMO_CONF, "--local", "never"),
                       cwd=str(tmp_path), env=fresh_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "status=committed messages=10" in p.stdout
    noise = [x for x in p.stderr.splitlines() if not x.startswith("[rocketlake")]
    assert noise == [], p.stderr[-3000:]                 # no INFO lines, no warnings, not the JVM's incubator line


def test_ctrl_c_during_a_spark_ingest(tmp_path):
    s = tmp_path / "s"
    p = subprocess.Popen(rocketlake("ingest", "--store", s, "--input", SAMPLE, "--config", DEMO_CONF,
                                    "--local", "never"),
                         cwd=str(tmp_path), env=fresh_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:   # Spark runs once the JVM's children exist
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        if kids:
            time.sleep(3)
            break
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGINT)                       # what Ctrl-C does: the whole foreground group
    out, err = p.communicate(timeout=300)
    if p.returncode == 0:
        pytest.skip("the ingest finished before the interrupt")
    assert p.returncode == 130, err[-3000:]
    # only our lines: no JVM incubator notice, no "WARN TaskSetManager: Lost task ... TaskKilled"
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("[rocketlake")]
    assert len(lines) == 1 and lines[0].startswith("interrupted (SIGINT): "), err[-3000:]
    assert "Traceback" not in err and "py4j" not in err.lower()
