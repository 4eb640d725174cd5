"""``spark.readStream.format("rocketmq")`` tailing a store on any backend, run with spark-submit
(the object-store and HDFS tests: tests/e2e/test_s3proxy.py, tests/e2e/test_hdfs.py).

    stream_tail.py STORE CHECKPOINT CONFIG OUT PART...

Ingests the first part (Spark-free, ``LocalSession``), starts a query (foreachBatch collects every
micro-batch's rows), lets it read all, then ingests each further part while the query runs and
lets it read again; writes to OUT (JSON) the rows each phase read and whether they are, in order,
exactly the rows ``spark.read.format("rocketmq")`` reads of the store at the end.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from pyspark.sql import SparkSession

from storelib.format.config import load_config
from storelib.ingest.driver import run_ingest
from storelib.io import objstore
from storelib.read import stream
from storelib.runtime.localrun import LocalSession


def main(store: str, ck: str, config: str, out: str, *parts: str) -> None:
    cfg = load_config(config)
    spark = SparkSession.builder.appName("rocketlake-stream-tail").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    objstore.ship(spark.sparkContext)
    stream.register(spark)
    seen: list = []

    def collect(df, epoch):
        seen.append(sorted((r.commitlog_offset, bytes(r.body).hex()) for r in
                           df.select("commitlog_offset", "body").collect()))

    def ingest(k: int) -> None:
        run_ingest(LocalSession(), store, parts[k], "jsonl", cfg, batch_id=f"tail-{k}", quiet=True)

    ingest(0)
    q = (spark.readStream.format("rocketmq").load(store).writeStream.foreachBatch(collect)
         .option("checkpointLocation", ck).trigger(processingTime="200 milliseconds").start())
    phases = []
    q.processAllAvailable()
    phases.append(sum(len(b) for b in seen))
    for k in range(1, len(parts)):
        ingest(k)                                   # committed while the query runs
        q.processAllAvailable()
        phases.append(sum(len(b) for b in seen) - sum(phases))
    q.stop()
    rows = [r for b in seen for r in b]
    whole = sorted((r.commitlog_offset, bytes(r.body).hex()) for r in
                   spark.read.format("rocketmq").load(store).select("commitlog_offset", "body").collect())
    with open(out, "w") as fh:
        json.dump({"phases": phases, "micro_batches": len(seen), "rows": len(rows), "store_rows": len(whole),
                   "same": rows == whole}, fh)
    spark.stop()


def tail(store: str, work, messages: str, env: dict | None = None, cut: tuple = (1000, 2000),
         timeout: int = 900) -> dict:
    """Run this script by spark-submit (local[2]) on ``store``: the ``messages`` (small-roll's
    messages.jsonl) cut into parts at ``cut``, small-roll's sizes; its JSON summary (``phases``,
    ``same``, ...)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = open(messages, encoding="utf-8").readlines()
    bounds = (0, *cut, len(lines))
    parts = []
    for k in range(len(bounds) - 1):
        p = os.path.join(str(work), f"tail-{k}.jsonl")
        with open(p, "w", encoding="utf-8") as fh:
            fh.write("".join(lines[bounds[k]:bounds[k + 1]]))
        parts.append(p)
    props = os.path.join(str(work), "tail.properties")
    with open(props, "w") as fh:
        fh.write("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=600\nmaxHashSlotNum=64\nmaxIndexNum=256\n")
    out = os.path.join(str(work), "tail.json")
    py = sys.executable
    cmd = [os.path.join(os.path.dirname(py), "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false",
           "--driver-java-options", f"-Dlog4j.configurationFile={root}/conf/log4j2.properties",
           os.path.abspath(__file__), store, os.path.join(str(work), "tail-ck"), props, out, *parts]
    r = subprocess.run(cmd, cwd=root, env=dict(os.environ, PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py, **(env or {})),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    with open(out) as fh:
        return json.load(fh)


if __name__ == "__main__":
    main(*sys.argv[1:])
