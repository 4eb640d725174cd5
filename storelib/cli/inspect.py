"""jobs/inspect.py --store STORE [--as-of-batch B | --version V] [--json] COMMAND ...

Look at a rocketlake store (or, for stats/verify, any RocketMQ store directory):

  segments [--kind commitlog|consumequeue|index|checkpoint] [--topic T]
                 the manifest: one row per live file (offsets, valid bytes, counts, time range, batch);
                 a consume queue's max_offset is the next offset (exclusive), as in stats; a --topic
                 the store never had is refused (exit 2, naming its topics)
  checkpoints    one row per committed batch (ingest / import / expire)
  topics         the topic config the store recorded with its batches (queue numbers per topic; a
                 later ingest without --topics uses it, a --topics that disagrees is refused)
  history        Delta history of the manifest and checkpoints tables
  stats          messages/bytes/offsets/times per topic and queue (what is still readable; times in
                 ISO-8601 UTC, epoch ms with --json), each topic's retention rule and the bytes it holds
                 back; broker disk vs stored (sparse) bytes
  verify [--deep] [--spark]
                 check every file (in this process; --spark: Spark tasks, one per commitlog segment /
                 group of consume queues / index file); one line per problem "<path>@<offset>: <what>",
                 exit status 1 if any
  register --database D
                 catalog tables D.manifest and D.checkpoints (external Delta tables at the store's
                 _rocketlake/ paths) and the views D.committed_files and D.live_files, in the Spark
                 session's catalog (a persistent one, e.g. Hive's metastore, keeps them for every
                 Spark SQL shell); needs Spark with delta-spark (storelib.table.delta_spark)

Only verify --spark and register start Spark (spark-submit, or local[*] under plain python); the
rest reads Delta and a few bytes in this process.
"""
import argparse
import json
import os
import signal
import sys


from ..ops import inspect as inspection
from ..io import storage
from .common import ExitCode
from .failures import CHECK, INSPECT, guarded, worded
from .timeargs import iso
from ..errors import BadInput, StoreError, StoreNotFound
from ..format import paths
from ..table import rowcheck, snapshots

from . import common as _cli
from ..table.rows import FileKind

__all__ = ["main"]


def main(argv=None) -> int:
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)      # `inspect.py ... | head` ends quietly
    ap = argparse.ArgumentParser(prog=_cli.prog("inspect.py"), description=_cli.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", help="store root: a local path or s3://, gs://, hdfs:// URI (before or after the "
                                     "command)")
    ap.add_argument("--as-of-batch", help="batch id or sequence number to look at (default: the latest)")
    ap.add_argument("--version", type=int, help="checkpoints-table Delta version to look at")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    ap.add_argument("--config", help="broker-style .properties for a broker's directory (default: the store's own "
                                     "configuration, else the sizes read off its files)")
    sub = ap.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("segments")
    sp.add_argument("--kind", choices=[k.value for k in FileKind], help="only files of this kind")
    sp.add_argument("--topic", help="only this topic's consume-queue files")
    sub.add_parser("checkpoints")
    sub.add_parser("topics")
    sub.add_parser("history")
    sub.add_parser("stats")
    vp = sub.add_parser("verify")
    vp.add_argument("--deep", action="store_true", help="also cross-file checks (CQ/index -> commitlog) and body CRCs")
    vp.add_argument("--spark", action="store_true", help="run the checks as Spark tasks (default: in this process)")
    vp.add_argument("--no-spark", action="store_true", help=argparse.SUPPRESS)      # the default; kept for scripts
    rp = sub.add_parser("register")
    rp.add_argument("--database", required=True, help="catalog database to create the tables in")
    # options after the command are accepted too: `segments --json`, `stats --store S`
    for p in (sp, vp, rp) + tuple(sub.choices[c] for c in ("checkpoints", "topics", "history", "stats")):
        p.add_argument("--store", dest="store_sub", help=argparse.SUPPRESS)
        p.add_argument("--config", dest="config_sub", help=argparse.SUPPRESS)
        p.add_argument("--json", action="store_true", dest="json_sub", help="JSON lines instead of a table")
        p.add_argument("--as-of-batch", dest="as_of_batch_sub",
                       help="batch id or sequence number to look at (default: the latest)")
        p.add_argument("--version", type=int, dest="version_sub", help="checkpoints-table Delta version to look at")
    args = ap.parse_args(argv)
    args.store = args.store_sub or args.store
    args.config = args.config_sub or args.config
    if not args.store:
        ap.error("the following arguments are required: --store")
    args.json = args.json or args.json_sub
    args.as_of_batch = args.as_of_batch_sub or args.as_of_batch
    args.version = args.version_sub if args.version_sub is not None else args.version
    return guarded(lambda: _inspect(args), INSPECT)


def _inspect(args) -> int:
    from . import common as cli
    with worded(CHECK):
        args.store_config = (resolved := cli.store_snapshot(args, history=True)).config   # not a store: exit 2
        if args.command in ("segments", "checkpoints", "topics", "history") and \
                paths.is_local(args.store) and \
                not os.path.isdir(os.path.join(paths.local_path(args.store), paths.META_DIR)):
            raise StoreNotFound(f"{args.store} has no rocketlake manifest ({paths.META_DIR}/): {args.command} "
                                "reads it; `stats` and `verify` work on a broker's directory too")
    store = storage.Store(args.store)
    if args.command == "verify":
        return cmd_verify(store, args)
    if args.command == "register":
        return cmd_register(store, args)
    snap = resolved.snapshot or snapshots.open_snapshot(    # (None: damaged tables, named here)
        store, args.as_of_batch, args.version, history=True)
    if args.command == "segments":
        rowcheck.check_snapshot(snap)
        _known_topic(args, snap)
        # (ops.inspect annotates manifest.Snapshot; it reads files, batch and batches, which the
        # command's StoreSnapshot has too: the annotation is its module's to widen)
        rows = [_exclusive(r) for r in inspection.segment_rows(snap, args.kind, args.topic)]  # type: ignore[arg-type]
        cols: tuple[str, ...] = inspection.SEGMENT_COLUMNS
        if args.kind == FileKind.COMMITLOG:
            cols = tuple(c for c in cols if c not in ("topic", "queue_id"))
        _emit(rows, cols, args.json, "no live files" if snap.batch else "no rocketlake manifest")
    elif args.command == "checkpoints":
        cols = inspection.CHECKPOINT_COLUMNS
        _emit(inspection.checkpoint_rows(snap), None if args.json else cols,  # type: ignore[arg-type]  # (as segments)
              args.json, "no committed batch")
    elif args.command == "topics":
        _emit(inspection.topic_rows(snap), inspection.TOPIC_COLUMNS,  # type: ignore[arg-type]  # (as segments)
              args.json, "no topic config recorded")
    elif args.command == "history":
        _emit(inspection.history_rows(store, args.version), inspection.HISTORY_COLUMNS, args.json, "no history")
    elif args.command == "stats":
        cmd_stats(store, snap, args)
    return int(ExitCode.OK)


def _known_topic(args, snap) -> None:
    """A --topic the store never had is a mistake (a typo would list nothing and say "no live
    files"): BadInput naming the store's topics, as query names a topic it lacks."""
    if args.topic is None or snap.batch is None:
        return
    have = inspection.known_topics(snap)
    if args.topic not in have:
        raise BadInput(f"--topic {args.topic!r}: no topic {args.topic!r} in {args.store} (its topics: "
                       f"{', '.join(repr(t) for t in sorted(have)) or 'none'})")


def _exclusive(row: dict) -> dict:
    """A consume-queue file's max_offset as stats and RocketMQ's getMaxOffsetInQueue give it: the
    next offset (exclusive); the manifest keeps the file's last unit (inclusive)."""
    if row.get("kind") == FileKind.CONSUMEQUEUE and row.get("max_offset") is not None and row.get("count"):
        return dict(row, max_offset=row["max_offset"] + 1)
    return row


def _emit(rows, cols, as_json, empty):
    if as_json:
        if rows:
            print(inspection.to_json_lines(rows, cols))
        return
    if not rows:
        print(f"({empty})")
        return
    print(inspection.format_table(rows, cols))


def _config(args):
    return args.store_config


def cmd_stats(store, snap, args):
    st = inspection.stats(store, snap, _config(args))
    if args.json:
        print(json.dumps(st, default=str))
        return
    tot = st["total"]
    for k in ("min_store_ts", "max_store_ts"):
        if tot.get(k) is not None:
            tot[k] = f"{tot[k]}({iso(tot[k])})"
    print("store: " + " ".join(f"{k}={v}" for k, v in tot.items()))
    for r in st["topics"] + st["queues"]:
        for k in ("first_store_ts", "last_store_ts"):
            r[k.replace("_ts", "_time")] = iso(r[k]) if r[k] is not None else ""
    print()
    print(inspection.format_table(st["topics"], ("topic", "queues", "messages", "bytes", "first_store_time",
                                                 "last_store_time", "retention", "held_back_bytes")))
    print()
    print(inspection.format_table(st["queues"], ("topic", "queue_id", "messages", "bytes", "min_offset",
                                                 "max_offset", "first_store_time", "last_store_time")))
    print()
    rows = st["cost"]["rows"]
    for r in rows:
        r["stored/broker"] = f"{r['stored_bytes'] / r['broker_bytes']:.4%}" if r["broker_bytes"] else "-"
    print(f"disk cost (stored = {st['cost']['measure']}):")
    print(inspection.format_table(rows, ("kind", "files", "broker_bytes", "valid_bytes", "stored_bytes",
                                         "stored/broker")))


def cmd_verify(store, args) -> int:
    from . import common as cli
    from ..ops import deepverify as verify
    cfg = _config(args)
    spark = None
    try:
        if args.spark and not args.no_spark:
            spark = cli.spark_session("verify", reach={"--store": store.uri})
        rep = verify.verify_store(store.uri, cfg, deep=args.deep, spark=spark, as_of_batch=args.as_of_batch,
                                  version=args.version)
    finally:
        if spark is not None:
            spark.stop()
    rep.emit(args.json)
    return int(ExitCode.OK if rep.ok else ExitCode.FAILED)        # verify: problems found = 1


def _no_persistent_catalog() -> int:
    print("error: register needs a persistent catalog: Spark's in-memory catalog forgets the tables when this "
          "process ends; pass --conf spark.sql.catalogImplementation=hive (with a Hive metastore: hive-site.xml or "
          "--conf spark.hadoop.hive.metastore.uris=thrift://HOST:9083), or call "
          "storelib.table.delta_spark.register_tables(spark, STORE, DATABASE) in your own Spark session",
          file=sys.stderr)
    return int(ExitCode.BAD_INPUT)


def _catalog_without_spark() -> str | None:
    """spark.sql.catalogImplementation as the session about to start will have it, read from the
    command's --conf, PYSPARK_SUBMIT_ARGS and spark-defaults.conf (None under spark-submit: its JVM
    has the answer). Spark's own default is "in-memory"."""
    import shlex
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    key = "spark.sql.catalogImplementation"
    found = None
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (os.path.join(os.environ["SPARK_HOME"], "conf")
                                                    if os.environ.get("SPARK_HOME") else None)
    defaults = os.path.join(conf_dir, "spark-defaults.conf") if conf_dir else None
    if defaults and os.path.exists(defaults):
        with open(defaults, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.strip().replace("=", " ", 1).split(None, 1)
                if len(parts) == 2 and parts[0] == key:
                    found = parts[1].strip()
    given = json.loads(os.environ.get("ROCKETLAKE_SPARK_CONFS") or "[]")
    words = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    given += [b for a, b in zip(words, words[1:]) if a == "--conf"]
    for c in given:
        k, _, v = c.partition("=")
        if k.strip() == key:
            found = v.strip()
    return found or "in-memory"


def cmd_register(store, args) -> int:
    from . import common as cli
    from ..table import delta_spark
    if store.local and not store.exists("_rocketlake/checkpoints/_delta_log"):
        raise StoreError(f"{store.uri} has no rocketlake checkpoints table (nothing committed)")
    if _catalog_without_spark() == "in-memory":
        return _no_persistent_catalog()
    spark = cli.spark_session("register")
    try:
        if spark.conf.get("spark.sql.catalogImplementation", "in-memory") == "in-memory":
            return _no_persistent_catalog()         # before any catalog call: no ./spark-warehouse/
        names = delta_spark.register_tables(spark, store.uri, args.database)
    except ValueError as e:               # a database name Spark cannot take
        raise BadInput(str(e)) from e
    finally:
        spark.stop()
    for name in names:
        print(name)
    return int(ExitCode.OK)
