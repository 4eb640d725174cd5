"""Retention per topic (jobs/expire.py --topic T --reserved-hours N, topicRetention) on expire-small,
the store RocketMQ wrote before its own fileReservedTime run, adopted."""
from __future__ import annotations

import json
import os

import pytest

from conftest import GOLDEN
from support.opshelp import restore, run, small_config, small_properties
from storelib.errors import ConfigError
from storelib.format.records import message_keys
from storelib.io import storage
from storelib.ops import adopt, expire as retention
from storelib.ops.topic_retention import parse_rules
from storelib.read.query import open_store
from storelib.table import manifest
from storelib.verify import driver as verify

SET = os.path.join(GOLDEN, "expire-small")
NOW = json.load(open(os.path.join(SET, "config.json")))["expire"]["now_ms"]


def _files(store: str) -> set:
    return {os.path.relpath(os.path.join(d, f), store) for d, _, fs in os.walk(store) for f in fs
            if not os.path.relpath(d, store).startswith("_rocketlake")}


@pytest.fixture(scope="module")
def by_topic(tmp_path_factory):
    """The store, a removed message (its key) of notify_sms before the expiry, dry-run and run outputs."""
    tmp = tmp_path_factory.mktemp("topicret")
    store = restore("expire-small", "files_before.json", str(tmp / "store"))
    adopt.adopt(None, store, store, small_config(), quiet=True)
    gone_msg = open_store(store).get_by_queue_offset("notify_sms", 0, 7)[0]
    before = _files(store)
    props = os.path.join(str(tmp), "ret.properties")
    with open(small_properties(tmp)) as fh, open(props, "w") as out:
        out.write(fh.read() + "topicRetention=notify_sms=24\n")
    args = ["--store", store, "--topic", "coupon_issue", "--reserved-hours", "48", "--config", props,
            "--now", str(NOW)]
    dry = run("expire.py", *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert _files(store) == before
    summary = retention.expire(store, None, NOW, topic_rules={"coupon_issue": 48, "notify_sms": 24}, quiet=True,
                               housekeeping=False)      # (the command line's run: its dry run above)
    return store, before, gone_msg, dry.stdout, summary


def test_dry_run_lists_files_and_new_minimum_offsets(by_topic):
    store, before, _, dry, summary = by_topic
    assert "would move min offset of coupon_issue/0: 0 -> 90" in dry
    assert "would move min offset of notify_sms/0: 0 -> 300" in dry
    listed = sorted(line.split(" ", 2)[2] for line in dry.splitlines() if line.startswith("would remove"))
    assert listed == sorted(summary["removed"]) and len(listed) == 13
    assert all(p.startswith(("consumequeue/coupon_issue/0/", "consumequeue/notify_sms/0/")) for p in listed)
    assert before - _files(store) == set(listed)
    assert summary["commitlog_removed"] == 0              # other topics' units still point into every segment


def test_queries_answer_from_the_new_minimum(by_topic):
    store, _, gone_msg, _, _ = by_topic
    r = open_store(store)
    assert r.get_min_offset_in_queue("notify_sms", 0) == 300
    assert r.get_min_offset_in_queue("coupon_issue", 0) == 90
    got = r.get_message("g", "notify_sms", 0, 0, 32)
    assert got["status"] == "OFFSET_TOO_SMALL" and got["next_begin_offset"] == 300
    assert r.get_message("g", "notify_sms", 0, 300, 1)["status"] == "FOUND"
    uniq, keys = message_keys(gone_msg)
    # the record is still in its (shared) segment and in the index: the broker's queryMessage finds
    # it, rocketlake's exact queries do not (it is no longer in its queue)
    assert r.query_message("notify_sms", uniq, 32, 0, 2**62)["phy_offsets"] == [gone_msg["commitlog_offset"]]
    assert r.find_by_key("notify_sms", uniq).messages == []
    assert r.find_by_unique_key("notify_sms", uniq) == []
    assert r.get_by_msg_id(gone_msg["msg_id"]) is None
    assert r.view_message_by_id(gone_msg["msg_id"])[2]["commitlog_offset"] == gone_msg["commitlog_offset"]  # the broker's
    kept = r.get_by_queue_offset("notify_sms", 0, 300)[0]
    assert r.get_by_msg_id(kept["msg_id"])["commitlog_offset"] == kept["commitlog_offset"]
    assert [m["commitlog_offset"] for m in r.find_by_key("notify_sms", message_keys(kept)[0]).messages] == \
        [kept["commitlog_offset"]]


def test_range_reads_leave_out_what_the_queues_no_longer_hold(by_topic, spark):
    """The records below a queue's new minimum stay in their shared segments; every walk of the
    segments leaves them out, as the queues, key lookups and stats do: the local range scan, the
    data source's JVM and Python readers (a topic filter walked, not read through the queues too)."""
    from storelib.read.datasource import register
    from storelib.read.localscan import scan_range_local
    from storelib.format.records import is_queued
    store = by_topic[0]
    t = scan_range_local(store)
    rows = sorted(zip(t.column("topic").to_pylist(), t.column("queue_id").to_pylist(),
                      t.column("queue_offset").to_pylist()))
    r = open_store(store)
    for topic, floor in (("notify_sms", 300), ("coupon_issue", 90)):
        offsets = [o for tp, q, o, f in zip(*(t.column(c).to_pylist() for c in ("topic", "queue_id", "queue_offset",
                                                                               "sys_flag")))
                   if (tp, q) == (topic, 0) and is_queued(f)]      # (PREPARED records have no queue offset)
        assert sorted(offsets) == list(range(floor, r.get_max_offset_in_queue(topic, 0))), topic
    register(spark)
    for engine in ("jvm", "python"):
        df = spark.read.format("rocketmq").option("engine", engine).load(store)
        assert sorted(tuple(x) for x in df.select("topic", "queue_id", "queue_offset").collect()) == rows, engine
        walked = spark.read.format("rocketmq").option("engine", engine).option("topicQueues", "false").load(store)
        got = [x[0] for x in walked.where("topic = 'notify_sms'").select("queue_offset").collect()]
        assert sorted(got) == [o for tp, _, o in rows if tp == "notify_sms"], engine


def test_one_expire_batch_that_verifies(by_topic):
    store = by_topic[0]
    snap = manifest.load_snapshot(storage.Store(store))
    assert [b["operation"] for b in snap.batches] == ["import", "expire"]
    assert verify.verify_store(store, deep=True).problems == []


def test_every_topic_ruled_frees_segments_and_store_wide_rule_still_applies(tmp_path):
    store = restore("expire-small", "files_before.json", str(tmp_path / "store"))
    adopt.adopt(None, store, store, small_config(), quiet=True)
    topics = os.listdir(os.path.join(store, "consumequeue"))
    s = retention.expire(store, None, NOW, dry_run=True, topic_rules=dict.fromkeys(topics, 1), quiet=True)
    assert s["commitlog_removed"] > 0 and s["min_phy_offset"] > 0
    wide = retention.expire(store, 48, NOW, dry_run=True, quiet=True)
    both = retention.expire(store, 48, NOW, dry_run=True, topic_rules={"notify_sms": 1}, quiet=True)
    assert both["commitlog_removed"] == wide["commitlog_removed"] == 21
    assert set(wide["removed"]) <= set(both["removed"])
    longer = retention.expire(store, 48, NOW, dry_run=True, topic_rules={"audit_log": 720}, quiet=True)
    assert 0 < longer["commitlog_removed"] < 21                       # audit_log's kept messages hold segments
    assert longer["held_back"]["audit_log"] == (21 - longer["commitlog_removed"]) * 65536
    s = retention.expire(store, None, NOW, topic_rules=dict.fromkeys(topics, 1), quiet=True, housekeeping=False)
    assert s["status"] == "committed" and s["commitlog_removed"] > 0
    r = open_store(store)
    assert s["queue_min_offsets"] and all(r.get_min_offset_in_queue(q["topic"], q["queue_id"]) == q["min_offset"]
                                          for q in s["queue_min_offsets"])
    assert verify.verify_store(store, deep=True).problems == []


def test_bad_rules_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError):         # a bad configuration value: exit 2
        parse_rules("orders=seventy")
    assert parse_rules(" orders=72, audit=720 ") == {"orders": 72.0, "audit": 720.0}
    res = run("expire.py", "--store", str(tmp_path), "--topic", "orders")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1


def test_stats_show_each_topics_rule_and_what_it_holds_back(tmp_path):
    from storelib.format.config import load_config
    from storelib.ops import inspect as inspection
    from support.opshelp import SMALL
    store = restore("expire-small", "files_before.json", str(tmp_path / "store"))
    adopt.adopt(None, store, store, small_config(), quiet=True)
    cfg = load_config(None, dict(SMALL, fileReservedTime=48, topicRetention="audit_log=720,notify_sms=1"))
    st = inspection.stats(storage.Store(store), manifest.load_snapshot(storage.Store(store)), cfg, now_ms=NOW)
    topics = {t["topic"]: t for t in st["topics"]}
    assert topics["audit_log"]["retention"] == "720h (topic)" and topics["refund"]["retention"] == "48h (store)"
    longer = retention.expire(store, 48, NOW, dry_run=True, topic_rules={"audit_log": 720, "notify_sms": 1},
                              quiet=True)
    assert topics["audit_log"]["held_back_bytes"] == longer["held_back"]["audit_log"] > 0
    assert topics["notify_sms"]["held_back_bytes"] == 0
    first = open_store(store).get_by_queue_offset("audit_log", 0, 0)[0]["store_timestamp"]
    assert topics["audit_log"]["oldest_live_ts"] <= first
