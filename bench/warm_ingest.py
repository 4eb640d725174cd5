"""The warm ingest figure of ``make bench-scale``: one Spark application, as a long-running job or
a notebook ingests batch after batch. A first ingest and Parquet copy of a small input pay the
JVM's and the Python workers' first use; then ``rounds`` ingests of the input into a fresh store,
alternated with Spark Parquet copies of it (``sync`` before each). What the cold figure adds on top
is a fresh ``spark-submit``'s fixed start-up, which does not grow with the messages.

``spark-submit bench/warm_ingest.py SRC WORKDIR ROUNDS OUT.json`` (``run`` builds the command)
writes {"ours": [s, ...], "copy": [s, ...], "messages": n, "record_bytes": b}."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP_MESSAGES = 20_000


def run(workdir: str, src: str, rounds: int) -> dict:
    """The figures of one application, with Spark's default JVM: a long-running application
    wants the JIT's second tier, which the cold ingest's C1-only options give up for a fast start."""
    from harness import check_rc, run_process, spark_submit
    out = os.path.join(workdir, "warm.json")
    run_ = run_process(spark_submit(os.path.abspath(__file__), src, workdir, str(rounds), out))
    check_rc(run_, "warm ingest")
    with open(out) as fh:
        return json.load(fh)


def _main(src: str, workdir: str, rounds: int, out: str) -> None:
    sys.path[0] = ROOT
    sys.path.insert(1, os.path.join(ROOT, "bench"))
    import datagen
    from pyspark.sql import SparkSession
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    spark = SparkSession.builder.appName("rocketlake-warm-ingest").getOrCreate()
    store, copy = os.path.join(workdir, "store-warm"), os.path.join(workdir, "copy-warm")

    def clear() -> None:
        """One output on the disk at a time (50M: 21 GB of store), removed before the clock starts:
        deleting the other step's output is neither step's work."""
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(copy, ignore_errors=True)

    def ingest(path: str) -> dict:
        return run_ingest(spark, store, path, "parquet", StoreConfig(), quiet=True)

    def parquet_copy(path: str) -> None:
        spark.read.parquet(path).write.mode("overwrite").parquet(copy)

    small = os.path.join(workdir, "input-warmup")
    shutil.rmtree(small, ignore_errors=True)
    datagen.write_parquet(small, WARMUP_MESSAGES, 256, files=4)
    clear()
    ingest(small)
    clear()
    parquet_copy(small)
    times: dict = {"ours": [], "copy": []}
    summary: dict = {}
    for _ in range(rounds):
        for name, step in (("ours", ingest), ("copy", parquet_copy)):
            clear()
            os.sync()
            t = time.perf_counter()
            got = step(src)
            times[name].append(time.perf_counter() - t)
            if name == "ours":
                summary = got
    for path in (store, copy, small):
        shutil.rmtree(path, ignore_errors=True)
    with open(out, "w") as fh:
        json.dump({**times, "messages": summary["messages"], "record_bytes": summary["record_bytes"]}, fh)
    spark.stop()


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
