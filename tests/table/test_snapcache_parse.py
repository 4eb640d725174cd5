"""A reader of the snapshot cache (storelib/table/snapcache.py) parses its document once: the base
file's JSON, then the delta's changes applied to it; the document the delta's recorded sha256 is
checked on is the one it gets, as a parse of that document's JSON would give it.
"""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from storelib.io import storage
from storelib.table import snapcache


def _row(i: int, seq: int) -> dict:
    return {"action": "add", "batch_id": f"b{seq}", "batch_seq": seq, "checksum": f"{i:064x}", "count": 1 + i % 5,
            "detail": json.dumps({"extents": [[0, 100 + i]], "sealed": i % 2 == 0}, sort_keys=True,
                                 separators=(",", ":")), "kind": "consumequeue",
            "path": f"consumequeue/t/{i % 4}/{i:020d}", "staged_path": None, "valid_bytes": 20 * (i + 1)}


@pytest.fixture
def cached(tmp_path):
    """A store whose cache is a base of batch b1's 300 rows and a delta giving batch b2's rows (a
    few changed, one gone, a few added); (the store, b2's document as canonical JSON)."""
    root = str(tmp_path / "store")
    store = storage.Store(root)
    tables = {}
    for name, rel in (("manifest", "_rocketlake/manifest"), ("checkpoints", "_rocketlake/checkpoints")):
        os.makedirs(f"{root}/{rel}/_delta_log")
        body = json.dumps({"commitInfo": {"table": name}}).encode()
        with open(f"{root}/{rel}/_delta_log/{0:020d}.json", "wb") as fh:
            fh.write(body)
        tables[name] = {"version": 0, "files": [[f"{0:020d}.json", hashlib.sha256(body).hexdigest()]]}
    rows = [_row(i, 1) for i in range(300)]
    snapcache._store(store, snapcache._document(tables, {"batch_id": "b1", "batch_seq": 1}, rows), snapcache._NONE,
                     len(rows))
    changed = [dict(r, valid_bytes=r["valid_bytes"] + 20, detail=r["detail"].replace("]]", "],[900,20]]"))
               if i % 50 == 0 else r for i, r in enumerate(rows) if i != 7] + [_row(300 + k, 2) for k in range(5)]
    raw = snapcache._document(tables, {"batch_id": "b2", "batch_seq": 2, "clean": True},
                              sorted(changed, key=lambda r: r["path"]))
    snapcache._store(store, raw, snapcache._Current.read(store), len(changed))
    assert store.exists("_rocketlake/snapshot-cache.delta.json"), "no delta written"
    return store, raw


def test_a_reader_parses_the_document_once(cached, monkeypatch):
    store, raw = cached
    parsed = []
    loads = json.loads

    def counting(text, *args, **kwargs):
        parsed.append(len(text))
        return loads(text, *args, **kwargs)
    monkeypatch.setattr(snapcache.json, "loads", counting)
    snap = snapcache.load(store)
    monkeypatch.undo()
    assert snap is not None and snap.batch["batch_id"] == "b2"
    assert len([n for n in parsed if n > len(raw) // 2]) == 1, parsed      # the base's document; not the result's


def test_the_document_is_what_a_parse_of_its_json_gives(cached):
    store, raw = cached
    doc = snapcache._Current.read(store).doc
    assert snapcache._document(doc["tables"], doc["batch"], doc["files"]) == raw
    want = json.loads(raw)
    assert doc == want and list(doc) == list(want) and [list(r) for r in doc["files"]] == [list(r) for r in want["files"]]
    assert type(doc["batch"]["clean"]) is bool and all(type(r["count"]) is int for r in doc["files"])
    snap = snapcache.load(store)
    assert snap is not None and snap.files == {r["path"]: r for r in want["files"]} and snap.batch == want["batch"]
