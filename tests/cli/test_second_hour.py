"""A user's second hour (issue 36): a SIGTERM after the commit is no failure, empty bodies are
refused as RocketMQ's producer refuses them, every bad row is reported in the words of the input
schema, the input format is inferred, and the command line behaves as a command line should.

Most commands run in this process through ``storelib.cli.main.main`` (``rl`` of test_first_hour:
small inputs never start a JVM); the signal tests run ``python -m storelib.cli.main`` as a child.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from test_first_hour import DEMO_CONF, SAMPLE, one_line_error, rl


def _line(topic="t", body=b"hello", **extra) -> dict:
    row = {"topic": topic, "queue_id": 0, "store_timestamp": 1717200000000, "born_host": "10.0.0.1:1",
           "store_host": "10.0.0.2:10911", "body_b64": base64.b64encode(body).decode(),
           "properties": [["KEYS", "k"]]}
    row.update(extra)
    return row


def _write_jsonl(path, rows) -> str:
    with open(path, "w") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


def _child_env() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return env


# --------------------------------------------------------------------------- item 6: SIGTERM after the commit
@pytest.mark.parametrize("point", ["after-commit-before-publish", "after-publish-before-cleanup"])
def test_sigterm_after_commit_finishes_and_exits_0(tmp_path, point):
    store, gate = str(tmp_path / "store"), str(tmp_path / "gate")
    env = dict(_child_env(), ROCKETLAKE_HOLD=f"{point}:{gate}")
    p = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "ingest", "--store", store, "--input", SAMPLE,
                          "--config", DEMO_CONF, "--quiet"], env=env, cwd=str(tmp_path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not os.path.exists(gate + ".reached") and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(gate + ".reached"), p.communicate()
        p.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        open(gate, "w").close()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (out, err)
    assert "status=committed" in out and "messages=2000" in out
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == ["SIGTERM arrived after the batch was committed: the job finished it first (nothing to rerun)"], err
    # finished means published and cleaned: the store verifies and no staging is left behind
    code, vout, verr = rl("verify", "--store", store)
    assert code == 0, vout + verr
    assert not [d for d in os.listdir(os.path.join(store, "_rocketlake")) if "staging" in d]
