"""Index files on object stores with paged heads (storelib.io.headpages, storelib.ingest.paged_index),
without Spark: a file built by one batch and continued by several small ones reads back
byte-identical to the same entries put in one go, its checksum is its bytes', and each small
batch reads and uploads only the head pages its keys touch and its window of the head
(``headpages.SWEEP``), never the whole head, while its row's layers stay bounded."""
from __future__ import annotations

import json

import numpy as np
import pytest

from storelib.format import indexfile as ix
from storelib.format.config import StoreConfig
from storelib.ingest import paged_index
from storelib.ingest.context import WriteContext
from storelib.ingest.file_versions import FileVersion, committed_facts
from storelib.ingest.indexfile import IndexFileBuilder
from storelib.ingest.topics import Topics
from storelib.io import headpages, storage

CFG = StoreConfig(maxHashSlotNum=200_000, maxIndexNum=800_000)
H = ix.entries_offset(CFG)
REL = "index/ordinal-000000"


def _keys(n, seed, t0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2**31 - 1, n).astype(np.int32), np.arange(n, dtype=np.int64) * 300 + seed * 10**7,
            np.full(n, t0, np.int64) + np.arange(n) * 10)


def _row(facts, builder):
    detail = {k: facts[k] for k in ("blocks", "extents", "tail", "head") if facts.get(k) is not None}
    detail["header"] = builder.header.to_dict()
    return {"valid_bytes": builder.valid_bytes(), "file_size": CFG.index_file_size, "detail": json.dumps(detail)}


def _ctx(st, committed, i):
    return WriteContext(store=st.uri, config=CFG, topics=Topics(), staging="unused", committed=committed,
                        objects=True, batch_id=f"b{i}", attempt="a", durable=False)


def _object_bytes(st):
    return sum(len(st.read(r)) for r in st.list_files("_rocketlake/objects"))


@pytest.mark.parametrize("span", [False, True])
def test_small_batches_touch_only_their_pages_and_read_back_whole(tmp_path, monkeypatch, span):
    """``span``: as a large batch does, read the touched pages' whole span at once (the pages
    loaded before, which the kernel may have changed, are kept)."""
    if span:
        monkeypatch.setattr(paged_index, "_MAX_RUNS", 4)
    st = storage.Store(str(tmp_path / "s"))
    ref = IndexFileBuilder(CFG, ix.IndexHeader())
    first = IndexFileBuilder(CFG, ix.IndexHeader())
    k = _keys(50_000, 1, 1_700_000_000_000)
    ref.put_keys(*k)
    first.put_keys(*k)
    v = FileVersion(_ctx(st, {}, 0), st, REL, 0, CFG.index_file_size, "t", "file")
    facts = paged_index.write_new(v, first, CFG)
    row = _row(facts, first)
    write_new_obj = json.loads(row["detail"])["head"]["layers"][0]
    monkeypatch.setattr(headpages, "SWEEP", 4, raising=False)
    pages = -(-H // headpages.PAGE)
    W = -(-pages // 4)                                   # the window: a quarter of the head's pages
    uploads = []
    for i in range(1, 10):
        header = ix.IndexHeader(**json.loads(row["detail"])["header"])
        committed = {REL: committed_facts(row)}
        v = FileVersion(_ctx(st, committed, i), st, REL, ix.entry_offset(header.index_count, CFG),
                        CFG.index_file_size, "t", "entries")
        ph = paged_index.PagedHead(v, CFG)
        b = ph.builder(header)
        k = _keys(300, i + 1, 1_700_000_100_000 + i * 10_000)
        b.put_keys(*(x[:150] for x in k))                # split by split: pages load as each needs them
        b.put_keys(*(x[150:] for x in k))
        ref.put_keys(*k)
        before = _object_bytes(st)
        facts = ph.finish(b)
        up = _object_bytes(st) - before
        row = _row(facts, b)
        layers = json.loads(row["detail"])["head"]["layers"]
        assert len(layers) <= 4 + 1 and (i < 4 or write_new_obj not in layers), (i, layers)
        uploads.append(up)
        if not span:
            # 300 keys: at most 301 pages of 512 bytes changed, and read with the single pages
            # between two touched ones (one read for both), of a 800 KB head; plus the window
            assert ph.bytes_read <= 2 * 302 * headpages.PAGE + W * headpages.PAGE, (i, ph.bytes_read)
        assert up <= (302 + W) * headpages.PAGE + 300 * ix.ENTRY_SIZE, (i, up)
        reader = storage.Store(str(tmp_path / "s"))
        reader.map_file(REL, CFG.index_file_size, headpages.version_extents(json.loads(row["detail"])))
        got = reader.read(REL, 0, row["valid_bytes"])
        want = b"".join(bytes(c) for c in ref.chunks())
        assert got == want[:row["valid_bytes"]] and len(want) == row["valid_bytes"]
        sha, _ = headpages.checksum_of(lambda p, n, got=got: got[p:p + n], H, len(got))
        assert sha == facts["checksum"]
        bad = bytearray(got)
        bad[H // 2] ^= 1                                  # one wrong byte anywhere in the head is seen
        assert headpages.checksum_of(lambda p, n, bad=bad: bad[p:p + n], H, len(bad))[0] != sha
    assert max(uploads) < H / 2, uploads                   # no batch uploads the whole head again


@pytest.mark.parametrize("damage", [
    lambda h: h.update(layers=["/etc/passwd"]), lambda h: h.update(map="not base64!"),
    lambda h: h.update(len=h["len"] * 2), lambda h: h.update(sum="f" * 65), lambda h: h.update(page=4096),
    lambda h: h.update(next=-1), lambda h: h.update(next=10**9)])
def test_a_damaged_head_map_is_refused(damage):
    hm = headpages.HeadMap.whole(H, "_rocketlake/objects/b/a/t/x", 5)
    d = hm.to_detail()
    assert headpages.HeadMap.from_detail(d).extents() == hm.extents()
    damage(d)
    with pytest.raises(ValueError):
        headpages.HeadMap.from_detail(d)
