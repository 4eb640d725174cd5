"""spark-submit jobs/ingest.py --store STORE --input PATH [--format jsonl|parquet|delta]
       spark-submit jobs/ingest.py --store STORE --format table --input TABLE_NAME
       spark-submit jobs/ingest.py --store STORE --format sql --input "SELECT ..."
                             [--config FILE.properties] [--batch-id ID] [--topics topics.json]
                             [--update-topics] [--queue-by NAME] [--store-timestamp MS] [--json-summary FILE]
       spark-submit jobs/ingest.py --store STORE --from-store BROKER_STORE_DIR [--config FILE.properties]

table / sql: the rows of a catalog table or of a query's result, through
storelib.ingest_dataframe (commitlog order: the DataFrame's partition order, then row order).

Ingests one batch of messages into a RocketMQ store (local path or pyarrow.fs URI) and commits
it to the store's Delta tables. Exit status (storelib.cli.common.ExitCode): 0 committed (or already
committed), 2 bad input or configuration, 3 concurrent writer, 1 anything else.
"""
import argparse

from . import common as cli
from .failures import CHECK, guarded
from .numargs import NON_NEGATIVE
from .timeargs import epoch_ms



__all__ = ["main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=cli.prog("ingest.py"), description=cli.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="store root: a local path or s3://, gs://, hdfs:// URI")
    ap.add_argument("--input", action="append",
                    help="input file or directory; --format table: a table name; --format sql: a query")
    ap.add_argument("--from-store", help="adopt this RocketMQ store directory (verified, not rewritten; "
                                         "= --store adopts in place, else its files are copied first)")
    ap.add_argument("--format", choices=["jsonl", "parquet", "delta", "table", "sql"],
                    help="the input's format (default: inferred and said: a directory with _delta_log/ is delta, "
                         "a file starting with Parquet's magic or a directory of .parquet files is parquet, "
                         "else jsonl)")
    ap.add_argument("--config", help="broker-style .properties file (default: the store's own, recorded with its "
                                     "first batch; for a new store conf/store.properties)")
    ap.add_argument("--batch-id", help="idempotency key (default: derived from the input's identity; not "
                    "digits alone, which --as-of-batch reads as a sequence number)")
    ap.add_argument("--partitions", type=NON_NEGATIVE, default=0,
                    help="split the input into at least this many tasks (default: Spark's parallelism)")
    ap.add_argument("--topics", help="RocketMQ topics.json: write queues per topic, for rows without queue_id "
                                     "(default: the queue counts the store recorded with its batches; for a new "
                                     "store conf/topics.json if present)")
    ap.add_argument("--update-topics", action="store_true",
                    help="--topics may change the queue count of a topic the store already placed messages by "
                         "(as mqadmin updateTopic; recorded with the batch); without it that is an error")
    ap.add_argument("--queue-by", metavar="NAME",
                    help="rows without queue_id: queue = abs(javaHash(value) %% writeQueueNums) of this property "
                         "or field (RocketMQ SelectMessageQueueByHash); default: round robin per topic")
    ap.add_argument("--store-timestamp", type=epoch_ms, metavar="TIME",
                    help="store time (epoch ms or ISO-8601) for rows without store_timestamp and born_timestamp "
                         "(default: the newest modification time of the input files)")
    ap.add_argument("--allow-empty-body", action="store_true", default=None,
                    help="write messages whose body is empty (refused by default, also allowed by "
                         "ROCKETLAKE_ALLOW_EMPTY_BODY=1: RocketMQ's producers refuse them and a proxy serving them fails)")
    ap.add_argument("--json-summary", help="also write the one-line summary as JSON to this file")
    ap.add_argument("--quiet", action="store_true", help="no progress lines (errors and the summary still print)")
    ap.add_argument("--allow-nonempty", action="store_true",
                    help="make a new store in a non-empty directory that is not a store (refused by default)")
    ap.add_argument("--local", choices=["auto", "always", "never"], default="never",
                    help="run the stages in this process without Spark: auto = for small local inputs "
                         "(the rocketlake command's default), always, never (spark-submit's default)")
    args = ap.parse_args(argv)
    if args.input and len(args.input) > 1:
        ap.error(f"--input given {len(args.input)} times ({', '.join(args.input)}): give one file or directory "
                 "(a directory ingests every file in it)")
    args.input = args.input[0] if args.input else None
    if args.update_topics and not args.topics:
        ap.error("--update-topics needs --topics (the new queue counts)")
    if args.from_store:
        if args.input:
            ap.error("--input and --from-store exclude each other")
        return guarded(lambda: _import(args), CHECK)
    if not args.input:
        ap.error("--input is required")
    return guarded(lambda: _ingest(args), CHECK)     # run_job words the job's own errors


def _ingest(args) -> int:
    from ..runtime.milestones import mark
    mark("preflight")
    from ..io.condput import refuse_gs_store
    refuse_gs_store(args.store)             # a store on gs://: refused before GCS is even asked (io.gcsreach)
    cli.check_outputs(args.store, {"--json-summary": args.json_summary})    # before Spark starts
    from .preflight import check_ingest, ingest_state, small_local_input
    early = None
    if args.local == "never" and args.format not in ("table", "sql"):
        # spark-submit: its JVM runs already; its SparkContext starts beside the checks
        early = cli.start_early("ingest", {"--store": args.store, "--input": args.input}, sql=False)
    cfg, before = check_ingest(args)        # a bad argument is one line, exit 2, before any task
    state = lambda: ingest_state(args.store, before)  # noqa: E731
    if args.format in ("table", "sql"):
        return cli.run_job("ingest", args, lambda spark, c: ingest_frame(spark, c, args), config=cfg, state=state,
                           reach={"--store": args.store})
    session = None
    if args.local == "always" or (args.local == "auto" and small_local_input(args)):
        from ..runtime.localrun import LocalSession
        session = LocalSession()
    else:
        from ..ingest.identity import prefetch
        prefetch(args.input, args.format)           # the input's identity is hashed while Spark starts
    return cli.run_job("ingest", args, lambda spark, c: cli.ingest(spark, c, args), config=cfg, state=state,
                       session=session, preload=cli.INGEST_DRIVER_MODULES, warm=cli.INGEST_TASK_MODULES,
                       reach={"--store": args.store, "--input": args.input}, sql=False, early=early)


def _import(args) -> int:
    """--from-store: the sizes come from --config, else the source's own files (said on stderr)."""
    from .preflight import check_import
    from ..io.condput import refuse_gs_store
    refuse_gs_store(args.store)             # a store on gs://: refused before GCS is even asked (io.gcsreach)
    cli.check_outputs(args.store, {"--json-summary": args.json_summary})
    cfg = check_import(args)                # one line, exit 2, before any JVM starts
    session = None
    if args.local != "never":           # the checks run on this process's threads instead of Spark tasks
        from ..runtime.localrun import LocalSession
        session = LocalSession()
    return cli.run_job("import", args, lambda spark, c: cli.adopt(None if session else spark, c, args),
                       config=cfg, session=session, reach={"--store": args.store, "--from-store": args.from_store},
                       state=lambda: "nothing was imported (the copied files are removed by the next run); "
                                     "rerun the same command")


def ingest_frame(spark, cfg, args) -> int:
    """--format table / sql: the DataFrame of the table or query, as storelib.ingest_dataframe."""
    from ..ingest.frame import ingest_dataframe
    df = spark.table(args.input) if args.format == "table" else spark.sql(args.input)
    if args.partitions:
        df = df.coalesce(args.partitions)          # fewer tasks; coalesce keeps the rows' order
    summary = ingest_dataframe(df, args.store, cfg, batch_id=args.batch_id, topics=args.topics,
                               queue_by=args.queue_by, store_timestamp=args.store_timestamp, quiet=args.quiet,
                               update_topics=bool(getattr(args, "update_topics", False)),
                               allow_empty_body=getattr(args, "allow_empty_body", None),
                               local=getattr(args, "local", "never"))
    cli.emit_summary(summary, args.json_summary)
    return int(cli.ExitCode.OK)
