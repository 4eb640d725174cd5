"""``find_by_key``'s reads (``IndexReader.chain_offsets`` walks every index file's chain side by
side through one ``io.checked.StoredRanges``; ``CommitLogReader.records_at`` reads the candidate
records together) give exactly what the one-read-at-a-time walk gives, on small random stores
written without Spark (tiny index files: many files, long chains, shared slots, hash-colliding
keys, earlier batches' snapshots whose index files hold entries written after them); and a
lookup opens each file once and asks for the slots of all its index files at once."""
from __future__ import annotations

import base64
import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from storelib.format import commitlog as cl, records
from storelib.format.config import load_config
from storelib.format.javahash import index_key_hash
from storelib.errors import CorruptStore
from storelib.read.indexchain import entry_time_bounds, walk_chain
from storelib.read.indexfile import _key_match
from storelib.read.query import open_store

# "Aa" and "BB" share a Java hash: hash-colliding keys; 8 slots and 64 entries a file: long
# chains over many files.
KEYS = ["k1", "k2", "k3", "Aa", "BB", "hot"]
TOPICS = ["orders", "audit"]
CONFIG = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 600, "maxHashSlotNum": 8,
          "maxIndexNum": 64}
BATCHES = 3


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    root = tmp_path_factory.mktemp("chains")
    rng = random.Random(40)
    cfg = load_config(None, CONFIG)
    times = []
    for b in range(BATCHES):
        rows = []
        ts = 1717200000000 + b * 200_000
        for i in range(100):
            ts += rng.choice([0, 1, 400, 1500])
            times.append(ts)
            keys = " ".join(rng.choice(KEYS) for _ in range(rng.randrange(1, 3)))
            rows.append({"topic": rng.choice(TOPICS), "queue_id": rng.randrange(2), "flag": 0, "sys_flag": 0,
                         "born_timestamp": ts - 5, "store_timestamp": ts, "born_host": "10.0.0.7:50123",
                         "store_host": "192.168.0.10:10911", "reconsume_times": 0, "prepared_transaction_offset": 0,
                         "body_b64": base64.b64encode(b"x" * rng.randrange(1, 900)).decode(),
                         "properties": [["KEYS", keys], ["UNIQ_KEY", f"U{b}{i % 7}"]]})
        path = root / f"in-{b}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        s = run_ingest(LocalSession(), str(root / "store"), str(path), "jsonl", cfg, batch_id=f"b{b}", quiet=True)
        assert s["status"] == "committed", s
    return str(root / "store"), times


def reference_find(reader, topic, key, lo, hi):
    """The walk one read at a time: per index file its slot, then its chain entry by entry, then
    each new candidate's size and magic, then its record."""
    idx, log = reader.index, reader.commitlog
    key_hash = index_key_hash(f"{topic}#{key}")
    offsets = []
    for i in range(len(idx.refs)):
        h = idx.header(i)
        count, _ = idx.limit(i)
        if count <= 1:
            continue
        for pos, khash, phy, tdiff in walk_chain(idx.slot_value(i, key_hash), lambda p, i=i: idx.entry(i, p),
                                                 count, reader.config.maxIndexNum):
            t_lo, t_hi = entry_time_bounds(pos, tdiff, h.begin_timestamp)
            if khash == key_hash and t_lo <= hi and t_hi >= lo:
                offsets.append(phy)
    found = []
    for off in dict.fromkeys(offsets):
        seg = log.find(off)
        pos = off % log.file_size
        if seg is None or pos + cl.BLANK_SIZE > seg.valid:
            continue
        size, magic = cl.parse_size_magic(log.read(seg.rel, pos, cl.BLANK_SIZE))
        if not cl.is_record_start(size, magic, pos, seg.valid):
            continue
        msg = records.decode_message(log.read(seg.rel, pos, size))
        if msg is not None and msg["commitlog_offset"] == off and _key_match(msg, topic, key, lo, hi, None) \
                and reader.in_queue(msg):
            found.append(msg)
    return sorted(found, key=lambda m: (m["store_timestamp"], m["commitlog_offset"]))


def test_the_stores_have_what_the_property_needs(store):
    path, _ = store
    reader = open_store(path)
    assert len(reader.files.index) >= 8
    assert index_key_hash("orders#Aa") == index_key_hash("orders#BB")
    early = open_store(path, as_of_batch="b0")
    assert any(r.index_count is not None for r in early.files.index)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.sampled_from([None, "b0", "b1"]), topic=st.sampled_from(TOPICS + ["nosuch"]),
       key=st.sampled_from(KEYS + ["U05", "U13", "U26", "none"]), window=st.tuples(st.floats(0, 1), st.floats(0, 1)),
       bounded=st.booleans(), limit=st.sampled_from([None, 1, 3]))
def test_find_by_key_equals_the_walk_one_read_at_a_time(store, batch, topic, key, window, bounded, limit):
    path, times = store
    reader = open_store(path, as_of_batch=batch)
    lo, hi = -(2**63), 2**63 - 1
    begin = end = None
    if bounded:
        a, b = sorted(window)
        begin = lo = times[int(a * (len(times) - 1))]
        end = hi = times[int(b * (len(times) - 1))] + 999
    want = reference_find(reader, topic, key, lo, hi)
    pages, after = [], None
    while True:
        page = reader.find_by_key(topic, key, begin, end, limit=limit, after=after)
        pages.extend(page.messages)
        if page.next_after is None:
            break
        after = page.next_after
    assert pages == want
    assert reader.find_by_key(topic, key, begin, end).total == len(want)


def test_a_hot_keys_records_are_read_a_batch_at_a_time(store, monkeypatch):
    from storelib.read import commitlog, indexfile
    path, _ = store
    reader = open_store(path)
    want = reference_find(reader, "orders", "hot", -(2**63), 2**63 - 1)
    assert len(want) > 20
    asked, real_read = [], commitlog.StoredRanges.read
    monkeypatch.setattr(commitlog.StoredRanges, "read", lambda self, ranges: asked.append(
        sum(rel.startswith("commitlog/") for rel, _, _ in ranges)) or real_read(self, ranges))
    for module in (commitlog, indexfile):
        monkeypatch.setattr(module, "RECORDS_AT_ONCE", 4)
    assert reader.find_by_key("orders", "hot").messages == want
    assert max(asked) == 4                      # records 4 at a time


def test_a_lookup_opens_each_file_once_and_asks_for_every_slot_at_once(store, monkeypatch):
    path, _ = store
    reader = open_store(path)
    opened, real_open = [], os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(p) or real_open(p, *a, **k))
    page = reader.find_by_key("orders", "k1")
    assert page.total > 5
    store_files = [p for p in opened if "/index/" in p or "/commitlog/" in p]
    assert len(store_files) == len(set(store_files))            # main: one open per slot, entry and record
    assert len([p for p in opened if "/index/" in p]) == len(reader.files.index)
    from storelib.io import checked
    asked, real_read = [], checked.StoredRanges.read
    monkeypatch.setattr(checked.StoredRanges, "read", lambda self, ranges: asked.append(list(ranges)) or
                        real_read(self, ranges))
    assert reader.find_by_key("orders", "k1").total == page.total
    slots = {r.rel for r in reader.files.index}
    assert {rel for rel, off, n in asked[0]} == slots and all(n == 4 for _, _, n in asked[0])     # one call
    assert max(len(a) for a in asked[1:]) > 1                   # chain entries of several files at once


def test_stored_ranges_hints_a_calls_ranges_before_reading_any(tmp_path, monkeypatch):
    from storelib.io import checked
    from storelib.io.localstore import open_local
    (tmp_path / "index").mkdir()
    data = os.urandom(1 << 20)
    (tmp_path / "index" / "f").write_bytes(data)
    calls, hint, pread = [], os.posix_fadvise, os.pread
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, advice: calls.append(("hint", off, advice)) or
                        hint(fd, off, n, advice))
    monkeypatch.setattr(os, "pread", lambda fd, n, off: calls.append(("read", off, None)) or pread(fd, n, off))
    ranges = [("index/f", 4096 * k, 20) for k in (7, 150, 220)]
    with checked.StoredRanges(open_local(str(tmp_path))) as files:
        assert files.read(ranges) == [data[o:o + n] for _, o, n in ranges]
        w = os.POSIX_FADV_WILLNEED
        assert calls == [("hint", 4096 * 7, w), ("hint", 4096 * 150, w), ("hint", 4096 * 220, w),
                         ("read", 4096 * 7, None), ("read", 4096 * 150, None), ("read", 4096 * 220, None)]
        calls.clear()
        assert files.read(ranges[:1]) == [data[4096 * 7:4096 * 7 + 20]] and calls == [("read", 4096 * 7, None)]


def test_stored_ranges_reads_exactly_or_says_the_file_is_short(tmp_path):
    from storelib.io.checked import StoredRanges
    from storelib.io.localstore import open_local
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "f").write_bytes(bytes(range(100)))
    with StoredRanges(open_local(str(tmp_path))) as files:
        assert files.read([("index/f", 10, 3), ("index/f", 0, 2), ("index/f", 99, 1)]) == [b"\n\x0b\x0c", b"\x00\x01",
                                                                                           b"c"]
        with pytest.raises(CorruptStore, match="truncated"):
            files.read([("index/f", 98, 4)])
        with pytest.raises(CorruptStore, match="missing file"):
            files.read([("index/gone", 0, 4)])
        fds = [fd for fd in files._fds.values() if fd is not None]
    for fd in fds:                                               # closed with the block
        with pytest.raises(OSError):
            os.fstat(fd)


def test_stored_ranges_sends_an_object_stores_ranges_together():
    """Elsewhere than a local file each range is a request: one call's requests are in flight at
    once (each read below returns only when all three have started)."""
    import threading

    from storelib.io.checked import StoredRanges
    together = threading.Barrier(3, timeout=10)

    class Remote:
        os_paths = False

        def read(self, rel, offset, length):
            together.wait()
            return bytes([offset]) * length

    with StoredRanges(Remote()) as files:
        assert files.read([("index/a", 1, 2), ("index/b", 2, 1), ("commitlog/c", 3, 3)]) == [b"\x01\x01", b"\x02",
                                                                                          b"\x03\x03\x03"]


@pytest.mark.parametrize("times", [[0, 5_000, 9_999, 20_000], [-5_000, 0, 1_500, 7_000],
                                   [1_000_000_000_000, 1_000_000_000_500, 3_200_000_000_000, 3_200_000_000_001]],
                         ids=["begins-at-0", "begins-before-0", "70-years-later"])
def test_entries_whose_time_diff_bounds_nothing_are_found_in_windows_and_pages(tmp_path, times):
    """An index file whose first message is stored at time <= 0 has timeDiff 0 in every entry, and
    a message stored 2^31 s or more after the first has Integer.MAX_VALUE (RocketMQ's putKey): a
    window or a page (``after``) past the first second must still find them."""
    from storelib.ingest.driver import run_ingest
    from storelib.read.query import open_store
    from storelib.runtime.localrun import LocalSession
    rows = [{"topic": "t", "queue_id": 0, "flag": 0, "sys_flag": 0, "born_timestamp": ts, "store_timestamp": ts,
             "born_host": "10.0.0.7:50123", "store_host": "192.168.0.10:10911", "reconsume_times": 0,
             "prepared_transaction_offset": 0, "body_b64": "eA==", "properties": [["KEYS", "k"]]} for ts in times]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = run_ingest(LocalSession(), str(tmp_path / "store"), str(path), "jsonl", load_config(None, CONFIG), quiet=True)
    assert s["status"] == "committed", s
    reader = open_store(str(tmp_path / "store"))
    every = reader.find_by_key("t", "k").messages
    assert [m["store_timestamp"] for m in every] == sorted(times)
    for lo, hi in ((times[2], times[3]), (times[1] + 1, None), (times[3], times[3])):
        got = reader.find_by_key("t", "k", lo, hi).messages
        assert [m["store_timestamp"] for m in got] == [t for t in sorted(times) if lo <= t and (hi is None or t <= hi)]
    paged, after = [], None
    for _ in range(len(times) + 1):
        page = reader.find_by_key("t", "k", limit=1, after=after)
        paged += [m["store_timestamp"] for m in page.messages]
        after = page.next_after
        if after is None:
            break
    assert paged == sorted(times)
