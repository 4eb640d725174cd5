"""python jobs/demo_report.py --store STORE [--config FILE] [--summary FILE]

Prints what `make demo` produced: the ingest summary, what the Delta tables say the store holds,
and a few lookups answered from the store files in-process (no Spark).
"""
import argparse
import json
import os


from ..table import manifest
from ..read import query
from ..io import storage
from .common import ExitCode
from ..format.config import load_config
from ..format import paths


__all__ = ["main"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--config")
    ap.add_argument("--summary")
    a = ap.parse_args()
    cfg = load_config(a.config)
    store = storage.Store(a.store)
    if a.summary and os.path.exists(a.summary):
        s = json.load(open(a.summary))
        print(f"\ningest: {s['messages']} messages, {s['segments']} commitlog segment(s), "
              f"{s['record_bytes']} record bytes, {s['index_entries']} index entries in {s['seconds']} s "
              f"({s['msgs_per_s']} msgs/s)")
    snap = manifest.load_snapshot(store)
    kinds = {}
    for r in snap.files.values():
        kinds.setdefault(r["kind"], [0, 0])
        kinds[r["kind"]][0] += 1
        kinds[r["kind"]][1] += r["valid_bytes"]
    print(f"manifest (batch {snap.batch['batch_id']}, seq {snap.batch_seq}):")
    for k, (n, b) in sorted(kinds.items()):
        print(f"  {k:13s} {n:4d} file(s), {b:10d} valid bytes")
    reader = query.StoreReader(store, cfg)
    print(f"max commitlog offset: {reader.get_max_phy_offset()}")
    page = reader.find_by_key("orders", "hot-key", limit=3)
    print(f"key lookup orders/hot-key: {page.total} message(s); first 3 offsets "
          f"{[m['commitlog_offset'] for m in page.messages]}")
    first = reader.get_by_queue_offset("orders", 0, 0, 1)
    if first:
        m = first[0]
        print(f"orders/0 offset 0: msg id {m['msg_id']}, stored at {m['store_timestamp']}")
        again = reader.get_by_msg_id(m["msg_id"])
        print(f"by msg id -> commitlog offset {again['commitlog_offset']}, topic {again['topic']}")
    print(f"\nstore files under {a.store}/ (a RocketMQ storePathRootDir); Delta tables under "
          f"{a.store}/{paths.META_DIR}/")
    return int(ExitCode.OK)
