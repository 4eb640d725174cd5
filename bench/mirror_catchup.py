"""Mirror catch-up against a plain copy, and the bytes one small cycle adds (no Spark).

    python bench/mirror_catchup.py [--messages 1000000] [--body 256] [--work DIR]

A broker-format store of N synthetic messages (bench/datagen.py, ingested in this process,
64 MiB segments) stands for a broker's directory; its checkpoint's physicMsgTimestamp is moved
so that 99 % of it is safe. Timed: ``cp -r`` of its commitlog/, consumequeue/, index/ and
checkpoint (then ``sync``), and ``mirror_broker`` catching up the same 99 % (fsync'd, the
default). Then the safe point moves to the end: the last cycle's new record bytes against the
bytes it added to the mirror's directory (st_blocks, Delta tables included). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def disk_bytes(root: str) -> int:
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(root) for f in fs)


def set_safe(broker: str, t: int) -> None:
    path = os.path.join(broker, "checkpoint")
    raw = bytearray(open(path, "rb").read())
    raw[0:8] = struct.pack(">q", t)
    open(path, "wb").write(bytes(raw))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--work", default="/tmp/rocketlake-mirror-bench")
    a = ap.parse_args()
    import numpy as np
    import datagen
    from storelib.format.config import load_config
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    from storelib.ops.mirror import mirror_broker
    shutil.rmtree(a.work, ignore_errors=True)
    broker, mirror, copy = (os.path.join(a.work, x) for x in ("broker", "mirror", "copy"))
    datagen.write_parquet(os.path.join(a.work, "in"), a.messages, a.body, files=4)
    cfg = load_config(None, {"mappedFileSizeCommitLog": 64 << 20})
    t = time.time()
    run_ingest(LocalSession(), broker, os.path.join(a.work, "in"), "parquet", cfg, batch_id="b", quiet=True)
    ingest_s = time.time() - t
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from support.mirrorhelp import records
    _, ends, ts = records(broker)
    cut = int(len(ts) * 0.99)
    t_cut = int(np.sort(ts)[cut])
    first_unsafe = int(np.flatnonzero(ts >= t_cut)[0])
    set_safe(broker, t_cut)
    os.makedirs(copy)
    subprocess.run(["sync"], check=True)
    t = time.time()
    for part in ("commitlog", "consumequeue", "index", "checkpoint"):
        subprocess.run(["cp", "-r", os.path.join(broker, part), copy], check=True)
    cp_s = time.time() - t
    subprocess.run(["sync"], check=True)
    cp_sync_s = time.time() - t
    copied = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(copy) for f in fs)
    t = time.time()
    batches = 0
    while True:
        s = mirror_broker(broker, mirror, quiet=True)
        if s["status"] != "committed":
            break
        batches += 1
    mirror_s = time.time() - t
    caught = int(ends[first_unsafe - 1])
    before = disk_bytes(mirror)
    set_safe(broker, int(ts.max()) + 1)
    t = time.time()
    last = mirror_broker(broker, mirror, quiet=True)
    last_s = time.time() - t
    added = disk_bytes(mirror) - before
    print(json.dumps({
        "messages": a.messages, "body": a.body, "ingest_s": round(ingest_s, 1),
        "catchup_record_mb": round(caught / 2**20, 1), "catchup_batches": batches,
        "mirror_s": round(mirror_s, 2), "mirror_mb_s": round(caught / 2**20 / mirror_s, 1),
        "cp_files_mb": round(copied / 2**20, 1), "cp_s": round(cp_s, 2), "cp_sync_s": round(cp_sync_s, 2),
        "cp_mb_s_of_records": round(caught / 2**20 / cp_sync_s, 1),
        "last_cycle_new_record_bytes": last["record_bytes"], "last_cycle_added_disk_bytes": added,
        "last_cycle_s": round(last_s, 3)}))
    shutil.rmtree(a.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
