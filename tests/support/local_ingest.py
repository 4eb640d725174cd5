"""Run one ingest, or one expiry, in this process without Spark (storelib.runtime.localrun): the suite's
fast end-to-end path, also under fault points and the crash simulator.

    python tests/support/local_ingest.py ingest STORE INPUT CONFIG BATCH_ID   # exit status as jobs/ingest.py
    python tests/support/local_ingest.py expire STORE HOURS NOW_MS
    python tests/support/local_ingest.py adopt STORE CONFIG                    # a broker's directory, in place
    python tests/support/local_ingest.py repair STORE [CONFIG]                 # repair --apply (CONFIG: a broker's)
    python tests/support/local_ingest.py mirror STORE BROKER_DIR               # one mirror cycle

Prints the summary as one JSON line on stdout; errors on stderr.
"""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def main(argv: list) -> int:
    from storelib.cli import common as cli
    from storelib.format.config import load_config
    try:
        if argv[0] == "ingest":
            from storelib.ingest.driver import run_ingest
            from storelib.runtime.localrun import LocalSession
            store, path, config, batch = argv[1:5]
            fmt = "parquet" if path.endswith(".parquet") else "jsonl"
            out = run_ingest(LocalSession(), store, path, fmt, load_config(config), batch_id=batch, quiet=True)
        elif argv[0] == "expire":
            from storelib.ops.expire import expire
            store, hours, now = argv[1:4]
            out = expire(store, float(hours), now_ms=int(now), quiet=True)
        elif argv[0] == "adopt":
            from storelib.ops.adopt import adopt
            store, config = argv[1:3]
            out = adopt(None, store, store, load_config(config), quiet=True)
        elif argv[0] == "repair":
            from storelib.ops.repair import repair
            out = repair(argv[1], load_config(argv[2]) if len(argv) > 2 else None, apply=True, threads=1, quiet=True)
            out.pop("findings", None)
        elif argv[0] == "mirror":
            from storelib.ops.mirror import mirror_broker
            out = mirror_broker(argv[2], argv[1], quiet=True)
        else:
            print(f"unknown command {argv[0]!r}", file=sys.stderr)
            return 2
    except BaseException as e:  # noqa: BLE001 - the job's exit status, as the jobs report it
        print(f"{type(e).__module__}.{type(e).__name__}: {e}", file=sys.stderr)
        return int(cli.exit_code(e))
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
