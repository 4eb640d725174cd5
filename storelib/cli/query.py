"""rocketlake query: look messages up in a store, one by one or many at once (RocketMQ-compatible answers).

Modes:

* many lookups at once (Spark): ``--store S --queries Q.jsonl --output A.jsonl`` answers a file
  of queries, one JSON object per line ({"qid": ..., "type": "queryMessage", "topic": ..., ...}:
  RocketMQ's MessageStore calls by name, docs/FORMAT.md "queries.jsonl"), as RocketMQ's own store
  answers them, in one Spark job; answers are JSON lines ordered by qid.
* single lookups (no Spark, also fine under spark-submit): ``key``, ``id``, ``unique-key``,
  ``offset``, ``time``.
* scans (Spark for large stores): ``range`` (every message stored in a time range, optionally of
  one topic) and ``keys`` (a Parquet file of topic/key pairs looked up at once).

Exact by default; ``--rocketmq-compat`` answers what a broker would. Exit status (the table every
job shares): 0 = done (found or nothing found; "nothing
found" says so on stderr and writes an empty output), 1 = query failed (a damaged or missing
store, a path leading out of it, anything unexpected), 2 = bad arguments / input / configuration
or a batch the store does not have.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from ..errors import BadInput
from .common import ExitCode, spark_session
from .failures import QUERY, guarded
from .numargs import POSITIVE
from .timeargs import write_csv

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow is imported where a mode needs it (Parquet output, Spark modes), not at module level:
# a single lookup printing JSON lines never loads it (``python jobs/query.py key ...`` in ~0.2 s).

from . import common as _cli

__all__ = ["Output", "build_parser", "parse_after", "single", "compat_batch", "range_cmd", "keys_cmd", "main"]

I64_MAX = 2**63 - 1


# ----------------------------------------------------------------------------- output
def _message_rows(msgs: list) -> pa.Table:
    """decode_message dicts -> rangescan.MESSAGE_SCHEMA table."""
    import pyarrow as pa
    from ..format.textforms import parse_properties_string
    from ..read.rangescan import MESSAGE_SCHEMA
    rows = []
    for m in msgs:
        p = parse_properties_string(m["properties_string"])
        r = {k: m[k] for k in MESSAGE_SCHEMA.names if k in m}
        r["properties"] = list(p.items())
        r["tags"], r["keys"], r["uniq_key"] = p.get("TAGS"), p.get("KEYS"), p.get("UNIQ_KEY")
        rows.append(r)
    return pa.Table.from_pylist(rows, schema=MESSAGE_SCHEMA)


def _json_value(v, body_as: str, name: str):
    if name == "body" and isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode() if body_as == "base64" else bytes(v).decode("utf-8", "replace")
    if name == "properties" and isinstance(v, list):
        return {k: val for k, val in v}
    if isinstance(v, dict) and name == "message":
        return v
    return v


class Output:
    """JSON lines (stdout or a file) or Parquet (``--output X.parquet``)."""

    def __init__(self, path: str | None, body_as: str):
        self.path = path
        self.body_as = body_as
        self.parquet = path is not None and path.lower().endswith(".parquet")
        self.csv = path is not None and path.lower().endswith(".csv")
        self.rows = 0

    def write_table(self, table: pa.Table | None, schema: pa.Schema | None = None) -> None:
        import pyarrow as pa
        if table is None:
            table = schema.empty_table() if schema is not None else pa.table({})
        if self.parquet:
            import pyarrow.parquet as pq
            self.rows += table.num_rows
            pq.write_table(table, self.path)
            return
        self.write_rows(row for batch in table.to_batches(65536) for row in batch.to_pylist())

    def write_rows(self, rows) -> None:
        """Rows (dicts, keys in column order) as JSON lines, without pyarrow."""
        fh = open(self.path, "w", encoding="utf-8", newline="" if self.csv else None) if self.path else sys.stdout
        try:
            if self.csv:
                self.rows += write_csv(fh, ({n: _json_value(v, self.body_as, n) for n, v in row.items()}
                                            for row in rows))
                return
            for row in rows:
                out = {n: _json_value(v, self.body_as, n) for n, v in row.items()}
                fh.write(json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n")
                self.rows += 1
        finally:
            if self.path:
                fh.close()
            else:
                fh.flush()

    def write_messages(self, msgs: list) -> None:
        """``decode_message`` dicts in the public message columns (JSON lines need no pyarrow)."""
        if self.parquet:
            self.write_table(_message_rows(msgs) if msgs else None, _schema())
        else:
            from ..format.records import message_row
            self.write_rows(message_row(m) for m in msgs)


def _nothing(what: str) -> None:
    print(f"nothing found: {what}", file=sys.stderr)


def _count(n: int, what: str = "message(s)") -> None:
    print(f"rocketlake: {n} {what}", file=sys.stderr)


# ----------------------------------------------------------------------------- arguments
def _common(p: argparse.ArgumentParser, suppress: bool) -> None:
    d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
    p.add_argument("--store", default=d(None), help="store root: local path or s3://, gs://, hdfs:// URI")
    p.add_argument("--as-of-batch", default=d(None), help="read this committed batch (id or sequence number)")
    p.add_argument("--config", default=d(None),
                   help="broker .properties for a broker's directory (default: the store's own configuration, "
                        "else the sizes read off its files)")
    p.add_argument("--output", default=d(None), help="output file: .parquet = Parquet, .csv = CSV, else JSON lines "
                                                     "(default: JSON lines on stdout)")
    p.add_argument("--body-as", choices=["base64", "text"], default=d("base64"),
                   help="bodies in JSON lines / CSV as base64 (default) or UTF-8 text")
    p.add_argument("--limit", type=POSITIVE, default=d(None), help="at most this many results (then --after pages on)")
    p.add_argument("--after", default=d(None), help="cursor printed by the previous page")
    p.add_argument("--local", choices=["auto", "always", "never"], default=d("never"),
                   help="range / keys in this process without Spark: auto = when the store is small (the "
                        "rocketlake command's default), always, never (spark-submit's default)")
    p.add_argument("--rocketmq-compat", action="store_true", default=d(False),
                   help="answer what a RocketMQ broker answers (quirks included) instead of the exact result")


def build_parser() -> argparse.ArgumentParser:
    from .timeargs import query_ms as epoch_ms     # (before 1970 too: RocketMQ's lookups take any long)
    ap = argparse.ArgumentParser(prog=_cli.prog("query.py"), description=_cli.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(ap, False)
    ap.add_argument("--queries", help="a JSON lines file of queries to answer as RocketMQ's store does (with --output; Spark)")

    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    p = sub.add_parser("key", help="messages by key (UNIQ_KEY or a KEYS token)")
    _common(p, True)
    p.add_argument("--topic", required=True, help="topic of the messages")
    p.add_argument("--key", required=True, help="a KEYS token or the UNIQ_KEY")
    p.add_argument("--begin", type=epoch_ms, help="store time lower bound (inclusive): epoch ms or ISO-8601")
    p.add_argument("--end", type=epoch_ms, help="store time upper bound (inclusive): epoch ms or ISO-8601")
    p.add_argument("--max-num", type=POSITIVE, help="--rocketmq-compat: queryMessage maxNum (default 64)")
    p = sub.add_parser("id", help="message by offset msgId")
    _common(p, True)
    p.add_argument("msg_id", help="the 32-hex-digit offset message id (store host + commitlog offset)")
    p = sub.add_parser("unique-key", help="message(s) by UNIQ_KEY (client message id)")
    _common(p, True)
    p.add_argument("--topic", required=True, help="topic of the message")
    p.add_argument("--key", required=True, help="the UNIQ_KEY (client message id)")
    p = sub.add_parser("offset", help="message(s) by queue offset")
    _common(p, True)
    p.add_argument("--topic", required=True, help="topic")
    p.add_argument("--queue", type=int, required=True, help="queue id")
    p.add_argument("--offset", type=int, required=True, help="first queue offset (the consume queue's unit index)")
    p.add_argument("--count", type=POSITIVE, default=1, help="how many messages from there (default 1)")
    p = sub.add_parser("time", help="queue offset by store time (getOffsetInQueueByTime)")
    _common(p, True)
    p.add_argument("--topic", required=True, help="topic")
    p.add_argument("--queue", type=int, required=True, help="queue id")
    p.add_argument("--timestamp", type=epoch_ms, required=True, help="store time: epoch ms or ISO-8601")
    p.add_argument("--boundary", choices=["lower", "upper"], default="lower",
                   help="which offset when several messages share the time (RocketMQ's BoundaryType)")
    p = sub.add_parser("range", help="messages by store time range (Spark)")
    _common(p, True)
    p.add_argument("--begin", type=epoch_ms, required=True, help="store time lower bound (inclusive): epoch ms or ISO-8601")
    p.add_argument("--end", type=epoch_ms, required=True, help="store time upper bound (inclusive): epoch ms or ISO-8601")
    p.add_argument("--topic", help="only this topic")
    p = sub.add_parser("keys", help="batch key lookup from a Parquet file of topic, key[, begin, end] (Spark)")
    _common(p, True)
    p.add_argument("--input", required=True, help="Parquet file with columns topic, key[, begin, end (epoch ms)]")
    return ap


def _unused_options(args) -> str | None:
    """Why an option given does nothing for this lookup (None: each one given is used): an option
    that is silently ignored reads as an answer to a question the user did not ask."""
    cmd, compat = args.cmd, args.rocketmq_compat
    mode = f"query {cmd}" if cmd else "--queries"
    if cmd and args.queries:
        return f"--queries answers a file of queries on its own; it takes no command ({cmd})"
    if compat and cmd in ("range", "keys"):
        return f"--rocketmq-compat: a broker has no {cmd} lookup; query {cmd} is exact only"
    if getattr(args, "max_num", None) is not None and not compat:
        return "--max-num is queryMessage's maxNum under --rocketmq-compat; without it use --limit (and --after)"
    if compat:
        mode += " --rocketmq-compat"
    if args.after is not None and (compat or cmd not in ("key", "unique-key", "range")):
        return f"--after pages exact key, unique-key and range lookups; {mode} takes none"
    if args.limit is not None and (cmd not in ("key", "unique-key", "range", "keys") or (compat and cmd != "key")):
        hint = " (--count says how many messages)" if cmd == "offset" else ""
        return f"--limit cuts key, unique-key, range and keys lookups; {mode} takes none{hint}"
    return None


def _resolved(args):
    """The store's configuration and snapshot (``common.store_snapshot``), opened once before the
    query runs and handed to every read of it."""
    if getattr(args, "resolved", None) is None:
        from .common import store_snapshot
        args.resolved = store_snapshot(args)
    return args.resolved


def _config(args):
    return _resolved(args).config


def _snapshot(args):
    return _resolved(args).snapshot


# ----------------------------------------------------------------------------- single lookups
def _open(args):
    from ..read.query import open_store
    return open_store(args.store, args.as_of_batch, _config(args), _snapshot(args))


def parse_after(text: str | None) -> tuple[int, int] | None:
    """A key / unique-key page's ``--after STORE_TIMESTAMP:COMMITLOG_OFFSET`` (None: the first page)."""
    if not text:
        return None
    try:
        ts, off = text.split(":")
        return int(ts), int(off)
    except ValueError:
        raise BadInput(f"--after {text!r}: expected STORE_TIMESTAMP:COMMITLOG_OFFSET as printed by the previous page") from None


def single(args) -> int:
    t0 = time.time()
    r = _open(args)
    out = Output(args.output, args.body_as)
    cursor = None
    if args.cmd in ("key", "unique-key"):
        what = f"{'key' if args.cmd == 'key' else 'unique key'} {args.key!r} in topic {args.topic!r}"
        msgs, cursor = _key_messages(r, args)
        if not msgs:
            what = _topic_miss({t for t, _ in r.files.consume_queues}, args.topic) or what
    elif args.cmd == "id":
        what = f"message id {args.msg_id}"
        try:
            from ..format.records import decode_msg_id
            decode_msg_id(args.msg_id)
        except ValueError:
            raise BadInput(f"malformed message id {args.msg_id!r}: a message id is 32 hex characters (an IPv4 "
                           f"store host, port and commitlog offset; 56 for an IPv6 host), as "
                           f"`rocketlake query key` prints it in msg_id") from None
        if args.rocketmq_compat:
            _, _, m = r.view_message_by_id(args.msg_id)
        else:
            m = r.get_by_msg_id(args.msg_id)
        msgs = [m] if m is not None else []
    elif args.cmd == "offset":
        what = f"queue offset {args.offset} (+{args.count}) of {args.topic}/{args.queue}"
        if args.rocketmq_compat:
            res = r.get_message("rocketlake-cli", args.topic, args.queue, args.offset, args.count)
            print(f"status={res['status']} next_begin_offset={res['next_begin_offset']} "
                  f"min_offset={res['min_offset']} max_offset={res['max_offset']}", file=sys.stderr)
            msgs = [m for m in res["messages"] if m is not None]
        else:
            msgs = r.get_by_queue_offset(args.topic, args.queue, args.offset, args.count)
        if not msgs:
            what = _queue_miss(r, args) or what
    else:                                                       # time
        return _time_lookup(r, args, out, t0)
    out.write_messages(msgs)
    if not msgs:
        _nothing(what)
        return ExitCode.OK
    _count(len(msgs))
    if cursor is not None:
        print(f"more results: rerun with --after {cursor[0]}:{cursor[1]}", file=sys.stderr)
    _timing(args, t0, len(msgs))
    return ExitCode.OK


def _topic_miss(topics: set, topic: str | None) -> str | None:
    """Why a lookup in ``topic`` found nothing when ``topics`` (the store's topics with a queue)
    lack it (a mistyped topic is named as such, not as a key or time it lacks); None when it has one."""
    if topic is None or topic in topics:
        return None
    return f"no topic {topic!r} in this store"


def _queue_miss(r, args) -> str | None:
    """Why ``offset`` found nothing: no such topic or queue, or an offset outside the queue's bounds."""
    queues = sorted(q for t, q in r.files.consume_queues if t == args.topic)
    if not queues:
        return _topic_miss(set(), args.topic)
    if args.queue not in queues:
        return f"no queue {args.queue} in topic {args.topic!r} (its queues: {', '.join(map(str, queues))})"
    lo, hi = r.get_min_offset_in_queue(args.topic, args.queue), r.get_max_offset_in_queue(args.topic, args.queue)
    if args.offset < lo:
        return (f"offset {args.offset} of {args.topic}/{args.queue} is below the queue's minimum offset {lo} "
                f"(expired); its offsets are {lo}..{hi - 1}")
    if args.offset >= hi:
        return f"offset {args.offset} of {args.topic}/{args.queue} is past its last offset {hi - 1}"
    return None


def _key_messages(r, args) -> tuple[list, tuple[int, int] | None]:
    """``key`` / ``unique-key``: (messages, cursor of the next page or None)."""
    cursor = None
    if args.rocketmq_compat:
        if args.cmd == "key":
            max_num = args.limit if args.limit is not None else (args.max_num if args.max_num is not None else 64)
            res = r.query_message(args.topic, args.key, max_num,
                                  args.begin if args.begin is not None else 0,
                                  args.end if args.end is not None else I64_MAX)
        else:                       # the admin tool: queryMessage(maxNum 32), keep UNIQ_KEY matches
            from ..format.records import message_keys
            res = r.query_message(args.topic, args.key, 32, 0, I64_MAX)
            res["messages"] = [m for m in res["messages"] if message_keys(m)[0] == args.key]
        msgs = res["messages"]
    elif args.cmd == "key":
        page = r.find_by_key(args.topic, args.key, args.begin, args.end, args.limit, parse_after(args.after))
        msgs, cursor = page.messages, page.next_after
    else:
        msgs = r.find_by_unique_key(args.topic, args.key)
        after = parse_after(args.after)
        if after:
            msgs = [m for m in msgs if (m["store_timestamp"], m["commitlog_offset"]) > after]
        if args.limit is not None and len(msgs) > args.limit:
            msgs = msgs[:args.limit]
            cursor = (msgs[-1]["store_timestamp"], msgs[-1]["commitlog_offset"]) if msgs else None
    return msgs, cursor


def _time_lookup(r, args, out: Output, t0: float) -> int:
    """``time``: getOffsetInQueueByTime and the queue's bounds, one row."""
    what = f"queue {args.topic}/{args.queue}"
    if r.get_max_offset_in_queue(args.topic, args.queue) <= 0:
        if out.parquet:
            out.write_table(None, _time_schema())
        else:
            out.write_rows([])
        _nothing(_topic_miss({t for t, _ in r.files.consume_queues}, args.topic) or what + " (no such queue, or it is empty)")
        return ExitCode.OK
    off = r.get_offset_in_queue_by_time(args.topic, args.queue, args.timestamp, args.boundary.upper())
    unit_ts = r.get_message_store_timestamp(args.topic, args.queue, off)
    row = {"topic": args.topic, "queue_id": args.queue, "timestamp": args.timestamp,
           "boundary": args.boundary.upper(), "queue_offset": off,
           "store_timestamp": unit_ts if unit_ts >= 0 else None,
           "min_offset": r.get_min_offset_in_queue(args.topic, args.queue),
           "max_offset": r.get_max_offset_in_queue(args.topic, args.queue)}
    if out.parquet:
        import pyarrow as pa
        out.write_table(pa.Table.from_pylist([row], schema=_time_schema()))
    else:
        out.write_rows([row])
    _timing(args, t0, 1)
    return ExitCode.OK


def _time_schema():
    """The ``time`` command's output columns (in the order of its JSON lines)."""
    import pyarrow as pa
    return pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("timestamp", pa.int64()),
                      ("boundary", pa.string()), ("queue_offset", pa.int64()),
                      ("store_timestamp", pa.int64()), ("min_offset", pa.int64()),
                      ("max_offset", pa.int64())])


def _schema():
    from ..read.rangescan import MESSAGE_SCHEMA
    return MESSAGE_SCHEMA


def _timing(args, t0, n) -> None:
    if os.environ.get("ROCKETLAKE_QUERY_TIMING"):
        print(f"rocketlake: {args.cmd} {n} result(s) in {1000 * (time.time() - t0):.1f} ms", file=sys.stderr)


# ----------------------------------------------------------------------------- Spark modes
def _spark():
    """(session, owned): a session this call created is stopped at the end, a running one is not."""
    from pyspark.sql import SparkSession
    if SparkSession.getActiveSession() is not None:
        return SparkSession.getActiveSession(), False
    return spark_session("query"), True


def _run_here(args) -> bool:
    """range / keys without Spark (``--local``; auto: the commitlog bytes to scan are few)."""
    if args.local == "never":
        return False
    if args.local == "always":
        return True
    from ..read.localscan import LOCAL_SCAN_BYTES, local_scan_bytes
    begin, end = (args.begin, args.end) if args.cmd == "range" else (None, None)
    return local_scan_bytes(args.store, begin, end, args.as_of_batch, _config(args), _snapshot(args)) <= LOCAL_SCAN_BYTES


def compat_batch(spark, args) -> int:
    from ..io.storage import Store
    from ..table.storefiles import open_files
    if not args.output:
        raise BadInput("--queries needs --output ANSWERS.jsonl")
    with open(args.queries, encoding="utf-8") as fh:
        lines = [ln for ln in fh.read().splitlines() if ln.strip()]
    queries = []
    for i, ln in enumerate(lines):
        try:
            q = json.loads(ln)
        except json.JSONDecodeError as e:
            raise BadInput(f"{args.queries}:{i + 1}: not JSON ({e})") from None
        queries.append((q.get("qid", i), i, ln))
    store = Store(args.store)
    files, info = open_files(store, args.as_of_batch, _config(args), _snapshot(args))
    sc = spark.sparkContext
    b_files = sc.broadcast(files)
    b_view = sc.broadcast(store.mappings())        # object stores: files assembled from objects
    uri = store.uri
    n_parts = max(1, min(len(queries), 4 * sc.defaultParallelism))

    def answer_part(items):
        from storelib.read.query import StoreReader
        from storelib.io.storage import Store as _Store
        f = b_files.value
        reader = StoreReader(_Store(uri).apply_mappings(b_view.value), f.config, f)
        for _qid, i, ln in items:
            a = reader.answer(json.loads(ln))
            yield (i, json.dumps(a, ensure_ascii=False, separators=(",", ":")))

    got = dict(sc.parallelize(queries, n_parts).mapPartitions(answer_part).collect())
    order = sorted(queries, key=lambda q: (q[0] if isinstance(q[0], (int, float)) else float("inf"), q[1]))
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        for _qid, i, _ in order:
            fh.write(got[i] + "\n")
    os.replace(tmp, args.output)
    print(f"rocketlake: answered {len(queries)} queries of {args.queries} on {args.store} "
          f"(batch {info.batch_id or 'none: broker view'}) -> {args.output}", file=sys.stderr)
    return ExitCode.OK


def range_cmd(spark, args) -> int:
    from pyspark.sql import functions as F
    from ..read.rangescan import scan_range
    if args.end < args.begin:
        raise BadInput("--end is before --begin")
    if spark is None:
        return _range_here(args)
    df = scan_range(spark, args.store, args.begin, args.end, args.topic, args.as_of_batch, _config(args),
                    _snapshot(args))
    after = _after_offset(args)
    if after is not None:
        df = df.where(F.col("commitlog_offset") > after)
    if args.limit is not None:           # TakeOrderedAndProject: no full sort / shuffle
        table = df.orderBy("commitlog_offset").limit(args.limit + 1).toArrow()
    else:                                # rows come to the driver anyway: sort them here
        table = df.toArrow().sort_by("commitlog_offset")
    return _range_page(args, table)


def _range_here(args) -> int:
    """``range`` in this process (``read.localscan``): the rows, order and pages of the Spark plan."""
    import pyarrow.compute as pc
    from ..read.localscan import scan_range_local
    table = scan_range_local(args.store, args.begin, args.end, args.topic, args.as_of_batch, _config(args),
                             _snapshot(args))
    after = _after_offset(args)
    if after is not None:
        table = table.filter(pc.greater(table.column("commitlog_offset"), after))
    return _range_page(args, table.sort_by("commitlog_offset"))


def _after_offset(args) -> int | None:
    """``--after``: the commitlog offset the previous page ended at, or None."""
    if not args.after:
        return None
    try:
        return int(args.after)
    except ValueError:
        raise BadInput(f"--after {args.after!r}: expected the commitlog offset printed by the previous page") from None


def _range_page(args, table) -> int:
    """One page of ``range``'s rows (sorted by commitlog offset, at most ``--limit``), and its cursor."""
    more = args.limit is not None and table.num_rows > args.limit
    if more:
        table = table.slice(0, args.limit)
    what = f"messages stored in [{args.begin}, {args.end}]" + (f" in topic {args.topic!r}" if args.topic else "")
    snap = _snapshot(args) if args.topic and not table.num_rows else None
    if snap is not None and snap.batch is not None:       # (a broker's directory: its queues are not listed here)
        what = _topic_miss(snap.topics(), args.topic) or what
    return _finish_table(args, table, what,
                         f"{table.column('commitlog_offset')[-1].as_py()}" if more and table.num_rows else None)


def keys_cmd(spark, args) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ..read.keylookup import lookup_keys
    try:
        keys = pq.read_table(args.input)
    except (OSError, pa.ArrowInvalid) as e:
        raise BadInput(f"--input {args.input}: cannot read Parquet ({e})") from None
    missing = {"topic", "key"} - set(keys.column_names)
    if missing:
        raise BadInput(f"--input {args.input}: missing column(s) {sorted(missing)} (need topic, key[, begin, end])")
    keys = keys.select([c for c in ("topic", "key", "begin", "end") if c in keys.column_names])
    if spark is None:
        from ..read.localscan import lookup_keys_here
        table = lookup_keys_here(args.store, keys, args.as_of_batch, _config(args), _snapshot(args))
    else:
        table = lookup_keys(spark, args.store, keys, args.as_of_batch, _config(args),
                            snapshot=_snapshot(args)).toArrow()
    table = table.sort_by([(c, "ascending") for c in ("query_topic", "query_key", "query_begin", "query_end",
                                                             "store_timestamp", "commitlog_offset")])
    if args.limit is not None:
        table = table.slice(0, args.limit)
    _missing_keys(keys, table)
    return _finish_table(args, table, f"any of the {keys.num_rows} keys of {args.input}", None)


def _missing_keys(keys, table) -> None:
    """The (topic, key) pairs of the input no message matched, on stderr (at most 20 named)."""
    found = set(zip(table.column("query_topic").to_pylist(), table.column("query_key").to_pylist()))
    asked = list(dict.fromkeys(zip(keys.column("topic").to_pylist(), keys.column("key").to_pylist())))
    missing = [k for k in asked if k not in found]
    if missing and table.num_rows:
        shown = ", ".join(f"{t}/{k}" for t, k in missing[:20])
        more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
        print(f"not found: {len(missing)} of {len(asked)} key(s): {shown}{more}", file=sys.stderr)


def _finish_table(args, table, what, cursor) -> int:
    out = Output(args.output, args.body_as)
    table = _normalize(table)
    out.write_table(table)
    if table.num_rows == 0:
        _nothing(what)
        return ExitCode.OK
    _count(table.num_rows)
    if cursor is not None:
        print(f"more results: rerun with --after {cursor}", file=sys.stderr)
    return ExitCode.OK


def _normalize(table: pa.Table) -> pa.Table:
    """Spark's Arrow output uses large types / nested names; keep the public schema types."""
    import pyarrow as pa
    from ..codec.properties import MAP_TYPE
    cols, names = [], []
    for name in table.column_names:
        col = table.column(name)
        if name == "properties":
            col = col.cast(MAP_TYPE)
        elif pa.types.is_large_string(col.type):
            col = col.cast(pa.string())
        elif pa.types.is_large_binary(col.type):
            col = col.cast(pa.binary())
        cols.append(col)
        names.append(name)
    return pa.table(cols, names=names)


# ----------------------------------------------------------------------------- entry
def main(argv=None) -> int:
    """The query job; ``query ... | head`` ends quietly when the reader goes away, as a shell tool would."""
    try:
        code = answer(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 141
    return code


def answer(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if not args.store:
        ap.error("--store is required")
    if args.cmd is None and not args.queries:
        ap.error("give --queries FILE.jsonl --output OUT.jsonl, or a command (key, id, unique-key, offset, "
                 "time, range, keys)")
    spark, owned = None, False

    def run() -> int:
        nonlocal spark, owned
        unused = _unused_options(args)
        if unused:
            raise BadInput(unused)
        _cli.check_outputs(args.store, {"--output": args.output})
        _config(args)                       # not a store, or a --config that disagrees: before any JVM
        if args.cmd in ("key", "id", "unique-key", "offset", "time"):
            return int(single(args))
        if args.cmd in ("range", "keys") and _run_here(args):
            return int(range_cmd(None, args) if args.cmd == "range" else keys_cmd(None, args))
        spark, owned = _spark()
        if args.cmd is None:
            return int(compat_batch(spark, args))
        if args.cmd == "range":
            return int(range_cmd(spark, args))
        return int(keys_cmd(spark, args))
    try:
        # a failed query: one line naming the bad input, the batch the store does not have, the
        # damaged file or the path refused (also from a Spark task); a traceback only for the unexpected
        return guarded(run, QUERY)
    finally:
        if spark is not None and owned:
            spark.stop()


