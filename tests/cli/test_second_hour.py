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


# --------------------------------------------------------------------------- item 8: empty bodies
def test_empty_body_refused_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.delenv("ROCKETLAKE_ALLOW_EMPTY_BODY", raising=False)
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(body=b"a"), _line(body=b""), _line(body=b"c")])
    store = str(tmp_path / "store")
    code, out, err = rl("ingest", "--store", store, "--input", src, "--quiet")
    assert code == 2, err
    assert f"{src} line 2: field 'body_b64': empty body" in err and "--allow-empty-body" in err
    assert "line 1" not in err and "line 3" not in err
    assert not os.path.exists(os.path.join(store, "commitlog"))
    code, out, err = rl("ingest", "--store", store, "--input", src, "--quiet", "--allow-empty-body")
    assert code == 0 and "messages=3" in out, err


def test_empty_body_refused_by_the_python_api(tmp_path, monkeypatch):
    from storelib.errors import InputError
    from storelib.format.config import load_config
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    monkeypatch.delenv("ROCKETLAKE_ALLOW_EMPTY_BODY", raising=False)
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(body=b"")] * 25)
    with pytest.raises(InputError) as e:
        run_ingest(LocalSession(), str(tmp_path / "s"), src, "jsonl", load_config(None), quiet=True)
    assert e.value.total == 25 and "more" in str(e.value).splitlines()[-1], str(e.value)
    assert f"{src} line 1: field 'body_b64': empty body" in str(e.value)
    monkeypatch.setenv("ROCKETLAKE_ALLOW_EMPTY_BODY", "1")
    assert run_ingest(LocalSession(), str(tmp_path / "s"), src, "jsonl", load_config(None), quiet=True)["messages"] == 25


def test_large_body_reported_once(tmp_path):
    src = _write_jsonl(tmp_path / "in.jsonl", [_line(), _line(body=b"x" * (5 << 20))])
    code, _out, err = rl("ingest", "--store", str(tmp_path / "store"), "--input", src, "--quiet")
    assert code == 2
    said = [x for x in err.splitlines() if "line 2" in x]
    assert len(said) == 1 and "exceeds maxMessageSize 4194304" in said[0], err
    assert "1 bad input row problem(s)" in err
