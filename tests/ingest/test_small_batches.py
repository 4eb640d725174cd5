"""What a small batch reads back on an object store, without Spark: a file continued at its
committed end is hashed on from the digest state its row keeps (``detail.tail``), so none of its
committed bytes are downloaded; a row without that state (an older store) still works, by
reading the unfinished block back. Bytes are counted where every object read goes
(``Store._read_object``, which the S3 store's range GETs go through too)."""
from __future__ import annotations

import os

import pytest

from storelib.format.config import StoreConfig
from storelib.ingest.context import WriteContext
from storelib.ingest.file_versions import FileVersion
from storelib.ingest.topics import Topics
from storelib.io import checksum, fragments, shastate, storage

pytestmark = pytest.mark.skipif(not shastate.AVAILABLE, reason="libcrypto could not be loaded")


def _counting(st: storage.Store, monkeypatch) -> list:
    got = []
    read = st._read_object

    def counted(rel, offset, length):
        data = read(rel, offset, length)
        got.append(len(data))
        return data
    monkeypatch.setattr(st, "_read_object", counted)
    return got


def _batch(st, committed, rel, start, chunk, i, file_size):
    ctx = WriteContext(store=st.uri, config=StoreConfig(), topics=Topics(), staging="unused",
                       committed=committed, objects=True, batch_id=f"b{i}", attempt="a", durable=False)
    v = FileVersion(ctx, st, rel, start, file_size, "t", "records")
    h = v.hasher()
    h.update(chunk)
    v.write_stream([chunk])
    facts = v.facts(len(chunk), h.finish()[1], h.tail())
    detail = {"tail": facts["tail"]} if facts["tail"] is not None else {}
    return facts, {rel: {"valid_bytes": start + len(chunk), "file_size": file_size, "blocks": facts["blocks"],
                         "extents": facts["extents"], "detail": detail}}


def test_a_small_batch_downloads_nothing_of_the_file_it_continues(tmp_path, monkeypatch):
    """A segment holding a full checksum block and part of the next, continued by three small
    batches: each is hashed on from the row's state; nothing is read back, and every version's
    checksum is its bytes' (blocks of 1 MiB here, as 16 MiB ones behave, but faster)."""
    monkeypatch.setattr(checksum, "BLOCK_SIZE", 1 << 20)
    st = storage.Store(str(tmp_path / "s"))
    got = _counting(st, monkeypatch)
    rel, F = "commitlog/00000000000000000000", 1 << 30
    data = os.urandom(1_300_000)
    facts, committed = _batch(st, {}, rel, 0, data, 0, F)
    for i in range(1, 4):
        chunk = os.urandom(40_000)
        got.clear()
        facts, committed = _batch(st, committed, rel, len(data), chunk, i, F)
        assert sum(got) == 0, f"batch {i} read {sum(got)} committed bytes back"
        data += chunk
        assert facts["checksum"] == checksum.checksum_of_bytes(data)
    reader = storage.Store(str(tmp_path / "s"))
    reader.map_file(rel, F, fragments.extents_from_detail(facts["extents"]))
    assert reader.read(rel, 0, len(data)) == data


def test_a_row_without_a_digest_state_reads_its_unfinished_block_back(tmp_path, monkeypatch):
    st = storage.Store(str(tmp_path / "s"))
    got = _counting(st, monkeypatch)
    rel = "consumequeue/T/0/00000000000000000000"
    data = os.urandom(6000)
    _, committed = _batch(st, {}, rel, 0, data, 0, 6_000_000)
    committed[rel]["detail"] = {}                       # as rows written before the state was kept
    chunk = os.urandom(200)
    got.clear()
    facts, _ = _batch(st, committed, rel, len(data), chunk, 1, 6_000_000)
    assert sum(got) == len(data) and facts["checksum"] == checksum.checksum_of_bytes(data + chunk)
    committed[rel]["detail"] = {"tail": {"h": "00" * 32, "done": 64, "rest": ""}}   # covers 64 bytes, not 6000
    with pytest.raises(Exception, match="digest state"):
        _batch(st, committed, rel, len(data), chunk, 2, 6_000_000)
