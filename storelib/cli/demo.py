"""rocketlake demo [--store demo-store] [--config FILE] [--summary FILE]

Ingests the bundled sample (samples/messages.jsonl, 2,000 messages, small files from
conf/demo.properties) into STORE unless it already holds a store, then prints what it holds: the
ingest summary, what the Delta tables say, and a few lookups answered from the store files
in-process (no Spark). `make demo` ingests with spark-submit first, then runs the report.
"""
import argparse
import json
import os


from ..table.snapshots import open_snapshot
from ..read import query
from ..io import storage
from .common import ExitCode
from .failures import INSPECT, guarded
from ..format.config import load_config
from ..format import paths


__all__ = ["main"]


def main(argv=None) -> int:
    from . import common as cli
    ap = argparse.ArgumentParser(prog=cli.prog("demo_report.py"), description=cli.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="demo-store", help="store to make (if absent) and look at")
    ap.add_argument("--config", help="default: conf/demo.properties for a new store, else the store's own")
    ap.add_argument("--summary", help="the ingest's --json-summary file to print")
    a = ap.parse_args(argv)
    a.summary = a.summary or f"{a.store.rstrip('/')}.summary.json"
    return guarded(lambda: _demo(a), INSPECT)


def _demo(a) -> int:
    """Make the store if absent, then print what it holds."""
    if not os.path.isdir(os.path.join(a.store, paths.META_DIR)):
        from . import ingest
        code = ingest.main(["--store", a.store, "--input", os.path.join(paths.PROJECT_ROOT, "samples", "messages.jsonl"),
                            "--config", a.config or os.path.join(paths.PROJECT_ROOT, "conf", "demo.properties"),
                            "--local", "auto", "--quiet", "--json-summary", a.summary])
        if code:
            return code
    cfg = load_config(a.config) if a.config else None
    store = storage.Store(a.store)
    if a.summary and os.path.exists(a.summary):
        s = json.load(open(a.summary))
        print(f"\ningest: {s['messages']} messages, {s['segments']} commitlog segment(s), "
              f"{s['record_bytes']} record bytes, {s['index_entries']} index entries in {s['seconds']} s "
              f"({s['msgs_per_s']} msgs/s)")
    snap = open_snapshot(store)
    kinds: dict[str, list[int]] = {}
    for r in snap.files.values():
        kinds.setdefault(r.kind, [0, 0])
        kinds[r.kind][0] += 1
        kinds[r.kind][1] += r.valid_bytes
    print(f"manifest (batch {snap.batch_id}, seq {snap.batch_seq}):")
    for k, (n, b) in sorted(kinds.items()):
        print(f"  {k:13s} {n:4d} file(s), {b:10d} valid bytes")
    reader = query.open_store(a.store, None, cfg)
    print(f"max commitlog offset: {reader.get_max_phy_offset()}")
    page = reader.find_by_key("orders", "hot-key", limit=3)
    print(f"key lookup orders/hot-key: {page.total} message(s); first 3 offsets "
          f"{[m['commitlog_offset'] for m in page.messages]}")
    first = reader.get_by_queue_offset("orders", 0, 0, 1)
    if first:
        m = first[0]
        print(f"orders/0 offset 0: msg id {m['msg_id']}, stored at {m['store_timestamp']}")
        again = reader.get_by_msg_id(m["msg_id"])
        print("by msg id -> " + (f"commitlog offset {again['commitlog_offset']}, topic {again['topic']}"
                                 if again is not None else "not found"))
    print(f"\nstore files under {a.store}/ (a RocketMQ storePathRootDir); Delta tables under "
          f"{a.store}/{paths.META_DIR}/")
    return int(ExitCode.OK)
