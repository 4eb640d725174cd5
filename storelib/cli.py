"""What the thin ``jobs/`` entry points share: Spark session, config, exit codes, summaries."""
from __future__ import annotations

import json
import os
import sys
import traceback

from .codec import InputError
from .config import ConfigError, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CONFIG = os.path.join(ROOT, "conf", "store.properties")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CONCURRENT = 3


def config_from_args(args):
    path = getattr(args, "config", None) or (DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
    return load_config(path)


def spark_session(app: str):
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.appName(f"rocketlake-{app}")
    if not _submitted():
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("ROCKETLAKE_SPARK_LOG", "WARN"))
    master = spark.sparkContext.master
    if not master.startswith("local"):
        _ship_code(spark)
    return spark


def _submitted() -> bool:
    """True under spark-submit (the master then comes from --master or its default local[*])."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _ship_code(spark) -> None:
    """Send storelib to executors of a real cluster (where it may not be installed)."""
    import tempfile
    import zipfile
    tmp = tempfile.mkdtemp(prefix="rocketlake-code-")
    path = os.path.join(tmp, "storelib.zip")
    with zipfile.ZipFile(path, "w") as zf:
        pkg = os.path.join(ROOT, "storelib")
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py"):
                zf.write(os.path.join(pkg, name), f"storelib/{name}")
    spark.sparkContext.addPyFile(path)


def run_job(app: str, args, body) -> int:
    """Run ``body(spark, config)`` with clear errors and exit codes."""
    from .adopt import AdoptError
    from .ingest import IngestError
    from .manifest import ConcurrentWriteError
    from .storage import StorePathError
    from .topics import TopicsError
    try:
        cfg = config_from_args(args)
    except (ConfigError, OSError) as e:
        print(f"error: configuration: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    spark = None
    try:
        spark = spark_session(app)
        return body(spark, cfg)
    except InputError as e:
        print(f"error: bad input, nothing was written:\n{e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ConfigError, TopicsError) as e:
        print(f"error: configuration: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ConcurrentWriteError as e:
        print(f"error: concurrent writer: {e}; this batch left nothing behind, rerun it", file=sys.stderr)
        return EXIT_CONCURRENT
    except (IngestError, AdoptError, StorePathError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - a job must end with a clear message
        root = _python_cause(e)
        if root:
            return run_job_error(root)
        traceback.print_exc()
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if spark is not None:
            spark.stop()


def _python_cause(e: Exception) -> str | None:
    """An executor's InputError etc. arrives wrapped in a Py4J error; dig out its message."""
    text = str(e)
    for marker in ("storelib.codec.InputError:", "storelib.ingest.IngestError:", "storelib.storage.StorePathError:"):
        if marker in text:
            return text[text.index(marker):].split("\n\n")[0]
    return None


def run_job_error(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT if "InputError" in msg else EXIT_FAILED


def emit_summary(summary: dict, json_path: str | None) -> None:
    line = " ".join(f"{k}={v}" for k, v in summary.items())
    print(f"rocketlake: {line}", flush=True)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(summary, fh, sort_keys=True)
            fh.write("\n")


def ingest(spark, cfg, args) -> int:
    from .ingest import run_ingest
    summary = run_ingest(spark, args.store, args.input, args.format, cfg, batch_id=args.batch_id,
                         target_splits=args.partitions, quiet=args.quiet,
                         topics=getattr(args, "topics", None), queue_by=getattr(args, "queue_by", None),
                         store_timestamp=getattr(args, "store_timestamp", None))
    emit_summary(summary, args.json_summary)
    return EXIT_OK


def adopt(spark, cfg, args) -> int:
    from .adopt import adopt as run_adopt
    summary = run_adopt(spark, args.store, args.from_store, cfg, batch_id=args.batch_id, quiet=args.quiet)
    emit_summary(summary, args.json_summary)
    return EXIT_OK
