"""Batch key lookup (storelib.read.keylookup) against per-key exact lookups (StoreReader.find_by_key)."""
from __future__ import annotations

import json
import os
import random
import time

import numpy as np
import pyarrow as pa
import pytest

from conftest import GOLDEN
from storelib.read import keylookup
from storelib.format.textforms import parse_properties_string
from storelib.read.query import open_store

SMALL = os.path.join(GOLDEN, "small-roll")


@pytest.fixture(scope="module")
def golden(restored_golden):
    return restored_golden("small-roll")


@pytest.fixture(scope="module")
def all_keys():
    keys = set()
    with open(os.path.join(SMALL, "messages.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            m = json.loads(line)
            p = parse_properties_string(m["properties_string"])
            for k in [p.get("UNIQ_KEY")] + [t for t in p.get("KEYS", "").split(" ") if t]:
                if k:
                    keys.add((m["topic"], k))
    return sorted(keys)


def _per_key(reader, keys):
    """Full exact result per (topic, key): [(store_timestamp, offset)] by find_by_key."""
    return {(t, k): [(m["store_timestamp"], m["commitlog_offset"]) for m in reader.find_by_key(t, k).messages]
            for t, k in keys}


def _queries(all_keys, n, seed=5):
    """n query rows: real keys (repeated, with random windows), hash twins, other topics, missing keys."""
    rnd = random.Random(seed)
    t0, t1 = 1710057000000, 1710072000000
    topics = sorted({t for t, _ in all_keys})
    rows = []
    for i in range(n):
        t, k = all_keys[rnd.randrange(len(all_keys))]
        kind = i % 10
        b = e = None
        if kind == 1:
            b = rnd.randint(t0, t1)
        elif kind == 2:
            e = rnd.randint(t0, t1)
        elif kind == 3:
            b = rnd.randint(t0, t1)
            e = b + rnd.randint(0, 3_000_000)
        elif kind == 4:
            k = k + "-missing-%d" % i
        elif kind == 5:
            t = topics[rnd.randrange(len(topics))]
        elif kind == 6:
            k = rnd.choice(["Aa", "BB", "AaAa", "AaBB", "BBBB", "BBAa"])
        rows.append((t, k, b, e))
    return rows


def _expected(full, q):
    t, k, b, e = q
    return [o for ts, o in full.get((t, k), []) if (b is None or ts >= b) and (e is None or ts <= e)]


def _as_table(rows):
    return pa.table({"topic": [r[0] for r in rows], "key": [r[1] for r in rows],
                     "begin": pa.array([r[2] for r in rows], pa.int64()),
                     "end": pa.array([r[3] for r in rows], pa.int64())})


def _grouped(result: pa.Table):
    got = {}
    cols = result.select(["query_topic", "query_key", "query_begin", "query_end", "store_timestamp",
                          "commitlog_offset"]).to_pydict()
    for t, k, b, e, ts, o in zip(*cols.values()):
        got.setdefault((t, k, b, e), []).append((ts, o))
    return {q: [o for _, o in sorted(v)] for q, v in got.items()}


@pytest.fixture(scope="module")
def queries_100k(golden, all_keys):
    """The 100k query rows and find_by_key's full answer per distinct (topic, key): the expected
    side of both plans, computed once (~20k keys: the slowest part of the test)."""
    rows = _queries(all_keys, 100_000)
    return rows, _per_key(open_store(golden), sorted({(t, k) for t, k, _, _ in rows}))


@pytest.mark.parametrize("plan", ["broadcast", "shuffle"])
def test_batch_lookup_100k_keys_equals_per_key(spark, golden, queries_100k, plan):
    rows, full = queries_100k
    reader = open_store(golden)
    t = time.time()
    limit = keylookup.BROADCAST_LIMIT if plan == "broadcast" else 0
    result = keylookup.lookup_keys(spark, golden, _as_table(rows), broadcast_limit=limit).toArrow()
    elapsed = time.time() - t
    got = _grouped(result)
    distinct_q = set(rows)
    for q in distinct_q:
        assert got.get(q, []) == _expected(full, q), q
    assert set(got) <= distinct_q
    assert sum(len(v) for v in got.values()) == result.num_rows            # one row per (query, message)
    print(f"batch lookup: {len(rows)} keys ({len(distinct_q)} distinct) -> {result.num_rows} rows "
          f"in {elapsed:.1f}s ({len(rows) / elapsed:.0f} keys/s)")
    # a sample of windows straight from find_by_key (not derived from the full result)
    for q in random.Random(3).sample(sorted(distinct_q, key=str), 200):
        t_, k_, b_, e_ = q
        assert got.get(q, []) == [m["commitlog_offset"] for m in reader.find_by_key(t_, k_, b_, e_).messages]


@pytest.mark.parametrize("range_reads", [False, True])
def test_local_lookup_both_index_read_modes(golden, all_keys, monkeypatch, range_reads):
    """Whole entry table + hash selection vs needed slots + chain walks by range reads."""
    monkeypatch.setattr(keylookup, "_RANDOM_READ_COST", 0 if range_reads else 10**9)
    rows = _queries(all_keys, 3000, seed=9)
    reader = open_store(golden)
    full = _per_key(reader, sorted({(t, k) for t, k, _, _ in rows}))
    got = _grouped(keylookup.lookup_keys_local(golden, _as_table(rows)))
    for q in set(rows):
        assert got.get(q, []) == _expected(full, q), q


@pytest.mark.parametrize("limit", [keylookup.BROADCAST_LIMIT, 2, 0])
def test_spark_lookup_on_dataframe_input_and_snapshot_limit(spark, golden, limit):
    """DataFrame input without begin/end (broadcast plan, too many keys for it, shuffle plan);
    an index snapshot limit hides newer entries."""
    from storelib.table.storefiles import IndexFileRef, StoreFiles
    df = spark.createDataFrame([("metrics-raw", "hot-metrics-raw"), ("shipping", "hot-shipping"),
                                ("shipping", "hot-shipping"), (None, "x")], "topic string, key string")
    res = keylookup.lookup_keys(spark, golden, df, broadcast_limit=limit).toArrow()
    reader = open_store(golden)
    assert sorted(res.column("commitlog_offset").to_pylist()) == sorted(
        [m["commitlog_offset"] for m in reader.find_by_key("metrics-raw", "hot-metrics-raw").messages]
        + [m["commitlog_offset"] for m in reader.find_by_key("shipping", "hot-shipping").messages])
    # candidates of a file limited to its first entries
    ref = reader.files.index[-1]
    h = reader.index.header(len(reader.files.index) - 1)
    limited = IndexFileRef(ref.rel, h.index_count - 5, h._replace(index_count=h.index_count - 5))
    hashes = np.unique(np.array([reader.index.entry(len(reader.files.index) - 1, p)[0] for p in range(1, h.index_count)],
                                np.int32))
    full = keylookup.index_candidates(reader.store, reader.config, IndexFileRef(ref.rel), hashes)
    part = keylookup.index_candidates(reader.store, reader.config, limited, hashes)
    assert full.num_rows == h.index_count - 1 and part.num_rows == h.index_count - 6
    assert isinstance(StoreFiles, type)


@pytest.mark.parametrize("ordered", [True, False])
def test_range_task_reads_its_span_of_the_entries_or_the_whole_file(tmp_path, ordered):
    """A range task binary-searches its span of an index file's entries (appended in commitlog
    order); a file out of order near the span is read whole: either way exactly the entries
    pointing into [lo, hi) are found."""
    from storelib.format import indexfile
    from storelib.io.storage import Store
    phys = np.arange(1000, dtype=np.int64) * 100
    if not ordered:
        phys[480], phys[20] = phys[20], phys[480]      # inside the span of [40000, 60000)
    entries = np.zeros(len(phys), indexfile.ENTRY_DTYPE)
    entries["phys"] = phys
    entries["hash"] = np.arange(len(phys))
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "f").write_bytes(entries.tobytes())
    lo, hi = 40_000, 60_000
    first, rec = keylookup._entries_for_range(Store(str(tmp_path)), "index/f", 0, len(phys), lo, hi)
    assert (first > 0) == ordered
    assert (len(rec) < len(phys)) == ordered
    got = sorted((np.flatnonzero((rec["phys"] >= lo) & (rec["phys"] < hi)) + first).tolist())
    want = [p for p in range(1, len(phys)) if lo <= phys[p] < hi]
    assert got == want
