"""Reading a store on S3: ``spark.read.format("rocketmq")`` (the JVM reader through S3A) against
Spark's Parquet reader over the same messages on the same S3 server, in the same run.

    python bench/objread.py [--n 1000000] [--rounds 3] [--python-reader] [--clustered]   # make bench-objread

The bench input (``datagen``: 256-byte bodies, 8 topics) is written as Parquet, ingested into
``s3://<bucket>/store`` with ``spark-submit jobs/ingest.py`` and uploaded to
``s3a://<bucket>/parquet``, on an S3Proxy 4.0.0 (a Java S3 server over a local directory,
``tests/support/s3server.py``) on 127.0.0.1. Queries (``read_query``: count, body bytes, distinct
topics): the full scan, ``topic = 'orders'`` (1 of 8 topics, spread evenly over the commitlog), the
middle tenth of the store times; answers checked equal.

* warm: one session, a first round of every query (not reported), then ``--rounds`` alternated
  rounds; the median of each side, and per query the bytes each side read from S3 (Hadoop's own
  statistics of the s3a file system) beside the bytes the answer needs (the matching records'
  bytes, sum(store_size));
* cold: a fresh ``spark-submit bench/read_query.py`` per side and query (S3A's jars on its class
  path), the first query of its session and its wall time;
* ``--clustered``: also the same messages with their topics in runs of ``CLUSTER_RUN`` messages
  (each topic's records in stretches of the commitlog, one eighth of them 'orders', in the same
  order in the Parquet copy), warm, the topic query only: where ranged reads can skip bytes.

Results go to bench/results/ like ``make bench``'s (section ``objread``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import datagen
import read_query
import readbench
from harness import ROOT, Results, alternate, job_env, run_process, spark_submit, stats

sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
sys.path.insert(0, os.path.join(ROOT, "tests"))          # (s3server imports support.mavenfetch)

BUCKET = "rl-bench"
SECTION = "objread"
CLUSTER_RUN = 10_000                 # --clustered: messages per run of one topic (about 4 MB of records)


def _ingest(store: str, src: str, env: dict) -> float:
    run = run_process(spark_submit(os.path.join(ROOT, "jobs", "ingest.py"), "--store", store, "--input", src,
                                   "--batch-id", "bench"), env=job_env(env), timeout=7200)
    if run["rc"] != 0:
        raise SystemExit(f"ingest into {store} failed:\n{run.get('stderr', '')[-3000:]}")
    return run["wall_s"]


def _upload(s3, files: list, prefix: str = "parquet") -> int:
    total = 0
    for f in files:
        s3.upload_file(f, BUCKET, f"{prefix}/{os.path.basename(f)}")
        total += os.path.getsize(f)
    return total


def _clustered(src: str, dst: str) -> list:
    """The input of ``src`` with its topics in runs of CLUSTER_RUN messages (round robin over
    datagen's topics), everything else as it was, as files in ``dst`` (made once)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    if not os.path.isdir(dst):
        tmp, at = dst + ".tmp", 0
        os.makedirs(tmp, exist_ok=True)
        for f in sorted(os.listdir(src)):
            t = pq.read_table(os.path.join(src, f))
            runs = (np.arange(at, at + t.num_rows) // CLUSTER_RUN) % len(datagen.TOPICS)
            t = t.set_column(t.schema.get_field_index("topic"), "topic",
                             pa.array(datagen.TOPICS).take(pa.array(runs)).cast(t.schema.field("topic").type))
            pq.write_table(t, os.path.join(tmp, f), row_group_size=256 * 1024)
            at += t.num_rows
        os.rename(tmp, dst)
    return sorted(os.path.join(dst, f) for f in os.listdir(dst))


def _session(env: dict):
    from pyspark.sql import SparkSession
    from storelib.read import jvmsource
    os.environ.update(env)
    spark = (SparkSession.builder.master("local[2]").appName("bench-objread")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.jars", ",".join(jvmsource.s3a_jars()))
             .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties")
             .getOrCreate())
    from storelib.io import objstore
    objstore.ship(spark.sparkContext)
    conf = spark._jsc.hadoopConfiguration()
    for k, v in jvmsource.s3a_settings(f"s3://{BUCKET}").items():
        conf.set(k, v)
    return spark


def _needed(spark, store: str, query: str, arg) -> int:
    df = read_query.frame(spark, "rocketmq", store)
    cond = read_query.where(query, arg)
    if cond:
        df = df.where(cond)
    return int(df.selectExpr("coalesce(sum(store_size), 0)").collect()[0][0])


def bench_warm(res, spark, store: str, parquet: str, qs: list, rounds: int, python_reader: bool, label: str = ""):
    from storelib.read import jvmsource
    kinds = [("rocketmq", store), ("parquet", parquet)] + ([("rocketmq-python", store)] if python_reader else [])
    spark.range(1000).selectExpr("sum(id)").collect()
    for query, arg in qs:
        times = {k: [] for k, _ in kinds}
        fetched = {k: [] for k, _ in kinds}
        requests = {k: [] for k, _ in kinds}
        answers = {}
        for r in range(rounds + 1):
            for kind, path in kinds:
                if kind == "rocketmq-python" and r > 1:
                    continue                   # (slow: one timed round)
                before = jvmsource.fetched(spark, "s3a")
                t = time.perf_counter()
                answers[kind] = read_query.answer(spark, kind, path, query, arg)
                took = time.perf_counter() - t
                after = jvmsource.fetched(spark, "s3a")
                fetched[kind].append(after[0] - before[0])
                requests[kind].append(after[1] - before[1])
                if r:
                    times[kind].append(took)
        if len({json.dumps(a, sort_keys=True) for a in answers.values()}) != 1:
            raise AssertionError(f"objread {query}: answers differ: {answers}")
        need = _needed(spark, store, query, arg)
        load = os.getloadavg()[0]
        what = label + {"full": "full scan", "topic": f"topic = '{readbench.TOPIC}'", "time": "store-time range (a tenth)"}[query]
        res.record(SECTION, f"{what}, {answers['rocketmq']['n']} rows on S3: median (s)",
                   statistics.median(times["rocketmq"]), statistics.median(times["parquet"]), "s",
                   f"baseline: Spark's Parquet reader over S3A, same server, messages and query; {rounds} "
                   f"alternated rounds after one warm-up; load average {load:.1f}",
                   runs=times["rocketmq"], baseline_runs=times["parquet"])
        res.record(SECTION, f"{what}: best (s)", min(times["rocketmq"]), min(times["parquet"]), "s")
        res.record(SECTION, f"{what}: MB read from S3 per query", max(fetched["rocketmq"]) / 1e6,
                   max(fetched["parquet"]) / 1e6, "MB",
                   f"Hadoop's s3a statistics (bytes read); the answer's records: {need / 1e6:.1f} MB "
                   f"(ours {max(fetched['rocketmq']) / max(need, 1):.2f}x of it); read requests (s3a read "
                   f"operations) ours {max(requests['rocketmq'])}, Parquet {max(requests['parquet'])}")
        if python_reader:
            res.record(SECTION, f"{what}, Python reader (engine=python): (s)",
                       statistics.median(times["rocketmq-python"]), statistics.median(times["parquet"]), "s",
                       "the reader object stores used before, same run; one round")


def bench_cold(res, store: str, parquet: str, qs: list, env: dict, rounds: int):
    from storelib.read import jvmsource
    script = os.path.join(ROOT, "bench", "read_query.py")
    jars = ["--jars", ",".join(jvmsource.s3a_jars())]
    for query, arg in qs:
        extra = [arg] if arg else []
        steps = {"rocketmq": spark_submit(*jars, script, "rocketmq", store, query, *extra),
                 "parquet": spark_submit(*jars, script, "parquet", parquet, query, *extra)}
        runs = alternate(rounds, steps)          # (the server's settings are in os.environ: main)
        got = {k: json.loads(v[-1]["stdout"].strip().splitlines()[-1]) for k, v in runs.items()}
        if got["rocketmq"] != got["parquet"]:
            raise AssertionError(f"cold objread {query}: {got}")
        o, b = stats(runs["rocketmq"]), stats(runs["parquet"])
        firsts = {k: [json.loads(r["stdout"].strip().splitlines()[-2])["first_query_s"] for r in v]
                  for k, v in runs.items()}
        res.record(SECTION, f"{query} on S3: first query of a fresh session (s)", statistics.median(firsts["rocketmq"]),
                   statistics.median(firsts["parquet"]), "s", f"a fresh spark-submit per query and side, "
                   f"{rounds} alternated rounds; load average {os.getloadavg()[0]:.1f}", mode="cold",
                   runs=firsts["rocketmq"], baseline_runs=firsts["parquet"])
        res.record(SECTION, f"{query} on S3, spark-submit: median wall (s)", o["median"], b["median"], "s",
                   "the same processes", mode="cold", runs=o["all"], baseline_runs=b["all"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="messages (default 1M)")
    ap.add_argument("--rounds", type=int, default=3, help="warm rounds")
    ap.add_argument("--cold-rounds", type=int, default=1, help="fresh processes per side and query (0: none)")
    ap.add_argument("--workdir", default="/tmp/rocketlake-bench-objread")
    ap.add_argument("--python-reader", action="store_true", help="the Python reader too (one round)")
    ap.add_argument("--clustered", action="store_true", help="also a store of the same messages with clustered topics")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    import s3server
    from storelib.read import jvmsource
    if not jvmsource.s3a_jars():
        raise SystemExit("S3A's jars are missing: make s3a")
    res = Results()
    src = os.path.join(args.workdir, f"input-{args.n}")
    files = sorted(os.path.join(src, f) for f in os.listdir(src)) if os.path.isdir(src) else \
        datagen.write_parquet(src, args.n)
    qs = readbench.queries(src)
    with s3server.s3proxy(BUCKET) as (env, s3):
        os.environ.update(job_env(env))          # every spark-submit below, and this process's session
        store, parquet = f"s3://{BUCKET}/store", f"s3a://{BUCKET}/parquet"
        wall = _ingest(store, src, env)
        size = _upload(s3, files)
        res.record(SECTION, f"ingest {args.n} msgs into S3 (s)", wall, None, "s",
                   f"spark-submit jobs/ingest.py; Parquet input {size / 1e6:.0f} MB uploaded beside it", mode="cold")
        if args.clustered:
            csrc = os.path.join(args.workdir, f"input-clustered-{args.n}")
            cfiles = _clustered(src, csrc)
            _ingest(f"s3://{BUCKET}/store-clustered", csrc, env)
            _upload(s3, cfiles, "parquet-clustered")
        spark = _session(env)
        try:
            bench_warm(res, spark, store, parquet, qs, args.rounds, args.python_reader)
            if args.clustered:
                bench_warm(res, spark, f"s3://{BUCKET}/store-clustered", f"s3a://{BUCKET}/parquet-clustered",
                           [("topic", readbench.TOPIC)], args.rounds, False,
                           f"clustered topics (runs of {CLUSTER_RUN:,}): ")
        finally:
            spark.stop()
        save(res, args)
        if args.cold_rounds:
            bench_cold(res, store, parquet, qs, env, args.cold_rounds)
            save(res, args)
    return 0


def save(res, args) -> None:
    if not args.no_save:
        print(res.save(os.path.join(ROOT, "bench", "results"), {"objread_n": args.n, "rounds": args.rounds,
                                                                "cold_rounds": args.cold_rounds,
                                                                "clustered": args.clustered}, sys.argv), flush=True)


if __name__ == "__main__":
    sys.exit(main())
