"""The read section: ``spark.read.format("rocketmq")`` of a store against Spark's Parquet reader
over the Parquet input of the same messages (the bench input: 256-byte bodies), same query on
both sides (``read_query``: count, body bytes, distinct topics), answers checked equal.

Queries: full scan; one topic (``topic = 'orders'``, 1 of datagen's 8 topics); a store-time range
(the middle tenth of the store times). Warm: one Spark session (local[2]), a first round of
every query, then ``rounds`` alternated rounds, best and median of each side. Cold: a fresh
``spark-submit bench/read_query.py`` per query, alternated, median and best (JVM and Python
start-up included on both sides), and from the same processes the first query of a fresh session
(timed after a trivial query). The warm session's first round is not reported: whichever side
runs a query shape first compiles Spark's code for it for the others."""
from __future__ import annotations

import json
import os
import statistics
import time

import numpy as np
import pyarrow.parquet as pq

import read_query
from harness import ROOT, alternate, spark_submit, stats

TOPIC = "orders"


def reusable_store(workdir: str, n: int) -> str | None:
    """``store-cold-<n>`` of an earlier run in ``workdir`` (--workdir) if it holds exactly the n
    messages of the bench input (one ingest, nothing added since), else None."""
    from storelib.table.storefiles import as_store, open_files
    store = os.path.join(workdir, f"store-cold-{n}")
    if not os.path.isdir(os.path.join(store, "_rocketlake")):
        return None
    _, info = open_files(as_store(store))
    return store if info.batch_seq == 1 and sum(info.seg_count.values()) == n else None


def _time_range(src: str) -> str:
    ts = np.sort(pq.read_table(src, columns=["store_timestamp"]).column("store_timestamp").to_numpy())
    return f"{int(ts[len(ts) * 45 // 100])},{int(ts[len(ts) * 55 // 100])}"


def queries(src: str) -> list:
    return [("full", None), ("topic", TOPIC), ("time", _time_range(src))]


def bench_read_warm(res, spark, store: str, src: str, rounds: int, section: str = "read"):
    """Per query: the source as users load it (the JVM reader), the Python reader of the same store
    (``engine=python``: what every read went through before the JVM reader) and Parquet."""
    kinds = (("rocketmq", store), ("rocketmq-python", store), ("parquet", src))
    spark.range(1000).selectExpr("sum(id)").collect()      # the session's own first query is nobody's
    for query, arg in queries(src):
        times = {k: [] for k, _ in kinds}
        answers = {}
        for r in range(rounds + 1):
            for kind, path in kinds:
                t = time.perf_counter()
                answers[kind] = read_query.answer(spark, kind, path, query, arg)
                if r:                     # (the first round warms Spark's code for the query on every side)
                    times[kind].append(time.perf_counter() - t)
        if len({json.dumps(a, sort_keys=True) for a in answers.values()}) != 1:
            raise AssertionError(f"read {query}: answers differ: {answers}")
        load = os.getloadavg()[0]
        what = {"full": "full scan", "topic": f"topic = '{TOPIC}'", "time": "store-time range (a tenth)"}[query]
        res.record(section, f"{what}, {answers['rocketmq']['n']} rows: median (s)",
                   statistics.median(times["rocketmq"]), statistics.median(times["parquet"]), "s",
                   f"baseline: Spark's Parquet reader, same messages and query; {rounds} alternated rounds "
                   f"after one warm-up; load average {load:.1f}", runs=times["rocketmq"], baseline_runs=times["parquet"])
        res.record(section, f"{what}: best (s)", min(times["rocketmq"]), min(times["parquet"]), "s")
        res.record(section, f"{what}, Python reader (engine=python): median (s)",
                   statistics.median(times["rocketmq-python"]), statistics.median(times["parquet"]), "s",
                   "the reader every query used before the JVM reader, same run", runs=times["rocketmq-python"],
                   baseline_runs=times["parquet"])


def bench_read_cold(res, store: str, src: str, rounds: int, section: str = "read"):
    """Per query its median wall time, ours and Parquet's: {query: (ours, parquet)}."""
    script = os.path.join(ROOT, "bench", "read_query.py")
    out = {}
    for query, arg in queries(src):
        extra = [arg] if arg else []
        runs = alternate(rounds, {"rocketmq": spark_submit(script, "rocketmq", store, query, *extra),
                                  "parquet": spark_submit(script, "parquet", src, query, *extra)})
        got = {k: json.loads(v[-1]["stdout"].strip().splitlines()[-1]) for k, v in runs.items()}
        if got["rocketmq"] != got["parquet"]:
            raise AssertionError(f"cold read {query}: {got}")
        o, b = stats(runs["rocketmq"]), stats(runs["parquet"])
        out[query] = (o["median"], b["median"])
        res.record(section, f"{query} read, spark-submit: median wall (s)", o["median"], b["median"], "s",
                   f"a fresh process per query (start-up included), {rounds} alternated rounds; load average "
                   f"{os.getloadavg()[0]:.1f}", mode="cold", runs=o["all"], baseline_runs=b["all"])
        firsts = {k: [json.loads(r["stdout"].strip().splitlines()[-2])["first_query_s"] for r in v]
                  for k, v in runs.items()}
        res.record(section, f"{query} read: first query of a fresh session (s)", statistics.median(firsts["rocketmq"]),
                   statistics.median(firsts["parquet"]), "s", "the same processes: load and query, timed after a "
                   "trivial query (the session's start and first query are nobody's)", mode="cold",
                   runs=firsts["rocketmq"], baseline_runs=firsts["parquet"])
    return out
