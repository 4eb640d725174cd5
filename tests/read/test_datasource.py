"""spark.read.format("rocketmq") and the distributed range scan, on the RocketMQ-written small-roll store."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re

import pytest

from conftest import GOLDEN
from storelib.format.textforms import parse_properties_string

SMALL = os.path.join(GOLDEN, "small-roll")


def _jsonl(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(x) for x in fh if x.strip()]


@pytest.fixture(scope="module")
def golden(restored_golden):
    return restored_golden("small-roll")


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    """The sources registered in this worker's session, whichever test of the module runs first
    (under pytest-xdist a test may run alone, without another test's fixture registering them)."""
    from storelib.read.datasource import register
    register(spark)


@pytest.fixture(scope="module")
def expected():
    msgs = _jsonl(os.path.join(SMALL, "messages.jsonl"))
    puts = _jsonl(os.path.join(SMALL, "put_results.jsonl"))
    return {p["wrote_offset"]: (m, p) for m, p in zip(msgs, puts)}


@pytest.fixture(scope="module")
def rows(spark, golden):
    from storelib.read.datasource import register
    register(spark)
    return {r["commitlog_offset"]: r for r in
            (x.asDict() for x in spark.read.format("rocketmq").load(golden).collect())}


def test_reads_every_message_field_by_field(rows, expected):
    assert set(rows) == set(expected)
    for off, (m, p) in expected.items():
        r = rows[off]
        props = parse_properties_string(m["properties_string"])
        assert r["topic"] == m["topic"] and r["queue_id"] == m["queue_id"] and r["flag"] == m["flag"]
        assert r["sys_flag"] == p["stored_sys_flag"] and r["body_crc"] == p["body_crc"]
        assert r["store_size"] == p["wrote_bytes"] and r["msg_id"] == p["msg_id"]
        assert r["queue_offset"] == p["queue_offset"] and r["store_timestamp"] == p["store_timestamp"]
        assert r["born_timestamp"] == m["born_timestamp"] and r["reconsume_times"] == m["reconsume_times"]
        assert r["prepared_transaction_offset"] == m["prepared_transaction_offset"]
        assert bytes(r["body"]) == base64.b64decode(m["body_b64"])
        assert r["properties"] == props
        assert (r["tags"], r["keys"], r["uniq_key"]) == (props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY"))
        for f in ("born_host", "store_host"):      # Java getHostAddress form (IPv6 uncompressed)
            assert r[f].rsplit(":", 1)[1] == m[f].rsplit(":", 1)[1]


def test_hosts_match_golden_answers(rows):
    """Host strings exactly as RocketMQ's answers print them."""
    seen = 0
    for a in _jsonl(os.path.join(SMALL, "answers.jsonl")):
        for msg in a.get("messages") or ([a["message"]] if a.get("message") else []):
            r = rows[msg["commitlog_offset"]]
            assert (r["born_host"], r["store_host"]) == (msg["born_host"], msg["store_host"])
            assert hashlib.sha256(bytes(r["body"])).hexdigest() == msg["body_sha256"]
            assert sorted(r["properties"].items()) == [tuple(x) for x in msg["properties_sorted"]]
            seen += 1
    assert seen > 500


def test_filters_and_pushdown(spark, golden, expected):
    ts = sorted(p["store_timestamp"] for _, p in expected.values())
    lo, hi = ts[800], ts[1900]
    cond1 = f"topic = 'metrics-raw' AND store_timestamp >= {lo} AND store_timestamp < {hi}"
    want1 = sorted(o for o, (m, p) in expected.items() if m["topic"] == "metrics-raw" and lo <= p["store_timestamp"] < hi)
    cond2 = "topic IN ('shipping', 'audit_log') AND commitlog_offset > 1000000 AND commitlog_offset <= 2000000"
    want2 = sorted(o for o, (m, p) in expected.items()
                   if m["topic"] in ("shipping", "audit_log") and 1000000 < o <= 2000000)
    assert want1 and want2

    def offsets(df):
        return sorted(r.commitlog_offset for r in df.select("commitlog_offset").collect())

    # pushdown off: Spark filters; one DataFrame can be queried any number of times
    df = spark.read.format("rocketmq").option("pushdown", "false").load(golden)
    assert offsets(df.where(cond1)) == want1
    assert offsets(df.where(cond2)) == want2
    assert df.count() == len(expected)
    # pushdown reader: filters become reader bounds (exact, not re-checked by Spark), offsets prune segments
    push = lambda: spark.read.format("rocketmq").load(golden)  # noqa: E731 - pushdown is the default
    q1 = push().where(cond1)
    assert offsets(q1) == want1
    plan = q1._jdf.queryExecution().executedPlan().toString()
    assert not re.search(r"^\W*(\*\(\d+\) )?Filter .*metrics-raw", plan, re.M)   # the topic filter went to the reader
    q2 = push().where(cond2)
    assert offsets(q2) == want2
    assert q2.rdd.getNumPartitions() == len(range(1000000 // 65536, 2000000 // 65536 + 1))
    assert push().where("topic = 'nosuch'").count() == 0
    # options do the same as filters (and are safe on a reused DataFrame)
    opt = spark.read.format("rocketmq").option("topic", "shipping,audit_log").option("minOffset", 1000001) \
        .option("maxOffset", 2000000).load(golden)
    assert offsets(opt) == want2
    assert opt.rdd.getNumPartitions() == q2.rdd.getNumPartitions()
    assert opt.count() == len(want2)


@pytest.fixture(scope="module")
def small_store(spark, tmp_path_factory):
    """600 of small-roll's messages ingested into a rocketlake store of 64 KiB segments:
    (store, messages)."""
    from storelib.format.config import StoreConfig
    from storelib.read.datasource import register
    from storelib.ingest.driver import run_ingest
    register(spark)
    tmp = tmp_path_factory.mktemp("small-store")
    lines = open(os.path.join(SMALL, "messages.jsonl"), encoding="utf-8").read().splitlines(True)[:600]
    src = tmp / "m.jsonl"
    src.write_text("".join(lines), encoding="utf-8")
    store = str(tmp / "store")
    run_ingest(spark, store, str(src), "jsonl", StoreConfig(mappedFileSizeCommitLog=65536,
               mappedFileSizeConsumeQueue=600, maxHashSlotNum=64, maxIndexNum=256), quiet=True)
    return store, [json.loads(x) for x in lines]


def test_manifest_segment_pruning(spark, small_store):
    """On a rocketlake store the manifest's per-segment store-time range prunes partitions."""
    store, msgs = small_store
    df = spark.read.format("rocketmq").load(store)
    assert df.count() == len(msgs)
    ts = sorted(m["store_timestamp"] for m in msgs)
    lo, hi = ts[100], ts[160]
    q = spark.read.format("rocketmq").option("beginTimestamp", lo).option("endTimestamp", hi).load(store)
    assert q.count() == sum(1 for m in msgs if lo <= m["store_timestamp"] <= hi)
    assert q.rdd.getNumPartitions() < df.rdd.getNumPartitions()
    # an older batch is readable too (asOfBatch)
    assert spark.read.format("rocketmq").option("asOfBatch", "1").load(store).count() == len(msgs)


def test_pushdown_reader_reuse(spark, small_store):
    """pyspark 4.1.4 plans a query without a pushable filter with the reader of the last pushdown
    on the same DataFrame: register's guard filter makes every query push its own filters, so a
    reused DataFrame answers each query for itself, with the query CLI's range scan's counts."""
    from storelib.read.rangescan import scan_range
    store, msgs = small_store
    ts = sorted(m["store_timestamp"] for m in msgs)
    df = spark.read.format("rocketmq").load(store)
    for lo, hi, topic in [(ts[100], ts[300], "shipping"), (ts[400], ts[450], None)]:
        cond = f"store_timestamp >= {lo} AND store_timestamp <= {hi}" + (f" AND topic = '{topic}'" if topic else "")
        want = sum(1 for m in msgs if lo <= m["store_timestamp"] <= hi and topic in (None, m["topic"]))
        pushed = df.where(cond)
        assert pushed.rdd.getNumPartitions() < df.rdd.getNumPartitions()          # pruned by the reader
        assert pushed.count() == want == scan_range(spark, store, lo, hi, topic).count()
        assert df.count() == len(msgs)                         # no pushable filter of its own
    assert df.where("queue_id = 0").count() == sum(1 for m in msgs if m.get("queue_id") == 0)


def test_range_scan_matches_brute_force(spark, golden, expected):
    from storelib.read.rangescan import scan_range
    ts = sorted(p["store_timestamp"] for _, p in expected.values())
    for lo, hi, topic in [(ts[1000], ts[1200], None), (ts[300], ts[2500], "shipping"), (ts[5], ts[5], None)]:
        got = sorted(r.commitlog_offset for r in scan_range(spark, golden, lo, hi, topic)
                     .select("commitlog_offset").collect())
        want = sorted(o for o, (m, p) in expected.items()
                      if lo <= p["store_timestamp"] <= hi and (topic is None or m["topic"] == topic))
        assert got == want, (lo, hi, topic)


def test_python_reader_packs_small_segments_into_the_cores_partitions(spark, golden):
    """The Python reader on a store of many small segments: one partition per core of the session
    (``minPartitions`` by default), not one per segment (each costs its task ~0.1-0.2 s), each
    reading its segments in commitlog order: the rows of a local scan."""
    from storelib.read.localscan import scan_range_local
    from storelib.table.storefiles import as_store, open_files
    segments = len(open_files(as_store(golden), None)[0].commitlog)
    cores = spark.sparkContext.defaultParallelism
    assert segments > cores
    packed = spark.read.format("rocketmq").option("engine", "python").load(golden)
    each = spark.read.format("rocketmq").option("engine", "python").option("minPartitions", segments).load(golden)
    assert packed.rdd.getNumPartitions() == cores and each.rdd.getNumPartitions() == segments
    cols = ["commitlog_offset", "msg_id", "topic", "body", "properties"]
    local = scan_range_local(golden).select(cols).to_pylist()
    assert [r.asDict() for r in packed.select(*cols).collect()] == [dict(r, properties=dict(r["properties"]))
                                                                    for r in local]


def test_splits_and_topic_queues_under_spark(spark, tmp_path):
    """Splits inside segments (``splitBytes``) and a topic read through its consume queues give
    the rows of one whole-segment task per segment: small-roll's messages that all have a unit
    (no PREPARED/ROLLBACK), ingested without Spark."""
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    lines = [x for x in open(os.path.join(SMALL, "messages.jsonl"), encoding="utf-8").read().splitlines(True)[:400]
             if json.loads(x)["sys_flag"] & 0xC in (0, 8)]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(lines), encoding="utf-8")
    store = str(tmp_path / "store")
    run_ingest(LocalSession(), store, str(src), "jsonl", StoreConfig(mappedFileSizeCommitLog=65536,
               mappedFileSizeConsumeQueue=600, maxHashSlotNum=64, maxIndexNum=256), quiet=True)
    one = spark.read.format("rocketmq").option("splitBytes", 1 << 30).load(store)
    many = spark.read.format("rocketmq").option("splitBytes", 24000).load(store)
    assert many.rdd.getNumPartitions() >= 2 * one.rdd.getNumPartitions()
    cols = ["commitlog_offset", "msg_id", "topic", "store_timestamp", "sha2(body, 256) AS b", "properties"]
    rows = one.selectExpr(*cols).collect()
    assert many.selectExpr(*cols).collect() == rows
    want = [r.commitlog_offset for r in rows if r.topic in ("shipping", "audit_log")]
    got = many.where("topic IN ('shipping', 'audit_log')").select("commitlog_offset").collect()
    assert want and [r.commitlog_offset for r in got] == want
