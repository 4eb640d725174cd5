"""rocketlake benchmarks: every figure is a ratio against a baseline measured in the same run.

    python bench/run.py [--n 2000000] [--lookup-n 5000000] [--rounds 2] [--only ingest,lookup,...]
                        [--workdir DIR] [--results DIR] [--smoke]

Cold figures (mode "cold") are what a user sees: a fresh ``spark-submit`` per ingest and Parquet
copy, a fresh ``python jobs/query.py`` per shell lookup (opening the store inside the figure), a
fresh verify process; ``sync`` before each, ours and the baseline alternated ``--rounds`` times,
median and best of each, peak memory of the whole process tree. Warm figures (mode "warm") are
in-process, after a first round. Every lookup's result count is checked against the expected.

Sections:
  disk         sequential write speed of this disk, numpy memory-copy speed (references)
  codec        encode / decode msgs/s on one core vs a numpy copy of the same bytes (warm)
  ingest       ingest of N messages (256-byte bodies, Parquet input, local[2]) vs a Spark
               Parquet -> Parquet copy of the same input: cold (spark-submit) and warm
  lookup       shell lookups on a store of --lookup-n messages (cold) and in-process p50/p99 (warm)
  batch        batch lookup of 1M keys vs a Spark broadcast join with the Parquet copy: count() and
               full rows (noop write of every column, bodies included) (warm)
  read         spark.read.format("rocketmq") of the N-message store vs Spark's Parquet reader over
               the same messages: full scan, one topic, a store-time range; cold (a fresh
               spark-submit per query) and warm (one session, after a first round)
  verify       verify --deep GB/s of valid record bytes vs reading the same files (cold, warm)
  incremental  a 1,000-message batch into an empty store vs into the N-message store (cold):
               wall time, bytes written (device counters and the process tree's /proc io)
  s3           ingest of --s3-n messages into a local moto S3 server, then a 1,000-message
               batch: bytes uploaded / copied / downloaded per record byte (counting proxy)
  anchor       the same messages (--anchor-n, each size) written by RocketMQ 5.3.3's own
               DefaultMessageStore in one JVM (ASYNC_FLUSH, no network) vs `rocketlake ingest` (cold,
               alternated): msgs/s each, where each spends its time, stores checked byte-identical
  scale        (make bench-scale; not in the default run) growth, per --scale-sizes (2M, 10M,
               50M): cold ingest vs Parquet copy (s per million msgs, driver and tree peak RSS),
               the same warm in one running Spark application,
               the cold reads vs Parquet, key lookups; spreads across sizes; the figure
               --scale-plot (docs/bench-scale.png, shown in docs/PERFORMANCE.md)

Each run writes bench/results/<UTC time>-<commit>.json (kept in git, the history) and
bench/results/latest.json; ``python bench/table.py`` puts the latest into docs/PERFORMANCE.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[0] = ROOT
sys.path.insert(1, os.path.join(ROOT, "bench"))

import cold  # noqa: E402
import datagen  # noqa: E402
import harness  # noqa: E402
from storelib.codec import messages as codec  # noqa: E402
from storelib.format import config as cfgmod  # noqa: E402
from storelib.ingest import inputs  # noqa: E402

RESULTS = os.path.join(ROOT, "bench", "results")
RES = harness.Results()


def record(section: str, metric: str, value, baseline=None, unit: str = "", note: str = ""):
    RES.record(section, metric, value, baseline, unit, note, mode="warm")


def timed(fn, *a, **kw):
    t = time.perf_counter()
    out = fn(*a, **kw)
    return time.perf_counter() - t, out


# ---------------------------------------------------------------------------- references
def disk_and_memory(workdir: str, size: int = 1 << 30) -> tuple[float, float]:
    block = np.random.default_rng(1).integers(0, 255, min(size, 64 << 20), dtype=np.uint8)
    path = os.path.join(workdir, "disk.bin")
    t = time.perf_counter()
    with open(path, "wb") as fh:
        for _ in range(size // len(block)):
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
    disk = size / (time.perf_counter() - t) / 1e6
    os.remove(path)
    src = np.random.default_rng(2).integers(0, 255, min(size, 512 << 20), dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t = time.perf_counter()
    for _ in range(3):
        np.copyto(dst, src)
    mem = 3 * len(src) / (time.perf_counter() - t) / 1e9
    record("disk", f"sequential write (fsync'd, {size >> 20} MiB)", disk, unit="MB/s")
    record("disk", "numpy memory copy", mem, unit="GB/s")
    return disk, mem


# ---------------------------------------------------------------------------- codec
def bench_codec(n: int = 1_000_000, reps: int = 3):
    """Encode/decode of n messages on one core, best of ``reps`` passes after a first pass.

    The first pass also pays for the process's first touch of its buffers (page faults, ~0.3-1 s
    per 400 MB on this kind of VM); a writer encodes batch after batch into reused memory
    (storelib.compute.allocator), so the steady state is the figure; the first pass is in the note."""
    import numba
    numba.set_num_threads(1)
    raw = datagen.generate(n, 256)
    table = inputs.to_canonical(raw, lambda i: f"row {i}", "body")
    cfg = cfgmod.StoreConfig()
    small = table.slice(0, 1000)
    pm = codec.prepare(small, cfg)                       # compile the kernels first
    codec.encode(pm, np.zeros(pm.n, np.int64), np.zeros(pm.n, np.int64))
    qoff = np.zeros(n, np.int64)
    enc, dec_t, copy_t = [], [], []
    for _ in range(reps + 1):
        t_prep, pm = timed(codec.prepare, table, cfg)
        phys = np.cumsum(pm.sizes) - pm.sizes
        t_enc, buf = timed(codec.encode, pm, phys, qoff)
        enc.append((t_prep, t_enc))
        copy_t.append(timed(np.copy, buf)[0])
        starts, _, _ = codec.record_starts(buf, 0, len(buf))
        t_dec, dec = timed(codec.decode_records, buf, 0, starts)
        assert dec.num_rows == n
        dec_t.append(t_dec)
        del dec, buf, pm
    first_enc, first_dec = sum(enc[0]), dec_t[0]
    t_prep, t_enc = min(enc[1:], key=sum)
    copy_rate = n / min(copy_t[1:])
    record("codec", "encode msgs/s/core (validate+hash+CRC+assemble)", n / (t_prep + t_enc), copy_rate,
           "msgs/s", f"prepare {t_prep:.2f}s + encode {t_enc:.2f}s; first pass {n / first_enc:,.0f}/s; "
           "baseline = memcpy of the records")
    record("codec", "decode msgs/s/core (walk+decode to Arrow)", n / min(dec_t[1:]), copy_rate, "msgs/s",
           f"first pass {n / first_dec:,.0f}/s")


# ---------------------------------------------------------------------------- ingest
def spark_session():
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master("local[2]").appName("rocketlake-bench")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", "6g")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties")
            .getOrCreate())


def best_of(reps: int, *fns):
    """Run the functions alternately ``reps`` times; the best time of each (and its result).

    Both sides get the same warm-up: the first round pays for JVM code paths, Python worker
    start-up and first page faults, which a long-running Spark application pays once."""
    best = [(float("inf"), None)] * len(fns)
    for _ in range(reps):
        for i, fn in enumerate(fns):
            os.sync()
            t, out = timed(fn)
            if t < best[i][0]:
                best[i] = (t, out)
    return best


def bench_ingest(spark, workdir: str, n: int, disk_mbs: float, reps: int = 2):
    from storelib.ingest.driver import run_ingest
    src = os.path.join(workdir, f"input-{n}")
    if not os.path.exists(src):
        datagen.write_parquet(src, n, 256, files=4)
    out = os.path.join(workdir, "parquet-copy")
    store = os.path.join(workdir, "store-ingest")

    def parquet_copy():
        spark.read.parquet(src).write.mode("overwrite").parquet(out)

    def ingest():
        shutil.rmtree(store, ignore_errors=True)
        return run_ingest(spark, store, src, "parquet", cfgmod.StoreConfig(), quiet=True)

    (t_pq, _), (t_in, summary) = best_of(reps, parquet_copy, ingest)
    record("ingest", f"ingest {n} msgs in one Spark session (s)", t_in, t_pq, "s",
           f"baseline: Spark Parquet->Parquet write; best of {reps} each, alternated")
    record("ingest", "ingest msgs/s", n / t_in, n / t_pq, "msgs/s")
    mbs = summary["record_bytes"] / t_in / 1e6
    record("ingest", "commitlog MB/s vs disk write speed", mbs, disk_mbs, "MB/s")
    shutil.rmtree(out, ignore_errors=True)
    return store


def bench_lookup(spark, workdir: str, n: int):
    from storelib.ingest.driver import run_ingest
    from storelib.read import query
    src = os.path.join(workdir, f"input-{n}")
    if not os.path.exists(src):
        datagen.write_parquet(src, n, 256, files=8)
    store = os.path.join(workdir, f"store-{n}")
    if not os.path.exists(os.path.join(store, "_rocketlake")):
        shutil.rmtree(store, ignore_errors=True)
        t, _ = timed(run_ingest, spark, store, src, "parquet", cfgmod.StoreConfig(), quiet=True)
        record("lookup", f"build store of {n} msgs (s)", t, unit="s")
    reader = query.open_store(store)
    keys = cold.sample_keys(src, 300 if n > 100_000 else 30)
    want = cold.expected_key_counts(src, keys)
    lat_exact, lat_compat = cold.key_lookup_latencies(reader, keys, want), []
    for topic, k in keys:
        t = time.perf_counter()
        reader.query_message(topic, k, 64, 0, 2**63 - 1)
        lat_compat.append(time.perf_counter() - t)
    topics = [keys[0][0]]
    keys = [k for _, k in keys]
    # Baseline: the same lookup as a Spark filter over the Parquet copy of the messages.
    df = spark.read.parquet(src)
    from pyspark.sql import functions as F
    base = []
    for k in keys[:5]:
        t = time.perf_counter()
        df.filter((F.col("topic") == topics[0]) &
                  F.exists("properties", lambda p: (p["name"] == "KEYS") &
                           F.array_contains(F.split(p["value"], " "), k))).collect()  # noqa: B023 - built and run now
        base.append(time.perf_counter() - t)
    p50b = float(np.median(base)) * 1000
    record("lookup", "single key p50 ms (exact)", float(np.percentile(lat_exact, 50)) * 1000, p50b, "ms",
           "baseline: Spark filter on Parquet (p50 of 5)")
    record("lookup", "single key p99 ms (exact)", float(np.percentile(lat_exact, 99)) * 1000, p50b, "ms")
    record("lookup", "single key p50 ms (--rocketmq-compat)", float(np.percentile(lat_compat, 50)) * 1000, p50b, "ms")
    record("lookup", "single key p99 ms (--rocketmq-compat)", float(np.percentile(lat_compat, 99)) * 1000, p50b, "ms")
    return store, src


def bench_batch(spark, store: str, src: str, n: int, nkeys: int, reps: int = 2):
    """Batch lookup of ``nkeys`` distinct (topic, key) pairs vs a broadcast join with the Parquet
    copy, two ways: ``count()`` (each side reads only what a count needs: the join prunes the
    bodies, ours leaves the message columns undecoded) and full rows (a noop write of every
    message column, bodies included, on both sides). Result counts must be equal."""
    from storelib.read import keylookup
    from pyspark.sql import functions as F
    import pyarrow as pa
    rng = np.random.default_rng(5)
    per_file = -(-n // 8)
    # distinct (topic, key) pairs; "order-i" occurs once per input file under a random topic
    pair = rng.choice(len(datagen.TOPICS) * per_file, size=min(nkeys, len(datagen.TOPICS) * per_file),
                      replace=False)
    nkeys = len(pair)
    keys = pa.table({"topic": pa.array(np.asarray(datagen.TOPICS, dtype=object)[pair // per_file].tolist()),
                     "key": pa.array([f"order-{i}" for i in pair % per_file])})
    kdf = spark.createDataFrame(keys.to_pandas())
    kdf.cache().count()
    # every input column (the message as stored, body and properties included) + its KEYS tokens
    msgs = spark.read.parquet(src).select(
        "*", F.explode(F.array_distinct(F.split(F.filter("properties", lambda p: p["name"] == "KEYS")[0]["value"],
                                                    " "))).alias("key"))

    def full_rows(df):
        df.write.format("noop").mode("overwrite").save()
        return None

    (t_ours, res), (t_join, cnt), (f_ours, _), (f_join, _) = best_of(
        reps, lambda: keylookup.lookup_keys(spark, store, keys).count(),
        lambda: msgs.join(F.broadcast(kdf), ["topic", "key"]).count(),
        lambda: full_rows(keylookup.lookup_keys(spark, store, keys)),
        lambda: full_rows(msgs.join(F.broadcast(kdf), ["topic", "key"])))
    load = os.getloadavg()[0]
    record("batch", f"batch lookup of {nkeys} keys, count() (s)", t_ours, t_join, "s",
           f"baseline: broadcast join with the Parquet copy ({cnt} rows; ours {res}); best of {reps} each, "
           f"alternated; load average {load:.1f}")
    record("batch", f"batch lookup of {nkeys} keys, full rows (s)", f_ours, f_join, "s",
           "noop write of every column incl. bodies on both sides (ours: RESULT_DDL; the join: every "
           "Parquet column + key)")
    if res != cnt:
        raise AssertionError(f"batch lookup found {res} messages, the join {cnt}")


def bench_verify(spark, store: str):
    from storelib.verify import driver as verify
    files = []
    for d, _, fs in os.walk(store):
        if "_rocketlake" in d:
            continue
        files += [os.path.join(d, f) for f in fs]
    t_read = time.perf_counter()
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            while True:
                b = fh.read(64 << 20)
                if not b:
                    break
                total += len(b)
    t_read = time.perf_counter() - t_read
    t_ver, report = timed(verify.verify_store, store, deep=True, spark=spark)
    record("verify", "verify --deep GB/s", total / t_ver / 1e9, total / t_read / 1e9, "GB/s",
           f"baseline: reading the same {total / 1e9:.1f} GB")


SECTIONS = "disk,codec,ingest,read,lookup,batch,verify,incremental,s3,anchor"


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2_000_000, help="messages for ingest, incremental's big store")
    ap.add_argument("--lookup-n", type=int, default=5_000_000)
    ap.add_argument("--batch-keys", type=int, default=1_000_000, help="distinct (topic, key) pairs")
    ap.add_argument("--s3-n", type=int, default=2_000_000, help="messages of the S3 ingest")
    ap.add_argument("--s3-config", default=None, help="store.properties for the S3 store (default sizes)")
    ap.add_argument("--scale-sizes", default="2000000,10000000,50000000",
                    help="scale section: message counts, comma-separated")
    ap.add_argument("--scale-plot", default=os.path.join(ROOT, "docs", "bench-scale.png"),
                    help="the scale section's figure (the default also rewrites docs/PERFORMANCE.md's block)")
    ap.add_argument("--anchor-n", default="2000000,10000000", help="anchor section: message counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=2, help="alternated rounds of every cold figure")
    ap.add_argument("--shell-keys", type=int, default=7, help="fresh-process lookups (each a key)")
    ap.add_argument("--only", default=SECTIONS)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--results", default=RESULTS, help="where the results JSON goes (default bench/results)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes: checks that every section runs (the test suite does this); no figures")
    a = ap.parse_args()
    a.codec_n, a.disk_size = 1_000_000, 1 << 30
    if a.smoke:
        a.n, a.lookup_n, a.batch_keys, a.codec_n, a.disk_size = 20_000, 40_000, 2_000, 20_000, 16 << 20
        a.s3_n, a.scale_sizes, a.shell_keys = min(a.s3_n, 5_000), "20000,40000", min(a.shell_keys, 2)
        a.scale_plot = os.path.join(a.workdir or tempfile.gettempdir(), "bench-scale-smoke.png")
        a.rounds, a.anchor_n = min(a.rounds, 1), "5000"
    return a


def run_sections(a, only: set, workdir: str):
    disk_mbs = disk_and_memory(workdir, a.disk_size)[0] if only & {"disk", "ingest"} else None
    if "codec" in only:
        bench_codec(a.codec_n)
    big_store = None
    if "ingest" in only:
        big_store = cold.bench_ingest_cold(RES, workdir, a.n, a.rounds)["store"]
    if "read" in only:                           # before incremental adds a batch to the store
        import readbench
        read_store = big_store or readbench.reusable_store(workdir, a.n) or cold.build_store(workdir, a.n)
        read_src = cold.ensure_input(workdir, a.n)
        readbench.bench_read_cold(RES, read_store, read_src, a.rounds)
        warm = spark_session()
        readbench.bench_read_warm(RES, warm, read_store, read_src, a.rounds)
        warm.stop()                              # the cold sections that follow get the machine to themselves
        big_store = big_store or read_store
    if "incremental" in only:
        if big_store is None and not a.smoke:    # the incremental's big store alone, built once
            big_store = cold.build_store(workdir, a.n)
        cold.bench_incremental(RES, workdir, big_store, a.n if big_store else 1000, a.rounds)
    if "s3" in only:
        import s3bench
        s3bench.bench_s3(RES, workdir, cold.ensure_input(workdir, a.s3_n), a.s3_n,
                         cold.small_batch(workdir, 1000, 99), a.s3_config)
    if "anchor" in only:
        import anchor
        for n in (int(x) for x in a.anchor_n.split(",")):
            anchor.bench_anchor(RES, workdir, cold.ensure_input(workdir, n), n, a.rounds)
    if "scale" in only:
        import scale
        scale.bench_scale(RES, workdir, [int(x) for x in a.scale_sizes.split(",")], a.rounds, a.shell_keys,
                          a.scale_plot)
    spark = spark_session() if only & {"ingest", "lookup", "batch", "verify"} else None
    if "ingest" in only:
        bench_ingest(spark, workdir, a.n, disk_mbs)
    store = src = None
    if only & {"lookup", "batch", "verify"}:
        store, src = bench_lookup(spark, workdir, a.lookup_n)
    if "lookup" in only:
        cold.bench_lookup_cold(RES, store, src, a.shell_keys)
    if "batch" in only:
        bench_batch(spark, store, src, a.lookup_n, a.batch_keys)
    if "verify" in only:
        from storelib.table.storefiles import open_files
        from storelib.io.storage import Store
        files, _ = open_files(Store(store), None, None)
        cold.bench_verify_cold(RES, store, sum(s.valid for s in files.commitlog), a.rounds)
        bench_verify(spark, store)


def main():
    a = parse_args()
    only = set(a.only.split(","))
    workdir = a.workdir or tempfile.mkdtemp(prefix="rocketlake-bench-", dir=os.environ.get("TMPDIR"))
    os.makedirs(workdir, exist_ok=True)
    print(f"{'section':11s} mode {'metric':52s} {'value':>14s} {'baseline':>14s} {'ratio':>9s} unit", flush=True)
    t0 = time.time()
    try:
        run_sections(a, only, workdir)
    finally:
        path = RES.save(a.results, {"n": a.n, "lookup_n": a.lookup_n, "batch_keys": a.batch_keys,
                                    "s3_n": a.s3_n, "scale_sizes": a.scale_sizes, "anchor_n": a.anchor_n, "rounds": a.rounds,
                                    "smoke": a.smoke, "sections": sorted(only)}, sys.argv[1:])
        print(f"total {time.time() - t0:.0f}s; results in {path}; work dir {workdir}")
        if not a.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
