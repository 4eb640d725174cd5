"""spark-submit jobs/expire.py --store STORE [--reserved-hours N] [--topic T --reserved-hours N ...]
       [--config PROPS] [--dry-run] [--now MS]

Retention like RocketMQ's fileReservedTime: removes the oldest commitlog segments whose newest
message is at least N hours older than now (never the last segment; a prefix only), then the
consume-queue and index files that point only below the new minimum offset; one Delta commit
(manifest rows action=remove, a checkpoint row operation=expire), then deletes the files and
does Delta housekeeping (checkpoint, log cleanup, vacuum). A topic's own rule (--topic T
--reserved-hours N, repeatable, or the topicRetention map of --config, e.g. orders=72,audit=720)
removes that topic's whole consume-queue files whose newest message is at least N hours old (its
queues' minimum offsets advance), and segments no kept queue unit points into go as well
(storelib.ops.topic_retention); --dry-run then also lists the new minimum offsets. Runs on the driver only: plain
`python jobs/expire.py ...` works as well.
Exit status (storelib.cli.common.ExitCode): 0 done (or nothing to do), 3 concurrent writer, 2 usage,
1 anything else.
"""
import argparse
import json
import sys


from ..ops import expire as retention
from .common import ExitCode
from .failures import CHECK, EXPIRE, guarded, worded
from .timeargs import epoch_ms
from ..errors import BadInput
from ..format.config import retention_hours


from . import common as _cli

__all__ = ["main"]


def _topic_pairs(argv: list) -> tuple[list, dict]:
    """``--topic T --reserved-hours N`` pairs taken out of ``argv`` (the rest, {topic: hours}); a
    --reserved-hours not right after a --topic is the store-wide rule."""
    rest: list = []
    rules: dict[str, float] = {}
    i = 0
    while i < len(argv):
        if argv[i] == "--topic":
            if i + 3 >= len(argv) or argv[i + 2] != "--reserved-hours":
                raise BadInput("--topic T must be followed by --reserved-hours N")
            try:
                hours = retention_hours(argv[i + 3])
            except ValueError as e:
                raise BadInput(f"--topic {argv[i + 1]} --reserved-hours: {e}") from None
            if rules.get(argv[i + 1], hours) != hours:
                raise BadInput(f"--topic {argv[i + 1]} is given two rules ({rules[argv[i + 1]]:g} and {hours:g} "
                               f"hours): give it one")
            rules[argv[i + 1]] = hours
            i += 4
            continue
        rest.append(argv[i])
        i += 1
    return rest, rules


def _known_topics(store: str, snap, rules: dict) -> None:
    """A --topic the store has no queue of is a mistake (a typo would expire nothing and say
    nothing): BadInput naming the store's topics. (topicRetention of a --config may name topics a
    store does not have: one file may serve many stores.)"""
    if not rules or snap is None or snap.batch is None:
        return
    have = snap.topics()
    unknown = sorted(set(rules) - have)
    if unknown:
        raise BadInput(f"--topic {', '.join(repr(t) for t in unknown)}: no such topic in {store} (its topics: "
                       f"{', '.join(repr(t) for t in sorted(have)) or 'none'}); nothing was removed")


def _hours_arg(text: str) -> float:
    try:
        return retention_hours(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _vacuum_hours_arg(text: str) -> int:
    """--vacuum-retention-hours: whole hours, 0 or more (Delta's vacuum refuses a negative one, and
    housekeeping never fails the expiry: it would only say so in the JSON summary)."""
    try:
        hours = int(text)
    except ValueError:
        hours = -1
    if hours < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: whole hours, 0 or more")
    return hours


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return guarded(lambda: _expire(argv), EXPIRE, interrupted=lambda e: _cli.interrupted(
        e, "the expiry is committed and its files deleted, or nothing changed; rerun the same command to finish "
           "either way"))


def _expire(argv: list) -> int:
    with worded(CHECK):
        argv, topic_rules = _topic_pairs(argv)
    ap = argparse.ArgumentParser(prog=_cli.prog("expire.py"), description=_cli.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="store root: a local path or s3://, gs://, hdfs:// URI")
    ap.add_argument("--reserved-hours", type=_hours_arg,
                    help="RocketMQ fileReservedTime (hours): the store-wide rule; after --topic T: that topic's")
    ap.add_argument("--topic", metavar="T", help="(with --reserved-hours N right after it, repeatable) a topic's rule")
    ap.add_argument("--config", help="store .properties: its topicRetention map (orders=72,audit=720)")
    ap.add_argument("--now", type=epoch_ms, help="reference time: epoch ms or ISO-8601 (default: the wall clock)")
    ap.add_argument("--dry-run", action="store_true", help="list what would go; change nothing")
    ap.add_argument("--batch-id", help="id of the expire batch (default expire-<now>)")
    ap.add_argument("--vacuum-retention-hours", type=_vacuum_hours_arg, default=168,
                    help="Delta vacuum (and object sweep) keeps what batches of the last N hours read (default 168): "
                         "how far back --as-of-batch reaches")
    ap.add_argument("--json-summary", help="also write the summary as JSON to this file")
    ap.add_argument("--quiet", action="store_true", help="no progress lines and no per-file lines but under --dry-run (the summary still prints)")
    args = ap.parse_args(argv)
    from . import common as cli
    from ..io.condput import refuse_gs_store
    with worded(CHECK):                      # a writer on gs://: refused before anything there is read
        if not args.dry_run:
            refuse_gs_store(args.store)
    cli.check_outputs(args.store, {"--json-summary": args.json_summary})
    with worded(CHECK):                      # not a store: one line, exit 2
        # (from the Delta tables, with their versions: the expiry goes on from it under the lease)
        read = cli.store_snapshot(argparse.Namespace(store=args.store, config=None, as_of_batch=None),
                                  history=True).snapshot
    _known_topics(args.store, read, topic_rules)
    cli.on_signals()
    if args.config:                          # an unreadable --config, its topicRetention rules
        from ..format.config import load_config
        from ..ops.topic_retention import parse_rules
        topic_rules = {**parse_rules(load_config(args.config).extra.get("topicRetention")), **topic_rules}
    if args.reserved_hours is None and not topic_rules:
        ap.error("--reserved-hours is required (or a topic's rule)")
    s = retention.expire(args.store, args.reserved_hours, args.now, args.dry_run, args.batch_id,
                         args.vacuum_retention_hours, quiet=args.quiet, topic_rules=topic_rules or None,
                         snapshot=read)
    if args.dry_run or not args.quiet:
        for q in s.get("queue_min_offsets", []):
            print(f"{'would move' if args.dry_run else 'moved'} min offset of {q['topic']}/{q['queue_id']}: "
                  f"{q['min_offset_before']} -> {q['min_offset']}")
        for p in s["removed"]:
            print(f"{'would remove' if args.dry_run else 'removed'} {p}")
    short = {k: v for k, v in s.items() if k not in ("removed", "housekeeping", "queue_min_offsets")}
    print("rocketlake: " + " ".join(f"{k}={v}" for k, v in short.items()), flush=True)
    if args.json_summary:
        with open(args.json_summary, "w") as fh:
            json.dump(s, fh, sort_keys=True)
            fh.write("\n")
    return int(ExitCode.OK)
