"""storelib.ingest_dataframe: a DataFrame of a golden set's messages gives RocketMQ's bytes; the
manifest and checkpoints data sources; idempotence without a batch id; bad DataFrames rejected
(row and column named) with the store untouched; jobs/ingest.py --format table / sql."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from support import goldenlib
from conftest import golden_set
from test_golden_ingest import golden_properties, spark_submit
from support.opshelp import tree_digest

from storelib.ingest import inputs
from storelib.table import manifest
from storelib.io import storage
from storelib.format import paths

SMALL = "small-roll"
INT32_COLUMNS = ("queue_id", "flag", "sys_flag", "reconsume_times")


def _golden_arrow() -> pa.Table:
    """small-roll's messages in the Parquet input layout, every integer column int64."""
    table = inputs.canonical_to_parquet_input(inputs.jsonl_to_table(os.path.join(golden_set(SMALL), "messages.jsonl")))
    return pa.table({n: (c.cast(pa.int64()) if n in INT32_COLUMNS else c) for n, c in zip(table.column_names, table.columns)})


def _frame(spark, table: pa.Table, parts: int):
    """A DataFrame of ``table`` in ``parts`` partitions, in row order."""
    indexed = table.append_column("row_number", pa.array(range(table.num_rows), pa.int64()))
    return spark.createDataFrame(indexed).repartitionByRange(parts, "row_number") \
        .sortWithinPartitions("row_number").drop("row_number")


@pytest.fixture(scope="module")
def ingested(spark, tmp_path_factory):
    """small-roll ingested from a 7-partition DataFrame (no batch id): (store, summary, table, properties)."""
    import storelib
    tmp = tmp_path_factory.mktemp("frame")
    props = golden_properties(golden_set(SMALL), tmp)
    table = _golden_arrow()
    store = str(tmp / "store")
    df = _frame(spark, table, 7)
    assert df.rdd.getNumPartitions() == 7
    summary = storelib.ingest_dataframe(df, store, config=props, quiet=True)
    return store, summary, table, props


def test_golden_bytes(ingested):
    store, summary, table, _ = ingested
    assert goldenlib.compare(golden_set(SMALL), store) == []
    assert summary["status"] == "committed" and summary["messages"] == table.num_rows
    assert summary["batch_id"].startswith("auto-") and summary["segments"] == 63
    assert not os.path.exists(os.path.join(store, paths.STAGING_DIR))


def test_rerun_is_recognized_whatever_the_partitioning(spark, ingested):
    """The auto id is the digest of the encoded messages: another partitioning and row order of
    the same rows is already committed; other rows under a committed id are an error."""
    import storelib
    store, summary, table, props = ingested
    before = tree_digest(store)
    shuffled = _frame(spark, table, 3).orderBy("born_timestamp", ascending=False)
    again = storelib.ingest_dataframe(shuffled, store, config=props, quiet=True)
    assert again["status"] == "already-committed" and again["batch_id"] == summary["batch_id"]
    with pytest.raises(storelib.IngestError, match="already committed with different input"):
        storelib.ingest_dataframe(_frame(spark, table.slice(0, 100), 2), store, config=props,
                                  batch_id=summary["batch_id"], quiet=True)
    assert tree_digest(store) == before


def test_bad_frames_name_row_and_column(spark, ingested):
    import numpy as np
    import storelib
    store, _, table, props = ingested
    before = tree_digest(store)
    part = table.slice(0, 40)
    qid = part.column("queue_id").to_numpy().copy()
    qid[33] = 2**31 + 5                             # partition 1 (rows 20..39), row 13
    bad = part.set_column(part.column_names.index("queue_id"), "queue_id", pa.array(qid))
    with pytest.raises(storelib.InputError) as e:
        storelib.ingest_dataframe(_frame(spark, bad, 2), store, config=props, quiet=True)
    assert "DataFrame row 33 (partition 1 row 13): field 'queue_id': 2147483653 does not fit a 32-bit int" in str(e.value)
    flags = pa.array([str(v) for v in part.column("flag").to_pylist()[:5]] + ["x"] + ["0"] * 34)
    with pytest.raises(storelib.InputError, match=r"DataFrame row 5 \(partition 0 row 5\): field 'flag': cannot convert"):
        storelib.ingest_dataframe(_frame(spark, part.set_column(part.column_names.index("flag"), "flag", flags), 2),
                                  store, config=props, quiet=True)
    with pytest.raises(storelib.InputError, match="DataFrame column 'topic': type array<string> cannot be converted"):
        storelib.ingest_dataframe(spark.createDataFrame(part).withColumn("topic", __import__("pyspark.sql.functions", fromlist=["array"]).array("topic")),
                                  store, config=props, quiet=True)
    with pytest.raises(storelib.InputError, match="DataFrame column 'body' is missing"):
        storelib.ingest_dataframe(spark.createDataFrame(part).drop("body"), store, config=props, quiet=True)
    no_ts = part.drop_columns(["store_timestamp", "born_timestamp"])
    with pytest.raises(storelib.InputError, match=r"DataFrame row 0 \(partition 0 row 0\): field 'store_timestamp': missing"):
        storelib.ingest_dataframe(spark.createDataFrame(no_ts), store, config=props, quiet=True)
    assert tree_digest(store) == before
    assert np.all(qid[:33] < 2**31)


def test_manifest_and_checkpoints_sources(spark, ingested):
    """One manifest row per file of the snapshot, one checkpoints row per batch, SQL over both;
    a second batch (string bodies, properties as the RocketMQ string) and asOfBatch."""
    import storelib
    from storelib.read.datasource import register
    store, summary, table, props = ingested
    register(spark)
    files = [os.path.relpath(os.path.join(d, f), store) for d, _, fs in os.walk(store) for f in fs
             if not os.path.relpath(d, store).startswith("_rocketlake")]
    files.remove("lock")       # the broker lock its writers held: no store file (storelib.io.brokerlock)
    mf = spark.read.format("rocketlake_manifest").load(store)
    assert mf.count() == len(files) and sorted(r.path for r in mf.select("path").collect()) == sorted(files)
    mf.createOrReplaceTempView("mf")
    kinds = {r.kind: r.n for r in spark.sql("SELECT kind, count(*) AS n FROM mf GROUP BY kind").collect()}
    assert kinds == {"commitlog": 63, "consumequeue": 142, "index": 25, "checkpoint": 1}
    extra = spark.createDataFrame([("late-topic", "hello", "KEYS\u0001k1\u0002", 1718000000000)],
                                  "topic string, body string, properties string, store_timestamp long")
    second = storelib.ingest_dataframe(extra, store, config=props, batch_id="second", quiet=True)
    assert second["status"] == "committed" and second["messages"] == 1
    ck = spark.read.format("rocketlake_checkpoints").load(store)
    assert [(r.batch_id, r.batch_seq) for r in ck.orderBy("batch_seq").collect()] == \
        [(summary["batch_id"], 1), ("second", 2)]
    old = spark.read.format("rocketlake_manifest").option("asOfBatch", 1).load(store)
    assert old.count() == len(files)
    latest = spark.read.format("rocketlake_manifest").load(store)
    assert latest.where("batch_id = 'second'").count() >= 3        # segment, its queue, index file, checkpoint
    snap = manifest.load_snapshot(storage.Store(store))
    assert latest.count() == len(snap.files)
    body = spark.read.format("rocketmq").load(store).where("topic = 'late-topic'").collect()
    assert [(bytes(r.body), r.keys) for r in body] == [(b"hello", "k1")]


def test_jobs_table_and_sql_formats(spark, tmp_path):
    """spark-submit jobs/ingest.py --format sql: the same bytes as the golden store."""
    table = _golden_arrow()
    src = tmp_path / "messages.parquet"
    import pyarrow.parquet as pq
    pq.write_table(table, src)
    g = golden_set(SMALL)
    store = str(tmp_path / "store")
    summary = tmp_path / "summary.json"
    r = spark_submit("jobs/ingest.py", "--store", store, "--format", "sql",
                     "--input", f"SELECT * FROM parquet.`{src}`", "--config", golden_properties(g, tmp_path),
                     "--json-summary", str(summary))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert goldenlib.compare(g, store) == []
    assert json.loads(summary.read_text())["messages"] == table.num_rows


def test_jobs_delta_format_in_process(tmp_path):
    """`rocketlake ingest --format delta` (a Delta table of the Parquet input layout), run in this
    process: the same bytes as the golden store."""
    from deltalake import write_deltalake
    from storelib.cli.ingest import main
    src = str(tmp_path / "messages_delta")
    write_deltalake(src, _golden_arrow())
    g = golden_set(SMALL)
    store = str(tmp_path / "store")
    assert main(["--store", store, "--format", "delta", "--input", src, "--config", golden_properties(g, tmp_path),
                 "--local", "always", "--quiet"]) == 0
    assert goldenlib.compare(g, store) == []


@pytest.mark.spark
def test_jobs_table_format(spark, tmp_path):
    """The body of `ingest --format table` on a catalog view: the same bytes as the golden store."""
    import argparse
    from storelib.cli.ingest import ingest_frame
    from storelib.format.config import load_config
    _frame(spark, _golden_arrow(), 3).createOrReplaceTempView("rocketlake_table_input")
    g = golden_set(SMALL)
    store = str(tmp_path / "store")
    args = argparse.Namespace(store=store, format="table", input="rocketlake_table_input", partitions=0,
                              batch_id=None, topics=None, queue_by=None, store_timestamp=None, quiet=True,
                              json_summary=str(tmp_path / "summary.json"))
    assert ingest_frame(spark, load_config(golden_properties(g, tmp_path)), args) == 0
    assert goldenlib.compare(g, store) == []
    assert json.loads((tmp_path / "summary.json").read_text())["messages"] == _golden_arrow().num_rows


def test_a_column_named_in_another_case_is_refused():
    """Spark matches column names in any case, the ingest exactly: a `Properties` or `QUEUE_ID`
    column was ignored as an extra column, and its messages written without their keys or in
    other queues. Such a column is named, before the store is touched."""
    import storelib
    from pyspark.sql import types as T
    from storelib.ingest.frame import check_frame_schema
    s = T.StringType()
    schema = T.StructType([T.StructField("topic", s), T.StructField("body", s), T.StructField("note", s),
                           T.StructField("Properties", T.MapType(s, s)), T.StructField("QUEUE_ID", T.IntegerType())])
    with pytest.raises(storelib.InputError) as e:
        check_frame_schema(schema)
    assert e.value.problems == [
        "DataFrame column 'Properties': column names are matched exactly: rename it 'properties' (or drop it)",
        "DataFrame column 'QUEUE_ID': column names are matched exactly: rename it 'queue_id' (or drop it)"]
    with pytest.raises(storelib.InputError, match="DataFrame column 'Topic': column names are matched exactly"):
        check_frame_schema(T.StructType([T.StructField("Topic", s), T.StructField("body", s)]))


def test_a_store_on_the_drivers_disk_is_refused_on_a_multi_host_master(spark, tmp_path, monkeypatch):
    """On Spark (not collected into this process) the executors write the store: with a multi-host
    master a path on the driver's disk is refused before anything is made, as the command refuses it
    (their tasks would write on each host's own disk, outside the store)."""
    from types import SimpleNamespace
    from storelib.errors import UnreachablePath
    from storelib.ingest.frame import ingest_dataframe
    from storelib.runtime.multihost import SHARED_ENV

    class OnYarn:
        def __init__(self, df):
            self._df = df

        def __getattr__(self, name):
            return getattr(self._df, name)

        sparkSession = SimpleNamespace(sparkContext=SimpleNamespace(master="yarn"))

    monkeypatch.delenv(SHARED_ENV, raising=False)
    df = OnYarn(spark.createDataFrame([("t", b"x")], "topic string, body binary"))
    store = tmp_path / "store"
    with pytest.raises(UnreachablePath, match=f"^store {store} is on the driver's local disk"):
        ingest_dataframe(df, str(store), local="never", quiet=True)
    assert not store.exists()
