"""What the thin ``jobs/`` entry points share: Spark session, config, exit codes, summaries.

Exit status of every job: one table, ``ExitCode`` (the codes) and ``exit_code`` (which error
means which code). Importing this module is cheap (no pyspark, pyarrow, numba or deltalake), so
every entry point can use the table.

    code  ExitCode    jobs/ingest.py       jobs/expire.py       jobs/query.py        jobs/inspect.py
                      (ingest, import)
    0     OK          committed, or        done, or nothing     answered (nothing    done; verify found
                      already committed    to expire            found: empty output) no problem
    1     FAILED      anything else: a failed write or check (IngestError, AdoptError, ExpireError), a store
                      path leading out of the store (StorePathError), a damaged or missing store
                      (StoreError, CorruptStore, StoreNotFound), an unexpected error; verify: problems found
    2     BAD_INPUT   bad arguments (argparse), bad input rows (InputError), configuration or topics.json
                      (ConfigError, TopicsError; an unreadable --config file); query: bad query input
                      (BadInput); query and inspect: a batch id / version the store does not have (KeyError)
    3     CONCURRENT  another writer committed first (ConcurrentWriteError): nothing of this batch or
                      expiry was left behind, rerun it (ingest, import, expire)

An error raised inside a Spark task reaches the driver as a Py4J error whose text holds the
Python traceback: InputError (2), IngestError and StorePathError (1) are recognized there too
(``task_error``); any other task failure is 1.
"""
from __future__ import annotations

import enum
import json
import os
import sys
import traceback

from .config import ConfigError, load_config

__all__ = [
    "ROOT", "DEFAULT_CONFIG", "ExitCode", "EXIT_TABLE", "exit_code", "task_error", "config_from_args",
    "spark_session", "run_job", "emit_summary", "ingest", "adopt", "INGEST_DRIVER_MODULES", "INGEST_TASK_MODULES",
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = os.path.join(ROOT, "conf", "store.properties")


class ExitCode(enum.IntEnum):
    """Exit status of every job (the table in this module's docstring)."""
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    CONCURRENT = 3


# Which error means which exit status: (module, class, code, recognized inside a Spark task's error).
# First match wins; classes are looked up only in modules already imported (an error of a class
# whose module was never imported cannot have been raised), so this table imports nothing.
EXIT_TABLE = (
    ("storelib.codec", "InputError", ExitCode.BAD_INPUT, True),
    ("storelib.ingest_errors", "IngestError", ExitCode.FAILED, True),
    ("storelib.storage", "StorePathError", ExitCode.FAILED, True),
    ("storelib.config", "ConfigError", ExitCode.BAD_INPUT, False),
    ("storelib.topics", "TopicsError", ExitCode.BAD_INPUT, False),
    ("storelib.querycli", "BadInput", ExitCode.BAD_INPUT, False),
    ("storelib.manifest", "ConcurrentWriteError", ExitCode.CONCURRENT, False),
    ("storelib.adopt", "AdoptError", ExitCode.FAILED, False),
    ("storelib.retention", "ExpireError", ExitCode.FAILED, False),
    ("storelib.errors", "StoreError", ExitCode.FAILED, False),
)


def _table_row(exc: BaseException):
    """The first row of EXIT_TABLE whose class ``exc`` is an instance of, or None."""
    for row in EXIT_TABLE:
        cls = getattr(sys.modules.get(row[0]), row[1], None)
        if cls is not None and isinstance(exc, cls):
            return row
    return None


def task_error(exc: BaseException):
    """(code, message) of a storelib error raised inside a Spark task, which arrives wrapped in a
    Py4J error (its text holds the Python traceback); None if ``exc`` is not one."""
    text = str(exc)
    for module, name, code, in_task in EXIT_TABLE:
        marker = f"{module}.{name}:"
        if in_task and marker in text:
            return code, text[text.index(marker):].split("\n\n")[0]
    return None


def exit_code(exc: BaseException, *, lookup_errors: bool = False) -> ExitCode:
    """The exit status of a job that ended with ``exc`` (EXIT_TABLE, then a Spark task's error).

    ``lookup_errors``: a KeyError means a batch id / version / name the store does not have (the
    readers, query and inspect), so bad arguments (2); elsewhere it is an unexpected error (1)."""
    row = _table_row(exc)
    if row is not None:
        return row[2]
    if lookup_errors and isinstance(exc, KeyError):
        return ExitCode.BAD_INPUT
    wrapped = task_error(exc)
    return wrapped[0] if wrapped else ExitCode.FAILED


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
    from .delta_spark import configure_delta
    from .multihost import check_reachable
    if reach and _submitted():
        check_reachable(_submitted_master(), reach)        # before the application even starts
        reach = None
    builder = SparkSession.builder.appName(f"rocketlake-{app}")
    if not _submitted():
        builder = builder.master("local[*]")
    spark = configure_delta(builder).getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ROCKETLAKE_SPARK_LOG", "WARN"))
    from . import objstore
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
        pkg = os.path.join(ROOT, "storelib")
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py"):
                zf.write(os.path.join(pkg, name), f"storelib/{name}")
    spark.sparkContext.addPyFile(path)


# What a writer job prints for the errors it expects (EXIT_TABLE class name -> message).
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
    body starts (``storelib.warmup``; the body joins it with ``warmup.wait_workers``). ``reach``:
    option name -> path the executors read (``spark_session``), checked before any task runs."""
    from . import allocator, warmup
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
        row = _table_row(e)
        wrapped = task_error(e) if row is None else None
        if row is not None and row[1] in _WRITER_MESSAGES:
            msg = _WRITER_MESSAGES.get(type(e).__name__) or _WRITER_MESSAGES[row[1]]
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
INGEST_DRIVER_MODULES = ("storelib.ingest", "deltalake")
INGEST_TASK_MODULES = ("storelib.encode_stage", "storelib.write_stage")


def ingest(spark, cfg, args) -> int:
    from .ingest import run_ingest
    summary = run_ingest(spark, args.store, args.input, args.format, cfg, batch_id=args.batch_id,
                         target_splits=args.partitions, quiet=args.quiet,
                         topics=getattr(args, "topics", None), queue_by=getattr(args, "queue_by", None),
                         store_timestamp=getattr(args, "store_timestamp", None))
    emit_summary(summary, args.json_summary)
    return int(ExitCode.OK)


def adopt(spark, cfg, args) -> int:
    from .adopt import adopt as run_adopt
    summary = run_adopt(spark, args.store, args.from_store, cfg, batch_id=args.batch_id, quiet=args.quiet)
    emit_summary(summary, args.json_summary)
    return int(ExitCode.OK)
