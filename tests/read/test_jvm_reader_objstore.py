"""The JVM reader on object stores (storelib.read.jvmsource: S3A from hadoop-aws, Hadoop's HDFS
client): the same rows as the Python reader on a store in S3 (files assembled from the objects of
two batches) and on HDFS, query shape by query shape; a time range fetches byte ranges, not the
segments; a damaged object is refused like the Python reader refuses it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from unittest import mock

import pytest

from support import s3server
from conftest import ROOT, golden_set
from test_jvm_reader import _read, _rows

# A store on moto and one on the HDFS mini cluster (a few minutes on 2 cores): `make jvm-objstores`;
# `make test` runs the remote reads through Hadoop's local file system (test_jvm_reader_remote.py).
pytestmark = [pytest.mark.slow, pytest.mark.spark,
              pytest.mark.skipif(not (os.environ.get("ROCKETLAKE_BACKENDS") or os.environ.get("ROCKETLAKE_LONG")),
                                 reason="the JVM reader on S3 and HDFS: make jvm-objstores (ROCKETLAKE_BACKENDS=1)")]

BUCKET = "rl-objread"
# several segments and queue files, few enough objects for a quick ingest on moto
SMALL = {"mappedFileSizeCommitLog": 1 << 20, "mappedFileSizeConsumeQueue": 6000, "maxHashSlotNum": 1024,
         "maxIndexNum": 4096}
CUT = 1700


def _ingest(uri: str, tmp, env: dict) -> None:
    """small-roll into ``uri`` in two batches (without Spark): every file continued by the second
    batch is assembled from two objects."""
    props = tmp / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl"), encoding="utf-8").readlines()
    for k, part in enumerate((lines[:CUT], lines[CUT:])):
        src = tmp / f"part{k}.jsonl"
        src.write_text("".join(part), encoding="utf-8")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest", uri,
                            str(src), str(props), f"b{k}"], env=dict(os.environ, **env), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def s3_store(tmp_path_factory, spark):
    """(env, boto3 client, store URI) of small-roll in S3 (moto), the session's S3 settings set."""
    from storelib.read import jvmsource
    if not jvmsource.s3a_jars():
        pytest.skip("S3A's jars are not fetched (make s3a)")
    with s3server.moto(BUCKET) as (env, s3):
        uri = f"s3://{BUCKET}/stores/small"
        _ingest(uri, tmp_path_factory.mktemp("objread"), env)
        with mock.patch.dict(os.environ, env):
            from storelib.io import objstore
            objstore.ship(spark.sparkContext)         # the Python reader's workers: the same server
            yield env, s3, uri


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    from storelib.read.datasource import register
    register(spark)


def _times(rows):
    ts = sorted(r["store_timestamp"] for r in rows)
    return ts[len(ts) * 4 // 10], ts[len(ts) * 5 // 10]


def _fetched(spark) -> int:
    from storelib.read import jvmsource
    return jvmsource.fetched(spark, "s3a")[0]


def _differential(spark, uri):
    """The JVM reader's rows against the Python reader's (read once, all columns: its filtered
    answers are its full rows filtered, tests/read/test_datasource.py), query shape by query
    shape: full scan, a topic through the queues and walked, a time range narrowed by zones, a
    topic and a time bound, an offset bound. Returns the rows."""
    def jvm(where=None, **options):
        df = _read(spark, uri, "jvm", where, **options)
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "BatchScan" in plan and "(Python)" not in plan, plan
        return _rows(df)
    full = _rows(_read(spark, uri, "python"))
    assert jvm() == full
    topic = sorted({r["topic"] for r in full})[0]
    lo, hi = _times(full)
    mid = full[len(full) // 2]["commitlog_offset"]
    for where, keep in ((f"topic = '{topic}'", lambda r: r["topic"] == topic),
                        (f"store_timestamp BETWEEN {lo} AND {hi}", lambda r: lo <= r["store_timestamp"] <= hi),
                        (f"topic = '{topic}' AND store_timestamp >= {lo}",
                         lambda r: r["topic"] == topic and r["store_timestamp"] >= lo),
                        (f"commitlog_offset > {mid}", lambda r: r["commitlog_offset"] > mid)):
        want = [r for r in full if keep(r)]
        assert want and jvm(where) == want, where
    assert jvm(f"topic = '{topic}'", topicQueues="false") == [r for r in full if r["topic"] == topic]
    return full


def test_s3_store_reads_as_the_python_reader(spark, s3_store):
    """The same rows as the Python reader; the full scan is every message the broker wrote (its
    store time and body checksum: offsets differ, the segments here are larger)."""
    env, s3, uri = s3_store
    puts = [json.loads(x) for x in open(os.path.join(golden_set("small-roll"), "put_results.jsonl"), encoding="utf-8")]
    full = _differential(spark, uri)
    assert sorted((r["store_timestamp"], r["body_crc"]) for r in full) == \
        sorted((p["store_timestamp"], p["body_crc"]) for p in puts)


def test_a_time_range_fetches_its_zones(spark, s3_store):
    """No whole-segment downloads: a tenth of the store times (through the zone maps) fetches far
    fewer bytes than the full scan. (small-roll has multi-dispatch queues, so a topic filter walks
    its records here; topics read through queue ranges: test_jvm_reader_remote.py.)"""
    env, s3, uri = s3_store

    def fetched_by(where):
        before = _fetched(spark)
        _read(spark, uri, "jvm", where, ["count(*)", "sum(length(body))"]).collect()
        return _fetched(spark) - before
    full = fetched_by(None)
    lo, hi = _times(_rows(_read(spark, uri, "jvm", cols=["store_timestamp"])))
    tenth = fetched_by(f"store_timestamp BETWEEN {lo} AND {hi}")
    assert full > 0 and 0 < tenth < full / 2, (full, tenth)


def _read_ops(spark) -> int:
    from storelib.read import jvmsource
    return jvmsource.fetched(spark, "s3a")[1]


def test_reads_make_no_metadata_requests(spark, s3_store):
    """Every stream is opened with the length the plan knows (FileBytes.Remote.open: an object's
    extents end there at the least), so S3A asks the server for no object's metadata: no HEAD per
    stream opened, whether a query walks the splits, narrows them to a time range's zones or
    reads a topic. Counted as Hadoop's read operations of s3a, which count S3A's HEAD and LIST
    requests, not its ranged GETs (the reader lists nothing). Before: a HEAD per stream, 5 for a
    tenth of the 2M bench store, 10 for its full scan."""
    env, s3, uri = s3_store
    rows = _rows(_read(spark, uri, "jvm", cols=["store_timestamp", "topic"]))
    lo, hi = _times(rows)
    topic = sorted({r["topic"] for r in rows})[0]
    for where in (None, f"store_timestamp BETWEEN {lo} AND {hi}", f"topic = '{topic}'"):
        ops, got = _read_ops(spark), _fetched(spark)
        n = _read(spark, uri, "jvm", where, ["count(*)", "sum(length(body))"]).collect()[0][0]
        assert n > 0 and _fetched(spark) > got, where
        assert _read_ops(spark) - ops == 0, (where, _read_ops(spark) - ops)


def _first_record_object(s3, uri: str) -> tuple:
    """(the first segment, its first extent, the key of that extent's object, the object's bytes)."""
    from storelib.table.storefiles import as_store, open_files
    store = as_store(uri)
    files, _ = open_files(store)
    seg = files.commitlog[0]
    size, extents = store.assembled[seg.rel]
    first = sorted(extents)[0]
    key = f"stores/small/{first[2]}"
    return seg, first, key, s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_an_object_shorter_than_its_extents_is_refused(spark, s3_store):
    """A stream opened with the length of its extents (no HEAD) still finds an object that ends
    before them: the read fails naming the file, it does not read past the object's end."""
    env, s3, uri = s3_store
    seg, first, key, original = _first_record_object(s3, uri)
    s3.put_object(Bucket=BUCKET, Key=key, Body=original[:first[3] + first[1] - 100])
    try:
        with pytest.raises(Exception) as e:
            _read(spark, uri, "jvm").count()
        assert seg.rel in str(e.value) and "ends before" in str(e.value), str(e.value)[-3000:]
    finally:
        s3.put_object(Bucket=BUCKET, Key=key, Body=original)


def test_a_damaged_object_is_refused(spark, s3_store, tmp_path):
    """A record object whose record's body length was changed: both readers refuse, naming the
    file and the record's place; the records before it still read."""
    from storelib.codec.messages import decode_one
    from storelib.format import commitlog as cl
    env, s3, uri = s3_store
    seg, first, key, original = _first_record_object(s3, uri)
    buf = bytearray(original)
    pos = 0
    for _ in range(4):
        pos += int.from_bytes(buf[first[3] + pos:first[3] + pos + 4], "big")
    r = decode_one(bytes(buf[first[3]:]), pos)
    at = first[3] + pos + cl.bodylength_offset(r["sys_flag"])
    buf[at:at + 4] = (10 ** 6).to_bytes(4, "big")
    s3.put_object(Bucket=BUCKET, Key=key, Body=bytes(buf))
    try:
        for engine in ("jvm", "python"):
            with pytest.raises(Exception) as e:
                _read(spark, uri, engine).count()
            assert f"{seg.rel}@{first[0] + pos}" in str(e.value) and "damaged record" in str(e.value), \
                (engine, str(e.value)[-3000:])
        assert _read(spark, uri, "jvm", f"commitlog_offset < {seg.base + first[0] + pos}").count() == 4
    finally:
        s3.put_object(Bucket=BUCKET, Key=key, Body=original)


def test_hdfs_store_reads_as_the_python_reader(spark, tmp_path):
    """The same on HDFS (Hadoop's mini cluster; pyspark's own HDFS client)."""
    from support import hdfscluster
    from support.mavenfetch import Unavailable
    try:
        hdfscluster.jars()
    except Unavailable as e:
        pytest.skip(f"the HDFS mini cluster is unavailable: {e}")
    with hdfscluster.cluster() as nn:
        uri = f"{nn}/stores/small"
        _ingest(uri, tmp_path, {})
        _differential(spark, uri)
