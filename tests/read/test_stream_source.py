"""``spark.readStream.format("rocketmq")`` tails a store (storelib.read.stream), in this process's
SparkSession: batches ingested while the query runs (by another writer, Spark-free), a restart from
the checkpoint, the topic option, and expiry before a read (reported, never
skipped silently). Every micro-batch's rows are checked against the batch reader's."""
from __future__ import annotations

import os
import threading

import pytest

from conftest import golden_set
from support import goldenlib

from storelib.format.config import load_config

pytestmark = pytest.mark.spark

SMALL = goldenlib.SMALL_ROLL_CONFIG
PARTS = ((0, 1000), (1000, 2000), (2000, 3000))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("stream-source")
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl")).readlines()
    paths = []
    for k, (a, b) in enumerate(PARTS):
        p = base / f"part-{k}.jsonl"
        p.write_text("".join(lines[a:b]))
        paths.append(str(p))
    return base, paths


def ingest(store: str, path: str, batch: str) -> None:
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    run_ingest(LocalSession(), store, path, "jsonl", load_config(None, dict(SMALL)), batch_id=batch, quiet=True)


class Collect:
    """foreachBatch: the rows of every micro-batch, in order."""

    def __init__(self):
        self.batches = []

    def __call__(self, df, epoch):
        rows = [(r.commitlog_offset, r.topic, bytes(r.body)) for r in
                df.select("commitlog_offset", "topic", "body").collect()]
        self.batches.append(sorted(rows))

    @property
    def rows(self):
        return [r for b in self.batches for r in b]


def start(spark, store, ck, sink, **opts):
    from storelib.read import stream
    stream.register(spark)
    r = spark.readStream.format("rocketmq")
    for k, v in opts.items():
        r = r.option(k, v)
    return (r.load(store).writeStream.foreachBatch(sink).option("checkpointLocation", ck)
            .trigger(processingTime="200 milliseconds").start())


def all_rows(spark, store, topic=None):
    df = spark.read.format("rocketmq").load(store)
    if topic:
        df = df.where(f"topic = '{topic}'")
    return sorted((r.commitlog_offset, r.topic, bytes(r.body)) for r in df.select("commitlog_offset", "topic", "body")
                  .collect())


def test_tailing_while_ingesting_and_after_a_restart(spark, inputs, tmp_path):
    base, paths = inputs
    store, ck = str(tmp_path / "store"), str(tmp_path / "ck")
    ingest(store, paths[0], "b0")
    got = Collect()
    q = start(spark, store, ck, got)
    q.processAllAvailable()
    writer = threading.Thread(target=ingest, args=(store, paths[1], "b1"))   # another writer, meanwhile
    writer.start()
    writer.join()
    q.processAllAvailable()
    q.stop()
    assert got.rows == all_rows(spark, store)
    seen = len(got.rows)

    ingest(store, paths[2], "b2")                     # committed while no query runs
    again = Collect()
    q = start(spark, store, ck, again)                # from the checkpoint: only what is new
    q.processAllAvailable()
    q.stop()
    whole = all_rows(spark, store)
    assert again.rows == whole[seen:] and len(whole) == 3000
    assert all(b == sorted(b) for b in again.batches)

    if not os.environ.get("ROCKETLAKE_STREAMING_FULL"):
        return                                        # `make streaming`: the topic option too
    topic = whole[0][1]
    only = Collect()
    q = start(spark, store, str(tmp_path / "ck-topic"), only, topic=topic)
    q.processAllAvailable()
    q.stop()
    assert only.rows == all_rows(spark, store, topic) and 0 < len(only.rows) < 3000


def test_expired_before_read_is_reported(spark, inputs, tmp_path):
    from storelib.ops.expire import expire
    from pyspark.errors import StreamingQueryException
    base, paths = inputs
    store = str(tmp_path / "store")
    ingest(store, paths[0], "b0")
    got = Collect()
    q = start(spark, store, str(tmp_path / "ck"), got)
    q.processAllAvailable()
    q.stop()
    ingest(store, paths[1], "b1")
    ingest(store, paths[2], "b2")
    expire(store, 1.0, now_ms=4_000_000_000_000, quiet=True)    # every segment but the current one
    q = start(spark, store, str(tmp_path / "ck"), got)
    with pytest.raises(StreamingQueryException, match="expired from the store before this query read them"):
        q.processAllAvailable()
    q.stop()

    lenient = Collect()
    q = start(spark, store, str(tmp_path / "ck"), lenient, failOnDataLoss="false")
    q.processAllAvailable()
    q.stop()
    left = all_rows(spark, store)
    assert lenient.rows == [r for r in left if r[0] >= got.rows[-1][0] + 1] and lenient.rows


def test_min_partitions_cuts_a_micro_batch(inputs, tmp_path):
    """``minPartitions`` on a stream: a micro-batch inside one segment is read by about that many
    tasks, cut on record starts, with the rows of one task per segment."""
    from storelib.read.stream import RocketMQStreamReader
    store = str(tmp_path / "store")
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    run_ingest(LocalSession(), store, inputs[1][0], "jsonl",
               load_config(None, dict(SMALL, mappedFileSizeCommitLog=1 << 22)), quiet=True)

    def read(**opts):
        r = RocketMQStreamReader({"path": store, **opts})
        start, end = r.initialOffset(), r.latestOffset()
        parts = r.partitions(start, end)
        rows = sorted((int(o), int(q)) for p in parts for b in r.read(p)
                      for o, q in zip(b.column("commitlog_offset").to_pylist(), b.column("queue_offset").to_pylist()))
        return parts, rows

    one, want = read()
    many, got = read(minPartitions="4")
    assert len(one) == 1 and len(many) >= 4
    assert got == want and len(want) == 1000
