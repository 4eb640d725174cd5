"""jobs/inspect.py segments / checkpoints / history / stats (plain python, no Spark)."""
from __future__ import annotations

import json
import os

import pytest

from conftest import GOLDEN
from support.opshelp import restore, run, small_config
from storelib.ops import adopt, expire as retention, inspect as inspection
from storelib.io import storage
from storelib.table import snapshots


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """expire-small before expiry, adopted (batch 1), then expired (batch 2)."""
    s = restore("expire-small", "files_before.json", str(tmp_path_factory.mktemp("insp") / "store"))
    adopt.adopt(None, s, s, small_config(), quiet=True)
    now = json.load(open(os.path.join(GOLDEN, "expire-small", "config.json")))["expire"]["now_ms"]
    retention.expire(s, 48, now, quiet=True)
    return s


def _json_lines(out):
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def test_segments_table_and_json(store):
    r = run("inspect.py", "--store", store, "segments", "--kind", "commitlog")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["kind", "path", "base_offset", "file_size"]
    assert len(lines) == 1 + 30 and "commitlog/00000000000001376256" in lines[1]
    j = run("inspect.py", "--store", store, "--json", "segments", "--kind", "consumequeue", "--topic", "early_sms")
    rows = _json_lines(j.stdout)
    assert [x["path"] for x in rows] == ["consumequeue/early_sms/0/00000000000000002400"]
    old = _json_lines(run("inspect.py", "--store", store, "segments", "--kind", "commitlog", "--json",
                          "--as-of-batch", "1").stdout)
    assert len(old) == 51 and old[0]["base_offset"] == 0
    assert sum(x["count"] for x in old) == 3000


@pytest.mark.parametrize("json_out", [(), ("--json",)])
def test_segments_of_a_topic_the_store_never_had_is_a_bad_argument(store, json_out):
    """As query names a topic it lacks (and expire refuses one): a mistyped --topic is one line,
    exit 2, naming the store's topics, never an empty listing that reads as "no live files"."""
    r = run("inspect.py", "--store", store, *json_out, "segments", "--topic", "early_smss")
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and r.stdout == "" and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: --topic 'early_smss': no topic 'early_smss' in {store} (its topics: ")
    assert "'early_sms'" in lines[0]


def test_a_topic_whose_files_all_expired_is_still_the_stores():
    """known_topics: a topic a batch wrote a queue of counts, though no live file is left of it."""
    from types import SimpleNamespace
    from storelib.table.rows import FileKind
    live = SimpleNamespace(kind=FileKind.CONSUMEQUEUE, topic="kept")
    snap = SimpleNamespace(files={"consumequeue/kept/0/0": live}, batches=[
        SimpleNamespace(queue_offsets=[{"topic": "gone", "queue_id": 0, "max_offset": 5}])])
    assert inspection.known_topics(snap) == {"kept", "gone"}


def test_checkpoints_history_version(store):
    rows = _json_lines(run("inspect.py", "--store", store, "checkpoints", "--json").stdout)
    assert [x["operation"] for x in rows] == ["import", "expire"]
    assert rows[1]["min_phy_offset"] == 1376256 and rows[0]["min_phy_offset"] == 0
    hist = _json_lines(run("inspect.py", "--store", store, "history", "--json").stdout)
    assert {(h["table"], h["rocketlake_operation"]) for h in hist if h["rocketlake_operation"]} == {
        ("manifest", "import"), ("checkpoints", "import"), ("manifest", "expire"), ("checkpoints", "expire")}
    v0 = _json_lines(run("inspect.py", "--store", store, "--version", "0", "checkpoints", "--json").stdout)
    assert [x["operation"] for x in v0] == ["import"]
    table = run("inspect.py", "--store", store, "checkpoints")
    assert table.returncode == 0 and "expire" in table.stdout


def test_stats(store):
    st = inspection.stats(storage.Store(store), snapshots.open_snapshot(storage.Store(store), history=True))
    q = {(x["topic"], x["queue_id"]): x for x in st["queues"]}
    assert q[("early_sms", 0)]["messages"] == 0 and q[("early_sms", 0)]["min_offset"] == 145
    assert st["total"]["min_phy_offset"] == 1376256
    tot = st["cost"]["rows"][-1]
    assert tot["kind"] == "total" and tot["broker_bytes"] > tot["valid_bytes"] > 0
    r = run("inspect.py", "--store", store, "stats")
    assert r.returncode == 0, r.stderr
    assert "disk cost" in r.stdout and "early_sms" in r.stdout


def test_stats_on_broker_store(tmp_path):
    s = restore("default-size", "files.json", str(tmp_path / "d"))
    st = inspection.stats(storage.Store(s), None)
    assert st["total"]["messages_readable"] == sum(x["messages"] for x in st["queues"]) > 0
    tot = st["cost"]["rows"][-1]
    assert tot["broker_bytes"] == 1073741824 + 113 * 6000000 + 420000040 + 4096
    assert tot["stored_bytes"] < tot["broker_bytes"] // 50          # sparse on disk
