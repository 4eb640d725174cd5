"""``df.write.format("rocketlake")`` (storelib.ingest.sink) in this process's SparkSession: the same
bytes as ``ingest_dataframe``, a rewrite of the same rows is a no-op, overwrite is refused, and a
commit that cannot get the writer lease fails naming its holder and writes nothing."""
from __future__ import annotations

import hashlib
import os

import pytest


from storelib.format.paths import META_DIR

pytestmark = pytest.mark.spark


def store_files(store: str) -> dict:
    out = {}
    for d, dirs, files in os.walk(store):
        dirs[:] = [x for x in dirs if os.path.relpath(os.path.join(d, x), store) != META_DIR]
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), store)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def frame(spark):
    rows = [(f"t{i % 3}", f"body {i}", 1718000000000 + i, {"KEYS": f"k{i % 7}"}) for i in range(500)]
    return spark.createDataFrame(rows, "topic string, body string, born_timestamp long, "
                                       "properties map<string,string>").repartition(2)


def batches(store):
    from storelib.io import storage
    from storelib.table import manifest
    return [(b["batch_id"], b["messages"]) for b in manifest.load_snapshot(storage.Store(store)).batches]


def test_write_is_ingest_dataframe_and_idempotent(spark, tmp_path):
    from storelib.ingest import frame as frame_ingest, sink
    sink.register(spark)
    df = frame(spark).cache()
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    df.write.format("rocketlake").mode("append").save(a)
    df.write.format("rocketlake").mode("append").save(a)            # the same rows: already committed
    frame_ingest.ingest_dataframe(df, b, quiet=True)
    assert batches(a) == batches(b) and len(batches(a)) == 1
    assert store_files(a) == store_files(b) and store_files(a)
    with pytest.raises(Exception, match="append-only"):
        df.write.format("rocketlake").mode("overwrite").save(a)


def test_a_held_lease_is_waited_for_then_named(spark, tmp_path):
    from storelib.ingest import sink
    from storelib.io import storage
    from storelib.table.writerlease import WriterLease
    sink.register(spark)
    store = str(tmp_path / "s")
    other = WriterLease(storage.Store(store), "another-query")
    other.acquire()
    try:
        with pytest.raises(Exception, match="waited 1s for the writer lease.*another-query"):
            frame(spark).write.format("rocketlake").mode("append").option("leaseWaitSeconds", "1").save(store)
    finally:
        other.release()
    assert not os.path.exists(os.path.join(store, META_DIR, "checkpoints"))


def test_empty_frames_commit_nothing(spark, tmp_path):
    """An empty DataFrame, micro-batch or write commits no batch (and creates no store); the next
    micro-batch with rows commits as usual."""
    from storelib.ingest import frame as frame_ingest, sink
    sink.register(spark)
    empty = frame(spark).limit(0)
    store = str(tmp_path / "s")
    assert frame_ingest.ingest_dataframe(empty, store, quiet=True) == {"status": "nothing-to-commit", "messages": 0}
    write = sink.rocketlake_batch_writer(store, store_timestamp=1718000000000, checkpoint=None)
    spark.sparkContext.setLocalProperty("sql.streaming.queryId", "q-empty")
    try:
        got = write(empty, 0)
        assert got["status"] == "nothing-to-commit" and got["batch_id"] == "stream-q-empty-0"
        empty.write.format("rocketlake").mode("append").save(store)
        assert not os.path.exists(store)
        assert write(frame(spark), 1)["status"] == "committed"
        assert write(empty, 2)["status"] == "nothing-to-commit"
    finally:
        spark.sparkContext.setLocalProperty("sql.streaming.queryId", None)
    assert batches(store) == [("stream-q-empty-1", 500)]


def test_a_committed_write_leaves_no_incoming_directory(spark, tmp_path):
    """Each write (each micro-batch of a query) stages under its own ``_rocketlake/incoming/<id>/``:
    the commit removes the directory with its files, and a dead writer's emptied one goes too. Left
    behind, a query made one per micro-batch and every commit listed them all again."""
    from storelib.ingest import sink
    from storelib.io import storage
    from storelib.format.paths import INCOMING_DIR
    sink.register(spark)
    store = str(tmp_path / "s")
    df = frame(spark)
    df.write.format("rocketlake").mode("append").save(store)
    dead = f"{INCOMING_DIR}/20200101T000000-write-0123456789ab"      # a writer that died staging
    storage.Store(store).write_file(f"{dead}/part-00000-x.arrow", [b"x"])
    df.limit(10).write.format("rocketlake").mode("append").save(store)
    assert len(batches(store)) == 2
    assert os.listdir(os.path.join(store, INCOMING_DIR)) == []


def test_an_option_the_sink_does_not_take_is_refused_before_any_task(tmp_path):
    """A misspelt option (`queue_by`, `storeTimestmp`) was ignored and the batch written without
    it; a bad leaseWaitSeconds failed only at the commit, as Python's float() error."""
    from pyspark.sql import types as T
    from storelib.ingest import sink
    schema = T.StructType([T.StructField("topic", T.StringType()), T.StructField("body", T.StringType())])
    store = str(tmp_path / "s")
    with pytest.raises(ValueError, match="rocketlake sink: unknown option 'queue_by'.*did you mean queueBy"):
        sink.RocketLakeDataSource({"path": store, "queue_by": "k"}).writer(schema, False)
    with pytest.raises(ValueError, match="rocketlake sink: option leaseWaitSeconds='abc': give seconds"):
        sink.RocketLakeDataSource({"path": store, "leaseWaitSeconds": "abc"}).writer(schema, False)
    with pytest.raises(ValueError, match="rocketlake sink: option storeTimestamp='soon': give milliseconds or 'now'"):
        sink.RocketLakeDataSource({"path": store, "storeTimestamp": "soon"}).writer(schema, False)
    with pytest.raises(ValueError, match="rocketlake sink: option batchId is for batch writes"):
        sink.RocketLakeDataSource({"path": store, "checkpointLocation": str(tmp_path / "ck"),
                                   "batchId": "b"}).streamWriter(schema, False)
    sink.RocketLakeDataSource({"path": store, "QUEUEBY": "k", "leaseWaitSeconds": "1.5", "storeTimestamp": "now",
                               "config": "c", "topics": "t", "updateTopics": "true", "batchId": "b",
                               "allowEmptyBody": "true"}).writer(schema, False)


def _checkpoint_reads(monkeypatch, sink, answer: bytes) -> list:
    """The sink's checkpoint reads answered with ``answer``: the list of what was read (store/rel)."""
    read = []

    class Store:
        def __init__(self, uri):
            self.uri = uri

        def read(self, rel):
            read.append(f"{self.uri}/{rel}")
            return answer
    monkeypatch.setattr(sink.storage, "Store", Store)
    return read


def test_the_query_id_is_read_from_an_s3a_checkpoint(monkeypatch):
    """Spark keeps a checkpoint on S3 under an s3a:// URI (Hadoop's file system), which pyarrow
    does not open: the sink failed every micro-batch with 'cannot read the query's id'. The same
    object is read as s3://."""
    from storelib.ingest import sink
    read = _checkpoint_reads(monkeypatch, sink, b'{"id":"q-1"}\n')
    assert sink.query_id_of("s3a://bucket/ck/orders") == "q-1"
    assert sink.query_id_of("file:///data/ck") == "q-1"
    assert read == ["s3://bucket/ck/orders/metadata", "/data/ck/metadata"]


def test_a_micro_batchs_offsets_are_read_from_a_local_or_s3a_checkpoint(monkeypatch, tmp_path):
    """A micro-batch is identified by its entry of Spark's offset log, read where ``metadata`` is
    (a path, ``file:``, ``s3a://``); without one the commit refuses, naming the file."""
    from storelib.ingest import sink
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "7").write_bytes(b'v1\n{"batchTimestampMs":1}\n{"logOffset":7}\n')
    assert sink.offset_entry(str(tmp_path), 7) == sink.offset_entry(f"file://{tmp_path}", 7) == \
        b'v1\n{"batchTimestampMs":1}\n{"logOffset":7}\n'
    with pytest.raises(ValueError, match=f"cannot read micro-batch 8's offsets from {tmp_path}/offsets/8"):
        sink.offset_entry(str(tmp_path), 8)
    read = _checkpoint_reads(monkeypatch, sink, b"v1\n{}\n{}\n")
    assert sink.offset_entry("s3a://bucket/ck/orders", 3) == b"v1\n{}\n{}\n"
    assert read == ["s3://bucket/ck/orders/offsets/3"]


def test_a_write_without_config_takes_the_stores_own(spark, tmp_path):
    """A store remembers the sizes it was made with, so later batches need no config (README): a
    sink write without ``config`` took conf/store.properties instead, and every write into a store
    made with other sizes failed ('configuration differs')."""
    from storelib.ingest import frame as frame_ingest, sink
    sink.register(spark)
    store = str(tmp_path / "s")
    small = {"mappedFileSizeCommitLog": "20000", "mappedFileSizeConsumeQueue": "600"}
    frame_ingest.ingest_dataframe(frame(spark).limit(10), store, config=small, quiet=True)
    frame(spark).write.format("rocketlake").mode("append").save(store)
    assert [n for _, n in batches(store)] == [10, 500]
    assert os.path.getsize(os.path.join(store, "commitlog", "00000000000000000000")) == 20000


@pytest.mark.parametrize("kind", ["write", "stream"])
def test_a_store_on_the_drivers_disk_is_refused_on_a_multi_host_master(tmp_path, kind):
    """The tasks stage their rows into the store: on a multi-host master each would write into its
    own host's copy of a local path, which the commit on the driver never sees."""
    from pyspark.sql.types import StringType, StructField, StructType
    from storelib.errors import UnreachablePath
    from storelib.ingest import sink
    schema = StructType([StructField("topic", StringType()), StructField("body", StringType())])
    store = str(tmp_path / "store")
    opts = {"path": store, "checkpointLocation": str(tmp_path / "cp")}

    def plan(source):
        ds = source(options=dict(opts))
        return ds.writer(schema, False) if kind == "write" else ds.streamWriter(schema, False)

    with pytest.raises(UnreachablePath, match="driver's local disk.*spark://h:7077"):
        plan(sink.bound_source("spark://h:7077", None))
    assert not os.path.exists(store)
    with pytest.raises(UnreachablePath, match="relative path"):
        opts["path"] = "store"
        plan(sink.bound_source("yarn", str(tmp_path)))
    opts["path"] = store
    for source in (sink.bound_source("yarn", str(tmp_path)),     # under a directory every host mounts
                   sink.bound_source("local[2]", None)):
        if kind == "write":
            assert plan(source) is not None
        else:                                              # past the check: the query's id is next
            with pytest.raises(ValueError, match="query's id"):
                plan(source)


# ----------------------------------------------------------------------------- a micro-batch's identity
def _json_rows(path, first: int, n: int) -> None:
    import json
    with open(path, "w") as f:
        for i in range(first, first + n):
            f.write(json.dumps({"topic": f"t{i % 3}", "body": f"body {i}", "store_timestamp": 1718000000000 + i}) + "\n")


def _run_query(spark, src, ck, store) -> None:
    """A file-source query into the sink until the files present are written (availableNow)."""
    q = (spark.readStream.schema("topic string, body string, store_timestamp long").json(str(src))
         .writeStream.format("rocketlake").option("checkpointLocation", str(ck)).trigger(availableNow=True)
         .start(str(store)))
    q.awaitTermination()


def _first_query(spark, tmp_path):
    """(source directory, checkpoint, store, query id) after micro-batch 0 of a query wrote a.json."""
    from storelib.ingest import sink
    sink.register(spark)
    src, ck, store = tmp_path / "in", tmp_path / "ck", tmp_path / "s"
    src.mkdir()
    _json_rows(src / "a.json", 0, 40)
    _run_query(spark, src, ck, store)
    qid = sink.query_id_of(str(ck))
    assert batches(str(store)) == [(f"stream-{qid}-0", 40)]
    return src, ck, store, qid


def _uncommit(ck, n: int) -> None:
    """Micro-batch ``n`` out of Spark's commit log (its checksum too): a crash after the sink's commit."""
    os.remove(ck / "commits" / str(n))
    os.remove(ck / "commits" / f".{n}.crc")


def test_a_reset_checkpoint_is_refused_not_skipped(spark, tmp_path):
    """A checkpoint reused with offsets/ and commits/ deleted and metadata kept: the same query id,
    micro-batches numbered from 0 again. Its micro-batch 0 (b.json's rows) was found "already
    committed" as batch stream-<id>-0 and its rows dropped without a word; it fails now, saying
    what happened and what to do, and the store is as it was. So does one whose sources' offsets
    equal those batch 0 was committed from."""
    import shutil
    from storelib.errors import ExitCode, IngestError, exit_code, from_task
    src, ck, store, qid = _first_query(spark, tmp_path)
    before = (batches(str(store)), store_files(str(store)))
    first = (ck / "offsets" / "0").read_text().splitlines()
    # the file source's log deleted too: micro-batch 0 reads a.json again, from the same source
    # offset; the entry's metadata line (batchTimestampMs) tells the reset
    for d in ("offsets", "commits", "sources"):
        shutil.rmtree(ck / d)
    with pytest.raises(Exception, match="offsets were reset or reused"):
        _run_query(spark, src, ck, store)
    again = (ck / "offsets" / "0").read_text().splitlines()
    assert again[2:] == first[2:] and again[1] != first[1]
    assert (batches(str(store)), store_files(str(store))) == before
    # the source's log kept: micro-batch 0 is b.json's rows, which were dropped as "already committed"
    shutil.rmtree(ck / "offsets")
    shutil.rmtree(ck / "commits")
    _json_rows(src / "b.json", 40, 25)
    with pytest.raises(Exception) as got:
        _run_query(spark, src, ck, store)
    err = from_task(got.value)
    assert isinstance(err, IngestError), got.value
    assert f"batch id 'stream-{qid}-0' is already committed with different input" in err.line()
    assert f"micro-batch 0 of query {qid} was committed to this store from another entry" in err.line()
    assert "offsets were reset or reused" in err.line() and "new checkpointLocation" in err.line()
    assert exit_code(got.value) == ExitCode.FAILED
    assert (batches(str(store)), store_files(str(store))) == before
    # a new checkpointLocation writes b.json's rows (a.json's too: a new query reads every file)
    _run_query(spark, src, tmp_path / "ck2", store)
    assert [n for _, n in batches(str(store))] == [40, 65]


def test_a_replayed_micro_batch_is_a_no_op_though_its_input_changed(spark, tmp_path):
    """Spark runs micro-batch 0 again (committed to the store, not to Spark's commit log: a crash
    between the two) from the same offsets/0, and the file it reads changed meanwhile (as a Kafka
    topic past its retention): the committed batch is the truth, nothing is written."""
    src, ck, store, qid = _first_query(spark, tmp_path)
    before = (batches(str(store)), store_files(str(store)))
    _uncommit(ck, 0)
    _json_rows(src / "a.json", 100, 40)
    _run_query(spark, src, ck, store)
    assert (ck / "commits" / "0").exists()                 # Spark ran micro-batch 0 again
    assert (batches(str(store)), store_files(str(store))) == before


def test_a_micro_batch_committed_with_the_id_digest_is_still_found(spark, tmp_path):
    """Stream batches committed before the offsets identity carry the digest of their batch id
    alone: a replay of one of them after the upgrade is "already committed", not an error."""
    import hashlib
    import pyarrow as pa
    from storelib.ingest import sink
    src, ck, _, qid = _first_query(spark, tmp_path)
    store = str(tmp_path / "old")
    bid = f"stream-{qid}-0"
    rows = pa.table({"topic": [f"t{i % 3}" for i in range(40)], "body": [f"body {i}" for i in range(40)],
                     "store_timestamp": [1718000000000 + i for i in range(40)]})
    writer = sink._Parts({"path": store}, owner=qid)             # the commit as the earlier version made it
    old = hashlib.sha256(f"rocketlake-stream\0{bid}".encode()).hexdigest()
    assert writer._ingest([writer._stage(iter(rows.to_batches()))], bid, old)["status"] == "committed"
    before = (batches(store), store_files(store))
    _uncommit(ck, 0)
    _run_query(spark, src, ck, store)
    assert (ck / "commits" / "0").exists()
    assert (batches(store), store_files(store)) == before
