"""jobs/repair.py --store STORE [--dry-run | --apply] [--spark] [--threads N] [--config PROPS] [--json-summary F]

Rebuild every consume-queue file, every index file and the checkpoint of a store (a broker's
directory or a rocketlake store) from its CommitLog alone, one task per CommitLog segment, and
compare each with the file on disk: one line per file that is missing, truncated or differing
(the first differing unit, slot, entry or header field, and what it should be). --dry-run (the
default) writes nothing; --apply replaces only the files that differ, atomically (written beside,
fsynced, renamed, directory fsynced); on a rocketlake store as one batch (operation repair). A
broker directory whose lock file a running broker holds is refused. Runs in this process on
--threads threads by default, --spark as Spark tasks.
On a rocketlake store only the files of the committed snapshot are derived (never one an expiry
removed), from a CommitLog that verifies against its manifest rows; a broker's directory is derived
from its records up to the first damaged one (a "commitlog" line says where), and a size its files
cannot tell (no queue or index file left) must come from --config.
Exit status: 0 nothing differs (dry run) or repaired (apply), 1 a dry run found files to repair (or
an unexpected error), 2 bad arguments or a store that cannot be repaired as asked (a broker's
directory whose sizes need --config), 3 a running broker or another writer holds the store, or a
rocketlake store's CommitLog does not verify against its manifest (file and offset named; nothing
changed), or a queue file's units whose records an expiry deleted are damaged ("unrestorable": only
a copy of the file can restore them; nothing changed).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")      # (verify's reason: the tasks run their own threads)

from .common import ExitCode
from .failures import CHECK, REPAIR, guarded, worded
from .numargs import POSITIVE

from . import common as cli_common

__all__ = ["main"]

_REPAIRED = ("missing", "truncated", "differing", "extra", "unrestorable")   # (unrestorable: --apply refuses)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=cli_common.prog("repair.py"), description=cli_common.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="store root: a broker's storePathRootDir or a rocketlake store")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="report what differs; write nothing (the default)")
    mode.add_argument("--apply", action="store_true", help="replace the files that differ")
    ap.add_argument("--spark", action="store_true", help="one Spark task per commitlog segment")
    ap.add_argument("--threads", type=POSITIVE, help="threads in process (default: the processors this process may use)")
    ap.add_argument("--config", help="broker-style .properties (a broker's directory: file sizes, delay levels)")
    ap.add_argument("--batch-id", help="id of the repair batch on a rocketlake store (default repair-<now>-<seq>)")
    ap.add_argument("--json-summary", help="also write the summary as JSON to this file")
    ap.add_argument("--quiet", action="store_true", help="no progress lines (the per-file lines and the summary still print)")
    args = ap.parse_args(argv)
    from . import common as cli
    from ..ops import repair as repair_op
    spark = None

    def run() -> dict:
        nonlocal spark
        if args.apply:
            from ..io.condput import refuse_gs_store
            with worded(CHECK):              # as every writer words it (a dry run only reads)
                refuse_gs_store(args.store)
        cli.check_outputs(args.store, {"--json-summary": args.json_summary})
        cfg = cli.config_from_args(args)
        if args.spark:
            spark = cli.spark_session("repair")
        return repair_op.repair(args.store, cfg, apply=args.apply, spark=spark, threads=args.threads,
                                batch_id=args.batch_id, quiet=args.quiet, sizes_given=bool(args.config))
    try:
        return guarded(lambda: _emit(args, run()), REPAIR)
    finally:
        if spark is not None:
            spark.stop()


def _emit(args, s: dict) -> int:
    """Print what the repair found (stdout), its summary (stderr); the exit status."""
    for note in s["commitlog"]:
        print(f"commitlog {note}")
    for f in s["findings"]:
        if f["state"] not in ("ok",):
            print(f"{f['state']} {f['path']}: {f['detail']}".rstrip(": "))
    short = {k: v for k, v in s.items() if k not in ("findings", "replaced", "removed", "commitlog")}
    print("rocketlake: " + " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in short.items()),
          file=sys.stderr, flush=True)
    if args.json_summary:
        with open(args.json_summary, "w") as fh:
            json.dump({**short, "commitlog": s["commitlog"], "findings": [{k: f[k] for k in ("kind", "path", "state", "detail")}
                                             for f in s["findings"]],
                       "replaced": s.get("replaced", []), "removed": s.get("removed", [])}, fh, sort_keys=True)
            fh.write("\n")
    pending = sum(v for k, v in s["counts"].items() if k in _REPAIRED)
    return int(ExitCode.FAILED if pending and not args.apply else ExitCode.OK)
