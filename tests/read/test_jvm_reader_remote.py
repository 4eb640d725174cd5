"""The JVM reader's remote path (org.rocketlake.spark.FileBytes.Remote: Hadoop file systems, files
assembled from extents of objects, windows of range reads, queue units' ranges) without a server:
a local store's plan rewritten to ``file://`` URIs (Hadoop's local file system), each segment cut
into two objects, one at an offset inside its object. The rows are the local reader's (itself the
Python reader's, test_jvm_reader.py), query shape by query shape; a topic and a time range read
a fraction of the bytes. On S3 and HDFS themselves: test_jvm_reader_objstore.py."""
from __future__ import annotations

import json
import os
import random

import pytest

from test_jvm_reader import _rows

pytestmark = pytest.mark.spark

TOPICS = [f"t{k}" for k in range(8)]


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    from storelib.read.datasource import register
    register(spark)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """4,000 messages of 8 topics (bodies of 100-400 bytes, store times 10 ms apart) in 256 KiB
    segments, two batches."""
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    tmp = tmp_path_factory.mktemp("remote")
    rnd = random.Random(5)
    cfg = StoreConfig(mappedFileSizeCommitLog=256 << 10, mappedFileSizeConsumeQueue=6000, maxHashSlotNum=1024,
                      maxIndexNum=4096)
    path = str(tmp / "store")
    for b in range(2):
        src = tmp / f"b{b}.jsonl"
        src.write_text("".join(json.dumps({"topic": rnd.choice(TOPICS), "body": "x" * rnd.randint(100, 400),
                                           "keys": f"k{b}-{i}", "store_timestamp": 1717200000000 + 10 * (b * 2000 + i)})
                               + "\n" for i in range(2000)))
        run_ingest(LocalSession(), path, str(src), "jsonl", cfg, quiet=True)
    return path


def _plan(path, **options):
    from storelib.read import jvmsource
    from storelib.read.datasource import RocketMQReader
    return json.loads(jvmsource.jvm_plan(RocketMQReader({"path": path, **options})))


def _as_objects(plan: dict, tmp) -> dict:
    """The plan with every file at a file:// URI and each segment assembled from two objects (the
    second one's bytes at offset 100 of its object)."""
    plan = dict(plan, remote=True)
    made: dict = {}
    for s in plan["splits"]:
        path, valid = s[0], s[3]
        if path not in made:
            data = open(path, "rb").read()
            cut = valid // 2 + 3                               # inside a record
            a, b = tmp / f"{os.path.basename(path)}.0", tmp / f"{os.path.basename(path)}.1"
            a.write_bytes(data[:cut])
            b.write_bytes(b"\xee" * 100 + data[cut:valid])
            made[path] = [len(data), [[0, cut, f"file://{a}", 0], [cut, valid - cut, f"file://{b}", 100]]]
        s[0] = f"file://{path}"
        s.append(made[path])
    for queues in (plan["queues"] or {}).values():
        for q in queues:
            for f in q:
                f[0] = f"file://{f[0]}"
                f.append(None)
    return plan


def _read_bytes(spark) -> int:
    from storelib.read import jvmsource
    return jvmsource.fetched(spark, "file")[0]


@pytest.fixture()
def raw_local(spark):
    """Hadoop's local file system without its checksum layer (whose reads are whole checksum
    chunks): its statistics count the bytes the reader asked for."""
    spark.conf.set("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
    yield
    spark.conf.unset("fs.file.impl")


def test_remote_reads_give_the_local_rows(spark, store, tmp_path, raw_local):
    from storelib.read import jvmsource
    remote = _as_objects(_plan(store, rangeGapBytes=0), tmp_path)
    assert jvmsource.ensure_loadable(spark)
    cols = ["commitlog_offset", "topic", "queue_id", "queue_offset", "store_timestamp", "sha2(body, 256) AS body",
            "keys"]
    local_df = spark.read.format("rocketmq").load(store)
    full = _rows(local_df.selectExpr(*cols))
    ts = sorted(r["store_timestamp"] for r in full)
    lo, hi = ts[len(ts) * 45 // 100], ts[len(ts) * 55 // 100]
    fetched = {}
    for name, where in (("full", None), ("topic", "topic = 't3'"),
                        ("time", f"store_timestamp BETWEEN {lo} AND {hi}"),
                        ("both", f"topic IN ('t1', 't6') AND store_timestamp >= {lo}"),
                        ("offset", f"commitlog_offset > {full[len(full) // 3]['commitlog_offset']}")):
        df = jvmsource.load_jvm(spark, json.dumps(remote))
        if where:
            df = df.where(where)
        before = _read_bytes(spark)
        got = _rows(df.selectExpr(*cols))
        fetched[name] = _read_bytes(spark) - before
        want = _rows((local_df.where(where) if where else local_df).selectExpr(*cols))
        assert want and got == want, name
    # the topic: its records (one in eight) and its queue units; the tenth: its zones
    assert fetched["full"] >= sum(os.path.getsize(p[len("file://"):]) for p in {s[0] for s in remote["splits"]}) // 2
    assert 0 < fetched["topic"] < fetched["full"] / 4, fetched
    assert 0 < fetched["time"] < fetched["full"] / 3, fetched


def test_a_missing_object_is_an_error_naming_the_file(spark, store, tmp_path):
    from storelib.read import jvmsource
    remote = _as_objects(_plan(store), tmp_path)
    s = remote["splits"][0]
    os.remove(s[9][1][1][2][len("file://"):])
    with pytest.raises(Exception) as e:
        jvmsource.load_jvm(spark, json.dumps(remote)).count()
    assert f"CorruptStore: {s[1]}@0: missing object" in str(e.value), str(e.value)[-2000:]


def test_s3_settings_of_a_store():
    from storelib.read import jvmsource
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b",
           "AWS_REGION": "eu-west-1"}
    got = jvmsource.s3a_settings("s3://bkt/stores/x", env)
    assert got == {"fs.s3a.bucket.bkt.endpoint": "http://127.0.0.1:9000", "fs.s3a.bucket.bkt.endpoint.region": "eu-west-1",
                   "fs.s3a.bucket.bkt.path.style.access": "true", "fs.s3a.bucket.bkt.connection.ssl.enabled": "false",
                   "fs.s3a.bucket.bkt.access.key": "a", "fs.s3a.bucket.bkt.secret.key": "b",
                   "fs.s3a.bucket.bkt.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}
    assert jvmsource.s3a_settings("hdfs://nn:8020/x", env) == {}
    assert jvmsource.hadoop_uri("s3://bkt/a") == "s3a://bkt/a" and jvmsource.hadoop_uri("gs://b/a") is None


def test_small_windows_read_ahead_and_even_tasks_give_the_local_rows(spark, store, tmp_path, raw_local):
    """Windows smaller than records (each such record read over again from its start), three range
    reads in flight at once (each on a stream of its own), records joined across window ends, and
    the splits cut on zone starts into about 16 tasks per core: the local rows, query shape by
    query shape, and the tasks are many more than the planned splits."""
    from storelib.read import jvmsource
    assert jvmsource.ensure_loadable(spark)
    cols = ["commitlog_offset", "topic", "store_timestamp", "sha2(body, 256) AS body", "keys"]
    local_df = spark.read.format("rocketmq").load(store)
    full = _rows(local_df.selectExpr(*cols))
    ts = sorted(r["store_timestamp"] for r in full)
    for window, ahead in ((512, 3), (700, 0), (3000, 2)):
        plan = _plan(store, windowBytes=window, readAhead=ahead, tasksPerCore=16)
        (tmp_path / f"w{window}").mkdir()
        remote = _as_objects(plan, tmp_path / f"w{window}")
        for where in (None, f"store_timestamp BETWEEN {ts[len(ts) // 5]} AND {ts[len(ts) * 3 // 5]}",
                      f"commitlog_offset < {full[len(full) // 2]['commitlog_offset']}", "topic = 't2'"):
            df = jvmsource.load_jvm(spark, json.dumps(remote))
            if where:
                df = df.where(where)
            want = _rows((local_df.where(where) if where else local_df).selectExpr(*cols))
            assert want and _rows(df.selectExpr(*cols)) == want, (window, ahead, where)
    tasks = jvmsource.load_jvm(spark, json.dumps(remote)).rdd.getNumPartitions()
    assert tasks >= 3 * len(remote["splits"]), (tasks, len(remote["splits"]))


def test_remote_tuning_options_are_integers():
    from storelib.read import jvmsource
    assert jvmsource._tuning({"windowbytes": "65536", "readahead": 3, "taskspercore": ""}) == \
        {"window_bytes": 65536, "read_ahead": 3}
    with pytest.raises(ValueError, match=r"option readAhead='two': expected an integer"):
        jvmsource._tuning({"readahead": "two"})


def _zone_bytes(plan: dict, lo: int, hi: int) -> int:
    """The bytes of the zones whose store-time range meets [lo, hi], over the plan's splits: what
    a time range may fetch (a zone's bytes run to the next zone's start, the last one's to its
    split's stop, within the segment's valid bytes)."""
    total = 0
    for s in plan["splits"]:
        base, valid, stop, zones = s[2], s[3], s[5], s[8]
        assert zones, "every split of this store starts on a zone"
        ends = [z[0] for z in zones[1:]] + [min(stop, base + valid)]
        total += sum(end - z[0] for z, end in zip(zones, ends) if z[2] >= lo and z[1] <= hi)
    return total


def test_a_time_range_fetches_at_most_its_zones_bytes(spark, store, tmp_path, raw_local):
    """The bound on a store-time range's fetch: at most the bytes of the zones its range meets
    (1.0x of them: no window, read ahead or task cut fetches a byte past them, nor any byte
    twice: with no read ahead, a window's last bytes, a record's head, are joined to the next
    window, not fetched again), and at least the matching records' bytes; with windows smaller
    than a zone, no read ahead, one and three range reads in flight at once."""
    from storelib.read import jvmsource
    assert jvmsource.ensure_loadable(spark)
    local_df = spark.read.format("rocketmq").load(store)
    ts = sorted(r["store_timestamp"] for r in _rows(local_df.select("store_timestamp")))
    lo, hi = ts[len(ts) * 45 // 100], ts[len(ts) * 55 // 100]
    where = f"store_timestamp BETWEEN {lo} AND {hi}"
    cols = ["commitlog_offset", "store_timestamp", "sha2(body, 256) AS body"]
    want = _rows(local_df.where(where).selectExpr(*cols))
    needed = local_df.where(where).selectExpr("sum(store_size)").collect()[0][0]
    for window, ahead in ((None, None), (3000, 0), (3000, 1), (3000, 3)):
        options = {k: v for k, v in (("windowBytes", window), ("readAhead", ahead)) if v is not None}
        plan = _plan(store, **options)
        bound = _zone_bytes(plan, lo, hi)
        (tmp_path / f"w{window}-{ahead}").mkdir()
        remote = _as_objects(plan, tmp_path / f"w{window}-{ahead}")
        before = _read_bytes(spark)
        got = _rows(jvmsource.load_jvm(spark, json.dumps(remote)).where(where).selectExpr(*cols))
        fetched = _read_bytes(spark) - before
        assert want and got == want, (window, ahead)
        assert needed <= fetched <= bound, (window, ahead, needed, fetched, bound)
        assert bound < sum(s[5] - s[4] for s in plan["splits"]) / 3, (bound, "the range is a fraction of the store")


def test_the_splits_of_a_segment_are_joined_before_they_are_cut_into_tasks(spark, store, tmp_path, raw_local):
    """With one task per core, the planner's splits of one segment that follow each other are read
    as one run cut into tasks of about equal bytes (not a task per planned split: splits of unequal
    bytes, in waves): a full scan and a time range planned in small splits are read in fewer tasks
    than the splits, no larger than a segment, with the local rows and the zones' bytes."""
    from storelib.read import jvmsource
    assert jvmsource.ensure_loadable(spark)
    cols = ["commitlog_offset", "store_timestamp", "sha2(body, 256) AS body"]
    local_df = spark.read.format("rocketmq").load(store)
    ts = sorted(r["store_timestamp"] for r in _rows(local_df.select("store_timestamp")))
    lo, hi = ts[len(ts) * 2 // 10], ts[len(ts) * 7 // 10]
    from storelib.read.datasource import RocketMQReader
    plan = json.loads(jvmsource.jvm_plan(RocketMQReader({"path": store, "tasksPerCore": 1}), split_bytes=20000))
    segments = {s[0] for s in plan["splits"]}
    assert len(plan["splits"]) >= 4 * len(segments), "several planned splits per segment"
    remote = _as_objects(plan, tmp_path)
    for where in (None, f"store_timestamp BETWEEN {lo} AND {hi}"):
        df = jvmsource.load_jvm(spark, json.dumps(remote))
        if where:
            df = df.where(where)
        want = _rows((local_df.where(where) if where else local_df).selectExpr(*cols))
        before = _read_bytes(spark)
        assert want and _rows(df.selectExpr(*cols)) == want, where
        fetched = _read_bytes(spark) - before
        assert fetched <= (_zone_bytes(plan, lo, hi) if where else sum(s[5] - s[4] for s in plan["splits"])), where
        tasks = df.rdd.getNumPartitions()
        assert tasks <= len(segments) + spark.sparkContext.defaultParallelism, (where, tasks, len(segments))
