"""An export writes the broker's delivery cursors of scheduled messages (ops/scheduled.py).

A small store, ingested in three batches without Spark, holds delay-level entries
(SCHEDULE_TOPIC_XXXX, the broker's properties: DELAY, REAL_TOPIC, REAL_QID, UNIQ_KEY) and timer
entries (rmq_sys_wheel_timer), and later the delivered copies in the real topics, as a broker
writes them (same UNIQ_KEY, born time, body, reconsume times; out of queue order at one level, a
look-alike that is not a copy, two entries sharing one identity, one for the half topic). Each
export's config/delayOffset.json and config/timercheck say where delivery resumes as of its batch:
never past an undelivered entry.
"""
from __future__ import annotations

import base64
import json
import os
import struct
from collections import Counter

import pytest

from storelib.format.config import load_config
from storelib.ingest.driver import run_ingest
from storelib.io import storage
from storelib.ops.scheduled import export_config_files
from storelib.runtime.localrun import LocalSession
from storelib.table.export import export_store
from storelib.table.rows import FileKind
from storelib.table.snapshots import open_snapshot
from storelib.verify import driver as verify

SMALL = {"mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 600, "maxHashSlotNum": 64, "maxIndexNum": 256}
SCHED, TIMER = "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"
T0 = 1_760_000_000_000


def msg(topic, qid, uniq, body, props=(), born=T0, recon=0, store=None):
    pairs = [["UNIQ_KEY", uniq], ["KEYS", uniq], *props] if uniq else list(props)
    return {"topic": topic, "queue_id": qid, "flag": 0, "sys_flag": 0, "born_timestamp": born,
            "store_timestamp": store or born + 5, "born_host": "10.0.0.1:40000", "store_host": "127.0.0.1:10911",
            "reconsume_times": recon, "prepared_transaction_offset": 0,
            "body_b64": base64.b64encode(body.encode()).decode(), "properties": pairs}


def entry(level, uniq, real="orders", real_q=1, born=T0, body=None):
    return msg(SCHED, level - 1, uniq, body or f"body {uniq}",
               [["DELAY", str(level)], ["REAL_TOPIC", real], ["REAL_QID", str(real_q)]], born=born)


def timer(uniq, born=T0):
    return msg(TIMER, 0, uniq, f"body {uniq}", [["TIMER_OUT_MS", str(born + 3000)], ["REAL_TOPIC", "orders"],
                                                ["REAL_QID", "1"]], born=born)


def copy(uniq, real="orders", real_q=1, born=T0, body=None):
    """The delivered copy: the real topic and queue, the entry's properties, born time and body."""
    return msg(real, real_q, uniq, body or f"body {uniq}", [["DELAY", "1"]], born=born)


BATCHES = [
    [msg("orders", 0, "plain-0", "x"),
     entry(1, "a0"), entry(1, "a1"), entry(1, "a2"),
     entry(2, "b0"), entry(2, "b1"),
     entry(3, "same", born=T0 + 7), entry(3, "same", born=T0 + 7),        # one identity, two entries
     entry(4, "half", real="RMQ_SYS_TRANS_HALF_TOPIC", real_q=0),          # discarded by the broker
     timer("t0"), timer("t1")],
    [copy("a0"), copy("a1"),
     copy("b1"),                                                          # level 2 out of order: b0 pending
     copy("a2", body="another body"),                                     # same UNIQ_KEY, not a2's copy
     copy("same", born=T0 + 7),
     copy("t1"),
     msg("orders", 0, "plain-1", "y")],
    [copy("a2"), copy("b0"), copy("t0"), copy("same", born=T0 + 7)],
]
WANT = {"p0": ({"1": 0, "2": 0, "3": 0, "4": 1}, 0),
        "p1": ({"1": 2, "2": 0, "3": 0, "4": 1}, 0),
        "p2": ({"1": 3, "2": 2, "3": 0, "4": 1}, 2)}


@pytest.fixture(scope="module")
def scheduled_store(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("scheduled")
    cfg = load_config(None, SMALL)
    store = str(tmp_path / "store")
    for k, rows in enumerate(BATCHES):
        part = tmp_path / f"p{k}.jsonl"
        part.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = run_ingest(LocalSession(), store, str(part), "jsonl", cfg, batch_id=f"p{k}", quiet=True)
        assert out["status"] == "committed", out
    return store


def test_export_writes_where_scheduled_delivery_resumes(scheduled_store, tmp_path):
    cfg = load_config(None, SMALL)
    store = scheduled_store
    for batch, (delay, timer_q) in WANT.items():
        out = str(tmp_path / f"out-{batch}")
        s = export_store(store, out, as_of_batch=batch, durable=False, config_files=export_config_files)
        got = json.load(open(os.path.join(out, "config", "delayOffset.json")))
        assert got == {"offsetTable": delay}, (batch, got)
        assert s["delay_offsets"] == delay and s["timer_offset"] == timer_q, s
        raw = open(os.path.join(out, "config", "timercheck"), "rb").read()
        assert len(raw) == 4096
        # TimerCheckpoint: lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset, masterTimerQueueOffset
        assert struct.unpack(">qqqq", raw[:32]) == (0, 0, timer_q, timer_q), batch
    assert s["scheduled_entries"] == 8 and s["scheduled_delivered"] == 6 and s["timer_delivered"] == 2, s
    assert verify.verify_store(out, cfg, deep=True, use_manifest=False, threads=1).problems == []


def test_a_store_without_scheduled_messages_gets_an_empty_table(tmp_path):
    cfg = load_config(None, SMALL)
    store = str(tmp_path / "store")
    part = tmp_path / "p.jsonl"
    part.write_text(json.dumps(msg("orders", 0, "plain", "x")) + "\n")
    run_ingest(LocalSession(), store, str(part), "jsonl", cfg, batch_id="p0", quiet=True)
    s = export_store(store, str(tmp_path / "out"), durable=False, config_files=export_config_files)
    assert json.load(open(tmp_path / "out" / "config" / "delayOffset.json")) == {"offsetTable": {}}
    assert not os.path.exists(tmp_path / "out" / "config" / "timercheck") and s["config_files"] == [
        "config/delayOffset.json"]


def test_an_export_reads_each_commitlog_segment_once(scheduled_store, tmp_path, monkeypatch):
    """The delivery cursors come from the segments the export reads for their files: each
    segment's valid bytes are read once, and the cursors and files are what they were."""
    rows = open_snapshot(storage.Store(scheduled_store), None).of_kind(FileKind.COMMITLOG)
    assert rows
    read: Counter = Counter()
    real = storage.Store.read

    def counting(self, rel, offset=0, length=None):
        data = real(self, rel, offset, length)
        if rel.startswith("commitlog/"):
            read[rel] += len(data)
        return data
    monkeypatch.setattr(storage.Store, "read", counting)
    s = export_store(scheduled_store, str(tmp_path / "out"), durable=False, config_files=export_config_files)
    assert dict(read) == {r.path: r.valid_bytes for r in rows}
    assert s["delay_offsets"] == WANT["p2"][0] and s["timer_offset"] == WANT["p2"][1], s
    monkeypatch.undo()
    export_store(scheduled_store, str(tmp_path / "plain"), durable=False)
    for r in rows:
        assert open(tmp_path / "out" / r.path, "rb").read() == open(tmp_path / "plain" / r.path, "rb").read()
