"""The index file header / slot / entry layout (storelib/format/indexfile.py; docs/FORMAT.md §3).

Like RocketMQ's IndexFileTest, without Spark: a tiny index file (4 slots, 8 entries) written
through ``IndexFileBuilder`` (the compiled putKey) and through a one-entry-at-a-time reference
built on the layout helpers, read back with the parse helpers; a golden small-roll index file
parsed and re-packed byte for byte.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from support import goldenlib
from conftest import golden_set
from storelib.format import indexfile as ix
from storelib.ingest.indexfile import IndexFileBuilder
from storelib.format.config import StoreConfig

TINY = StoreConfig(maxHashSlotNum=4, maxIndexNum=8)


def _golden_file(rel: str) -> bytes:
    root, files = goldenlib.load_listing(golden_set("small-roll"))
    f = next(f for f in files if f["path"] == rel)
    return b"".join(goldenlib.golden_blocks(os.path.join(root, f["stored_as"]), f["size"]))


def test_layout_constants():
    assert ix.HEADER_SIZE == ix.HEADER_DTYPE.itemsize == 40
    assert [ix.HEADER_DTYPE.fields[n][1] for n in ix.IndexHeader._fields] == \
        [ix.HEADER_BEGIN_TIMESTAMP, ix.HEADER_END_TIMESTAMP, ix.HEADER_BEGIN_PHY_OFFSET, ix.HEADER_END_PHY_OFFSET,
         ix.HEADER_HASH_SLOT_COUNT, ix.HEADER_INDEX_COUNT] == [0, 8, 16, 24, 32, 36]
    assert ix.SLOT_SIZE == ix.SLOT_DTYPE.itemsize == 4
    assert ix.ENTRY_SIZE == ix.ENTRY_DTYPE.itemsize == 20
    assert [ix.ENTRY_DTYPE.fields[n][1] for n in ("hash", "phys", "time_diff", "prev")] == \
        [ix.ENTRY_KEY_HASH, ix.ENTRY_PHY_OFFSET, ix.ENTRY_TIME_DIFF, ix.ENTRY_PREV_POS] == [0, 4, 12, 16]
    assert ix.file_size(4, 8) == TINY.index_file_size == 40 + 16 + 160
    assert ix.slot_offset(3) == 52 and ix.entries_offset(TINY) == 56 and ix.entry_offset(7, TINY) == 196
    assert StoreConfig().index_file_size == 420000040


def test_header_round_trip_and_reader_api():
    h = ix.IndexHeader(1710057604507, 1710057700000, 244, 9999, 3, 5)
    raw = h.to_bytes()
    assert len(raw) == ix.HEADER_SIZE
    assert ix.IndexHeader.parse(raw + b"\x01" * 10) == h == ix.IndexHeader.from_bytes(raw)
    assert np.frombuffer(raw, ix.HEADER_DTYPE)[0].tolist() == tuple(h)
    assert h.to_dict() == {"begin_timestamp": 1710057604507, "end_timestamp": 1710057700000,
                           "begin_phy_offset": 244, "end_phy_offset": 9999, "hash_slot_count": 3, "index_count": 5}
    assert ix.IndexHeader() == (0, 0, 0, 0, 0, 1)              # a new file: indexCount starts at 1
    assert hash(h) == hash(ix.IndexHeader(*h))                  # usable inside NamedTuple file refs
    assert ix.IndexHeader.inherited(9999, 1710057700000) == (1710057700000, 1710057700000, 9999, 9999, 0, 1)
    assert ix.IndexHeader.inherited(0, 0) == ix.IndexHeader()


def _reference_put(data: bytearray, header: ix.IndexHeader, key_hash: int, phy: int, ts: int) -> ix.IndexHeader:
    """IndexFile.putKey for one entry, written with the layout helpers only (docs/FORMAT.md §3.3)."""
    slot = key_hash % TINY.maxHashSlotNum
    head = ix.parse_slot(data, ix.slot_offset(slot))
    if head <= 0 or head > header.index_count:
        head = 0
    if header.begin_timestamp <= 0:
        td = 0
    else:
        d = ts - header.begin_timestamp
        td = min(max(int(d / 1000), 0), ix.INT_MAX)
    pos = header.index_count
    at = ix.entry_offset(pos, TINY)
    data[at:at + ix.ENTRY_SIZE] = ix.pack_entry(key_hash, phy, td, head)
    data[ix.slot_offset(slot):ix.slot_offset(slot) + ix.SLOT_SIZE] = ix.encode_slots(np.array([pos]))
    if header.index_count <= 1:
        header = header._replace(begin_phy_offset=phy, begin_timestamp=ts)
    return header._replace(hash_slot_count=header.hash_slot_count + (head == 0), index_count=pos + 1,
                           end_phy_offset=phy, end_timestamp=ts)


def test_tiny_index_file_fills_up_and_matches_the_reference():
    # 7 entries fill a file of maxIndexNum 8 (position 0 is never used); hashes 1, 5, 9 share slot 1.
    hashes = np.array([1, 5, 2, 9, 3, 4, 1], np.int64)
    phys = np.arange(7, dtype=np.int64) * 100 + 1000
    ts = np.array([5000, 5999, 7000, 7001, 4000, 9000, 10500], np.int64)
    b = IndexFileBuilder(TINY, ix.IndexHeader.inherited(900, 3000))
    b.put_keys(hashes[:3], phys[:3], ts[:3])          # two runs: the kernel continues where it stopped
    b.put_keys(hashes[3:], phys[3:], ts[3:])
    assert b.room() == 0
    with pytest.raises(ValueError):
        b.put_keys(hashes[:1], phys[:1], ts[:1])
    data = b"".join(bytes(c) for c in b.chunks())
    assert len(data) == b.valid_bytes() == TINY.index_file_size      # full: nothing left to zero-fill

    ref = bytearray(TINY.index_file_size)
    h = ix.IndexHeader.inherited(900, 3000)
    for k in range(7):
        h = _reference_put(ref, h, int(hashes[k]), int(phys[k]), int(ts[k]))
    ref[:ix.HEADER_SIZE] = h.to_bytes()
    assert data == bytes(ref)

    # read back with the parse helpers
    hdr = ix.IndexHeader.parse(data)
    assert hdr == h == b.header
    assert (hdr.index_count, hdr.hash_slot_count) == (8, 4)          # slots 1, 2, 3, 0 taken
    assert (hdr.begin_phy_offset, hdr.end_phy_offset, hdr.begin_timestamp, hdr.end_timestamp) == (1000, 1600, 5000,
                                                                                                10500)
    assert ix.decode_slots(data, 4, ix.slot_offset(0)).tolist() == [6, 7, 3, 5]
    ents = ix.decode_entries(data, hdr.index_count, ix.entries_offset(TINY))
    assert ents["prev"].tolist() == [0, 0, 1, 0, 2, 0, 0, 4]
    # the first entry's timeDiff is measured from the inherited begin (3000), later ones from 5000
    assert ents["time_diff"].tolist() == [0, 2, 0, 2, 2, 0, 4, 5]
    # the chain of slot 1, newest first: positions 7 (hash 1), 4 (hash 9), 2 (hash 5), 1 (hash 1)
    chain, pos = [], ix.parse_slot(data, ix.slot_offset(1))
    while pos:
        kh, phy, td, prev = ix.parse_entry(data, ix.entry_offset(pos, TINY))
        chain.append((pos, kh, phy))
        pos = prev
    assert chain == [(7, 1, 1600), (4, 9, 1300), (2, 5, 1100), (1, 1, 1000)]
    # the next file inherits the end values (§3.4)
    assert ix.IndexHeader.inherited(hdr.end_phy_offset, hdr.end_timestamp) == (10500, 10500, 1600, 1600, 0, 1)
    # re-opened from its bytes, the builder gives the same file
    again = IndexFileBuilder.from_bytes(TINY, data)
    assert b"".join(bytes(c) for c in again.chunks()) == data


def test_golden_index_file_parses_and_repacks_byte_identically():
    cfg = StoreConfig(maxHashSlotNum=64, maxIndexNum=256)
    data = _golden_file("index/20000101000000000")
    assert len(data) == cfg.index_file_size
    hdr = ix.IndexHeader.parse(data)
    assert hdr.index_count == cfg.maxIndexNum                   # the first file filled up and rolled
    slots = ix.decode_slots(data, cfg.maxHashSlotNum, ix.slot_offset(0))
    ents = ix.decode_entries(data, hdr.index_count, ix.entries_offset(cfg))
    assert int((ents["prev"][1:] == 0).sum()) == hdr.hash_slot_count
    assert (int(ents["phys"][1]), int(ents["phys"][-1])) == (hdr.begin_phy_offset, hdr.end_phy_offset)
    repacked = hdr.to_bytes() + ix.encode_slots(slots) + b"".join(
        ix.pack_entry(*(int(x) for x in e)) for e in ents.tolist())
    assert repacked == data
    b = IndexFileBuilder.from_bytes(cfg, data)
    assert b"".join(bytes(c) for c in b.chunks()) == data
    for s in range(cfg.maxHashSlotNum):                          # every slot heads a chain of its own hashes
        pos = ix.parse_slot(data, ix.slot_offset(s))
        while pos:
            kh, _, _, prev = ix.parse_entry(data, ix.entry_offset(pos, cfg))
            assert kh % cfg.maxHashSlotNum == s and prev < pos
            pos = prev


# ----------------------------------------------------------------------------- appended in place
def _index_store(tmp_path, data: bytes, name: str = "20240601000000000"):
    from storelib.io.storage import Store
    root = tmp_path / name
    (root / ix.DIR).mkdir(parents=True)
    (root / ix.DIR / name).write_bytes(data + bytes(TINY.index_file_size - len(data)))
    return Store(str(root)), f"{ix.DIR}/{name}"


def test_snapshot_readers_skip_entries_appended_after_it(tmp_path):
    """A later batch appends entries to the file in place and moves the slot heads and the header
    while readers of the older snapshot read it: they must see only the snapshot's entries (those
    below its indexCount) and still follow the newer entries' prevPos back into them."""
    import json

    from storelib.read import keylookup
    from storelib.read.indexfile import IndexReader
    from storelib.table.storefiles import IndexFileRef
    from storelib.verify.access import VerifyContext
    from storelib.verify.indexfile import verify_index

    b = IndexFileBuilder(TINY, ix.IndexHeader.inherited(900, 3000))
    b.put_keys(np.array([1, 5, 2], np.int64), np.array([1000, 1100, 1200], np.int64),
               np.array([5000, 5999, 7000], np.int64))
    snap = b.header                                                 # what the first batch committed
    old = b"".join(bytes(c) for c in b.chunks())
    b.put_keys(np.array([9, 1, 3], np.int64), np.array([1300, 1400, 1500], np.int64),
               np.array([7001, 8000, 9000], np.int64))              # the next batch, in the same file
    new = b"".join(bytes(c) for c in b.chunks())
    assert ix.decode_slots(new, 4, ix.slot_offset(0))[1] == 5      # slot 1's head is a newer entry now
    s_old, rel = _index_store(tmp_path / "old", old)
    s_new, _ = _index_store(tmp_path / "new", new)
    ref = IndexFileRef(rel, snap.index_count, snap)
    for h in (1, 2, 3, 4, 5, 9, 13):
        answers = []
        for s in (s_old, s_new):
            r = IndexReader(s, [ref], TINY, None)
            out: list = []
            r.select_phy_offsets(0, out, h, 64, 0, 2**62)
            answers.append((out, sorted(r.chain_offsets(h, -(2**63), 2**63 - 1))))
        assert answers[0] == answers[1], h
        assert answers[0][1] == {1: [1000], 5: [1100], 2: [1200]}.get(h, []), h
        entries_at = ix.entries_offset(TINY)
        hashes = np.array([h], np.int32)
        got = [keylookup._chains_by_range_reads(s, TINY, rel, snap.index_count, hashes, entries_at)[1].tolist()
               for s in (s_old, s_new)]
        assert got[0] == got[1], h
        assert sorted(keylookup.index_candidates(s_new, TINY, ref, hashes).column("phy").to_pylist()) == \
            sorted(got[0]), h
    # verify of the snapshot: the newer entries and heads are not damage
    row = {"path": rel, "batch_id": "b1", "valid_bytes": b.valid_bytes() - 3 * ix.ENTRY_SIZE, "count": 3,
           "file_size": TINY.index_file_size, "checksum": None, "detail": json.dumps({"header": snap.to_dict()})}
    for s in (s_old, s_new):
        ctx = VerifyContext(store=s.uri, config=TINY, deep=False, segments=[], min_phy=0, max_phy=0, local_store=s)
        rep = verify_index(ctx, {"path": rel, "manifest": row})
        assert rep["problems"] == [], rep["problems"]
    # a newer entry whose prevPos does not lead back, or a header whose indexCount grew without
    # entries behind it, is damage (the snapshot's readers would meet it), not an append
    bad = bytearray(new)
    at = ix.entry_offset(5, TINY) + ix.ENTRY_PREV_POS
    bad[at:at + 4] = (7).to_bytes(4, "big")
    grown = bytearray(old)
    grown[ix.HEADER_INDEX_COUNT:ix.HEADER_INDEX_COUNT + 4] = (6).to_bytes(4, "big")
    for name, data, what in (("bad", bad, "slot 1 points to entry 5"), ("grown", grown, "differs from the manifest")):
        s_bad, _ = _index_store(tmp_path / name, bytes(data))
        ctx = VerifyContext(store=s_bad.uri, config=TINY, deep=False, segments=[], min_phy=0, max_phy=0,
                            local_store=s_bad)
        rep = verify_index(ctx, {"path": rel, "manifest": row})
        assert any(p.path == rel and what in p.what for p in rep["problems"]), rep["problems"]


def test_name_time_keeps_names_spellable_and_increasing():
    """A file is named by its begin time while that is later than the previous name and a
    four-digit year; else 1 ms after the previous name (store times RocketMQ wrote in the year
    10000, or going back)."""
    assert ix.name_time(0, 1_700_000_000_000) == 1_700_000_000_000
    assert ix.name_time(1_700_000_000_000, 1_600_000_000_000) == 1_700_000_000_001
    assert ix.name_time(5, -1000) == 6
    assert ix.name_time(0, ix.NAME_LATEST) == ix.NAME_LATEST
    prev, names = 0, []
    for t in (1_700_000_000_000, 253_402_300_799_000, 253_402_300_800_000, 2**53, 2**63 - 1, 1):
        prev = ix.name_time(prev, t)
        names.append(ix.file_name(prev))
    assert names == sorted(set(names)) and all(len(n) == 17 for n in names)
    assert [ix.name_millis(n) for n in names] == [1_700_000_000_000 + i for i in range(6)]
