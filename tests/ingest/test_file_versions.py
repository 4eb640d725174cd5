"""How a batch writes file versions, without Spark: block checksums (storelib.io.checksum), in-place
patches and their undo (storelib.io.patches), object-store extents (storelib.io.fragments).

Like RocketMQ's IndexFileTest: tiny files (an index file of 4 slots and 8 entries), a committed
version, a batch appended in place, a batch killed half way and trimmed back to the byte.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from storelib.io import checksum, fragments, patches, storage
from storelib.format import indexfile as ix
from storelib.format.config import StoreConfig
from storelib import errors
from storelib.errors import CorruptStore
from storelib.format import paths
from storelib.ingest.indexfile import IndexFileBuilder

TINY = StoreConfig(maxHashSlotNum=4, maxIndexNum=8)


# ---------------------------------------------------------------------------- checksums
def test_block_checksum_resumes_from_the_committed_blocks(monkeypatch):
    monkeypatch.setattr(checksum, "BLOCK_SIZE", 64)
    data = os.urandom(1000)
    whole = checksum.checksum_of_bytes(data)
    assert whole == hashlib.sha256(b"".join(hashlib.sha256(data[i:i + 64]).digest()
                                            for i in range(0, 1000, 64))).hexdigest()
    committed = checksum.file_checksum(lambda p, n: data[p:p + n], 300)[1]
    # append from 300: only the block holding byte 300 is read back
    h = checksum.BlockHasher(300, committed, data[256:300])
    h.update(data[300:700])
    h.update(data[700:])
    assert h.finish()[0] == whole
    # in place: bytes 10..12 changed, 300.. appended; blocks 0 and 4.. are hashed again
    changed = bytearray(data)
    changed[10:12] = b"zz"
    reads = []

    def read_at(p, n):
        reads.append(p // 64)
        return bytes(changed[p:p + n])
    got = checksum.rehash_blocks(read_at, 1000, committed, [(10, 12), (300, 1000)])
    assert checksum.combine(got) == checksum.checksum_of_bytes(bytes(changed))
    assert sorted(reads) == [0] + list(range(4, 16))
    with pytest.raises(ValueError):
        checksum.BlockHasher(300, committed[:2], data[256:300])     # the digests before are missing
    assert checksum.checksum_of_bytes(b"") == hashlib.sha256(b"").hexdigest()


# ---------------------------------------------------------------------------- index files in place
def _entries(n, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(-2**31, 2**31, n).astype(np.int32), np.arange(n, dtype=np.int64) * 100 + 7,
            np.full(n, 1_700_000_000_000, np.int64) + np.arange(n) * 1000)


def _committed_index(tmp_path, n=3):
    """A store holding a tiny index file of ``n`` entries, and its manifest row."""
    st = storage.Store(str(tmp_path / "store"))
    b = IndexFileBuilder(TINY, ix.IndexHeader())
    b.put_keys(*_entries(n, 1))
    rel = "index/20240101000000000"
    st.write_file(rel, b.chunks(), TINY.index_file_size)
    data = st.read(rel, 0, b.valid_bytes())
    row = {"path": rel, "kind": "index", "file_size": TINY.index_file_size, "valid_bytes": b.valid_bytes(),
           "detail": json.dumps({"header": b.header.to_dict(),
                                 "blocks": checksum.digests_to_detail(checksum.file_checksum(
                                     lambda p, k: data[p:p + k], len(data))[1])})}
    return st, rel, row, b


def _append_in_place(st, rel, header, n_new, seed, phase_link=True):
    """What a batch's patch does to the file: entries, then slot heads and header."""
    slots = ix.decode_slots(st.read(rel, ix.slot_offset(0), TINY.maxHashSlotNum * ix.SLOT_SIZE))
    b = IndexFileBuilder.for_append(TINY, header, slots)
    before = slots.copy()
    b.put_keys(*_entries(n_new, seed))
    parts = [(ix.entry_offset(header.index_count, TINY), b.new_entries(), patches.PHASE_APPEND)]
    if phase_link:
        parts += [(p, d, patches.PHASE_LINK) for p, d in patches.slot_extents(b.slots, np.flatnonzero(b.slots != before))]
        parts.append((0, b.header.to_bytes(), patches.PHASE_LINK))
    staged = "_rocketlake/staging/b/a/files/t/" + rel + ".entries.patch"
    ext = patches.stage_patch(st, staged, parts, durable=False)
    patches.apply_patches(st, [{"path": rel, "staged": staged, "extents": ext}], durable=False)
    return b, parts


def test_index_appended_in_place_equals_one_whole_build(tmp_path):
    st, rel, row, _ = _committed_index(tmp_path)
    header = ix.IndexHeader(**json.loads(row["detail"])["header"])
    b, parts = _append_in_place(st, rel, header, 4, 2)
    whole = IndexFileBuilder(TINY, ix.IndexHeader())
    whole.put_keys(*_entries(3, 1))
    whole.put_keys(*_entries(4, 2))
    expect = b"".join(bytes(memoryview(c)) for c in whole.chunks())
    got = st.read(rel)
    assert got[:len(expect)] == expect and got[len(expect):] == bytes(len(got) - len(expect))
    # the new version's checksum from the committed block digests and the patch alone
    known = checksum.digests_from_detail(json.loads(row["detail"])["blocks"])
    read_new = patches.overlay_reader(lambda p, n: st.read(rel, p, n), [])
    digests = checksum.rehash_blocks(read_new, b.valid_bytes(), known,
                                     [(p, p + len(bytes(memoryview(d)))) for p, d, _ in parts])
    assert checksum.combine(digests) == checksum.checksum_of_bytes(expect)


@pytest.mark.parametrize("linked", [False, True])
def test_a_later_version_is_trimmed_back_to_the_byte(tmp_path, linked):
    """Entries (and, ``linked``, slot heads and header) a later batch appended: trimming a copy
    to the earlier row walks the slot heads back along the entries' links, cuts the entries and
    rewrites the header: the file is byte-identical to the earlier version (export and verify of
    an earlier snapshot)."""
    st, rel, row, _ = _committed_index(tmp_path)
    before = st.read(rel)
    header = ix.IndexHeader(**json.loads(row["detail"])["header"])
    _append_in_place(st, rel, header, 4, 3, phase_link=linked)
    assert st.read(rel) != before
    patches.trim_file(st, row, TINY)
    assert st.read(rel) == before


def test_settle_slots_refuses_links_that_do_not_lead_back(tmp_path):
    st, rel, row, b = _committed_index(tmp_path)
    header = ix.IndexHeader(**json.loads(row["detail"])["header"])
    bad = ix.decode_slots(st.read(rel, ix.slot_offset(0), 16)).copy()
    bad[0] = header.index_count                  # points at an entry past the committed ones ...
    st.write_at(rel, [(ix.entry_offset(header.index_count, TINY), ix.pack_entry(1, 2, 0, header.index_count))])
    with pytest.raises(CorruptStore, match="does not lead back"):     # ... whose link loops
        patches.settle_slots(st, rel, TINY, bad, header.index_count)
    bad[0] = 99
    with pytest.raises(CorruptStore, match="past the file"):
        patches.settle_slots(st, rel, TINY, bad, header.index_count)


def test_segment_tail_is_cut(tmp_path):
    st = storage.Store(str(tmp_path / "s"))
    st.write_file("commitlog/00000000000000000000", [b"x" * 100], 1024)
    st.write_at("commitlog/00000000000000000000", [(100, b"y" * 50)])
    patches.trim_file(st, {"path": "commitlog/00000000000000000000", "kind": "commitlog", "valid_bytes": 100,
                           "file_size": 1024}, TINY)
    assert st.read("commitlog/00000000000000000000") == b"x" * 100 + bytes(924)


# ---------------------------------------------------------------------------- object-store extents
def test_overlay_keeps_what_new_extents_do_not_cover():
    objs = paths.OBJECTS_DIR
    prior = [[0, 100, f"{objs}/a", 0], [100, 50, f"{objs}/b", 0]]
    new = [[0, 40, f"{objs}/head", 0], [150, 10, f"{objs}/c", 0]]
    assert fragments.overlay(prior, new) == [(0, 40, f"{objs}/head", 0), (40, 60, f"{objs}/a", 40),
                                             (100, 50, f"{objs}/b", 0), (150, 10, f"{objs}/c", 0)]


@pytest.mark.parametrize("bad", [
    "x", [[0, 10, "commitlog/000", 0]], [[0, 10, "_rocketlake/objects/a", -1]],
    [[0, 10, "_rocketlake/objects/a", 0], [5, 10, "_rocketlake/objects/b", 0]], [[0, 10, 5, 0]], [[0, 10]],
])
def test_damaged_extents_are_refused(bad):
    with pytest.raises(ValueError):
        fragments.extents_from_detail(bad)


def test_a_file_assembles_from_objects_and_never_reads_outside_the_store(tmp_path):
    st = storage.Store(str(tmp_path / "s"))
    objs = paths.OBJECTS_DIR
    st.write_file(f"{objs}/b/a/t/x.1", [b"hello"])
    st.write_file(f"{objs}/b/a/t/x.2", [b"--world"])
    st.map_file("commitlog/x", 20, [[2, 5, f"{objs}/b/a/t/x.1", 0], [10, 5, f"{objs}/b/a/t/x.2", 2]])
    assert st.read("commitlog/x") == b"\0\0hello\0\0\0world\0\0\0\0\0"
    assert st.size("commitlog/x") == 20 and st.exists("commitlog/x")
    with pytest.raises(errors.StorePathError):
        st.map_file("commitlog/y", 20, [[0, 5, "_rocketlake/objects/../../../etc/passwd", 0]])


def test_object_store_extents_stay_bounded_across_many_small_batches(tmp_path, monkeypatch):
    """Each batch adds an extent to a continued file; past MAX_EXTENTS a run of them is rewritten
    as one object, never more bytes than the version's merge budget (the driver's plan, else
    what the version adds). Every version still reads back whole and matches its checksum."""
    from storelib.ingest.context import WriteContext
    from storelib.ingest.file_versions import FileVersion
    from storelib.ingest.topics import Topics
    monkeypatch.setattr(fragments, "MAX_EXTENTS", 3)
    st = storage.Store(str(tmp_path / "s"))
    data, committed, counts = b"", {}, []
    for i in range(12):
        chunk = bytes([i + 1]) * (100 + i)
        ctx = WriteContext(store=st.uri, config=StoreConfig(), topics=Topics(), staging="unused",
                           committed=committed, objects=True, batch_id=f"b{i}", attempt="a", durable=False)
        v = FileVersion(ctx, st, "commitlog/c", len(data), 4096, "t", "records")
        h = v.hasher()
        h.update(chunk)
        v.write_stream([chunk])
        merged_before = _merged_bytes(tmp_path / "s")
        facts = v.facts(len(chunk), h.finish()[1])
        merged = _merged_bytes(tmp_path / "s") - merged_before
        assert merged <= (committed.get("commitlog/c") or {}).get("merge", len(chunk))
        data += chunk
        counts.append(len(facts["extents"]))
        reader = storage.Store(str(tmp_path / "s"))
        reader.map_file("commitlog/c", 4096, fragments.extents_from_detail(facts["extents"]))
        assert reader.read("commitlog/c", 0, len(data)) == data
        assert reader.read("commitlog/c", len(data), 10) == bytes(10)
        assert facts["checksum"] == checksum.checksum_of_bytes(data)
        committed = {"commitlog/c": {"valid_bytes": len(data), "file_size": 4096, "blocks": facts["blocks"],
                                     "extents": facts["extents"], "detail": {}}}
        # the driver's share: 10x a batch here (the bench's is MERGE_SHARE of the batch's records)
        plan = fragments.plan_merges({"commitlog/c": facts["extents"]}, 10 * 100)
        if "commitlog/c" in plan:
            committed["commitlog/c"]["merge"] = plan["commitlog/c"]
    assert max(counts) <= 4, counts


def _merged_bytes(root) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.merged*"))
