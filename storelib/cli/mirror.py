"""rocketlake mirror --from BROKER_STORE_DIR --store STORE [--once | --every SECONDS]

Mirror a running RocketMQ broker's store into a rocketlake store: each cycle copies the CommitLog
records the broker added since the previous cycle, up to its safe point (whole records stored
before the broker's last flush, docs/DESIGN.md), derives their consume-queue units and index
entries, and commits them as one batch, as an ingest commits. The broker's directory is only read
(no lock, no abort file, no mapping). What the broker deletes under its retention stays in the
mirror until `rocketlake expire` removes it. --once runs cycles until the mirror has caught up,
then exits; --every SECONDS runs a cycle every SECONDS until interrupted (SIGINT/SIGTERM end it
between cycles or abandon the one running: a cycle never commits half a batch).
With --every, a cycle that finds another writer on the store (an expire of the mirror, a repair)
commits nothing and says so on stderr; the next cycle runs as planned.
Exit status: 0 done, 130/143 interrupted (SIGINT/SIGTERM), 1 failed (a damaged broker record,
an unexpected error), 2 bad arguments (not a broker directory, a store that is no mirror, a
broker whose CommitLog no longer starts at 0 on the first cycle, a FIFO or device where a broker's
file is, a store another `mirror --every` on this host still mirrors), 3 the broker's CommitLog no
longer matches what the mirror committed, or (--once) another writer holds the store.
"""
import argparse
import json
import sys
import time

from . import common as cli_common
from .failures import CHECK, guarded
from .numargs import POSITIVE, seconds

__all__ = ["main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=cli_common.prog("mirror.py"), description=cli_common.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="broker", required=True, help="the broker's storePathRootDir (a local directory)")
    ap.add_argument("--store", required=True, help="the mirror: a rocketlake store (new, or one this mirror wrote)")
    when = ap.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="catch up, then exit (the default)")
    when.add_argument("--every", type=seconds, metavar="SECONDS", help="a cycle every SECONDS until interrupted")
    ap.add_argument("--max-batch-mb", type=POSITIVE, default=512, help="record bytes one batch copies at most (MiB)")
    ap.add_argument("--config", help="broker-style .properties (file sizes, delay levels) for the first cycle")
    ap.add_argument("--quiet", action="store_true", help="no progress lines (errors and each summary still print)")
    args = ap.parse_args(argv)
    return guarded(lambda: _cycles(args), CHECK, interrupted=lambda e: cli_common.interrupted(
        e, f"every committed mirror batch of {args.store} is intact; rerun the same command to go on"))


def _cycles(args) -> int:
    """Mirror cycles: until caught up (--once), or one every --every seconds."""
    from ..errors import ConcurrentWriteError
    from ..ops.mirror import mirror_broker
    from ..runtime import interrupts
    cfg = cli_common.config_from_args(args) if args.config else None
    while True:
        started = time.time()
        while True:                  # catch up: batches until one finds nothing new
            interrupts.reset()       # a signal before this cycle's commit abandons the cycle
            try:
                s = mirror_broker(args.broker, args.store, cfg, quiet=args.quiet, max_bytes=args.max_batch_mb << 20,
                                  every=args.every)
            except ConcurrentWriteError as e:
                if args.every is None:
                    raise
                # another writer (an expire of the mirror's history, a repair) had the store: this
                # cycle committed nothing and changed nothing, the next one starts over from the store
                print(f"rocketlake: cycle skipped, concurrent writer: {e.line()}; the next cycle in "
                      f"{args.every:g}s", file=sys.stderr, flush=True)
                break
            print("rocketlake: " + json.dumps(s, sort_keys=True), flush=True)
            signum = interrupts.pending()
            if signum is not None:   # ... after it: the batch was finished first; stop here
                name = {2: "SIGINT", 15: "SIGTERM"}.get(signum, f"signal {signum}")
                print(f"{name} arrived after batch {s['batch_id']} was committed: it is in the mirror; "
                      "stopped", file=sys.stderr, flush=True)
                return 0
            if s["status"] != "committed" or s["to"] - s["from"] < (args.max_batch_mb << 20) // 2:
                break
        if args.every is None:
            return 0
        interrupts.reset()           # a signal while waiting ends the run now (a committed cycle deferred them)
        time.sleep(max(0.0, args.every - (time.time() - started)))


if __name__ == "__main__":
    sys.exit(main())
