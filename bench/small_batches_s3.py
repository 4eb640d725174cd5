"""Bytes uploaded per small batch into a store on S3, batch after batch (issue 40 item 2).

A store of ``--store-n`` messages (default file sizes: one index file whose paged head is 20 MB)
is written to a moto S3 server, then ``--batches`` consecutive batches of ``--batch-n`` messages
continue it, each in this process without Spark (storelib.runtime.localrun: the same write and
commit code as a Spark job). Per batch: bytes uploaded (the objects new or replaced on the
server between two listings, the Delta commits included; with ``--proxy``, the S3 PUT /
UploadPart bodies the counting proxy of bench/s3bench.py sees), the batch's record bytes, and
the index head pages its keys changed (counted in ``PagedHead.finish``), and the bytes of the
snapshot cache's objects among the uploads (``_rocketlake/snapshot-cache*``). The summary gives
the growth per batch too: the least-squares slope of uploaded less record bytes, and of the cache's.
The goal: p50 and max of uploaded <= 2 x record bytes + changed head pages x 512.

    python bench/small_batches_s3.py                      # 100k-message store, 80 batches
    python bench/small_batches_s3.py --full               # 2M-message store, 200 batches
    python bench/small_batches_s3.py --baseline-src DIR   # also the code in DIR, same run
    python bench/small_batches_s3.py --baseline-src main  # also a git revision of this checkout

With ``--baseline-src`` the same measurement runs first with DIR's storelib (a child process
with DIR first on its path), then with this tree's; both tables are printed, and the figures are
saved as JSON under bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _measure(store_n: int, batches: int, batch_n: int, workdir: str, proxy_on: bool = False,
             server: str = "moto", rows_out: str | None = None) -> dict:
    import numpy as np
    import pyarrow.parquet as pq
    import storelib                                        # noqa: F401 - first: the tree under test
    from storelib.format.config import StoreConfig
    from storelib.ingest import paged_index
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "tests")]
    import datagen
    from s3bench import CountingProxy
    from support import s3server

    changed: list = []
    finish = paged_index.PagedHead.finish

    def counted(self, builder):
        from storelib.format import indexfile
        P = 512
        head = builder.header.to_bytes(self.cfg.line_4_9) + indexfile.encode_slots(builder.slots)
        changed.append(sum(head[j * P:(j + 1) * P] != self.old[int(j)] for j in np.flatnonzero(self.loaded)))
        return finish(self, builder)
    paged_index.PagedHead.finish = counted
    calls = _count_calls()

    def part(n, seed, start_ms):
        d = os.path.join(workdir, f"in-{seed}")
        os.makedirs(d, exist_ok=True)
        pq.write_table(datagen.generate(n, 256, seed, start_ms=start_ms), os.path.join(d, "part-00000.parquet"))
        return d

    def listing(s3) -> dict:
        out = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bench"):
            out.update({o["Key"]: (o["ETag"], o["Size"]) for o in page.get("Contents", [])})
        return out

    def stored_delta(a: dict, b: dict, part: str = "") -> int:
        """Bytes of the objects new or replaced between two listings (whose key holds ``part``):
        what was uploaded, counted on the server (no proxy in the way)."""
        return sum(v[1] for k, v in b.items() if a.get(k) != v and part in k)

    def largest(a: dict, b: dict, k: int = 3) -> list:
        """The ``k`` largest objects new or replaced between two listings: what a spike uploaded."""
        return sorted(([n, v[1]] for n, v in b.items() if a.get(n) != v), key=lambda x: -x[1])[:k]

    cfg, rows = StoreConfig(), []
    # S3Proxy checks signatures against its own Host; behind the counting proxy it checks none
    start = s3server.moto if server == "moto" else lambda b: s3server.s3proxy(b, authorization="none" if proxy_on
                                                                              else "aws-v2-or-v4")
    with start("bench") as (env, s3), (CountingProxy(env["AWS_ENDPOINT_URL"]) if proxy_on else _Nothing()) as proxy:
        os.environ.update(env, **({"AWS_ENDPOINT_URL": proxy.url} if proxy_on else {}))
        uri = "s3://bench/store"
        t = time.time()
        run_ingest(LocalSession(), uri, part(store_n, 7, 1717200000000), "parquet", cfg, batch_id="base", quiet=True)
        base_s = time.time() - t
        after = listing(s3)
        for i in range(batches):
            src = part(batch_n, 1000 + i, 1817200000000 + i * 10_000_000)
            changed.clear()
            before = after           # (one listing a batch: S3Proxy's takes seconds on a 2M-message store)
            if proxy_on:
                proxy.counts.reset()
            calls.clear()
            t = time.time()
            out = run_ingest(LocalSession(), uri, src, "parquet", cfg, batch_id=f"small-{i}", quiet=True)
            wall = time.time() - t
            c = proxy.counts.snapshot() if proxy_on else {"bytes": {"uploaded": -1, "downloaded": -1}, "requests": {}}
            after = listing(s3)
            stored, cache = stored_delta(before, after), stored_delta(before, after, "/_rocketlake/snapshot-cache")
            rows.append({"uploaded": c["bytes"]["uploaded"] if proxy_on else stored, "stored": stored, "cache": cache,
                         "downloaded": c["bytes"]["downloaded"],
                         "record_bytes": out["record_bytes"], "changed_pages": int(sum(changed)),
                         "requests": sum(c["requests"].values()), "wall_s": wall, "largest": largest(before, after),
                         "objects_put": sum(before.get(k) != v for k, v in after.items()),
                         "objects_deleted": sum(k not in after for k in before),
                         # the Delta checkpoints of either table this batch wrote (deltalake's, every 100
                         # versions): the periodic part of a batch's upload
                         "delta_checkpoints": sorted([k.split("/_rocketlake/")[-1], v[1]] for k, v in after.items()
                                                     if before.get(k) != v and k.endswith(".checkpoint.parquet")),
                         "delta_log": stored_delta(before, after, "/_delta_log/"),
                         # the manifest table's data file(s) of the batch's rows (merges and compactions
                         # included), and the extent-list objects it wrote (storelib.io.extentlists)
                         "manifest_rows": stored_delta(before, after, "/_rocketlake/manifest/")
                         - stored_delta(before, after, "/_rocketlake/manifest/_delta_log/"),
                         "extent_lists": stored_delta(before, after, ".extents"),
                         # what else a batch uploads beside its records: merged extents (storelib.io.fragments),
                         # the checkpoints table's data file(s), consume queue units, index entries
                         "merged": stored_delta(before, after, ".merged"),
                         "checkpoints_rows": stored_delta(before, after, "/_rocketlake/checkpoints/")
                         - stored_delta(before, after, "/_rocketlake/checkpoints/_delta_log/"),
                         "load_avg": os.getloadavg()[0], "store_calls": calls["store"],
                         "refresh_store_calls": calls["refresh store"], "refresh_s": calls["refresh s"]})
            print(f"batch {i}: stored {stored / 1e6:.3f} MB, records {out['record_bytes'] / 1e6:.3f} MB, head pages "
                  f"changed {512 * int(sum(changed)) / 1e6:.3f} MB, snapshot cache {cache / 1e3:.1f} KB, objects put "
                  f"{rows[-1]['objects_put']} / deleted {rows[-1]['objects_deleted']}, store calls {calls['store']} (cache "
                  f"refresh {calls['refresh store']}, {calls['refresh s']:.2f} s), {wall:.1f} s, load {rows[-1]['load_avg']:.1f}", file=sys.stderr, flush=True)
            if rows_out:                     # a run cut short keeps every batch it measured
                with open(rows_out, "a") as fh:
                    fh.write(json.dumps(dict(rows[-1], batch=i, base_ingest_s=base_s)) + "\n")
        tables = {t: _table_files(s3, uri, "bench", f"store/_rocketlake/{t}") for t in ("manifest", "checkpoints")}
    return {"store_n": store_n, "batch_n": batch_n, "base_ingest_s": base_s, "server": server, "batches": rows,
            "tables_at_end": tables}


def _table_files(s3, uri: str, bucket: str, prefix: str) -> dict:
    """A Delta table's live data files (its latest version's), and its objects on the server
    (data files a merge or compaction removed included) and log: counts and bytes."""
    from storelib.io import storage
    from storelib.table.tableread import open_table
    dt = open_table(storage.Store(uri), prefix.split("/", 1)[1])
    out = {"live_data_files": len(dt.file_uris()), "data_files": 0, "data_bytes": 0, "log_files": 0, "log_bytes": 0}
    dt = None
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            kind = "log" if "/_delta_log/" in o["Key"] else "data" if o["Key"].endswith(".parquet") else None
            if kind:
                out[f"{kind}_files"] += 1
                out[f"{kind}_bytes"] += o["Size"]
    return out


def _count_calls() -> dict:
    """Counters, from now on in this process: ``store``, the calls of ``storage.Store`` that reach
    the store (reads, writes, listings, existence checks, deletes: each one request or more;
    deltalake's own requests not counted), and of those ``refresh store`` and ``refresh s`` (its
    seconds) within ``snapcache.refresh``, the snapshot cache's part of a commit."""
    import collections

    from storelib.io import storage
    from storelib.table import snapcache
    calls: dict = collections.Counter()
    inside = [False]
    def counting(f):
        def counted(self, *a, **kw):
            calls["store"] += 1
            calls["refresh store"] += inside[0]
            return f(self, *a, **kw)
        return counted
    for name in ("read", "read_array", "exists", "size", "list_files", "list_dirs", "write_file", "write_objects",
                 "write_at", "publish", "delete"):
        setattr(storage.Store, name, counting(getattr(storage.Store, name)))
    refresh = snapcache.refresh

    def timed(*a, **kw):
        t, inside[0] = time.time(), True
        try:
            return refresh(*a, **kw)
        finally:
            calls["refresh s"] += time.time() - t
            inside[0] = False
    snapcache.refresh = timed
    return calls


def _measure_head(store_n: int, batches: int, batch_n: int, workdir: str, keys_per_msg: float = 2.05) -> dict:
    """The index head alone (``--head-only``), on a local disk: the objects one index file's
    batches upload (what they upload to S3 too: the same ``write_objects``), with no commitlog,
    consume queue or Delta commit around them. ``keys_per_msg``: the bench input's (UNIQ_KEY, KEYS,
    5% a second key)."""
    import json as _json

    import numpy as np
    from storelib.format import indexfile as ix
    from storelib.format.config import StoreConfig
    from storelib.ingest import paged_index
    from storelib.ingest.context import WriteContext
    from storelib.ingest.file_versions import FileVersion, committed_facts
    from storelib.ingest.indexfile import IndexFileBuilder
    from storelib.ingest.topics import Topics
    from storelib.io import storage

    cfg, rel = StoreConfig(), "index/bench-000000"
    st = storage.Store(os.path.join(workdir, "store"))
    rng = np.random.default_rng(7)
    t0 = [1_700_000_000_000]

    def keys(n):
        t0[0] += 10 * n
        return (rng.integers(-2**31, 2**31 - 1, n).astype(np.int32), np.arange(n, dtype=np.int64) * 410,
                t0[0] + np.arange(n, dtype=np.int64) * 10)

    def ctx(i, committed):
        return WriteContext(store=st.uri, config=cfg, topics=Topics(), staging="unused", committed=committed,
                            objects=True, batch_id=f"b{i}", attempt="a", durable=False)

    def objects():
        """Bytes of the store's objects: (head page layers, merged extents, the rest)."""
        out = [0, 0, 0]
        for d, _, fs in os.walk(os.path.join(st.root, "_rocketlake")):
            for f in fs:
                out[0 if f.endswith(".pages") else 1 if ".merged" in f else 2] += os.path.getsize(os.path.join(d, f))
        return np.array(out)

    def row(facts, b):
        detail = {k: facts[k] for k in ("blocks", "extents", "extent_lists", "tail", "head") if facts.get(k) is not None}
        detail["header"] = b.header.to_dict()
        return {"path": rel, "valid_bytes": b.valid_bytes(), "file_size": cfg.index_file_size,
                "detail": _json.dumps(detail)}

    b = IndexFileBuilder(cfg, ix.IndexHeader())
    b.put_keys(*keys(int(store_n * keys_per_msg)))
    r = row(paged_index.write_new(FileVersion(ctx(0, {}), st, rel, 0, cfg.index_file_size, "t", "file"), b, cfg), b)
    rows = []
    for i in range(1, batches + 1):
        header = ix.IndexHeader(**_json.loads(r["detail"])["header"])
        v = FileVersion(ctx(i, {rel: committed_facts(r, st)}), st, rel, ix.entry_offset(header.index_count, cfg),
                        cfg.index_file_size, "t", "entries")
        ph = paged_index.PagedHead(v, cfg)
        b = ph.builder(header)
        b.put_keys(*keys(int(batch_n * keys_per_msg)))
        loaded = np.flatnonzero(ph.loaded)
        head = b.header.to_bytes(cfg.line_4_9) + ix.encode_slots(b.slots)
        changed = sum(head[j * 512:(j + 1) * 512] != ph.old[int(j)] for j in loaded)
        before = objects()
        r = row(ph.finish(b), b)
        up = objects() - before
        rows.append({"uploaded": int(up.sum()), "head_uploaded": int(up[0]), "merged_uploaded": int(up[1]), "downloaded": ph.bytes_read, "changed_pages": int(changed),
                     "record_bytes": batch_n * 410, "layers": len(_json.loads(r["detail"])["head"]["layers"]),
                     "detail_bytes": len(r["detail"]), "requests": 0, "wall_s": 0.0})
    return {"store_n": store_n, "batch_n": batch_n, "head_only": True, "batches": rows}


def summarize(res: dict) -> dict:
    import numpy as np
    b = res["batches"]
    up = np.array([r["uploaded"] for r in b], float)
    allow = np.array([2 * r["record_bytes"] + 512 * r["changed_pages"] for r in b], float)
    rec = np.array([r["record_bytes"] for r in b], float)
    worst = int(np.argmax(up / allow))
    return {"p50_uploaded": float(np.median(up)), "max_uploaded": float(up.max()), "argmax": int(up.argmax()),
            "p50_record": float(np.median(rec)), "p50_allow": float(np.median(allow)),
            "p50_per_allow": float(np.median(up / allow)), "max_per_allow": float((up / allow).max()),
            "worst": worst, "p50_downloaded": float(np.median([r["downloaded"] for r in b])),
            "max_downloaded": float(max(r["downloaded"] for r in b)),
            "p50_wall_s": float(np.median([r["wall_s"] for r in b])), "n": len(b),
            "p50_changed": float(np.median([512 * r["changed_pages"] for r in b])),
            **({f"{q}_{k}": float(f(np.array([r[k] for r in b], float))) for k in ("head_uploaded", "merged_uploaded")
                for q, f in (("p50", np.median), ("max", np.max))} if "head_uploaded" in b[0] else {}),
            **({"delta_checkpoints": [[i, *c] for i, r in enumerate(b) for c in r["delta_checkpoints"]]}
               if "delta_checkpoints" in b[0] else {}),
            "max_layers": max(r.get("layers", 0) for r in b), "max_detail": max(r.get("detail_bytes", 0) for r in b),
            # bytes a batch more than the batch before (least squares over the run), as a whole and
            # of the snapshot cache's files (``cache``: objects under _rocketlake/snapshot-cache*)
            "growth_per_batch": _slope(up - rec),
            **({f"{q}_{k}": float(f(np.array([r[k] for r in b], float))) for k in ("store_calls", "refresh_store_calls",
                                                                                      "refresh_s", "objects_put")
                for q, f in (("p50", np.median), ("max", np.max), ("last10", lambda y: y[-10:].mean()))}
               if "store_calls" in b[0] else {}),
            **({f"{q}_{k}": float(f(np.array([r[k] for r in b], float))) for k in ("manifest_rows", "extent_lists")
                for q, f in (("p50", np.median), ("max", np.max), ("growth", _slope))} if "manifest_rows" in b[0] else {}),
            **({"p50_cache": float(np.median([r["cache"] for r in b])), "max_cache": float(max(r["cache"] for r in b)),
                "cache_growth_per_batch": _slope(np.array([r["cache"] for r in b], float))} if "cache" in b[0] else {})}


def _slope(y) -> float:
    import numpy as np
    return float(np.polyfit(np.arange(len(y)), y, 1)[0]) if len(y) > 1 else 0.0


def _table(name: str, s: dict) -> str:
    mb = 1e6
    return (f"{name}: {s['n']} batches; uploaded p50 {s['p50_uploaded'] / mb:.3f} MB, max {s['max_uploaded'] / mb:.3f} MB "
            f"(batch {s['argmax']}); record bytes p50 {s['p50_record'] / mb:.3f} MB; allowance (2 x records + changed "
            f"pages) p50 {s['p50_allow'] / mb:.3f} MB; uploaded / allowance p50 {s['p50_per_allow']:.2f}, max "
            f"{s['max_per_allow']:.2f} (batch {s['worst']}); downloaded p50 {s['p50_downloaded'] / mb:.3f} MB, max "
            f"{s['max_downloaded'] / mb:.3f} MB; changed head pages p50 {s['p50_changed'] / mb:.3f} MB; wall p50 "
            f"{s['p50_wall_s']:.1f} s" + (f"; of which head page layers p50 {s['p50_head_uploaded'] / mb:.3f} MB, max "
                                          f"{s['max_head_uploaded'] / mb:.3f} MB; merged extents max "
                                          f"{s['max_merged_uploaded'] / mb:.3f} MB" if "p50_head_uploaded" in s else "") + (f"; layers max {s['max_layers']}, row detail max {s['max_detail']} bytes"
                                          if s["max_layers"] else "")
            + f"; uploaded less records grows {s['growth_per_batch'] / 1e3:.2f} KB a batch"
            + (f"; objects put p50 {s['p50_objects_put']:.0f}; store calls p50 {s['p50_store_calls']:.0f}, max "
               f"{s['max_store_calls']:.0f}, last 10 {s['last10_store_calls']:.0f}; of them the cache refresh's p50 "
               f"{s['p50_refresh_store_calls']:.0f}, max {s['max_refresh_store_calls']:.0f}, last 10 "
               f"{s['last10_refresh_store_calls']:.0f}; refresh p50 {s['p50_refresh_s']:.2f} s, max "
               f"{s['max_refresh_s']:.2f} s" if "p50_store_calls" in s else "")
            + (f"; manifest rows' data files p50 {s['p50_manifest_rows'] / 1e3:.1f} KB, max "
               f"{s['max_manifest_rows'] / 1e3:.1f} KB, grow {s['growth_manifest_rows'] / 1e3:.3f} KB a batch; extent "
               f"lists p50 {s['p50_extent_lists'] / 1e3:.2f} KB, max {s['max_extent_lists'] / 1e3:.2f} KB"
               if "p50_manifest_rows" in s else "")
            + (f"; snapshot cache p50 {s['p50_cache'] / 1e3:.1f} KB, max {s['max_cache'] / 1e3:.1f} KB, grows "
               f"{s['cache_growth_per_batch'] / 1e3:.2f} KB a batch" if "p50_cache" in s else "")
            + ("; Delta checkpoints (batch, object, KB): " + ", ".join(
                f"{i} {k.split('/')[0]} {n / 1e3:.1f}" for i, k, n in s["delta_checkpoints"])
               if s.get("delta_checkpoints") else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store-n", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=80)
    ap.add_argument("--batch-n", type=int, default=1000)
    ap.add_argument("--full", action="store_true", help="the issue's size: 2M-message store, 200 batches")
    ap.add_argument("--baseline-src", default=None, help="a source tree, or a git revision of this checkout (e.g. main), measured first")
    ap.add_argument("--proxy", action="store_true", help="count through the proxy of bench/s3bench.py")
    ap.add_argument("--head-only", action="store_true", help="the index head's uploads alone (local disk, fast)")
    ap.add_argument("--server", choices=("moto", "s3proxy"), default="moto",
                    help="the S3 server: moto, or S3Proxy (filesystem; its jars come with `make s3proxy`)")
    ap.add_argument("--rows-out", default=None, help="append each batch's figures here as a JSON line, as it ends")
    ap.add_argument("--json-out", default=None, help="(child) write the raw figures here")
    a = ap.parse_args(argv)
    if a.full:
        a.store_n, a.batches = 2_000_000, 200
    args = ["--store-n", str(a.store_n), "--batches", str(a.batches), "--batch-n", str(a.batch_n)]
    args += (["--head-only"] if a.head_only else []) + (["--proxy"] if a.proxy else []) + ["--server", a.server]
    if a.json_out:
        with tempfile.TemporaryDirectory(prefix="smallbatch-") as wd:
            res = (_measure_head(a.store_n, a.batches, a.batch_n, wd) if a.head_only
                   else _measure(a.store_n, a.batches, a.batch_n, wd, a.proxy, a.server, a.rows_out))
        with open(a.json_out, "w") as fh:
            json.dump(res, fh)
        return 0
    root = os.path.dirname(HERE)
    with tempfile.TemporaryDirectory(prefix="smallbatch-src-") as tree:
        baseline = a.baseline_src
        if baseline and not os.path.isdir(baseline):       # a git revision of this checkout (e.g. main)
            subprocess.run(f"git -C {root} archive {baseline} | tar -x -C {tree}", shell=True, check=True)
            baseline = tree
        return _compare(a, args, root, baseline)


def _compare(a: argparse.Namespace, args: list, root: str, baseline: str | None) -> int:
    runs = ([("baseline", baseline)] if baseline else []) + [("this tree", root)]
    out = {"load_avg_start": os.getloadavg()[0], "args": args}
    for name, src in runs:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([src] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
            rows_out = ["--rows-out", f"{a.rows_out}.{name.replace(' ', '-')}"] if a.rows_out else []
            subprocess.run([sys.executable, os.path.abspath(__file__), *args, *rows_out, "--json-out", f.name],
                           env=env, check=True)
            res = json.load(open(f.name))
        res["summary"] = summarize(res)
        out[name] = res
        print(_table(name, res["summary"]), flush=True)
    out["load_avg_end"] = os.getloadavg()[0]
    save_results(f"small-batches-{'head' if a.head_only else 's3'}", out)
    return 0


def save_results(name: str, out: dict) -> str:
    """``out`` as bench/results/<name>-<UTC time>.json; its path, printed."""
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", time.strftime(f"{name}-%Y-%m-%dT%H%M%S.json", time.gmtime()))
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(path)
    return path


if __name__ == "__main__":
    sys.exit(main())
