"""One read query as a fresh process (the read section's cold figure):

    spark-submit bench/read_query.py rocketmq|rocketmq-python|parquet PATH full|topic|time [ARG]

``full``: count(*), sum(length(body)), count(distinct topic) over every message; ``topic``:
the same over ``topic = ARG``; ``time``: over ``store_timestamp BETWEEN lo AND hi`` (ARG "lo,hi").
The rocketmq side reads the store through ``spark.read.format("rocketmq")``, the parquet side
the Parquet input of the same messages. Prints ``{"first_query_s": ...}`` (the load and the query,
after a trivial query: the first query of a fresh session) and then the answer, a JSON line each."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyspark.sql import SparkSession

AGG = ["count(*) AS n", "sum(length(body)) AS body_bytes", "count(DISTINCT topic) AS topics"]
_REGISTERED = set()                      # sessions the rocketmq source is registered in


def frame(spark, kind: str, path: str):
    """``rocketmq``: the source as a user loads it (the JVM reader on a local store);
    ``rocketmq-python``: the same through the Python reader (``engine=python``)."""
    if kind.startswith("rocketmq"):
        from storelib.read.datasource import register
        if id(spark) not in _REGISTERED:
            register(spark)
            _REGISTERED.add(id(spark))
        engine = "python" if kind == "rocketmq-python" else "auto"
        return spark.read.format("rocketmq").option("engine", engine).load(path)
    return spark.read.parquet(path)


def where(query: str, arg: str | None) -> str | None:
    if query == "topic":
        return f"topic = '{arg}'"
    if query == "time":
        lo, hi = arg.split(",")
        return f"store_timestamp >= {int(lo)} AND store_timestamp <= {int(hi)}"
    return None


def answer(spark, kind: str, path: str, query: str, arg: str | None = None) -> dict:
    df = frame(spark, kind, path)
    cond = where(query, arg)
    if cond:
        df = df.where(cond)
    return df.selectExpr(*AGG).collect()[0].asDict()


if __name__ == "__main__":
    import time
    kind, path, query = sys.argv[1:4]
    spark = SparkSession.builder.appName(f"read-{kind}-{query}").getOrCreate()
    if path.startswith("s3a://"):                         # Parquet on S3: the S3 settings the store uses
        from storelib.read.jvmsource import s3a_settings
        for k, v in s3a_settings("s3://" + path[len("s3a://"):]).items():
            spark._jsc.hadoopConfiguration().set(k, v)
    spark.range(1000).selectExpr("sum(id)").collect()     # the session's own first query is nobody's
    t = time.perf_counter()
    got = answer(spark, kind, path, query, sys.argv[4] if len(sys.argv) > 4 else None)
    print(json.dumps({"first_query_s": time.perf_counter() - t}))
    print(json.dumps(got))
    spark.stop()
