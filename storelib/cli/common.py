"""What the thin ``jobs/`` entry points share: Spark session, config, exit codes, summaries.

Exit statuses: ``storelib.errors`` (``ExitCode``, ``EXIT_TABLE``, ``exit_code``).
"""
from __future__ import annotations

import json
import os
import sys
import traceback

from ..format.paths import PROJECT_ROOT
from ..format.config import load_config
from ..errors import ConfigError, EXIT_TABLE, ExitCode, exit_code, task_error

__all__ = [
    "ROOT", "DEFAULT_CONFIG", "ExitCode", "exit_code", "config_from_args",
    "spark_session", "run_job", "emit_summary", "ingest", "adopt", "INGEST_DRIVER_MODULES", "INGEST_TASK_MODULES",
]

ROOT = PROJECT_ROOT
DEFAULT_CONFIG = os.path.join(ROOT, "conf", "store.properties")


def config_from_args(args):
    path = getattr(args, "config", None) or (DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
    return load_config(path)


def spark_session(app: str, reach: dict | None = None):
    """The job's SparkSession, with Delta Lake (``delta_spark.configure_delta``: delta-spark's
    jars from ``make install``, Delta's SQL extension and catalog). The driver's object-store
    settings go with every task (``objstore.ship``). ``reach``: option name -> path the executors
    must read; on a multi-host master one on the driver's disk is refused before any task runs
    (``multihost.UnreachablePath``, the session stopped)."""
    from pyspark.sql import SparkSession
    from ..table.delta_spark import configure_delta
    from .multihost import check_reachable
    if reach and _submitted():
        check_reachable(_submitted_master(), reach)        # before the application even starts
        reach = None
    builder = SparkSession.builder.appName(f"rocketlake-{app}")
    if not _submitted():
        builder = builder.master("local[*]")
    spark = configure_delta(builder).getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ROCKETLAKE_SPARK_LOG", "WARN"))
    from ..io import objstore
    objstore.ship(spark.sparkContext)
    master = spark.sparkContext.master
    if reach:
        try:
            check_reachable(master, reach)
        except BaseException:
            spark.stop()
            raise
    if not master.startswith("local"):
        _ship_code(spark)
    return spark


def _submitted() -> bool:
    """True under spark-submit (the master then comes from --master or its default local[*])."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _submitted_master() -> str:
    """The master spark-submit was given (its JVM, our Py4J gateway, holds it as ``spark.master``),
    read without starting a SparkContext."""
    from pyspark import SparkConf, SparkContext
    SparkContext._ensure_initialized()
    return SparkConf().get("spark.master", "local[*]")


def _ship_code(spark) -> None:
    """Send storelib to executors of a real cluster (where it may not be installed). The zip is
    served from the driver's disk while the application runs (an executor that joins late fetches
    it then), and removed when the driver's Python exits."""
    import atexit
    import shutil
    import tempfile
    import zipfile
    tmp = tempfile.mkdtemp(prefix="rocketlake-code-")
    atexit.register(shutil.rmtree, tmp, True)
    path = os.path.join(tmp, "storelib.zip")
    with zipfile.ZipFile(path, "w") as zf:
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, "storelib")):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            for name in sorted(f for f in files if f.endswith(".py")):
                path_in = os.path.join(dirpath, name)
                zf.write(path_in, os.path.relpath(path_in, ROOT))
    spark.sparkContext.addPyFile(path)


# What a writer job prints for the errors it expects (name of an EXIT_TABLE class -> message).
_WRITER_MESSAGES = {
    "InputError": "bad input, nothing was written:\n{e}",
    "ConfigError": "configuration: {e}",
    "UnreachablePath": "{e}",
    "TopicsError": "configuration: {e}",
    "ConcurrentWriteError": "concurrent writer: {e}; this batch left nothing behind, rerun it",
    "IngestError": "{e}",
    "AdoptError": "{e}",
    "StorePathError": "{e}",
    "ExpireError": "{e}",
    "StoreError": "the store is damaged, nothing was written: {e} (run jobs/inspect.py verify)",
}


def run_job(app: str, args, body, preload=(), warm=(), reach=None) -> int:
    """Run ``body(spark, config)`` with clear errors and exit codes (``exit_code``).

    ``preload``: modules the body needs, imported while the SparkSession starts; ``warm``: modules
    the job's tasks need, imported in the executors' Python workers by a warm-up job while the
    body starts (``storelib.runtime.warmup``; the body joins it with ``warmup.wait_workers``). ``reach``:
    option name -> path the executors read (``spark_session``), checked before any task runs."""
    from ..compute import allocator
    from ..runtime import warmup
    allocator.tune()          # the driver's malloc settings, before Spark starts (as importing the codec did)
    try:
        cfg = config_from_args(args)
    except (ConfigError, OSError) as e:       # an unreadable or invalid --config file
        print(f"error: configuration: {e}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    spark = None
    try:
        loading = warmup.preload(preload)
        spark = spark_session(app, reach)
        if warm:
            warmup.warm_workers(spark.sparkContext, warm)
        loading.wait()
        return body(spark, cfg)
    except Exception as e:  # noqa: BLE001 - a job must end with a clear message
        cls = next((c for c, _code, _in_task in EXIT_TABLE if isinstance(e, c)), None)
        wrapped = task_error(e) if cls is None else None
        if cls is not None and cls.__name__ in _WRITER_MESSAGES:
            msg = _WRITER_MESSAGES.get(type(e).__name__) or _WRITER_MESSAGES[cls.__name__]
            print("error: " + msg.format(e=e), file=sys.stderr)
        elif wrapped:
            print(f"error: {wrapped[1]}", file=sys.stderr)
        else:
            traceback.print_exc()
            print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return int(exit_code(e))
    finally:
        if spark is not None:
            warmup.wait_workers(spark.sparkContext, timeout=10)
            spark.stop()


def emit_summary(summary: dict, json_path: str | None) -> None:
    line = " ".join(f"{k}={v}" for k, v in summary.items())
    print(f"rocketlake: {line}", flush=True)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(summary, fh, sort_keys=True)
            fh.write("\n")


# What an ingest's driver and its tasks import (run_job's preload / warm): the driver plans and
# commits (Delta through deltalake); the tasks encode and write.
INGEST_DRIVER_MODULES = ("storelib.ingest.driver", "deltalake")
INGEST_TASK_MODULES = ("storelib.ingest.encode", "storelib.ingest.write")


def ingest(spark, cfg, args) -> int:
    from ..ingest.driver import run_ingest
    summary = run_ingest(spark, args.store, args.input, args.format, cfg, batch_id=args.batch_id,
                         target_splits=args.partitions, quiet=args.quiet,
                         topics=getattr(args, "topics", None), queue_by=getattr(args, "queue_by", None),
                         store_timestamp=getattr(args, "store_timestamp", None))
    emit_summary(summary, args.json_summary)
    return int(ExitCode.OK)


def adopt(spark, cfg, args) -> int:
    from ..ops.adopt import adopt as run_adopt
    summary = run_adopt(spark, args.store, args.from_store, cfg, batch_id=args.batch_id, quiet=args.quiet)
    emit_summary(summary, args.json_summary)
    return int(ExitCode.OK)
