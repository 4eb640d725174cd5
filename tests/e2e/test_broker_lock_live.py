"""A real RocketMQ 5.3.3 broker running on a store adopted in place: rocketlake's writers are
refused by the broker's own lock, and change nothing.

small-roll as RocketMQ wrote it is adopted in place (its ``lock`` is the broker's, 4 bytes); a
broker starts on the directory. While it runs, ``rocketlake ingest`` (an append) and
``rocketlake expire`` exit 3 naming the running broker, every file a writer would touch (the
CommitLog, the consume queues, the index files, ``_rocketlake/``) and the directory's entries as
they were, and the broker still serves every message. Once it has stopped, the append goes
through.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from support.opshelp import small_config
from support.lockholder import stat_tree
from support.rmqbroker import Broker

from test_rocketmq_broker import broker_topics, consume_all, expected, golden_store

pytestmark = pytest.mark.slow
SAMPLE = os.path.join(ROOT, "samples", "messages.jsonl")
WRITTEN = ("commitlog", "consumequeue", "index", "_rocketlake")      # what a rocketlake writer changes


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storelib.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))


def test_writers_are_refused_while_a_broker_runs_on_an_adopted_store(tmp_path):
    from storelib.ops import adopt
    g, store = golden_store(tmp_path)
    lock = os.path.join(store, "lock")
    assert open(lock, "rb").read() == b"lock"
    assert adopt.adopt(None, store, store, small_config(), quiet=True)["status"] == "committed"
    _, _, queues = expected(g, 3000)
    broker_topics(store, queues)
    cfg = json.load(open(os.path.join(g, "config.json")))["messageStoreConfig"]
    with Broker(store, str(tmp_path / "broker"), {k: v for k, v in cfg.items() if k != "flushDiskType"}) as b:
        before = stat_tree(store, WRITTEN)
        ingest = _cli("ingest", "--store", store, "--input", SAMPLE, "--local", "always", "--quiet")
        assert ingest.returncode == 3 and "running broker" in ingest.stderr, ingest.stderr[-3000:]
        expire = _cli("expire", "--store", store, "--reserved-hours", "0", "--now", "99999999999999", "--quiet")
        assert expire.returncode == 3 and "running broker" in expire.stderr, expire.stderr[-3000:]
        assert stat_tree(store, WRITTEN) == before
        n = consume_all(b, queues)
    assert n == sum(len(v) for v in queues.values())
    ingest = _cli("ingest", "--store", store, "--input", SAMPLE, "--local", "always", "--quiet")
    assert ingest.returncode == 0, ingest.stderr[-3000:]
    assert stat_tree(store, WRITTEN) != before
