"""The snapshot a commit returns (``manifest.committed_snapshot``) and the snapshot cache written
from it (storelib/table/snapcache.py ``refresh(store, committed)``): after every commit the writer
knows the new snapshot (the one it opened, its rows, its checkpoint row) and writes the cache
from memory, without reading the Delta tables again. The cache it writes must be the very bytes a
read of the tables gives, through ingests, the manifest table's compactions and expiries.

Real batches without Spark (``storelib.runtime.localrun``): small-roll's messages in parts.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from conftest import golden_set
from support.opshelp import SMALL
from storelib.format import paths
from storelib.format.config import StoreConfig
from storelib.io import storage
from storelib.ops import expire
from storelib.table import manifest, snapcache

PARTS = 8


def _ingest(store: str, path: str, batch: str) -> None:
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    cfg = StoreConfig(flushDiskType="ASYNC_FLUSH", **SMALL)
    run_ingest(LocalSession(), store, path, "jsonl", cfg, batch_id=batch, quiet=True)


def _cache_as_a_read_writes_it(store: str) -> tuple[bytes, bytes]:
    """(the cache the last commit wrote, the one a read of the Delta tables writes)."""
    written = snapcache.document(storage.Store(store))
    for rel in (paths.SNAPSHOT_CACHE, paths.SNAPSHOT_CACHE_DELTA):
        if os.path.exists(os.path.join(store, rel)):
            os.remove(os.path.join(store, rel))
    assert snapcache.refresh(storage.Store(store))
    return written, snapcache.document(storage.Store(store))


def _max_store_ts(store: str) -> int:
    snap = manifest.load_snapshot(storage.Store(store))
    return max(r["max_store_ts"] for r in snap.of_kind("commitlog"))


def test_each_commit_writes_the_cache_a_read_of_the_tables_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 0)       # (compactions in a small store)
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl")).readlines()
    step = -(-len(lines) // PARTS)
    store = str(tmp_path / "store")
    reads: list = []
    load = manifest.load_snapshot

    def counted(*a, **kw):
        reads.append(a)
        return load(*a, **kw)
    compacted = 0
    for i in range(PARTS):
        part = tmp_path / f"p{i}.jsonl"
        part.write_text("".join(lines[i * step:(i + 1) * step]))
        monkeypatch.setattr(manifest, "load_snapshot", counted)
        _ingest(store, str(part), f"B{i}")
        monkeypatch.setattr(manifest, "load_snapshot", load)
        assert reads == [], "the cache was refreshed by a read of the tables"
        written, read = _cache_as_a_read_writes_it(store)
        assert written == read
        snap = manifest.load_snapshot(storage.Store(store))
        compacted += snap.compaction is not None and snap.compaction.detail["through_seq"] == snap.batch_seq
    assert compacted >= 1, "no batch compacted the manifest table"
    # an expiry removes files (and is read from memory too); with its housekeeping (new Delta
    # versions since the commit) the tables are read, and the cache is the same either way
    for housekeeping in (False, True):
        now = _max_store_ts(store) - 1
        monkeypatch.setattr(manifest, "load_snapshot", counted)
        out = expire.expire(store, 0, now, housekeeping=housekeeping, quiet=True)
        monkeypatch.setattr(manifest, "load_snapshot", load)
        assert out["status"] == "committed" or housekeeping, out
        assert (reads == []) or housekeeping
        reads.clear()
        written, read = _cache_as_a_read_writes_it(store)
        assert written == read
    doc = json.loads(written)
    assert doc is not None and doc["batch"]["operation"] == "expire"


def test_the_committed_snapshot_is_the_one_a_read_gives(tmp_path, monkeypatch):
    """Field by field, with a dead attempt's rows in the table (never counted) and a compaction."""
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 0)
    store = storage.Store(str(tmp_path / "store"))

    def cq(seq: int, q: int, units: int, attempt: str) -> dict:
        return manifest.file_row("consumequeue", f"consumequeue/t/{q}/00000000000000000000", f"b{seq}", seq, seq,
                                 attempt_id=attempt, topic="t", queue_id=q, base_offset=0, file_size=6000,
                                 valid_bytes=20 * units, count=units, min_offset=0, max_offset=units)

    def ck(seq: int, queues: dict) -> dict:
        cols = {n: None for n in manifest.CHECKPOINTS_SCHEMA.names if n != "attempt_id"}
        cols.update(batch_id=f"b{seq}", batch_seq=seq, operation="ingest", committed_at=seq, messages=1,
                    queue_offsets=manifest.queue_offsets(queues), detail="{}")
        return dict(manifest.checkpoint_row(**cols), attempt_id=f"a{seq}")
    snap = manifest.load_snapshot(store)
    ends: dict = {}
    compactions = 0
    for seq in range(1, 9):
        rows = []
        for q in (range(3) if seq % 2 else [0]):
            ends[("t", q)] = ends.get(("t", q), 0) + 1
            rows.append(cq(seq, q, ends[("t", q)], f"a{seq}"))
        if seq == 3:                  # a value Arrow takes but gives back as another type
            rows[0]["count"] = np.int64(rows[0]["count"])
        committed = manifest.commit(store, snap.versions, rows + [cq(seq, 7, 1, "dead")], ck(seq, ends), durable=False)
        snap = manifest.load_snapshot(store)
        assert committed is not None
        assert committed.batch == snap.batch and committed.files == snap.files and committed.removed == snap.removed
        assert [dict(b) for b in committed.batches] == [dict(b) for b in snap.batches]
        assert committed.versions == snap.versions and committed.versions.stray == snap.versions.stray
        assert committed.duplicates == snap.duplicates and committed.compaction == snap.compaction
        assert all(type(r["count"]) is int for r in committed.files.values())
        compactions += snap.compaction is not None and snap.compaction.detail["through_seq"] == seq
    assert compactions >= 1
    # a batch without an attempt id of its own (an expiry's) whose id a dead attempt's rows already
    # carry: a read would count them, memory cannot know them: no snapshot
    row, v = dict(ck(9, ends), attempt_id=None), snap.versions
    dead = manifest.TableVersions(v.manifest, v.checkpoints, v.rows, v.latest, v.stray | {("b9", 9, None)})
    assert manifest.committed_snapshot(dead, [cq(9, 0, 99, None)], row) is None
    assert manifest.committed_snapshot(v, [cq(9, 0, 99, None)], row) is not None

@pytest.mark.parametrize("moved", ["manifest", "checkpoints"])
def test_a_version_since_the_commit_makes_refresh_read_the_tables(tmp_path, moved):
    """The committed snapshot serves only while both tables are at its versions."""
    store = str(tmp_path / "store")
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl")).readlines()[:60]
    (tmp_path / "p.jsonl").write_text("".join(lines))
    _ingest(store, str(tmp_path / "p.jsonl"), "B0")
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    v = snap.versions
    fake = manifest.Snapshot(snap.batch, {}, manifest.TableVersions(
        v.manifest - (moved == "manifest"), v.checkpoints - (moved == "checkpoints"), v.rows), list(snap.batches))
    os.remove(os.path.join(store, paths.SNAPSHOT_CACHE))
    assert snapcache.refresh(st, fake)
    doc = snapcache.decode(open(os.path.join(store, paths.SNAPSHOT_CACHE), "rb").read())
    assert doc is not None and len(doc["files"]) == len(snap.files) > 0      # the tables' files, not the fake's
    assert json.dumps(doc["batch"], sort_keys=True) == json.dumps(dict(snap.batch), sort_keys=True)


def test_the_check_after_a_commit_judges_the_new_rows_alone(tmp_path, monkeypatch):
    """The writer checked its snapshot's rows when it opened it; the cache's check after its
    commit (the same rows and the batch's) judges each row once (``ManifestRow.once``)."""
    from storelib.table import rowcheck
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl")).readlines()
    store = str(tmp_path / "store")
    for i, (lo, hi) in enumerate(((0, 400), (400, 450))):
        (tmp_path / f"p{i}.jsonl").write_text("".join(lines[lo:hi]))
    _ingest(store, str(tmp_path / "p0.jsonl"), "B0")
    before = manifest.load_snapshot(storage.Store(store))
    judged: list = []
    problem = rowcheck.row_problem
    monkeypatch.setattr(rowcheck, "row_problem", lambda r, cfg: (judged.append(r["path"]), problem(r, cfg))[1])
    _ingest(store, str(tmp_path / "p1.jsonl"), "B1")
    after = manifest.load_snapshot(storage.Store(store))
    new = [p for p, r in after.files.items() if r["batch_id"] == "B1"]
    assert 0 < len(new) < len(after.files)
    assert sorted(judged) == sorted([*before.files, *new])     # the open's check, then the new rows'
    written, read = _cache_as_a_read_writes_it(store)
    assert written == read
