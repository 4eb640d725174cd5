"""Cold figures: every job a fresh process, as a user runs it (``spark-submit`` per ingest and
Parquet copy, a fresh ``python jobs/query.py`` per lookup with the store opened inside the
figure, a fresh verify process). Ours and the baseline alternate; median and best of each."""
from __future__ import annotations

import glob
import json
import os
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import datagen
from harness import PY, ROOT, alternate, check_rc, run_process, spark_submit, stats

BENCH = os.path.join(ROOT, "bench")
GB = 1e9


def ensure_input(workdir: str, n: int, files: int = 4) -> str:
    src = os.path.join(workdir, f"input-{n}")
    if not os.path.exists(os.path.join(src, "_done")):
        shutil.rmtree(src, ignore_errors=True)
        datagen.write_parquet(src, n, 256, files=files)
        open(os.path.join(src, "_done"), "w").close()
    return src


def ingest_argv(store: str, src: str, summary: str, *extra: str) -> list:
    """`make`'s cold ingest: its JVM options are the Makefile's SUBMIT's (storelib.runtime.jvm_archive)."""
    from storelib.runtime.jvm_archive import job_options
    return spark_submit(os.path.join(ROOT, "jobs", "ingest.py"), "--store", store, "--input", src,
                        "--format", "parquet", "--json-summary", summary, *extra, java_opts=job_options())


def _record_pair(res, section: str, what: str, runs: dict, ours: str, base: str, note: str):
    """Median and best wall time of ours vs the baseline, and the peak memory of each tree."""
    o, b = stats(runs[ours]), stats(runs[base])
    k = len(o["all"])
    res.record(section, f"{what}: median wall (s)", o["median"], b["median"], "s", note + f"; {k} rounds",
               mode="cold", runs=o["all"], baseline_runs=b["all"])
    res.record(section, f"{what}: best wall (s)", o["best"], b["best"], "s", "", mode="cold")
    om, bm = stats(runs[ours], "peak_rss_bytes"), stats(runs[base], "peak_rss_bytes")
    kinds = {kk: max(r["peak_rss_by_kind"].get(kk, 0) for r in runs[ours]) / GB for kk in ("jvm", "python_workers")}
    kinds["python_driver"] = max(r["peak_hwm_by_kind"].get("python_driver", 0) for r in runs[ours]) / GB
    res.record(section, f"{what}: peak RSS of the process tree (GB)", om["best"] and max(om["all"]) / GB,
               max(bm["all"]) / GB, "GB", "sum of RSS over the job's session (JVM + Python driver + "
               "workers), max over rounds; ours by kind (the driver: its VmHWM): "
               + ", ".join(f"{kk} {v:.2f}" for kk, v in kinds.items()),
               mode="cold", peak_by_kind_gb=kinds)


def bench_ingest_cold(res, workdir: str, n: int, rounds: int, section: str = "ingest") -> dict:
    """spark-submit jobs/ingest.py vs spark-submit bench/parquet_copy.py of the same input."""
    src = ensure_input(workdir, n)
    store, out = os.path.join(workdir, f"store-cold-{n}"), os.path.join(workdir, f"parquet-copy-{n}")
    summary = os.path.join(workdir, f"summary-{n}.json")

    def before(name, r):
        shutil.rmtree(store if name == "ours" else out, ignore_errors=True)

    runs = alternate(rounds, {"ours": ingest_argv(store, src, summary),
                              "parquet copy": spark_submit(os.path.join(BENCH, "parquet_copy.py"), src, out)},
                     before=before)
    with open(summary) as fh:
        summ = json.load(fh)
    if summ.get("messages") != n:
        raise AssertionError(f"ingest reported {summ.get('messages')} messages, expected {n}")
    _record_pair(res, section, f"ingest {n} msgs, spark-submit", runs, "ours", "parquet copy",
                 "baseline: spark-submit Parquet->Parquet copy of the same input, Spark's default JVM; "
                 "ours with the Makefile's JVM options for a cold ingest (storelib.runtime.jvm_archive)")
    rb = summ["record_bytes"]
    res.record(section, "ingest GB/s of record bytes (best)", rb / stats(runs["ours"])["best"] / GB,
               rb / stats(runs["parquet copy"])["best"] / GB, "GB/s",
               f"{rb / GB:.2f} GB of valid records; baseline: the same bytes over the copy's time", mode="cold")
    shutil.rmtree(out, ignore_errors=True)
    return {"store": store, "src": src, "record_bytes": rb, "runs": runs}


# ---------------------------------------------------------------------------- lookups
def expected_key_counts(src: str, keys: list) -> list:
    """Messages per (topic, "order-i") straight from the Parquet input (row i of every input
    file carries KEYS "order-i"; its topic varies per file), independent of our readers."""
    idx = np.array([int(k.split("-")[1]) for _, k in keys])
    counts = np.zeros(len(keys), np.int64)
    for f in sorted(glob.glob(os.path.join(src, "*.parquet"))):
        topics = pq.read_table(f, columns=["topic"]).column(0)
        ok = idx < len(topics)
        got = np.asarray(topics.take(pa.array(np.where(ok, idx, 0))).to_pylist(), dtype=object)
        counts += ok & (got == np.asarray([t for t, _ in keys], dtype=object))
    return counts.tolist()


def sample_keys(src: str, n_keys: int, seed: int = 3) -> list:
    """(topic, key) pairs that exist: "order-i" under the topic file 0 gave row i."""
    first = sorted(glob.glob(os.path.join(src, "*.parquet")))[0]
    topics = pq.read_table(first, columns=["topic"]).column(0)
    rows = np.random.default_rng(seed).choice(len(topics), n_keys, replace=False)
    return [(topics[int(i)].as_py(), f"order-{int(i)}") for i in rows]


def key_lookup_latencies(reader, keys: list, want: list) -> list:
    """Seconds of each in-process ``find_by_key`` on an open store, every count checked."""
    lat = []
    for (topic, key), expected in zip(keys, want):
        t = time.perf_counter()
        got = reader.find_by_key(topic, key).total
        lat.append(time.perf_counter() - t)
        if got != expected:
            raise AssertionError(f"find_by_key {topic}/{key}: {got} messages, expected {expected}")
    return lat


def bench_lookup_cold(res, store: str, src: str, n_keys: int, section: str = "lookup"):
    """``python jobs/query.py --store S key --topic T --key K``, a fresh process per key, vs a
    fresh Python process finding the same key in the Parquet input with pyarrow."""
    keys = sample_keys(src, n_keys)
    want = expected_key_counts(src, keys)
    ours, base, floor = [], [], []
    for (topic, key), expected in zip(keys, want):
        r = run_process([PY, os.path.join(ROOT, "jobs", "query.py"), "--store", store, "key",
                         "--topic", topic, "--key", key])
        check_rc(r, "lookup")
        got = len([line for line in r["stdout"].splitlines() if line.strip()])
        if got != expected:
            raise AssertionError(f"lookup {topic}/{key}: {got} messages, expected {expected}")
        ours.append(r["wall_s"])
        b = run_process([PY, os.path.join(BENCH, "parquet_lookup.py"), src, topic, key])
        check_rc(b, "parquet lookup")
        if int(b["stdout"].split()[0]) != expected:
            raise AssertionError(f"parquet lookup {topic}/{key}: {b['stdout']!r}, expected {expected}")
        base.append(b["wall_s"])
        floor.append(run_process([PY, "-c", "pass"])["wall_s"])
    note = (f"{n_keys} keys, every count checked; baseline: fresh python + pyarrow scan of the Parquet "
            f"input; python start alone: median {np.median(floor) * 1000:.0f} ms")
    res.record(section, "shell lookup, fresh process: median (ms)", float(np.median(ours)) * 1000,
               float(np.median(base)) * 1000, "ms", note, mode="cold", runs=ours, baseline_runs=base)
    res.record(section, "shell lookup, fresh process: best (ms)", min(ours) * 1000, min(base) * 1000, "ms",
               "", mode="cold")
    return {"median_ms": float(np.median(ours)) * 1000, "baseline_median_ms": float(np.median(base)) * 1000}


def bench_verify_cold(res, store: str, record_bytes: int, rounds: int, section: str = "verify"):
    """A fresh ``python jobs/verify.py --store S --deep`` process (what a user runs: the checks run
    in process, no JVM; ``--spark`` runs them as Spark tasks) vs a fresh process reading the same
    files; GB/s of valid record bytes for both."""
    verify_job = os.path.join(ROOT, "jobs", "verify.py")
    argv = [PY, verify_job, "--store", store, "--deep"] if os.path.exists(verify_job) else \
        spark_submit(os.path.join(ROOT, "jobs", "inspect.py"), "--store", store, "verify", "--deep")
    runs = alternate(rounds, {"ours": argv, "read": [PY, os.path.join(BENCH, "read_files.py"), store]})
    o, b = stats(runs["ours"]), stats(runs["read"])
    how = "python jobs/verify.py (in process, no spark-submit)" if os.path.exists(verify_job) else \
        "spark-submit jobs/inspect.py verify"
    res.record(section, "verify --deep, fresh process: GB/s (best)", record_bytes / o["best"] / GB,
               record_bytes / b["best"] / GB, "GB/s",
               f"{record_bytes / GB:.2f} GB valid records; {how}; baseline: a fresh process reading the "
               f"store's files; {rounds} rounds, median {o['median']:.1f} s vs {b['median']:.2f} s; load average "
               f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} processors", mode="cold")


# ---------------------------------------------------------------------------- incremental
def small_batch(workdir: str, n: int, seed: int) -> str:
    """``n`` messages whose store times follow every bench input's."""
    path = os.path.join(workdir, f"batch-{n}-{seed}")
    if not os.path.exists(path):
        os.makedirs(path)
        pq.write_table(datagen.generate(n, 256, seed, start_ms=1817200000000 + seed * 100_000),
                       os.path.join(path, "part-00000.parquet"))
    return path


def build_store(workdir: str, n: int) -> str:
    """A store of the n-message bench input (default file sizes), one cold ingest."""
    src = ensure_input(workdir, n)
    store = os.path.join(workdir, f"store-cold-{n}")
    shutil.rmtree(store, ignore_errors=True)
    check_rc(run_process(ingest_argv(store, src, os.path.join(workdir, "summary-build.json"))), "build store")
    return store


def bench_incremental(res, workdir: str, big_store: str | None, n_big: int, rounds: int, batch_n: int = 1000,
                      section: str = "incremental"):
    """A ``batch_n``-message batch (cold spark-submit) into an empty store vs into ``big_store``
    (``n_big`` messages, default file sizes): wall time and bytes written by the batch.
    ``big_store`` None (the smoke run): the store the empty-store batch made, copied."""
    empty = os.path.join(workdir, "store-empty")
    summary = os.path.join(workdir, "summary-inc.json")
    runs = {"into empty store": [], "into big store": []}
    for r in range(rounds):
        src = small_batch(workdir, batch_n, 100 + r)
        shutil.rmtree(empty, ignore_errors=True)
        for name, store in (("into empty store", empty), ("into big store", big_store)):
            if store is None:
                store = os.path.join(workdir, "store-copied")
                shutil.rmtree(store, ignore_errors=True)
                shutil.copytree(empty, store)
            # one id per store: the copied store (smoke) already holds the empty-store batch, and
            # the same id and input would be "already committed" there, writing nothing
            run = run_process(ingest_argv(store, src, summary, "--batch-id", f"bench-inc-{r}-{name.split()[-2]}"),
                              workdir=workdir)
            check_rc(run, f"batch {name}")
            with open(summary) as fh:
                status = json.load(fh).get("status")
            if status != "committed":
                raise RuntimeError(f"batch {name}: status {status!r}, expected a committed batch")
            runs[name].append(run)
    big, small = runs["into big store"], runs["into empty store"]
    with open(summary) as fh:
        rb = json.load(fh)["record_bytes"]
    note = f"{batch_n} msgs ({rb / 1e6:.2f} MB of records), {n_big} msgs in the big store; {rounds} rounds"
    res.record(section, "batch into big store vs empty: median wall (s)", stats(big)["median"],
               stats(small)["median"], "s", note, mode="cold")
    res.record(section, "batch into big store vs empty: best wall (s)", stats(big)["best"],
               stats(small)["best"], "s", "", mode="cold")
    for key, what in (("device_written_bytes", "device counters (whole machine), sync before and after"),
                      ("tree_written_bytes", "write_bytes of the job's process tree (/proc)")):
        b, s = stats(big, key), stats(small, key)
        if b["median"] is None:
            continue
        res.record(section, f"MB written by the batch, {key.split('_')[0]}: median", b["median"] / 1e6,
                   s["median"] / 1e6, "MB", f"{what}; per record byte: {b['median'] / rb:.0f}", mode="cold",
                   runs=b["all"], baseline_runs=s["all"])
