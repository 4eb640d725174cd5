"""Streaming jobs of the streaming tests, run with spark-submit (Spark's Kafka source on spark.jars).

    stream_job.py STEP ARG... [-- STEP ARG...]      # the steps in one Spark application, in order

Steps:
  kafka-stream BOOTSTRAP TOPIC STORE CHECKPOINT MAX_OFFSETS  Kafka -> rocketlake sink, availableNow
  kafka-once BOOTSTRAP TOPIC STORE                            the whole topic, ingest_dataframe
  files-stream DIR STORE CHECKPOINT                           JSON files -> rocketlake sink, one file per trigger
  files-once FILE STORE                                       one JSON file, ingest_dataframe

A Kafka message becomes a message of topic ``orders``: the value is the body, the key the KEYS
property, the Kafka timestamp the born time (store time follows it), so a replayed micro-batch
encodes to the same records.
"""
from __future__ import annotations

import sys


from pyspark.sql import SparkSession, functions as F

from storelib.ingest import frame, sink

FILE_SCHEMA = "topic string, body string, born_timestamp long, keys string"


def from_kafka(df):
    return df.select(F.lit("orders").alias("topic"), F.col("value").alias("body"),
                     F.col("timestamp").alias("born_timestamp"),
                     F.create_map(F.lit("KEYS"), F.col("key").cast("string")).alias("properties"))


def from_files(df):
    return df.select("topic", "body", "born_timestamp", F.create_map(F.lit("KEYS"), F.col("keys")).alias("properties"))


def kafka_reader(spark, streaming: bool, bootstrap: str, topic: str):
    r = spark.readStream if streaming else spark.read
    return (r.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest"))


def run(spark, step: str, args: list) -> None:
    if step == "kafka-stream":
        boot, topic, store, ck, max_off = args
        df = from_kafka(kafka_reader(spark, True, boot, topic).option("maxOffsetsPerTrigger", int(max_off)).load())
        q = (df.writeStream.format("rocketlake").option("checkpointLocation", ck)
             .trigger(availableNow=True).start(store))
        q.awaitTermination()
    elif step == "kafka-once":
        boot, topic, store = args
        df = from_kafka(kafka_reader(spark, False, boot, topic).option("endingOffsets", "latest").load())
        frame.ingest_dataframe(df, store, quiet=True)
    elif step == "files-stream":
        src, store, ck = args
        df = from_files(spark.readStream.schema(FILE_SCHEMA).option("maxFilesPerTrigger", 1).json(src))
        q = (df.writeStream.format("rocketlake").option("checkpointLocation", ck)
             .trigger(availableNow=True).start(store))
        q.awaitTermination()
    elif step == "files-once":
        path, store = args
        frame.ingest_dataframe(from_files(spark.read.schema(FILE_SCHEMA).json(path)), store, quiet=True)
    else:
        raise SystemExit(f"unknown step {step!r}")
    print(f"step done: {step}", flush=True)


def main(argv: list) -> int:
    spark = SparkSession.builder.getOrCreate()
    sink.register(spark)
    steps, cur = [], []
    for a in argv:
        if a == "--":
            steps.append(cur)
            cur = []
        else:
            cur.append(a)
    steps.append(cur)
    for s in steps:
        run(spark, s[0], s[1:])
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
