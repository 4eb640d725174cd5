"""A class-data-sharing archive of Spark's JVM for the test run (``python tests/jvm_archive.py OUT``).

The suite starts about a hundred short-lived Spark JVMs (spark-submit, SparkSessions, the
ingest runner); each spends most of its start loading and verifying the same ten thousand
classes. Java 17 can dump the classes one run loaded (``-XX:ArchiveClassesAtExit``) and map them
into every later JVM of the same java and class path (``-XX:SharedArchiveFile``). conftest.py
builds one archive per test run in a temporary directory, before any worker starts, and puts it
into ``SPARK_SUBMIT_OPTS`` (which every spark-submit and PySpark gateway passes to its JVM). If
the archive cannot be built, or a JVM cannot use it, the JVM starts as it would without it.

Running this file as a script is the archive's workload: a local[2] session with the kinds of
jobs the tests run (RDD, Arrow to and from Python, SQL), then a clean stop, so the JVM exits
and writes the archive.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

__all__ = ["build", "jvm_options", "cached_archive"]

# Logging off: a JVM that cannot use the archive (another java, another class path) says so on
# stdout, where tests read job output.
_QUIET = "-Xlog:disable"


def jvm_options(archive: str, base: str) -> str:
    """``base`` plus the options that map ``archive`` (quietly)."""
    return f"{base} -XX:SharedArchiveFile={archive} {_QUIET}".strip()


def build(archive: str, base: str, timeout: float = 300) -> bool:
    """Run the workload with ``-XX:ArchiveClassesAtExit=archive``; True if the archive exists."""
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{base} -XX:ArchiveClassesAtExit={archive}".strip(),
               PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable))
    deadline = time.time() + timeout
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), archive], env=env, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    # The JVM writes the archive as it exits, after the Python process that started it: wait for it.
    pids = [int(line) for line in r.stdout.splitlines() if line.strip().isdigit()]
    while pids and os.path.exists(f"/proc/{pids[-1]}") and time.time() < deadline:
        time.sleep(0.2)
    return bool(pids) and not os.path.exists(f"/proc/{pids[-1]}") and os.path.exists(archive) \
        and os.path.getsize(archive) > 0


def cached_archive(cache_dir: str, base: str) -> str | None:
    """The archive for this java, this pyspark and ``base`` under ``cache_dir`` (kept between
    runs: a clean clone builds it once, later runs reuse it), built now if missing; None if it
    cannot be built. Concurrent test runs build it once (a lock)."""
    import fcntl
    import hashlib
    import pyspark
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    key = hashlib.sha256(f"{java}|{pyspark.__version__}|{pyspark.__file__}|{base}".encode()).hexdigest()[:16]
    os.makedirs(cache_dir, exist_ok=True)
    archive = os.path.join(cache_dir, f"spark-{key}.jsa")
    with open(os.path.join(cache_dir, "build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(archive):
            tmp = f"{archive}.{os.getpid()}.tmp"
            if not build(tmp, base):
                return None
            os.replace(tmp, archive)
    return archive


def _workload() -> None:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spark = (SparkSession.builder.master("local[2]").appName("rocketlake-jvm-archive")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={root}/conf/log4j2.properties")
             .getOrCreate())
    sc = spark.sparkContext
    sc.parallelize(range(1000), 2).map(lambda x: x * 2).sum()
    df = spark.createDataFrame(pa.table({"k": list(range(100)), "v": [str(i) for i in range(100)]}))
    df.mapInArrow(lambda it: it, df.schema).groupBy("k").count().toArrow()
    spark.range(1000).selectExpr("id % 7 AS g").groupBy("g").count().collect()
    print(spark._jvm.java.lang.ProcessHandle.current().pid(), flush=True)     # for build() to wait on
    spark.stop()


if __name__ == "__main__":
    _workload()
