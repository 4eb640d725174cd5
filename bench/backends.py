"""A 1,000-message batch into a 2M-message store on each storage backend (issue 39, "How fast").

    python bench/backends.py                       # 2M-message store, 1,000-message batch (make bench-backends)
    python bench/backends.py --store-n 200000      # a smaller store

The base store (``--store-n`` messages, default file sizes) is ingested without Spark
(``storelib.runtime.localrun``: the write and commit code of a Spark job) on each backend: a
local disk, a moto S3 server, S3Proxy 4.0 (filesystem-nio2) and Hadoop's HDFS mini cluster (three
DataNodes); that is not timed. It cannot be built once and copied: on S3 and HDFS a store keeps
its files as bounded objects listed in its manifest rows (``storelib.io.fragments``), while a local
store's rows name whole files (and a copy would upload each preallocated 1 GiB segment and 400 MB
index file whole). Then the same batch (``--batch-n`` messages, one Parquet file) is ingested into
each, the local disk's figure being the baseline of the same run.

Per backend: wall time of the batch, bytes uploaded and downloaded per record byte of the batch,
requests by kind. The batch runs in a child process (its wall time taken inside it, around the
ingest, after the same batch into a scratch local store warmed it up), so that every request of it,
deltalake's too, can go through a counting proxy in this one.
  * S3 (moto, S3Proxy): every request of the batch (pyarrow's S3 client for the store's files,
    deltalake's for the Delta commits, the conditional-put probe) goes through the counting proxy
    of ``bench/s3bench.py``, which streams responses through: PUT/UploadPart bodies uploaded, GET
    bodies downloaded, requests by kind (GET, PUT, COPY, HEAD, LIST, DELETE, POST) for the Delta
    log, the Delta tables' data files and the store's files apart. S3Proxy runs with
    ``s3proxy.authorization=none`` here (the proxy in between forwards what the client signed,
    yet S3Proxy's SigV4 check rejected the uploads).
  * HDFS: the calls and bytes of ``hdfs_native.Client`` (counted around its Python methods in the
    child: creates, reads, listings, deletes...). The Delta commits go through deltalake's own
    HDFS client (Rust) and are not in these counts.
  * local disk: none counted (no requests), only wall time.
The figures are printed as a table and saved as JSON under bench/results/. The machine may be
loaded: compare the ratios to the local-disk figure, not the absolute times.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE, os.path.join(ROOT, "tests", "support"), os.path.join(ROOT, "tests")]


class HdfsCounts:
    """Calls and bytes of ``hdfs_native``'s Python client (its methods wrapped in this process)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.bytes = {"uploaded": 0, "downloaded": 0}
        self.requests: dict = {}

    def install(self):
        import hdfs_native as h
        counts = self

        def wrap(cls, name, kind=None, by=None):
            orig = getattr(cls, name)

            def f(self, *a, **k):
                counts.requests[by or name] = counts.requests.get(by or name, 0) + 1
                out = orig(self, *a, **k)
                if kind == "downloaded":
                    counts.bytes[kind] += len(out)
                elif kind == "uploaded":
                    counts.bytes[kind] += int(out or 0)
                return out
            setattr(cls, name, f)
        for name in ("get_file_info", "list_status", "read", "create", "append", "mkdirs", "rename", "delete",
                     "set_times", "get_content_summary"):
            wrap(h.Client, name)
        wrap(h.FileReader, "read", "downloaded", "block read")
        wrap(h.FileReader, "read_range", "downloaded", "block read")
        wrap(h.FileWriter, "write", "uploaded", "block write")

    def snapshot(self) -> dict:
        return {"bytes": dict(self.bytes), "requests": dict(self.requests)}


def _inputs(workdir: str, store_n: int, batch_n: int) -> tuple:
    import pyarrow.parquet as pq
    import datagen
    out = []
    for name, n, seed, start in (("base", store_n, 7, 1717200000000), ("batch", batch_n, 1000, 1817200000000)):
        d = os.path.join(workdir, f"in-{name}-{n}")
        if not os.path.isdir(d):
            os.makedirs(d + ".tmp", exist_ok=True)
            pq.write_table(datagen.generate(n, 256, seed, start_ms=start), os.path.join(d + ".tmp", "part-00000.parquet"))
            os.rename(d + ".tmp", d)
        out.append(d)
    return tuple(out)


def _ingest(uri: str, src: str, batch_id: str) -> dict:
    from storelib.format.config import StoreConfig
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    return run_ingest(LocalSession(), uri, src, "parquet", StoreConfig(), batch_id=batch_id, quiet=True)


def _child(uri: str, batch: str, hdfs: bool) -> int:
    """The measured batch (``--measure``): its result, wall time and, on HDFS, the client's counts
    as one JSON line on stdout."""
    # warmed up on a scratch local store first (imports, compiled kernels), as the bench process
    # itself is by the base store: the figure is the batch's, not a cold interpreter's
    scratch = tempfile.mkdtemp(prefix="bench-backends-warm-")
    try:
        _ingest(os.path.join(scratch, "store"), batch, "warm")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    counts = HdfsCounts() if hdfs else None
    if counts is not None:
        counts.install()
    t = time.time()
    out = _ingest(uri, batch, "bench-batch")
    wall = time.time() - t
    print(json.dumps({"status": out["status"], "record_bytes": out["record_bytes"], "wall_s": wall,
                      "counts": counts.snapshot() if counts is not None else None}))
    return 0


def _measure(name: str, uri: str, batch: str, env: dict | None = None, proxy=None, hdfs: bool = False) -> dict:
    """The batch into the store at ``uri`` in a child process with ``env`` (its S3 endpoint the
    counting ``proxy``, if given)."""
    if proxy is not None:
        proxy.counts.reset()
    cenv = dict(os.environ, **(env or {}))
    if proxy is not None:
        cenv["AWS_ENDPOINT_URL"] = proxy.url
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--measure", uri, batch]
                       + (["--hdfs-counts"] if hdfs else []), env=cenv, capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: the batch failed (exit {r.returncode}): {r.stderr[-3000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    c = proxy.counts.snapshot() if proxy is not None else got["counts"]
    counted = c is not None
    c = c or {"bytes": {"uploaded": 0, "downloaded": 0}, "requests": {}}
    assert got["status"] == "committed", got
    rec, wall = got["record_bytes"], got["wall_s"]
    row = {"backend": name, "wall_s": wall, "record_bytes": rec, "uploaded": c["bytes"]["uploaded"],
           "downloaded": c["bytes"]["downloaded"], "copied": c["bytes"].get("copied", 0),
           "up_per_record": c["bytes"]["uploaded"] / rec, "down_per_record": c["bytes"]["downloaded"] / rec,
           "requests": c["requests"], "by_area": c.get("by_area"), "counted": counted}
    print(f"{name}: {wall:.1f} s, uploaded {row['up_per_record']:.2f} x, downloaded {row['down_per_record']:.2f} x "
          f"of {rec / 1e6:.3f} MB records; requests {sum(c['requests'].values())}", file=sys.stderr, flush=True)
    return row


def _kinds(reqs: dict) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(reqs.items())) or "-"


def _table(rows: list) -> str:
    base = next((r for r in rows if r["backend"] == "local disk"), None)
    lines = ["| backend | wall s | x local | uploaded / record byte | downloaded / record byte | requests by kind: "
             "Delta log; Delta data; store files |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("by_area") is not None:
            reqs = "; ".join(f"{a}: {_kinds(r['by_area'].get(a, {}).get('requests', {}))}"
                             for a in ("delta log", "delta data", "store files"))
        else:
            reqs = _kinds(r["requests"]) if r["counted"] else "not counted"
        up, down = ((f"{r['up_per_record']:.2f}", f"{r['down_per_record']:.2f}") if r["counted"]
                    else ("not counted", "not counted"))
        ratio = f"{r['wall_s'] / base['wall_s']:.1f}" if base else "-"
        lines.append(f"| {r['backend']} | {r['wall_s']:.1f} | {ratio} | {up} | {down} | {reqs} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store-n", type=int, default=2_000_000)
    ap.add_argument("--batch-n", type=int, default=1000)
    ap.add_argument("--backends", default="local,moto,s3proxy,hdfs")
    ap.add_argument("--workdir", default=None, help="keeps the generated inputs between runs")
    ap.add_argument("--out", default=None, help="the results' JSON file (default: bench/results/backends-<time>.json)")
    ap.add_argument("--measure", nargs=2, metavar=("URI", "BATCH"), help=argparse.SUPPRESS)
    ap.add_argument("--hdfs-counts", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.measure:
        return _child(*a.measure, a.hdfs_counts)
    workdir = a.workdir or tempfile.mkdtemp(prefix="bench-backends-")
    os.makedirs(workdir, exist_ok=True)
    os.environ.setdefault("ROCKETLAKE_QUIET", "1")
    from s3bench import CountingProxy
    import s3server
    import hdfscluster
    base_in, batch_in = _inputs(workdir, a.store_n, a.batch_n)
    out = {"store_n": a.store_n, "batch_n": a.batch_n, "load_avg_start": os.getloadavg()[0], "rows": [],
           "base_ingest_s": {}}
    want = a.backends.split(",")

    def base(name: str, uri: str) -> None:
        t = time.time()
        _ingest(uri, base_in, "base")
        out["base_ingest_s"][name] = time.time() - t
        print(f"{name}: base store of {a.store_n} messages in {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    try:
        if "local" in want:
            local = os.path.join(workdir, "local-store")
            shutil.rmtree(local, ignore_errors=True)
            base("local disk", local)
            out["rows"].append(_measure("local disk", local, batch_in))
            shutil.rmtree(local, ignore_errors=True)
        servers = {"moto": lambda: s3server.moto("bench"),
                   "s3proxy": lambda: s3server.s3proxy("bench", authorization="none")}
        for name in ("moto", "s3proxy"):
            if name not in want:
                continue
            with servers[name]() as (env, _s3), CountingProxy(env["AWS_ENDPOINT_URL"]) as proxy:
                os.environ.update(env)
                label = "moto S3" if name == "moto" else "S3Proxy 4.0"
                base(label, "s3://bench/store")
                out["rows"].append(_measure(label, "s3://bench/store", batch_in, env, proxy))
        if "hdfs" in want:
            with hdfscluster.cluster() as nn:
                base("HDFS", f"{nn}/store")
                out["rows"].append(_measure("HDFS (3 DataNodes)", f"{nn}/store", batch_in, hdfs=True))
    finally:
        if not a.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    out["load_avg_end"] = os.getloadavg()[0]
    print(_table(out["rows"]))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)
    else:
        from small_batches_s3 import save_results
        save_results("backends", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
