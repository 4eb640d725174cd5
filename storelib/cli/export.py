"""python jobs/export.py --store STORE --to DIR [--as-of-batch B]

Materializes a committed snapshot as a broker-ready RocketMQ store directory (commitlog/,
consumequeue/, index/, checkpoint, rocketlake.properties: the sizes the files were written
with, as a broker's properties; config/delayOffset.json and config/timercheck: where delivery of
scheduled messages had got as of the batch; no _rocketlake/), byte-identical to a RocketMQ broker's files
for the same messages, every file checked against its manifest checksum. On object stores, where
rocketlake keeps files as per-batch fragments (storelib.io.fragments), this is how a broker gets its
files. DIR must be empty or absent. Runs on the driver only (no Spark).
Exit status (storelib.cli.common.ExitCode): 0 done, 1 failed (damaged store), 2 usage (target not empty).
"""
import argparse
import json

from .common import ExitCode
from .failures import CHECK, guarded


from . import common as _cli

__all__ = ["main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=_cli.prog("export.py"), description=_cli.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="store root: a local path or s3://, gs://, hdfs:// URI")
    ap.add_argument("--to", required=True, help="target directory (or store URI), empty or absent")
    ap.add_argument("--as-of-batch", help="batch id or sequence number (default: the latest)")
    ap.add_argument("--no-fsync", action="store_true", help="do not fsync the exported files")
    args = ap.parse_args(argv)
    return guarded(lambda: _export(args), CHECK, interrupted=lambda e: _cli.interrupted(
        e, f"nothing was exported ({args.to} is left as it was); rerun the same command"))


def _export(args) -> int:
    from ..io.condput import refuse_gs_store
    from ..ops import scheduled
    from ..table import export
    from . import common as cli
    refuse_gs_store(args.to)                # a target on gs://: refused before the store is read
    res = cli.store_snapshot(argparse.Namespace(store=args.store, config=None, as_of_batch=args.as_of_batch))  # a store?
    as_of = int(args.as_of_batch) if args.as_of_batch and args.as_of_batch.isdigit() else args.as_of_batch
    s = export.export_store(args.store, args.to, as_of, durable=not args.no_fsync, snap=res.snapshot,
                             config_files=scheduled.export_config_files)
    print("rocketlake: " + json.dumps(s, sort_keys=True), flush=True)
    return int(ExitCode.OK)
