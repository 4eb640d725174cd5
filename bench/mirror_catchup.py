"""Mirror catch-up against a plain copy, and the bytes one small cycle adds (no Spark).

    python bench/mirror_catchup.py [--messages 1000000] [--body 256] [--work DIR] [--baseline-src DIR]

A broker-format store of N synthetic messages (bench/datagen.py, ingested in this process,
64 MiB segments) stands for a broker's directory; its checkpoint's physicMsgTimestamp is moved
so that 99 % of it is safe. Timed, each with the broker's files first dropped from the page cache
(``POSIX_FADV_DONTNEED``, after a ``sync``: every run reads them from the disk): ``cp -r`` of its
commitlog/, consumequeue/, index/ and checkpoint (then ``sync``), before each round and after the last;
``mirror_broker`` catching up the same 99 % (fsync'd, the default) in a child process, first with
``--baseline-src``'s storelib (e.g. the main tree: the "before" of a change) if given, then with
this tree's (``--rounds`` rounds: medians); each child first mirrors 1 MB into a scratch store so
that its compiled kernels are loaded before the timing. Then the safe point moves to the end: the last cycle's new record bytes
against the bytes it added to the mirror's directory (st_blocks, Delta tables included). Prints
one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if "--child" not in sys.argv:            # (a child imports the storelib of its PYTHONPATH)
    sys.path[:0] = [ROOT, os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests")]


def disk_bytes(root: str) -> int:
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(root) for f in fs)


def uncache(root: str) -> None:
    """``sync``, then drop every file under ``root`` from the page cache (a timed run reads it from
    the disk, as a mirror catching up a broker's old segments does)."""
    subprocess.run(["sync"], check=True)
    for d, _, fs in os.walk(root):
        for f in fs:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def copy_s(broker: str, copy: str) -> float:
    """``cp -r`` of the broker's store files + ``sync``, seconds."""
    shutil.rmtree(copy, ignore_errors=True)
    os.makedirs(copy)
    uncache(broker)
    t = time.time()
    for part in ("commitlog", "consumequeue", "index", "checkpoint"):
        subprocess.run(["cp", "-r", os.path.join(broker, part), copy], check=True)
    subprocess.run(["sync"], check=True)
    return time.time() - t


def child(broker: str, store: str, scratch: str) -> int:
    """(a child process) Warm up on 1 MB, then catch ``store`` up with ``broker``: one JSON line."""
    from storelib.ops import mirror
    mirror.mirror_broker(broker, scratch, quiet=True, max_bytes=1 << 20)
    shutil.rmtree(scratch, ignore_errors=True)
    uncache(broker)
    t = time.time()
    batches = 0
    while mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed":
        batches += 1
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(mirror.__file__))))
    print(json.dumps({"s": time.time() - t, "batches": batches, "src": src}))
    return 0


def mirror_run(src: str, broker: str, store: str, work: str) -> dict:
    shutil.rmtree(store, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.path.join(src, "tests")]))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", broker, store,
                        os.path.join(work, "scratch")], env=env, cwd=src, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"the mirror ({src}) failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if os.path.realpath(out["src"]) != os.path.realpath(src):
        raise RuntimeError(f"the child imported storelib from {out['src']}, not {src}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=256)
    ap.add_argument("--work", default="/tmp/rocketlake-mirror-bench")
    ap.add_argument("--baseline-src", default=None, help="a source tree (e.g. main's) whose mirror is timed too")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of cp, baseline, this (medians; cp once more last)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (its broker store is reused)")
    ap.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    import numpy as np
    from support.mirrorhelp import records, set_safe
    broker, mirror, copy = (os.path.join(a.work, x) for x in ("broker", "mirror", "copy"))
    ingest_s = None
    if not (a.keep and os.path.exists(os.path.join(broker, "checkpoint"))):
        import datagen
        from storelib.format.config import load_config
        from storelib.ingest.driver import run_ingest
        from storelib.runtime.localrun import LocalSession
        shutil.rmtree(a.work, ignore_errors=True)
        datagen.write_parquet(os.path.join(a.work, "in"), a.messages, a.body, files=4)
        cfg = load_config(None, {"mappedFileSizeCommitLog": 64 << 20})
        t = time.time()
        run_ingest(LocalSession(), broker, os.path.join(a.work, "in"), "parquet", cfg, batch_id="b", quiet=True)
        ingest_s = time.time() - t
        shutil.rmtree(os.path.join(a.work, "in"))
        shutil.rmtree(os.path.join(broker, "_rocketlake"))      # a broker's directory: no manifest
    _, ends, ts = records(broker)
    cut = int(len(ts) * 0.99)
    t_cut = int(np.sort(ts)[cut])
    first_unsafe = int(np.flatnonzero(ts >= t_cut)[0])
    set_safe(broker, t_cut)
    caught = int(ends[first_unsafe - 1])
    cps, runs = [], {}
    for k in range(a.rounds):                # cp, (baseline,) this; ...; cp
        cps.append(copy_s(broker, copy))
        copied = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(copy) for f in fs)
        shutil.rmtree(copy)
        if a.baseline_src:
            runs.setdefault("baseline", []).append(mirror_run(os.path.abspath(a.baseline_src), broker, mirror, a.work))
            shutil.rmtree(mirror)
        runs.setdefault("this", []).append(mirror_run(ROOT, broker, mirror, a.work))
        if k < a.rounds - 1:
            shutil.rmtree(mirror)
    cps.append(copy_s(broker, copy))
    shutil.rmtree(copy)
    cp_s = float(np.median(cps))
    before = disk_bytes(mirror)
    set_safe(broker, int(ts.max()) + 1)
    from storelib.ops.mirror import mirror_broker
    t = time.time()
    last = mirror_broker(broker, mirror, quiet=True)
    last_s = time.time() - t
    added = disk_bytes(mirror) - before
    mb = caught / 2**20
    out = {"messages": a.messages, "body": a.body, "ingest_s": ingest_s and round(ingest_s, 1),
           "catchup_record_mb": round(mb, 1), "cp_files_mb": round(copied / 2**20, 1),
           "cp_sync_s": [round(x, 2) for x in cps],
           "cp_mb_s_of_records": round(mb / cp_s, 1), "loadavg": os.getloadavg(),
           "last_cycle_new_record_bytes": last["record_bytes"], "last_cycle_added_disk_bytes": added,
           "last_cycle_s": round(last_s, 3)}
    for name, rs in runs.items():
        s = float(np.median([r["s"] for r in rs]))
        out[name] = {"batches": rs[0]["batches"], "mirror_s": round(s, 2), "mirror_s_all": [round(r["s"], 2) for r in rs],
                     "mirror_mb_s": round(mb / s, 1), "mirror_over_cp_sync": round(cp_s / s, 2)}
    # (the keys the bench's summary reads: this tree's)
    out.update(catchup_batches=out["this"]["batches"], mirror_s=out["this"]["mirror_s"],
               mirror_mb_s=out["this"]["mirror_mb_s"])
    print(json.dumps(out))
    shutil.rmtree(mirror, ignore_errors=True)
    if not a.keep:
        shutil.rmtree(a.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
