"""Streaming latency and throughput: Kafka -> rocketlake beside Kafka -> Delta, same messages, same run.

    python bench/streaming.py [--rate 2000] [--seconds 60] [--triggers 1,10] [--backlog 200000] [--warmup 10]

For each trigger interval, in one local[2] Spark application: a Kafka broker (tests/support:
KRaft, 127.0.0.1) gets ``--rate`` messages/s for ``--seconds`` (ConsoleProducer fed at that
pace; 100-byte bodies); two queries read the topic at the same time, one into a rocketlake
store (``format("rocketlake")``), one into a Delta table (delta-spark). End-to-end latency of a
message = the commit time of the batch that made it visible (rocketlake: the checkpoints row's
``committed_at``; Delta: the commit's timestamp in ``_delta_log``) minus its Kafka timestamp;
p50 / p99 over all messages. Then throughput: a backlog of ``--backlog`` messages is produced
first, and each query drains it alone (messages / seconds from start to the last commit).

Results: one JSON line per measurement on stdout and bench/results/streaming-<time>.json.
Not part of `make test` (minutes); `make bench-streaming`.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from support import kafkajars  # noqa: E402
from support.kafkabroker import KafkaBroker  # noqa: E402


def session():
    from pyspark.sql import SparkSession
    from storelib.ingest import sink
    from storelib.read import stream
    from storelib.table.delta_spark import configure_delta
    b = (SparkSession.builder.master("local[2]").appName("bench-streaming").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.jars", kafkajars.spark_jars()))
    spark = configure_delta(b).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sink.register(spark)
    stream.register(spark)
    return spark


def produce_at(broker: KafkaBroker, topic: str, rate: int, seconds: float) -> threading.Thread:
    """A ConsoleProducer fed ``rate`` lines per second for ``seconds`` (on a thread)."""
    cmd = broker.java("kafka.tools.ConsoleProducer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                       "--producer-property", "linger.ms=5")

    def run():
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             text=True)
        t0, sent, tick = time.time(), 0, 0.05
        while time.time() - t0 < seconds:
            due = int((time.time() - t0) * rate)
            if due > sent:
                p.stdin.write("".join(f"m{i:08d} " + "x" * 90 + "\n" for i in range(sent, due)))
                p.stdin.flush()
                sent = due
            time.sleep(tick)
        p.stdin.close()
        p.wait()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def kafka_df(spark, broker, topic, max_offsets=None):
    from pyspark.sql import functions as F
    r = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest"))
    if max_offsets:
        r = r.option("maxOffsetsPerTrigger", max_offsets)
    return r.load().select(F.lit("bench").alias("topic"), F.col("value").alias("body"),
                           F.col("timestamp").alias("born_timestamp"))


def start_both(spark, broker, topic, work, trigger, tag):
    df = kafka_df(spark, broker, topic)
    store, table = os.path.join(work, f"store-{tag}"), os.path.join(work, f"delta-{tag}")
    qa = (df.writeStream.format("rocketlake").option("checkpointLocation", os.path.join(work, f"ck-a-{tag}"))
          .trigger(processingTime=trigger).start(store))
    qb = (df.writeStream.format("delta").option("checkpointLocation", os.path.join(work, f"ck-b-{tag}"))
          .trigger(processingTime=trigger).start(table))
    return (qa, store), (qb, table)


def rocketlake_latencies(spark, store):
    from storelib.io import storage
    from storelib.table import manifest
    batches = manifest.load_snapshot(storage.Store(store)).batches
    ends = [(int(b["max_phy_offset"]), int(b["committed_at"])) for b in batches]
    rows = spark.read.format("rocketmq").load(store).select("commitlog_offset", "born_timestamp").collect()
    import bisect
    offs = [e[0] for e in ends]
    return [ends[bisect.bisect_right(offs, r.commitlog_offset)][1] - r.born_timestamp for r in rows]


def delta_latencies(spark, table):
    from pyspark.sql import functions as F
    when = {}
    for f in sorted(glob.glob(os.path.join(table, "_delta_log", "*.json"))):
        ts, adds = None, []
        for line in open(f):
            a = json.loads(line)
            if "commitInfo" in a:
                ts = a["commitInfo"]["timestamp"]
            if "add" in a:
                adds.append(a["add"]["path"])
        for p in adds:
            when[os.path.basename(p)] = ts
    rows = (spark.read.format("delta").load(table)
            .select((F.col("born_timestamp").cast("double") * 1000).cast("long").alias("ts"),
                    F.col("_metadata.file_name").alias("f")).collect())
    return [when[r.f] - r.ts for r in rows]


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def latency_run(spark, broker, work, trigger_s, rate, seconds):
    topic = f"lat-{trigger_s}-{int(seconds)}"
    (qa, store), (qb, table) = start_both(spark, broker, topic, work, f"{trigger_s} seconds", topic)
    th = produce_at(broker, topic, rate, seconds)
    th.join()
    time.sleep(trigger_s * 2 + 5)
    for q in (qa, qb):
        q.processAllAvailable()
        q.stop()
    out = []
    for name, lat in (("rocketlake", rocketlake_latencies(spark, store)), ("delta", delta_latencies(spark, table))):
        out.append({"what": "latency", "sink": name, "trigger_s": trigger_s, "rate": rate, "messages": len(lat),
                    "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99)})
    return out


def throughput_run(spark, broker, work, backlog):
    topic = "backlog"
    broker.produce(topic, [f"k\tm{i:08d} " + "x" * 90 for i in range(backlog)])
    out = []
    for name in ("rocketlake", "delta"):
        df = kafka_df(spark, broker, topic, max_offsets=max(1, backlog // 4))
        w = df.writeStream.format(name).option("checkpointLocation", os.path.join(work, f"ck-t-{name}"))
        t0 = time.time()
        q = w.trigger(availableNow=True).start(os.path.join(work, f"t-{name}"))
        q.awaitTermination()
        s = time.time() - t0
        out.append({"what": "throughput", "sink": name, "messages": backlog, "seconds": round(s, 2),
                    "messages_per_s": round(backlog / s)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--triggers", default="1,10")
    ap.add_argument("--backlog", type=int, default=200_000)
    ap.add_argument("--warmup", type=float, default=10, help="seconds of an unreported first run (JIT, "
                    "numba in the commit worker, Delta's classes): the first query of a session pays them")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-streaming-")
    results = []
    try:
        with KafkaBroker(os.path.join(work, "kafka")) as broker:
            spark = session()
            if args.warmup:
                latency_run(spark, broker, work, 1, args.rate, args.warmup)
            for t in (float(x) for x in args.triggers.split(",")):
                for r in latency_run(spark, broker, work, t if t != int(t) else int(t), args.rate, args.seconds):
                    print(json.dumps(r), flush=True)
                    results.append(r)
            if args.backlog:
                for r in throughput_run(spark, broker, work, args.backlog):
                    print(json.dumps(r), flush=True)
                    results.append(r)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", f"streaming-{time.strftime('%Y%m%dT%H%M%S')}.json"), "w") as fh:
        json.dump({"args": vars(args), "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
