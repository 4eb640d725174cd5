"""Where an in-process key lookup (``StoreReader.find_by_key``, what ``make bench-scale`` times)
spends its time, per lookup: index files consulted, hash slots read, index entries walked along
the chains, commitlog reads and bytes to confirm the key, file opens and reads, bytes the device
really read (``/proc/self/io`` read_bytes: pages that were not in the page cache), the wait for
them and the Python around them.

Three passes over the same keys, each key once per pass: ``cold`` (the first lookup of each key
in this process: its pages are in the page cache only if something read them before; a store
just written by ``rocketlake ingest`` leaves none there), ``warm`` (the same keys again) and
``counted`` (again, with the OS calls counted: a separate pass, so counting costs no timed
lookup anything). Nothing is dropped from the page cache system-wide.

    python bench/lookup_cost.py STORE KEYS_JSON START COUNT      # one tree: JSON on stdout
    python bench/lookup_cost.py --compare STORE KEYS_JSON --trees /work/main,.  [--rounds 4 --count 50]

``KEYS_JSON``: {"keys": [[topic, key], ...], "want": [messages per key]} (``write_keys``). The
compare mode runs each tree (PYTHONPATH=tree) in a fresh process per round, alternating which
goes first, each round on keys no process looked up before, so both meet the same page cache.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def write_keys(src: str, path: str, n_keys: int = 1000) -> None:
    """Keys that exist (``cold.sample_keys``) and their message counts from the Parquet input."""
    import cold
    keys = cold.sample_keys(src, n_keys)
    with open(path, "w") as fh:
        json.dump({"keys": keys, "want": cold.expected_key_counts(src, keys)}, fh)


def datagen_keys(path: str, n: int, n_keys: int, pick_seed: int, files: int = 4, seed: int = 7) -> None:
    """``write_keys`` for the input ``cold.ensure_input`` writes (``datagen.write_parquet`` of
    ``n`` messages in ``files`` files), without the input: row i of file k has KEYS "order-i"
    and the topic of the first draw of ``default_rng(seed + k)`` (``datagen.generate``); keys
    from file 0's rows picked with ``pick_seed``, counted over every file."""
    import datagen
    per = -(-n // files)
    topics = [np.random.default_rng(seed + k).integers(0, len(datagen.TOPICS), min(n, (k + 1) * per) - k * per)
              for k in range(files) if k * per < n]
    rows = np.random.default_rng(pick_seed).choice(len(topics[0]), n_keys, replace=False)
    keys = [(datagen.TOPICS[int(topics[0][i])], f"order-{int(i)}") for i in rows]
    want = [sum(int(i < len(t) and t[i] == topics[0][i]) for t in topics) for i in rows]
    with open(path, "w") as fh:
        json.dump({"keys": keys, "want": want}, fh)


def _device_read_bytes() -> int:
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


class _Counter:
    """The OS calls of the lookups (os.open / pread / posix_fadvise, the calls both the store's
    ``read`` and ``io.checked.StoredRanges`` make), classified by file and offset."""

    def __init__(self, store_root: str, entries_at: int):
        self.root = os.path.realpath(store_root) + "/"
        self.entries_at = entries_at
        self.paths: dict[int, str] = {}
        self.calls: list[tuple[str, str, int, int, float]] = []    # (call, rel, offset, length, seconds)
        self._saved: dict[str, object] = {}

    def __enter__(self) -> _Counter:
        real = {n: getattr(os, n) for n in ("open", "pread", "posix_fadvise") if hasattr(os, n)}
        self._saved = real

        def opened(path, flags, *a, **k):
            t = time.perf_counter()
            fd = real["open"](path, flags, *a, **k)
            took = time.perf_counter() - t
            rel = os.path.realpath(path).removeprefix(self.root) if isinstance(path, str) else str(path)
            self.paths[fd] = rel
            self.calls.append(("open", rel, 0, 0, took))
            return fd

        def pread(fd, n, offset):
            t = time.perf_counter()
            data = real["pread"](fd, n, offset)
            self.calls.append(("pread", self.paths.get(fd, "?"), offset, len(data), time.perf_counter() - t))
            return data

        def fadvise(fd, offset, n, advice):
            t = time.perf_counter()
            real["posix_fadvise"](fd, offset, n, advice)
            self.calls.append(("fadvise", self.paths.get(fd, "?"), offset, n, time.perf_counter() - t))

        os.open, os.pread = opened, pread
        if "posix_fadvise" in real:
            os.posix_fadvise = fadvise
        return self

    def __exit__(self, *exc) -> None:
        for n, f in self._saved.items():
            setattr(os, n, f)

    def waits(self) -> int:
        """Reads a cold lookup waits for one after another: a read of pages neither read before
        in the lookup nor hinted, or the first read after a batch of hints (the pages of one
        batch arrive together, and any hinted before a wait arrived during it), every page
        taken as not cached."""
        seen: set = set()
        hinted: set = set()
        fresh, waits = False, 0
        for call, rel, offset, length, _ in self.calls:
            pages = {(rel, p) for p in range(offset // 4096, (offset + max(length, 1) - 1) // 4096 + 1)}
            if call == "fadvise":
                hinted |= pages
                fresh = True
            elif call == "pread":
                new = pages - seen
                seen |= pages
                if new and (fresh or not new <= hinted):
                    waits += 1
                    fresh = False           # the pages hinted before it arrived meanwhile
        return waits

    def summary(self) -> dict:
        reads = [c for c in self.calls if c[0] == "pread"]
        idx = [c for c in reads if c[1].startswith("index/")]
        log = [c for c in reads if c[1].startswith("commitlog/")]
        return {"index_files": len({c[1] for c in idx if 40 <= c[2] < self.entries_at}),
                "slots": sum(1 for c in idx if 40 <= c[2] < self.entries_at),
                "entries": sum(1 for c in idx if c[2] >= self.entries_at),
                "headers": sum(1 for c in idx if c[2] < 40),
                "commitlog_reads": len(log), "commitlog_bytes": sum(c[3] for c in log),
                "queue_reads": sum(1 for c in reads if c[1].startswith("consumequeue/")),
                "opens": sum(1 for c in self.calls if c[0] == "open"), "reads": len(reads),
                "hints": sum(1 for c in self.calls if c[0] == "fadvise"),
                "os_ms": sum(c[4] for c in self.calls) * 1000}


def measure(store: str, keys: list, want: list) -> dict:
    """The three passes over ``keys`` on one open store (every count checked against ``want``)."""
    from storelib.format import indexfile
    from storelib.read import query
    reader = query.open_store(store)
    entries_at = indexfile.entries_offset(reader.config)

    def timed() -> list:
        rows = []
        for (topic, key), expected in zip(keys, want):
            dev = _device_read_bytes()
            t = time.perf_counter()
            got = reader.find_by_key(topic, key).total
            ms = (time.perf_counter() - t) * 1000
            if got != expected:
                raise AssertionError(f"find_by_key {topic}/{key}: {got} messages, expected {expected}")
            rows.append({"ms": ms, "device_kb": (_device_read_bytes() - dev) / 1024})
        return rows

    cold, warm = timed(), timed()
    counted = []
    for topic, key in keys:
        with _Counter(store, entries_at) as c:
            reader.find_by_key(topic, key)
        counted.append(dict(c.summary(), cold_waits=c.waits()))
    rows = [dict(n, cold_ms=a["ms"], cold_device_kb=a["device_kb"], warm_ms=b["ms"],
                 python_ms=max(0.0, b["ms"] - n["os_ms"]))
            for a, b, n in zip(cold, warm, counted)]
    return {"store": store, "index_files_in_store": len(reader.files.index),
            "index_counts": [r.index_count for r in reader.files.index],
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rows": rows,
            "summary": summarize(rows)}


def summarize(rows: list) -> dict:
    """p50 of the times, mean of the counts (and the cold p90)."""
    out = {f"{k}_p50": float(np.median([r[k] for r in rows])) for k in ("cold_ms", "warm_ms", "python_ms")}
    out["cold_ms_p90"] = float(np.percentile([r["cold_ms"] for r in rows], 90))
    for k in ("index_files", "slots", "entries", "headers", "commitlog_reads", "commitlog_bytes", "queue_reads",
              "opens", "reads", "hints", "os_ms", "cold_device_kb", "cold_waits"):
        out[f"{k}_mean"] = float(np.mean([r[k] for r in rows]))
    return out


def compare(store: str, keys_json: str, trees: list, rounds: int, count: int, first: int = 0) -> dict:
    """Each tree in a fresh process per round (PYTHONPATH=tree), the order alternating, every
    process on keys no process looked up before; per tree the rows of all its rounds."""
    with open(keys_json) as fh:
        n_keys = len(json.load(fh)["keys"])
    if first + rounds * len(trees) * count > n_keys:
        raise SystemExit(f"{keys_json}: {n_keys} keys, {first + rounds * len(trees) * count} needed")
    rows: dict = {t: [] for t in trees}
    start = first
    for r in range(rounds):
        for t in (trees if r % 2 == 0 else trees[::-1]):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(t))
            out = subprocess.run([sys.executable, os.path.abspath(__file__), store, keys_json, str(start), str(count)],
                                 env=env, check=True, capture_output=True, text=True)
            rows[t].extend(json.loads(out.stdout)["rows"])
            start += count
    return {t: summarize(v) for t, v in rows.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("keys_json")
    ap.add_argument("start", nargs="?", type=int, default=0)
    ap.add_argument("count", nargs="?", type=int, default=200)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--trees", default=f"/work/main,{os.path.dirname(HERE)}")
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    if a.compare:        # START: the first key used; COUNT: keys per process
        print(json.dumps(compare(a.store, a.keys_json, a.trees.split(","), a.rounds, a.count, a.start), indent=1))
        return
    with open(a.keys_json) as fh:
        got = json.load(fh)
    sl = slice(a.start, a.start + a.count)
    print(json.dumps(measure(a.store, [tuple(k) for k in got["keys"][sl]], got["want"][sl])))


if __name__ == "__main__":
    main()
