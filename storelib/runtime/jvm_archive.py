"""The JVM options of a cold job whose work is in Python: C1 only, and a class-data archive.

A cold ``spark-submit jobs/ingest.py`` starts a JVM that mostly schedules tasks and passes small
summaries between Python processes; yet it spends seconds of CPU loading and verifying about ten
thousand classes and running C2, the optimising compiler, on code that runs for seconds. On two
cores that CPU is taken from the encode tasks (measured on a 2M-message ingest: the JVM's and
driver's CPU 13.4 s with the default JVM, 6.3 s with these options). So:

* ``-XX:TieredStopAtLevel=1``: C1 only (quick compiles, no C2 threads). Not for jobs whose work
  is in the JVM (a Parquet copy, SQL over the ``rocketmq`` source): C2 pays off there.
* a dynamic class-data-sharing archive: Java 17 dumps the classes one run loaded
  (``-XX:ArchiveClassesAtExit``) and maps them into every later JVM of the same java and class
  path (``-XX:SharedArchiveFile``), parsed and verified already. ``make install`` builds it once
  under the virtualenv (``python -m storelib.runtime.jvm_archive --build``); it is keyed by the java, the
  pyspark and the options, so another java or pyspark gets its own. A JVM that cannot use it
  (another class path) starts as it would without it; its warning is switched off because the
  JVM prints it on stdout, where jobs print their answers.

The tests' JVMs use the same options (tests/conftest.py): they are short-lived, like a cold job.

    python -m storelib.runtime.jvm_archive --build      # build if missing, install the spark-submit
                                                        # hook (storelib.runtime.submit_hook); print the options
    python -m storelib.runtime.jvm_archive              # print the options (the archive only if built)
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from ..format.paths import PROJECT_ROOT

__all__ = ["C1_ONLY", "DEFAULT_CACHE", "build", "jvm_options", "archive_path", "cached_archive", "job_options"]

C1_ONLY = "-XX:TieredStopAtLevel=1"
# beside the virtualenv's packages: gone with .venv, rebuilt by the next `make install`
DEFAULT_CACHE = os.path.join(sys.prefix, "rocketlake-jvm-archive")
_QUIET = "-Xlog:cds*=off"


def jvm_options(archive: str | None, base: str = C1_ONLY) -> str:
    """``base`` plus the options that map ``archive`` (quietly); ``base`` alone without one."""
    return f"{base} -XX:SharedArchiveFile={archive} {_QUIET}".strip() if archive else base


def build(archive: str, base: str = C1_ONLY, timeout: float = 300) -> bool:
    """Run the workload (this module as a script) with ``-XX:ArchiveClassesAtExit=archive``;
    True if the archive was written."""
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"{base} -XX:ArchiveClassesAtExit={archive}".strip(),
               PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable))
    deadline = time.time() + timeout
    try:
        r = subprocess.run([sys.executable, "-m", "storelib.runtime.jvm_archive", "--workload"], env=env, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False,
                           cwd=PROJECT_ROOT)
    except (OSError, subprocess.SubprocessError):
        return False
    # The JVM writes the archive as it exits, after the Python process that started it: wait for it.
    pids = [int(line) for line in r.stdout.splitlines() if line.strip().isdigit()]
    while pids and os.path.exists(f"/proc/{pids[-1]}") and time.time() < deadline:
        time.sleep(0.2)
    return bool(pids) and not os.path.exists(f"/proc/{pids[-1]}") and os.path.exists(archive) \
        and os.path.getsize(archive) > 0


def archive_path(cache_dir: str = DEFAULT_CACHE, base: str = C1_ONLY) -> str | None:
    """Where the archive for this java, this pyspark and ``base`` lives (None without java)."""
    import hashlib
    import pyspark
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    key = hashlib.sha256(f"{java}|{pyspark.__version__}|{pyspark.__file__}|{base}".encode()).hexdigest()[:16]
    return os.path.join(cache_dir, f"spark-{key}.jsa")


def cached_archive(cache_dir: str = DEFAULT_CACHE, base: str = C1_ONLY) -> str | None:
    """The archive under ``cache_dir``, built now if missing (concurrent callers build it once,
    under a lock); None if it cannot be built."""
    import fcntl
    archive = archive_path(cache_dir, base)
    if archive is None:
        return None
    os.makedirs(cache_dir, exist_ok=True)
    with open(os.path.join(cache_dir, "build.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(archive):
            tmp = f"{archive}.{os.getpid()}.tmp"
            if not build(tmp, base):
                return None
            os.replace(tmp, archive)
    return archive


def job_options(cache_dir: str = DEFAULT_CACHE) -> str:
    """The options of a cold job whose work is in Python: C1 only, and the archive if built."""
    archive = archive_path(cache_dir)
    return jvm_options(archive if archive and os.path.exists(archive) else None)


def _workload() -> None:
    """What the archive holds: a local[2] session with the kinds of jobs rocketlake runs (RDD
    jobs, broadcasts, Arrow to and from Python, SQL), then a clean stop."""
    import pyarrow as pa
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("rocketlake-jvm-archive")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    b = sc.broadcast({"x": 1})
    sc.parallelize(range(1000), 2).map(lambda x: x * b.value["x"]).sum()
    df = spark.createDataFrame(pa.table({"k": list(range(100)), "v": [str(i) for i in range(100)]}))
    df.mapInArrow(lambda it: it, df.schema).groupBy("k").count().toArrow()
    spark.range(1000).selectExpr("id % 7 AS g").groupBy("g").count().collect()
    jvm = spark._jvm
    assert jvm is not None                        # a classic (JVM) session
    print(jvm.java.lang.ProcessHandle.current().pid(), flush=True)     # for build() to wait on
    spark.stop()


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m storelib.runtime.jvm_archive", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="store_true", help="build the archive if missing")
    ap.add_argument("--cache", default=DEFAULT_CACHE, help="directory of the archives")
    ap.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.workload:
        _workload()
        return 0
    if args.build and cached_archive(args.cache) is None:
        print("warning: no class-data archive (java missing, or the build failed); C1 only", file=sys.stderr)
    if args.build:
        from . import submit_hook
        if submit_hook.install(job_options(args.cache)) is None:
            print(f"note: {submit_hook.hook_path()} is not rocketlake's: a plain spark-submit jobs/ingest.py "
                  "starts with Spark's default JVM options", file=sys.stderr)
    print(job_options(args.cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
