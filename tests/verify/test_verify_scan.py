"""verify's one-pass record scan (storelib/verify/scan.py) against zlib and the former multi-pass checks."""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

from support.opshelp import restore
from storelib.io import checksum
from storelib.codec import messages as codec, properties
from storelib.compute import crc32, kernels
from storelib.verify import commitlog as verify_records, kernels as verify_kernels, scan as verify_scan
from storelib.format import commitlog as cl, consumequeue, indexfile
from storelib.verify.kernels import index_summary, walk_chains


def test_crc32_equals_zlib_every_short_length_and_offset():
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    starts, ends = [], []
    for n in range(65):
        for a in rng.integers(0, len(data) - 64, 8):
            starts.append(int(a))
            ends.append(int(a) + n)
    for n in (100, 1000, 4000):                              # long ones: the 16-byte steps
        starts.append(3)
        ends.append(3 + n)
    got = crc32.crc32_slices(data, np.array(starts), np.array(ends))
    want = [zlib.crc32(data[a:b].tobytes()) for a, b in zip(starts, ends)]
    assert got.tolist() == want


def test_java_hash_is_string_hashcode():
    """The scan's topic and key hashes (kernels.java_hash_continue) are Java's String.hashCode
    over UTF-16 units: surrogate pairs above U+FFFF, multi-byte UTF-8 decoded."""
    words = ["", "a", "TopicTest", "caf\u00e9", "\u4e2d\u6587", "emoji \U0001F600 x", "x" * 70]
    raw = [w.encode("utf-8") for w in words]
    data = np.frombuffer(b"".join(raw), np.uint8)
    off = np.concatenate([[0], np.cumsum([len(r) for r in raw])]).astype(np.int64)

    def string_hash_code(w):
        h, units = 0, w.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
        return h
    assert kernels.java_hash_slices(data, off[:-1], off[1:]).tolist() == [string_hash_code(w) for w in words]


@pytest.fixture(scope="module")
def segments(tmp_path_factory):
    """The golden small-roll store's commitlog segments (bytes, base offset)."""
    store = restore("small-roll", "files.json", str(tmp_path_factory.mktemp("golden") / "small-roll"))
    d = os.path.join(store, "commitlog")
    return [(np.fromfile(os.path.join(d, n), dtype=np.uint8), int(n)) for n in sorted(os.listdir(d))]


def _scan(buf, base, deep=True, threads=1):
    starts, _, _ = kernels.walk_records(buf, 0, len(buf))
    return starts, verify_records.scan_check(buf, starts, base, deep, None, threads)[:4]


def test_scan_rows_equal_the_former_passes(segments):
    for buf, base in segments:
        starts, (msgs, facts, scan, good) = _scan(buf, base)
        recs = scan[0]
        f = kernels.record_fields(buf, starts)
        p = f[kernels.F_PROPS_POS]
        vs, ve = properties.property_spans_between(buf, p, p + f[kernels.F_PROPS_LEN], ["TAGS", "DELAY", "KEYS", "UNIQ_KEY"])
        tpos, tlen = f[kernels.F_TOPIC_POS], f[kernels.F_TOPIC_LEN]
        th = kernels.java_hash_slices(buf, tpos, tpos + tlen)
        key = (th.astype(np.uint64) << np.uint64(32) | crc32.crc32_slices(buf, tpos, tpos + tlen).astype(np.uint64))
        g = np.flatnonzero(good)
        assert np.array_equal(recs["topic_key"][g], key.view(np.int64)[g])
        tags = np.where(vs[0] >= 0, kernels.java_hash_slices(buf, vs[0], ve[0]).view(np.int32), 0)
        assert np.array_equal(recs["tags"][g], tags[g])
        for name in ("queue_id", "queue_offset", "store_ts", "size", "sysflag"):
            row = {"queue_id": kernels.F_QUEUEID, "queue_offset": kernels.F_QUEUEOFFSET, "store_ts": kernels.F_STORETS,
                   "size": kernels.F_SIZE, "sysflag": kernels.F_SYSFLAG}[name]
            assert np.array_equal(recs[name][g], f[row][g]), name
        rows, h = kernels.index_keys(buf, vs[3], ve[3], vs[2], ve[2], np.ones(len(starts), bool), th)
        first = np.searchsorted(rows, np.arange(len(starts) + 1))
        assert np.array_equal(recs["keys"][g], np.diff(first)[g])
        kh = codec.index_key_hash(h.view(np.int32)).astype(np.int64)
        for j in range(3):
            has = g[np.diff(first)[g] > j]
            assert np.array_equal(recs[f"key{j}"][has], kh[first[has] + j])


def _corrupt(buf, rng, starts):
    """A copy of ``buf`` with a few bytes changed inside records (header, lengths, body, properties)."""
    out = buf.copy()
    for _ in range(int(rng.integers(1, 4))):
        s = int(starts[rng.integers(0, len(starts))])
        at = s + int(rng.choice([0, 3, 7, 10, 15, 19, 27, 35, 39, 47, 60, 70, 80, 90, 100, 130, 200]))
        if at < len(out):
            out[at] ^= np.uint8(rng.integers(1, 256))
    return out


def fast_check(buf: np.ndarray, starts: np.ndarray, base: int, deep: bool):
    """The former multi-pass check (record_fields, then whole-array checks), the reference the
    scan is held to: ``check_records``' answer as (problems {position: what}, facts, fields, good).

    ``fields``: ``kernels.record_fields`` of every record; ``good``: the records that pass every
    field check (a superset of the problems is re-checked by ``_record_problems``, which names
    them, so the answer is that of ``check_records``); body CRCs (``deep``) of the good ones.
    """
    s = np.asarray(starts, dtype=np.int64)
    f = kernels.record_fields(buf, s)
    size, sysflag, qoff = f[kernels.F_SIZE], f[kernels.F_SYSFLAG], f[kernels.F_QUEUEOFFSET]
    total = cl.record_size(f[kernels.F_BODY_LEN], f[kernels.F_TOPIC_LEN], f[kernels.F_PROPS_LEN],
                           f[kernels.F_BORNHOST_LEN] == cl.HOST_V6_SIZE, f[kernels.F_STOREHOST_LEN] == cl.HOST_V6_SIZE,
                           f[kernels.F_MAGIC] == cl.MAGIC_V2)
    tran = sysflag & cl.TRANSACTION_MASK
    # PROPERTIESLENGTH 0 also stands for a length >= 32768 in record_fields: such records are re-checked.
    good = ((f[kernels.F_OK] == 1) & (size >= cl.MIN_RECORD_SIZE) & (total == size) & (f[kernels.F_PROPS_LEN] > 0)
            & (f[kernels.F_PHYS] == base + s) & (f[kernels.F_QUEUEID] >= 0) & (qoff >= 0)
            & ~(((tran == cl.TRANSACTION_PREPARED) | (tran == cl.TRANSACTION_ROLLBACK)) & (qoff != 0)))
    facts = {"min_ts": None, "max_ts": None, "bytes": int(size.sum())}
    msgs, slow = verify_records._record_problems(buf, s[~good], base, deep) if not good.all() else ({}, facts)
    ts = f[kernels.F_STORETS][good]
    lo = [v for v in (slow["min_ts"], int(ts.min()) if len(ts) else None) if v is not None]
    hi = [v for v in (slow["max_ts"], int(ts.max()) if len(ts) else None) if v is not None]
    facts.update(min_ts=min(lo) if lo else None, max_ts=max(hi) if hi else None)
    if deep and good.any():
        p_body = f[kernels.F_BODY_POS][good]
        crc = crc32.crc32_slices(buf, p_body, p_body + f[kernels.F_BODY_LEN][good]).astype(np.int64) & 0x7FFFFFFF
        stored = f[kernels.F_BODYCRC][good]
        for k in np.flatnonzero(crc != stored)[:verify_records.MAX_PROBLEMS_PER_FILE]:
            msgs[int(s[good][k])] = f"BODYCRC {stored[k]} but the body's crc32 & 0x7fffffff is {crc[k]}"
    msgs = {p: msgs[p] for p in sorted(msgs)[:verify_records.MAX_PROBLEMS_PER_FILE]}
    return msgs, facts, f, good



@pytest.mark.parametrize("threads", [1, 3])
def test_scan_finds_what_the_former_check_found(segments, threads, monkeypatch):
    """The same words, facts and soundness from the one-pass scan as from the former multi-pass
    check, in pieces of records or in checksum blocks (small blocks here: many pieces), and the
    blocks' digests those of the bytes."""
    monkeypatch.setattr(checksum, "BLOCK_SIZE", 4096 + 16 * threads)
    rng = np.random.default_rng(11)
    for trial in range(120):
        buf, base = segments[trial % len(segments)]
        starts, _, _ = kernels.walk_records(buf, 0, len(buf))
        bad = _corrupt(buf, rng, starts)
        starts, _, _ = kernels.walk_records(bad, 0, len(bad))
        for deep in (False, True):
            old_msgs, old_facts, _, old_good = fast_check(bad, starts, base, deep)
            from concurrent.futures import ThreadPoolExecutor
            end = int(starts[-1]) + int(_record_size(bad, starts[-1])) if len(starts) else 0
            with ThreadPoolExecutor(threads) as pool:
                for digest_end in (None, end + int(rng.integers(0, 9000))):
                    msgs, facts, _, good, digests = verify_records.scan_check(bad, starts, base, deep, pool, threads,
                                                                              digest_end)
                    assert msgs == old_msgs
                    assert facts == old_facts
                    assert np.array_equal(good, old_good)
                    B = checksum.BLOCK_SIZE
                    want = [] if digest_end is None else \
                        [checksum.block_digest(bad[a:min(a + B, digest_end)]) for a in range(0, digest_end, B)]
                    assert digests == want


def _record_size(buf, s):
    """TOTALSIZE of the record at ``s``."""
    return cl.parse_size_magic(buf, int(s))[0]


def _against_entries(buf, starts, recs, rows, pos, hashes, tdiff, begin):
    """entries_against over index entries at positions ``pos`` pointing at the records ``rows``:
    which of them it finds disagreeing (a mask over ``rows``)."""
    n = int(pos.max()) + 1
    ents = np.zeros(n, indexfile.ENTRY_DTYPE)
    ents["phys"] = 0x7FFF_FFFF_FFFF                        # (unused positions: beyond every record)
    ents["phys"][pos], ents["hash"][pos], ents["time_diff"][pos] = starts[rows], hashes, tdiff
    missing, bad = verify_scan.entries_against(ents.view(np.uint8), 0, int(pos.min()), n, buf, starts, 0, recs,
                                               begin)
    assert not len(set(missing) & set(pos.tolist()))
    return np.isin(pos, bad)


def test_entries_against_and_rows_beyond_three_keys(segments):
    buf, base = segments[0]
    starts, (_, _, scan, good) = _scan(buf, base)
    recs = scan[0].copy()
    g = np.flatnonzero(good)
    assert len(g) == len(starts)                             # (the rows are the segment's records)
    rollback = (recs["sysflag"] & cl.TRANSACTION_MASK) == cl.TRANSACTION_ROLLBACK
    has = g[(recs["keys"][g] > 0) & ~rollback[g]]
    assert len(has) > 5
    want = recs["key0"][has].astype(np.int64)
    ts = recs["store_ts"][has]
    begin = int(ts.min())
    tdiff = (ts - begin) // 1000
    pos = np.arange(len(has)) + 2
    assert not _against_entries(buf, starts, recs, has, pos, want, tdiff, begin).any()
    assert _against_entries(buf, starts, recs, has, pos, want ^ 1, tdiff, begin).all()
    assert _against_entries(buf, starts, recs, has, pos, want, tdiff + 1, begin).all()
    # A record with more keys than its row holds is looked at again: hide the row's keys.
    recs["keys"][has] = 4
    recs["key0"][has] = recs["key1"][has] = recs["key2"][has] = -5
    assert not _against_entries(buf, starts, recs, has, pos, want, tdiff, begin).any()
    assert _against_entries(buf, starts, recs, has, pos, -want - 1, tdiff, begin).all()
    rb = g[rollback[g]]
    if len(rb):
        assert _against_entries(buf, starts, recs, rb, rb + 2, recs["key0"][rb], np.zeros(len(rb)), 0).all()
    # entries at offsets where no record starts are missing, not bad
    ents = np.zeros(3, indexfile.ENTRY_DTYPE)
    ents["phys"] = [starts[has[0]], starts[has[0]] + 1, starts[has[1]]]
    ents["hash"] = [want[0], want[0], want[1]]
    missing, bad = verify_scan.entries_against(ents.view(np.uint8), 0, 0, 3, buf, starts, 0, scan[0], 0)
    assert missing.tolist() == [1] and bad.tolist() == []


def test_units_against(segments):
    buf, base = segments[0]
    starts, (_, _, scan, good) = _scan(buf, base)
    recs = scan[0]
    g = np.flatnonzero(good)
    r = recs[g]

    def against(rows, qoff0, size, tags, k, q):
        units = np.zeros(len(rows), consumequeue.UNIT_DTYPE)
        units["phys"], units["size"], units["tags"] = base + starts[rows], size, tags
        return verify_scan.units_against(units.view(np.uint8), 0, len(rows), starts, base, recs, qoff0, k, q)

    checked = 0
    for k in np.unique(r["topic_key"])[:2]:
        for q in np.unique(r["queue_id"][r["topic_key"] == k]):
            rows = g[(r["topic_key"] == k) & (r["queue_id"] == q)]
            checked += 1
            qoff0 = int(recs["queue_offset"][rows[0]])
            if not np.array_equal(recs["queue_offset"][rows], qoff0 + np.arange(len(rows))):
                checked -= 1                                 # (a queue whose units are not all in this segment)
                continue
            args = (rows, qoff0, recs["size"][rows], recs["tags"][rows], int(k), int(q))
            tran = recs["sysflag"][rows] & cl.TRANSACTION_MASK
            ok = (tran != cl.TRANSACTION_PREPARED) & (tran != cl.TRANSACTION_ROLLBACK)
            missing, bad = against(*args)
            assert len(missing) == 0 and bad.tolist() == np.flatnonzero(~ok).tolist()
            assert len(against(rows, qoff0 + 1, *args[2:])[1]) == len(rows)
            assert len(against(*args[:5], int(q) + 1)[1]) == len(rows)
            assert len(against(rows, qoff0, args[2] + 1, *args[3:])[1]) == len(rows)
            assert len(against(rows, qoff0, args[2], args[3] ^ 1, *args[4:])[1]) == len(rows)
    assert checked >= 1


def test_units_by_records_agrees_with_units_against(segments):
    """The record-by-record sweep finds the units units_against finds disagreeing, and gives a
    file up (None) when a unit points at anything but its own record."""
    rng = np.random.default_rng(3)
    for buf, base in segments:
        starts, (_, _, scan, good) = _scan(buf, base)
        recs = scan[0]
        g = np.flatnonzero(good)
        r = recs[g]
        queues = sorted(set(zip(r["topic_key"].tolist(), r["queue_id"].tolist())))
        for trial in range(6):
            files, want = [], []
            for k, q in queues:
                rows = g[(r["topic_key"] == k) & (r["queue_id"] == q)]
                tran = recs["sysflag"][rows] & cl.TRANSACTION_MASK
                rows = rows[(tran != cl.TRANSACTION_PREPARED) & (tran != cl.TRANSACTION_ROLLBACK)]
                if not len(rows):
                    continue
                qoff = recs["queue_offset"][rows]
                first = int(qoff.min()) - int(rng.integers(0, 3))  # units before the range: another segment's
                units = np.zeros(int(qoff.max()) - first + 1, consumequeue.UNIT_DTYPE)
                units["phys"] = base - 1000                  # (not in this segment)
                units["phys"][qoff - first] = base + starts[rows]
                units["size"][qoff - first] = recs["size"][rows]
                units["tags"][qoff - first] = recs["tags"][rows]
                a = int(qoff.min()) - first
                b = int(qoff.max()) - first + 1
                if not np.array_equal(np.sort(qoff), np.arange(qoff.min(), qoff.max() + 1)):
                    continue                                 # (a gap: a record of the queue elsewhere)
                what = trial % 3 if trial else -1                # damage one unit: size, tags, where
                i = int(rng.integers(a, b))
                if what == 0:
                    units["size"][i] += 1
                elif what == 1:
                    units["tags"][i] ^= 4
                elif what == 2 and len(starts) > 1:
                    units["phys"][i] = base + starts[(np.searchsorted(starts, units["phys"][i] - base) + 1) % len(starts)]
                cq = units.view(np.uint8)
                files.append((cq, a, b, first, k, q))
                m, bad = verify_scan.units_against(cq, a, b, starts, base, recs, first, k, q)
                want.append((m.tolist(), bad.tolist()))
            got = verify_scan.units_by_records(starts, base, recs, files)
            assert len(got) == len(files) > 0
            for res, (m, bad) in zip(got, want):
                if res is None:                              # given up: a unit points elsewhere
                    assert m or bad
                else:
                    assert not m and res.tolist() == bad
            if trial == 0:
                assert all(res is not None and not len(res) for res in got)


def _appended_chains(rng, n, nslots):
    """(slots, hashes, prev) of ``n - 1`` entries appended in order (entry 0 unused)."""
    hashes = np.concatenate([[0], rng.integers(0, 2**31, n - 1)]).astype(np.int64)
    prev = np.zeros(n, np.int64)
    slots = np.zeros(nslots, np.int64)
    for p in range(1, n):
        s = hashes[p] % nslots
        prev[p], slots[s] = slots[s], p
    return slots, hashes, prev


def _walk_finds_nothing(slots, hashes, prev, nslots):
    heads = np.flatnonzero(slots > 0)
    if (slots[heads] >= len(prev)).any():
        return False
    slot_of, dups = walk_chains(heads, slots[heads], prev, len(prev), 50)
    reach = slot_of[1:]
    return not dups and (reach >= 0).all() and (hashes[1:] % nslots == reach).all()


def _entry_bytes(hashes, prev, phys=None):
    """Index entries (``indexfile``'s layout) holding these fields, as the bytes of a file whose
    entry table starts at 0."""
    ents = np.zeros(len(prev), indexfile.ENTRY_DTYPE)
    ents["hash"], ents["prev"] = hashes, prev
    ents["phys"] = np.arange(len(prev)) * 100 if phys is None else phys
    return ents.view(np.uint8)


def _chains_in_order(slots, hashes, prev, nslots):
    return index_summary(_entry_bytes(hashes, prev), 0, len(prev), slots, nslots, 0, 1 << 30,
                         np.zeros(1, np.int64)).in_order


def test_chains_in_order_only_when_the_walk_finds_nothing():
    rng = np.random.default_rng(5)
    for trial in range(300):
        nslots = int(rng.integers(1, 40))
        slots, hashes, prev = _appended_chains(rng, int(rng.integers(1, 200)), nslots)
        if trial % 3:                                       # damage: a prevPos, a slot, a hash
            arr = [slots, hashes, prev][trial % 3 if trial % 2 else 0]
            if len(arr) > 1:
                arr[int(rng.integers(1 if arr is not slots else 0, len(arr)))] ^= int(rng.integers(1, 8))
        fast = _chains_in_order(slots, hashes, prev, nslots)
        if fast:
            assert _walk_finds_nothing(slots, hashes, prev, nslots)
        if trial % 3 == 0:
            assert fast


def test_index_summary_counts_what_the_naming_checks_count():
    """index_summary's counts (a sound file skips the checks that name each problem) are the
    numpy definitions those checks use, for damaged entries too."""
    rng = np.random.default_rng(11)
    F = 1000
    for trial in range(200):
        n = int(rng.integers(2, 120))
        hashes = rng.integers(-3, 50, n)
        prev = rng.integers(-2, n + 2, n)
        phys = np.sort(rng.integers(0, 6 * F, n)) if trial % 2 else rng.integers(0, 6 * F, n)
        bases = np.sort(rng.choice(np.arange(6) * F, int(rng.integers(1, 6)), replace=False))
        min_phy = int(rng.integers(0, 2 * F))
        sm = index_summary(_entry_bytes(hashes, prev, phys), 0, n, np.zeros(7, np.int64), 7, min_phy, F, bases)
        pos = np.arange(1, n)
        p, h, e = prev[1:], hashes[1:], phys[1:]
        assert sm.bad_prev == int(((p < 0) | (p >= pos)).sum())
        assert sm.negative_hash == int((h < 0).sum())
        assert sm.heads == int((p == 0).sum())
        assert (sm.first_phys, sm.last_phys) == (phys[1], phys[-1])
        assert sm.descending == int((np.diff(e) < 0).sum())
        assert sm.lost == int(((e >= min_phy) & ~np.isin(e // F * F, bases)).sum())


def test_scan_buffers_are_handed_on_and_walks_need_room(segments):
    buf, base = segments[0]
    pool = verify_records.ScanBuffers()
    cap = kernels.walk_capacity(0, len(buf))
    first = pool.take(cap)
    pool.give(first)
    again = pool.take(cap)
    assert again is first                                   # the same arrays, pages already touched
    assert pool.take(cap) is not first                      # (a second segment at once: its own)
    starts, _, _ = kernels.walk_records(buf, 0, len(buf), again[0])
    assert starts.tolist() == kernels.walk_records(buf, 0, len(buf))[0].tolist()
    filled = verify_records.scan_check(buf, starts, base, True, None, 1, None, again[1:])
    assert all(np.shares_memory(a, b) for a, b in zip(filled[2], again[1:]))      # its arrays, filled
    fresh = verify_records.scan_check(buf, starts, base, True)
    assert filled[:2] == fresh[:2] and np.array_equal(filled[3], fresh[3])
    with pytest.raises(ValueError):
        kernels.walk_records(buf, 0, len(buf), np.empty(cap - 1, np.int64))


def test_queue_summary_counts_what_the_naming_checks_count():
    """queue_summary's counts (a sound queue file skips the checks that name each problem) are
    the numpy definitions those checks use, for damaged units too."""
    rng = np.random.default_rng(13)
    F = 1000
    for trial in range(200):
        n = int(rng.integers(0, 80))
        units = np.zeros(n, consumequeue.UNIT_DTYPE)
        phys = np.sort(rng.integers(-5, 6 * F, n)) if trial % 2 else rng.integers(-5, 6 * F, n)
        units["phys"], units["size"] = phys, rng.integers(-2, 300, n)
        bases = np.sort(rng.choice(np.arange(6) * F, int(rng.integers(1, 6)), replace=False))
        prev, max_phy, min_phy = int(rng.integers(-1, 50)), int(rng.integers(3 * F, 6 * F)), int(rng.integers(0, 2 * F))
        sm = verify_kernels.queue_summary(units.view(np.uint8), n, prev, max_phy, min_phy, F, bases)
        size = units["size"].astype(np.int64)
        assert sm.not_in_use == int((~consumequeue.unit_in_use(phys, size)).sum())
        assert sm.not_ascending == int((np.diff(np.concatenate([[prev], phys])) <= 0).sum())
        assert sm.past_end == int((phys + size > max_phy).sum())
        assert sm.lost == int(((phys >= min_phy) & ~np.isin(phys // F * F, bases)).sum())
        if n:
            assert (sm.min_phys, sm.max_phys) == (phys.min(), phys.max())
