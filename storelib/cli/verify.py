"""jobs/verify.py --store STORE [--deep] [--threads N] [--spark] [--as-of-batch B | --version V] [--json]

Check every file of a store (rocketlake or a broker's directory): one line per problem
``<path>@<offset>: <what>`` on stdout, a summary on stderr (``record_gb_per_s``: valid record bytes
per second), exit status 1 if any problem. The same checks as ``jobs/inspect.py verify``; this
entry point runs them in this process on ``--threads`` threads by default (the checks' kernels and
hashing release the GIL, and no JVM has to start), ``--spark`` as Spark tasks.
"""
import argparse
import gc
import os

# numpy's OpenBLAS would start a thread per core that spins after any BLAS call: verify runs its
# own threads (set before numpy is first imported)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


from .common import ExitCode
from .failures import VERIFY, guarded
from .numargs import POSITIVE

from . import common as _cli

__all__ = ["main"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=_cli.prog("verify.py"), description=_cli.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="store root: a local path or s3://, gs://, hdfs:// URI")
    ap.add_argument("--deep", action="store_true", help="also cross-file checks (CQ/index -> commitlog) and body CRCs")
    ap.add_argument("--threads", type=POSITIVE, help="threads in process (default: the processors this process may use)")
    ap.add_argument("--spark", action="store_true", help="run the checks as Spark tasks")
    ap.add_argument("--as-of-batch", help="batch id or sequence number to check (default: the latest)")
    ap.add_argument("--version", type=int, help="checkpoints-table Delta version to check")
    ap.add_argument("--config", help="broker-style .properties for a broker's directory (default: the store's own "
                                     "configuration, else the sizes read off its files)")
    ap.add_argument("--json", action="store_true", help="the summary as JSON")
    args = ap.parse_args(argv)
    from . import common as cli
    from ..ops import deepverify as verify
    gc.freeze()          # the imports' objects are never garbage: the collections of the run skip them
    spark = None

    def run() -> int:
        nonlocal spark
        res = cli.store_snapshot(args, say=True)    # not a store: exit 2 before anything starts
        if args.spark:
            spark = cli.spark_session("verify", reach={"--store": args.store})
        rep = verify.verify_store(args.store, res.config, deep=args.deep, spark=spark,
                                  as_of_batch=args.as_of_batch, version=args.version, threads=args.threads,
                                  snap=res.snapshot)
        rep.emit(args.json)
        return int(ExitCode.OK if rep.ok else ExitCode.FAILED)
    try:
        return guarded(run, VERIFY, interrupted=lambda e: cli.interrupted(e, "verify changes nothing; rerun it"))
    finally:
        if spark is not None:
            spark.stop()
