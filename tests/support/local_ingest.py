"""Run one ingest, or one expiry, in this process without Spark (storelib.runtime.localrun): the suite's
fast end-to-end path, also under fault points and the crash simulator.

    python tests/support/local_ingest.py ingest STORE INPUT CONFIG BATCH_ID   # exit status as jobs/ingest.py
    python tests/support/local_ingest.py expire STORE HOURS NOW_MS [TOPIC=HOURS,...]   # HOURS "-": none
    python tests/support/local_ingest.py sink STORE INPUT CONFIG QUERY MICRO_BATCH     # the streaming sink's commit
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


def sink_commit(store: str, path: str, config: str, query: str, micro_batch: str) -> dict:
    """Micro-batch ``micro_batch`` of streaming query ``query`` through the ``rocketlake`` sink as
    Spark runs it, without Spark: each half of the input staged as one task's part under
    ``_rocketlake/incoming/``, then the writer's commit (``ingest_staged``) on the driver."""
    from storelib.codec.messages import MESSAGE_SCHEMA
    from storelib.ingest.sink import _Parts, stream_batch_id, stream_fingerprint
    from storelib.ingest.inputs import jsonl_to_table
    table = jsonl_to_table(path).select(MESSAGE_SCHEMA.names)
    half = table.num_rows // 2
    writer = _Parts({"path": store, "config": config}, owner=query)
    parts = [writer._stage(iter(t.to_batches())) for t in (table.slice(0, half), table.slice(half))]
    for k, p in enumerate(parts):
        parts[k] = type(p)(k, p.rel, p.rows)
    bid = stream_batch_id(query, int(micro_batch))
    # the entry Spark's offset log would hold for it: the same on every run, as on a replay
    offsets = f'v1\n{{"batchWatermarkMs":0}}\n{{"{query}":{micro_batch}}}\n'.encode()
    out = writer._ingest(parts, bid, stream_fingerprint(bid, offsets))
    return out if out is not None else {"status": "empty"}


def main(argv: list) -> int:
    from storelib.cli import common as cli
    from storelib.format.config import load_config
    if os.environ.get("ROCKETLAKE_TEST_CACHE_REBASE_SHARE"):   # tests/table/test_snapcache.py: a new base
        from storelib.table import snapcache
        snapcache.REBASE_SHARE = float(os.environ["ROCKETLAKE_TEST_CACHE_REBASE_SHARE"])
    try:
        if argv[0] == "ingest":
            from storelib.ingest.driver import run_ingest
            from storelib.io import fragments
            # tests/e2e/test_s3_merge_kills.py: extents merged within a few batches of a small store
            if os.environ.get("ROCKETLAKE_TEST_MAX_EXTENTS"):
                fragments.MAX_EXTENTS = int(os.environ["ROCKETLAKE_TEST_MAX_EXTENTS"])
                fragments.MERGE_SHARE = float(os.environ.get("ROCKETLAKE_TEST_MERGE_SHARE", fragments.MERGE_SHARE))
            # tests/e2e/test_extent_lists_s3.py: extent lists written within a few batches
            if os.environ.get("ROCKETLAKE_TEST_INLINE_EXTENTS"):
                from storelib.io import extentlists
                extentlists.INLINE_EXTENTS = int(os.environ["ROCKETLAKE_TEST_INLINE_EXTENTS"])
            # tests/e2e/test_crash_compaction.py: the manifest table compacted in a small store
            if os.environ.get("ROCKETLAKE_TEST_COMPACT_MIN_ROWS"):
                from storelib.table import manifest
                manifest.COMPACT_MIN_ROWS = int(os.environ["ROCKETLAKE_TEST_COMPACT_MIN_ROWS"])
            # ... and its checkpoints table's files merged
            if os.environ.get("ROCKETLAKE_TEST_MERGE_MIN_FILES"):
                from storelib.table import ckmerge
                ckmerge.MERGE_MIN_FILES = int(os.environ["ROCKETLAKE_TEST_MERGE_MIN_FILES"])
            from storelib.runtime.localrun import LocalSession
            store, path, config, batch = argv[1:5]
            fmt = "parquet" if path.endswith(".parquet") else "jsonl"
            out = run_ingest(LocalSession(), store, path, fmt, load_config(config), batch_id=batch, quiet=True)
        elif argv[0] == "sink":
            out = sink_commit(*argv[1:6])
        elif argv[0] == "expire":
            from storelib.ops.expire import expire
            from storelib.ops.topic_retention import parse_rules
            store, hours, now = argv[1:4]
            rules = parse_rules(argv[4]) if len(argv) > 4 else None
            # tests/ops/test_object_sweep.py: every replaced manifest data file vacuumed, then swept
            vacuum = int(os.environ.get("ROCKETLAKE_TEST_VACUUM_HOURS", "168"))
            out = expire(store, None if hours == "-" else float(hours), now_ms=int(now), quiet=True, topic_rules=rules,
                         vacuum_retention_hours=vacuum)
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
