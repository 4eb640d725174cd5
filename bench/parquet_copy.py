"""The cold baseline for ingest: ``spark-submit bench/parquet_copy.py SRC DST`` reads a Parquet
input and writes it back as Parquet, the cheapest thing Spark does with the same bytes. Timed as
a whole process beside ``spark-submit jobs/ingest.py`` of the same input (what a user runs)."""
import sys

from pyspark.sql import SparkSession

if __name__ == "__main__":
    src, dst = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.appName("parquet-copy").getOrCreate()
    spark.read.parquet(src).write.mode("overwrite").parquet(dst)
    spark.stop()
