"""Kernels compiled once per host, not per job: one small ingest (storelib.runtime.localrun, no JVM) run
from storelib shipped as a zip, as a cluster's executors run it, in two "application" folders
in turn. The first run finds no compiled kernels (cold), the second, from another folder, finds
the first one's (warm: storelib.compute.kernelcache keys them by source, not by the zip's path).

    python bench/kernel_cache.py [INPUT.jsonl CONFIG.properties]

Prints one line per run: seconds for the imports and the ingest, and the cache's size. Then the
same two runs with numba's own zip locator (``NUMBA_CACHE_LOCATOR_CLASSES=ZipCacheLocator``), the
baseline: its cache is keyed by the zip's path, so the second folder compiles again.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = r"""
import sys, time
t0 = time.time()
import storelib
assert ".zip" in storelib.__file__, storelib.__file__
from storelib.format.config import load_config
from storelib.ingest.driver import run_ingest
from storelib.runtime.localrun import LocalSession
t1 = time.time()
run_ingest(LocalSession(), sys.argv[1], sys.argv[2], "jsonl", load_config(sys.argv[3]), batch_id="k", quiet=True)
print(f"imports={t1 - t0:.2f}s ingest={time.time() - t1:.2f}s")
"""


def zip_storelib(folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "storelib.zip")
    with zipfile.ZipFile(path, "w") as zf:
        pkg = os.path.join(ROOT, "storelib")
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py"):
                zf.write(os.path.join(pkg, name), f"storelib/{name}")
    return path


def main(argv) -> int:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from support import goldenlib
    g = os.path.join(goldenlib.golden_root(), "small-roll")
    inp = argv[0] if argv else os.path.join(g, "messages.jsonl")
    tmp = tempfile.mkdtemp(prefix="rocketlake-kcache-")
    conf = argv[1] if len(argv) > 1 else os.path.join(tmp, "small.properties")
    if len(argv) < 2:
        with open(conf, "w") as fh:
            fh.write("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=600\nmaxHashSlotNum=64\nmaxIndexNum=256\n")
    cache = os.path.join(tmp, "cache")
    runs = (("cold", {}), ("warm, another folder", {}),
            ("numba default, cold", {"NUMBA_CACHE_LOCATOR_CLASSES": "ZipCacheLocator"}),
            ("numba default, another folder", {"NUMBA_CACHE_LOCATOR_CLASSES": "ZipCacheLocator"}))
    for k, (label, extra) in enumerate(runs):
        z = zip_storelib(os.path.join(tmp, f"app-{k}"))
        env = {k2: v for k2, v in os.environ.items() if k2 != "NUMBA_CACHE_DIR"}
        env.update(PYTHONPATH=z, ROCKETLAKE_KERNEL_CACHE=cache, XDG_CACHE_HOME=os.path.join(tmp, "xdg"), **extra)
        r = subprocess.run([sys.executable, "-c", RUN, os.path.join(tmp, f"store-{k}"), inp, conf],
                           env=env, capture_output=True, text=True, cwd=tmp)
        if r.returncode:
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        where = os.path.join(tmp, "xdg") if extra else cache
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(where) for f in fs)
        print(f"{label}: {r.stdout.strip()} cache={size / 1e6:.1f}MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
