"""The JVM reader of ``spark.read.format("rocketmq")`` (jvm/src, storelib.read.jvmsource) against
the Python reader: the same rows, column for column, on RocketMQ's own stores and on rocketlake
stores; only the columns a query names are read; damaged bytes are errors naming file and place."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from storelib.format import commitlog as cl

ALL = ["commitlog_offset", "store_size", "msg_id", "topic", "queue_id", "queue_offset", "flag", "sys_flag", "body_crc",
       "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
       "prepared_transaction_offset", "sha2(body, 256) AS body", "map_entries(properties) AS properties", "tags",
       "keys", "uniq_key"]


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    from storelib.read.datasource import register
    register(spark)


def _read(spark, store, engine, where=None, cols=ALL, **options):
    r = spark.read.format("rocketmq").option("engine", engine)
    for k, v in options.items():
        r = r.option(k, v)
    df = r.load(store)
    if where:
        df = df.where(where)
    return df.selectExpr(*cols)


def _rows(df):
    out = [r.asDict(recursive=True) for r in df.collect()]
    for r in out:
        if isinstance(r.get("properties"), list):
            r["properties"] = sorted((e["key"], e["value"]) for e in r["properties"])
    return out


def _same(spark, store, where=None, cols=ALL, **options):
    jvm = _read(spark, store, "jvm", where, cols, **options)
    plan = jvm._jdf.queryExecution().executedPlan().toString()
    assert "BatchScan" in plan and "(Python)" not in plan, plan          # not the Python source
    got, want = _rows(jvm), _rows(_read(spark, store, "python", where, cols, **options))
    assert got == want, (where, options)
    return got


@pytest.fixture(scope="module")
def rocketlake_store(tmp_path_factory):
    """small-roll's messages ingested by rocketlake (without Spark) into 64 KiB segments."""
    from conftest import GOLDEN
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    store = str(tmp_path_factory.mktemp("jvm-reader") / "store")
    run_ingest(LocalSession(), store, os.path.join(GOLDEN, "small-roll", "messages.jsonl"), "jsonl",
               StoreConfig(mappedFileSizeCommitLog=65536, mappedFileSizeConsumeQueue=600, maxHashSlotNum=64,
                           maxIndexNum=256), quiet=True)
    return store


@pytest.mark.parametrize("kind", ["broker", "rocketlake"])
def test_stores_read_alike(spark, restored_golden, rocketlake_store, kind):
    """RocketMQ's own store and rocketlake's of the same messages (IPv4 and IPv6 hosts, 1- and
    2-byte topic lengths, many 64 KiB segments, transaction records)."""
    store = restored_golden("small-roll") if kind == "broker" else rocketlake_store
    rows = _same(spark, store)
    assert len(rows) > 1000
    ts = sorted(r["store_timestamp"] for r in rows)
    cases = [  # (where, the same on the rows read, options)
        (f"store_timestamp >= {ts[200]} AND store_timestamp <= {ts[900]} AND topic IN ('shipping', 'order_events')",
         lambda r: ts[200] <= r["store_timestamp"] <= ts[900] and r["topic"] in ("shipping", "order_events"), {}),
        ("commitlog_offset > 70000 AND commitlog_offset < 400000",
         lambda r: 70000 < r["commitlog_offset"] < 400000, {"splitBytes": 20000}),
        ("queue_id = 1 AND tags IS NOT NULL", lambda r: r["queue_id"] == 1 and r["tags"] is not None, {}),
    ]
    for where, keep, options in cases:
        got = _rows(_read(spark, store, "jvm", where, **options))
        assert got == [r for r in rows if keep(r)] and got, where
    assert _read(spark, store, "jvm", "topic = 'nosuch'").count() == 0


def test_topic_filter_through_the_queues(spark, tmp_path):
    """A rocketlake store whose records all have a unit: a topic filter reads through the consume
    queues (QueueReader), with the rows of a walk and of the Python reader; a unit that points at
    the wrong record is an error."""
    from conftest import GOLDEN
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    with open(os.path.join(GOLDEN, "small-roll", "messages.jsonl"), encoding="utf-8") as fh:
        lines = [x for x in fh if json.loads(x)["sys_flag"] & 0xC in (0, 8)][:1500]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(lines), encoding="utf-8")
    store = str(tmp_path / "store")
    run_ingest(LocalSession(), store, str(src), "jsonl", StoreConfig(mappedFileSizeCommitLog=65536,
               mappedFileSizeConsumeQueue=600, maxHashSlotNum=64, maxIndexNum=256), quiet=True)
    where = "topic IN ('shipping', 'audit_log') AND commitlog_offset > 30000"
    q = _read(spark, store, "jvm", where, splitBytes=24000)
    assert "topics read through their consume queues" in q._jdf.queryExecution().executedPlan().toString()
    got = _rows(q)
    assert got == _rows(_read(spark, store, "jvm", where, topicQueues="false")) == \
        _rows(_read(spark, store, "python", where)) and len(got) > 100
    # a unit of a shipping record pointed into the middle of its record
    qdir = os.path.join(store, "consumequeue", "shipping", "0")
    f = os.path.join(qdir, sorted(os.listdir(qdir))[0])
    raw = bytearray(open(f, "rb").read())
    raw[0:8] = (int.from_bytes(raw[0:8], "big") + 4).to_bytes(8, "big")
    open(f, "wb").write(bytes(raw))
    with pytest.raises(Exception, match="a consume-queue unit says a record of"):
        _read(spark, store, "jvm", "topic = 'shipping'").count()


def test_only_named_columns_are_read(spark, restored_golden):
    df = _read(spark, restored_golden("small-roll"), "jvm", "topic = 'shipping'", cols=["length(body) AS n"])
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert re.search(r"BatchScan rocketmq\([^)]*\)\[body#\d+\] ", plan), plan     # one column read
    assert not re.search(r"\bFilter\b", plan)     # the topic filter is applied by the reader, exactly
    from conftest import GOLDEN
    with open(os.path.join(GOLDEN, "small-roll", "messages.jsonl"), encoding="utf-8") as fh:
        assert df.count() == sum(json.loads(x)["topic"] == "shipping" for x in fh)


def _segment_of(store):
    seg = sorted(os.listdir(os.path.join(store, "commitlog")))[0]
    return os.path.join(store, "commitlog", seg), "commitlog/" + seg


def _record_at(buf, n):
    """Position of the n-th record of a segment's bytes."""
    pos = 0
    for _ in range(n):
        pos += int.from_bytes(buf[pos:pos + 4], "big")
    return pos


def _copy(restored_golden, tmp_path, name="small-roll"):
    store = str(tmp_path / "store")
    shutil.copytree(restored_golden(name), store)
    for root, _, names in os.walk(store):
        for n in names:
            os.chmod(os.path.join(root, n), 0o644)
    return store


def _changed(restored_golden, tmp_path, n, change):
    """A copy of small-roll whose first segment's n-th record went through ``change(buf, pos,
    decoded record)``: (store, the segment's name, the record's position)."""
    from storelib.codec.messages import decode_one
    store = _copy(restored_golden, tmp_path)
    path, rel = _segment_of(store)
    buf = bytearray(open(path, "rb").read())
    pos = _record_at(buf, n)
    change(buf, pos, decode_one(bytes(buf), pos))
    with open(path, "wb") as fh:
        fh.write(bytes(buf))
    return store, rel, pos


def test_text_that_is_not_utf8_reads_like_java(spark, restored_golden, tmp_path):
    """A topic and a properties string with a byte that is not UTF-8: replaced (U+FFFD) alike."""
    def change(buf, pos, r):
        topic_at = bytes(buf).index(r["topic"].encode(), pos)
        buf[topic_at + 1] = 0xFF
        props_at = bytes(buf).index(r["properties_string"].encode()[:8], topic_at)
        buf[props_at + 2] = 0xC3              # a lead byte without its continuation
    store, _, pos = _changed(restored_golden, tmp_path, 3, change)
    rows = _same(spark, store, f"commitlog_offset = {pos}")
    assert "\ufffd" in rows[0]["topic"]


def test_damaged_record_is_an_error_naming_its_place(spark, restored_golden, tmp_path):
    def change(buf, pos, r):
        at = pos + cl.bodylength_offset(r["sys_flag"])
        buf[at:at + 4] = (10 ** 6).to_bytes(4, "big")       # a body longer than its record
    store, rel, pos = _changed(restored_golden, tmp_path, 5, change)
    for engine in ("jvm", "python"):
        with pytest.raises(Exception) as e:
            _read(spark, store, engine).count()
        assert f"{rel}@{pos}" in str(e.value) and "damaged record" in str(e.value), (engine, str(e.value)[-3000:])
    # records before it, and a time range that leaves it out, still read
    assert _read(spark, store, "jvm", f"commitlog_offset < {pos}").count() == 5


@pytest.mark.parametrize("damage", ["zero-size", "magic"])
def test_records_that_end_before_the_valid_bytes_are_an_error(spark, restored_golden, tmp_path, damage):
    """A segment's last split whose walk meets a zero TOTALSIZE or an unknown magic before the
    segment's valid bytes end: an error naming the place in both readers, not the records before
    it as the whole answer."""
    def change(buf, pos, r):
        at = pos if damage == "zero-size" else pos + 4
        buf[at:at + 4] = (0 if damage == "zero-size" else 1).to_bytes(4, "big")
    store, rel, pos = _changed(restored_golden, tmp_path, 5, change)
    for engine in ("jvm", "python"):
        with pytest.raises(Exception) as e:
            _read(spark, store, engine).count()
        assert f"{rel}@{pos}" in str(e.value) and "the records end here" in str(e.value), (engine, str(e.value)[-3000:])


def test_a_dataframe_reads_the_snapshot_it_was_loaded_on(spark, tmp_path):
    """Plans are made at load: a later batch is seen by the next load, not by an earlier DataFrame."""
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    cfg = StoreConfig(mappedFileSizeCommitLog=65536, mappedFileSizeConsumeQueue=600, maxHashSlotNum=64,
                      maxIndexNum=256)
    store = str(tmp_path / "store")
    for i, n in enumerate((30, 20)):
        src = tmp_path / f"m{i}.jsonl"
        src.write_text("".join(json.dumps({"topic": "t", "body": f"b{i}-{k}"}) + "\n" for k in range(n)))
        run_ingest(LocalSession(), store, str(src), "jsonl", cfg, quiet=True)
        if i == 0:
            first = spark.read.format("rocketmq").load(store)
    assert first.count() == 30
    assert spark.read.format("rocketmq").load(store).count() == 50
    assert spark.read.format("rocketmq").option("asOfBatch", "1").load(store).count() == 30


def test_engine_option(spark, restored_golden):
    store = restored_golden("small-roll")
    with pytest.raises(ValueError, match="engine='fast'"):
        spark.read.format("rocketmq").option("engine", "fast").load(store)
    plan = spark.read.format("rocketmq").option("engine", "python").load(store)._jdf.queryExecution() \
        .executedPlan().toString()
    assert "(Python)" in plan, plan


def test_stores_read_through_python_where_the_jvm_reader_cannot(restored_golden):
    """Files read through a staged patch or assembled from objects, a publish in flight: no JVM plan."""
    from storelib.read import jvmsource
    from storelib.read.datasource import RocketMQReader
    store = restored_golden("small-roll")
    assert jvmsource.jvm_plan(RocketMQReader({"path": store})) is not None

    class Moving:
        os_paths = True
        moved = {"commitlog/staged": "commitlog/0"}
    assert not jvmsource.plain_files(Moving(), ["commitlog/0"])

    class Objects:
        os_paths = False
        moved = {}
    assert not jvmsource.plain_files(Objects(), ["commitlog/0"])


@pytest.mark.slow
def test_a_spark_submit_job_reads_through_the_jvm_reader(restored_golden, tmp_path):
    """Under spark-submit pyspark is imported from Spark's pyspark.zip: the jar is still found
    (not rebuilt against a path inside the zip) and the query runs in the JVM."""
    import subprocess
    import sys
    script = tmp_path / "q.py"
    script.write_text(
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "from storelib.read.datasource import register\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "register(spark)\n"
        "df = spark.read.format('rocketmq').load(sys.argv[1]).where(\"topic = 'shipping'\")\n"
        "print('PLAN', '(Python)' in df._jdf.queryExecution().executedPlan().toString())\n"
        "print('COUNT', df.count())\n")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "spark-submit"), "--master", "local[2]",
                        "--conf", "spark.ui.enabled=false", str(script), restored_golden("small-roll")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "PLAN False" in r.stdout and "could not be built" not in r.stderr, (r.stdout, r.stderr[-3000:])
    from conftest import GOLDEN
    with open(os.path.join(GOLDEN, "small-roll", "messages.jsonl"), encoding="utf-8") as fh:
        want = sum(json.loads(x)["topic"] == "shipping" for x in fh)
    assert f"COUNT {want}" in r.stdout


def test_store_time_prunes_inside_segments(spark, tmp_path):
    """A pushed store-time filter narrows each split to its runs of zones that may hold matching
    records (zone maps, storelib.table.zonemap): fewer, smaller tasks, and exactly the rows of a
    full read filtered afterwards, on both readers."""
    from conftest import GOLDEN
    from storelib.format.config import StoreConfig
    from support.zoned_store import BASE_TS, zoned_store
    store = zoned_store(tmp_path, os.path.join(GOLDEN, "small-roll", "messages.jsonl"),
                        StoreConfig(mappedFileSizeCommitLog=65536, mappedFileSizeConsumeQueue=600,
                                    maxHashSlotNum=64, maxIndexNum=256))
    cols = ["commitlog_offset", "store_timestamp", "topic"]
    whole = _rows(_read(spark, store, "jvm", cols=cols))
    full = _read(spark, store, "jvm", cols=cols).rdd.getNumPartitions()
    for lo, width, where_topic in ((3 * 10**5, 10**5, ""), (0, 4 * 10**5, " AND topic = 'shipping'"),
                                   (19 * 10**5, 10**4, "")):
        b, e = BASE_TS + lo, BASE_TS + lo + width
        where = f"store_timestamp >= {b} AND store_timestamp <= {e}" + where_topic
        want = [r for r in whole if b <= r["store_timestamp"] <= e
                and (not where_topic or r["topic"] == "shipping")]
        q = _read(spark, store, "jvm", where, cols)
        assert _rows(q) == want == _same(spark, store, where, cols) and want, where
        assert q.rdd.getNumPartitions() < full / 2, where
    # a zone start that is not a record start is an error, not missing rows
    from storelib.read import jvmsource
    from storelib.read.datasource import RocketMQReader
    plan = json.loads(jvmsource.jvm_plan(RocketMQReader({"path": store}), split_bytes=8000))
    zones = next(r for r in plan["splits"] if r[8] and len(r[8]) > 1)[8]
    zones[0][1:] = [0, 0]                           # the zone before: outside the range below
    zones[1][0] += 3
    df = jvmsource.load_jvm(spark, json.dumps(plan))
    with pytest.raises(Exception, match="no record starts here"):
        df.where(f"store_timestamp >= {zones[1][1]} AND store_timestamp <= {zones[1][2]}").count()


def test_min_partitions_is_honoured(spark, tmp_path):
    """``minPartitions`` (the Python reader's option) on the JVM reader: no fewer tasks than that
    where the splits' zones allow, the same rows; without it, the splits as planned."""
    from conftest import GOLDEN
    from storelib.format.config import StoreConfig
    from support.zoned_store import zoned_store
    store = zoned_store(tmp_path, os.path.join(GOLDEN, "small-roll", "messages.jsonl"),
                        StoreConfig(mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=6000,
                                    maxHashSlotNum=64, maxIndexNum=256))
    cols = ["commitlog_offset", "store_timestamp", "topic"]
    plain = _read(spark, store, "jvm", cols=cols)
    assert plain.rdd.getNumPartitions() < 5
    many = _read(spark, store, "jvm", cols=cols, minPartitions=5)
    assert many.rdd.getNumPartitions() >= 5
    assert _rows(many) == _rows(plain) == _same(spark, store, cols=cols, minPartitions=5)
