#!/usr/bin/env python3
"""Kafka's jars for the streaming tests: a broker (KRaft) and Spark's Kafka source.

``tests/kafka/pom-broker.xml`` (Apache Kafka, Scala 2.13) and ``tests/kafka/pom-spark-kafka.xml``
(``spark-sql-kafka-0-10_2.13`` of the pyspark line) are resolved by ``mvn
dependency:copy-dependencies`` from Maven Central (``tests/kafka/settings.xml``: Central only)
into ``.cache/m2``, their jars copied to ``.cache/jars/kafka-broker/`` and
``.cache/jars/spark-kafka/`` (git-ignored). A stamp there (the pom's sha256) makes a second run
fetch nothing; without a stamp mvn tries offline first.

    PYTHONPATH=tests python -m support.kafkajars fetch        # both sets
    PYTHONPATH=tests python -m support.kafkajars spark-jars   # the comma list for spark.jars

Nothing here is needed by ``make check``.
"""
from __future__ import annotations

import glob
import hashlib
import os

from support.mavenfetch import Unavailable, command, fetch_pom  # noqa: F401  (Unavailable: what callers catch)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".cache")
POM_DIR = os.path.join(ROOT, "tests", "kafka")
SETS = ("broker", "spark-kafka")
# What Spark needs beyond its own jars (pyspark/jars has Hadoop, Scala, snappy, lz4, slf4j).
SPARK_KAFKA_PREFIXES = ("spark-sql-kafka-", "spark-token-provider-kafka-", "kafka-clients-", "commons-pool2-")


def jar_dir(name: str) -> str:
    return os.path.join(CACHE, "jars", f"kafka-{name}" if name == "broker" else name)


def fetch(name: str) -> str:
    pom = os.path.join(POM_DIR, f"pom-{name}.xml")
    with open(pom, "rb") as fh:
        want = hashlib.sha256(fh.read()).hexdigest()
    return fetch_pom(pom, jar_dir(name), want, f"Kafka {name}",
                     ("-q", "-s", os.path.join(POM_DIR, "settings.xml")))


def broker_classpath() -> str:
    return os.pathsep.join(sorted(glob.glob(os.path.join(fetch("broker"), "*.jar"))))


def spark_jars() -> str:
    """The comma-separated jars to give Spark (``spark.jars``) for ``format("kafka")``."""
    jars = sorted(glob.glob(os.path.join(fetch("spark-kafka"), "*.jar")))
    return ",".join(j for j in jars if os.path.basename(j).startswith(SPARK_KAFKA_PREFIXES))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "fetch":
        for name in SETS:
            d = fetch(name)
            print(f"Kafka {name}: {len(glob.glob(os.path.join(d, '*.jar')))} jars in {os.path.relpath(d, ROOT)}")
        return 0
    if len(argv) == 2 and argv[1] == "spark-jars":
        print(spark_jars())
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    command(main)
