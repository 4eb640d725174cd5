"""The manifest table's compaction and the checkpoint rows' changed queues (storelib/table/manifest.py),
through real Delta commits without Spark.

A manifest table whose rows outnumber twice the live ones is replaced, in the commit of the batch
that made it so, by one data file of the live rows (``dataChange = false``); every batch still
reads as it did (the latest ones from the compacted rows, earlier ones from the table version
they recorded), and a store written before (full queue maps, no recorded version, never
compacted) opens, and gets compacted by its next batch.
"""
from __future__ import annotations

import json
import os

import pytest

from storelib.errors import CorruptStore
from storelib.format import paths
from storelib.io import storage
from support.compaction import written_before_compaction
from storelib.table import manifest, rowcheck
from storelib.table.rows import BatchRow, queue_ends

QUEUES = 4
CQ_FILE = 6_000_000


@pytest.fixture(autouse=True)
def _small_tables(monkeypatch):
    """Compaction as soon as the dead rows outnumber the live ones (not only past 10,000)."""
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 0)


def _ck(seq: int, queue_next: dict) -> dict:
    cols = {n: None for n in manifest.CHECKPOINTS_SCHEMA.names if n != "attempt_id"}
    cols.update(batch_id=f"b{seq}", batch_seq=seq, operation="ingest", committed_at=seq, messages=1,
                queue_offsets=manifest.queue_offsets(queue_next), detail="{}")
    return dict(manifest.checkpoint_row(**cols), attempt_id=f"a{seq}")


def _cq(seq: int, q: int, units: int) -> dict:
    return manifest.file_row("consumequeue", f"consumequeue/t/{q}/00000000000000000000", f"b{seq}", seq, seq,
                             attempt_id=f"a{seq}", topic="t", queue_id=q, base_offset=0, file_size=CQ_FILE,
                             valid_bytes=20 * units, count=units, min_offset=0, max_offset=units)


def _batches(store, first: int, last: int, queue_next: dict, seen: dict, queues: int = QUEUES) -> None:
    """Batches ``first..last``: batch k appends one unit to queue 0, and to every queue when k is odd."""
    snap = manifest.load_snapshot(store)
    for seq in range(first, last + 1):
        changed = range(queues) if seq % 2 else [0]
        rows = []
        for q in changed:
            queue_next[("t", q)] = queue_next.get(("t", q), 0) + 1
            rows.append(_cq(seq, q, queue_next[("t", q)]))
        # a dead attempt's rows, never visible
        manifest.commit(store, snap.versions, rows + [dict(_cq(seq, 9, 1), attempt_id="dead")],
                        _ck(seq, queue_next), durable=False)
        snap = manifest.load_snapshot(store)
        seen[seq] = {p: dict(r) for p, r in snap.files.items()}
        assert queue_ends(snap.files.values()) == queue_next


def _table_rows(store) -> list:
    return list(manifest.read_tables(store).rows)


def _log_actions(store, version: int) -> list:
    with open(store.path(paths.delta_commit(paths.MANIFEST_DIR, version)), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_compaction_keeps_every_batch_readable(tmp_path):
    store = storage.Store(str(tmp_path / "store"))
    seen: dict = {}
    queue_next: dict = {}
    _batches(store, 1, 14, queue_next, seen)
    tables = manifest.read_tables(store)
    snap = manifest.snapshot_of(tables)
    live = len(snap.files)
    # compacted: the table holds the live rows, one marker and the rows since, never more than
    # twice the live rows (plus the batch that made it due)
    marker = snap.compaction
    assert marker is not None and marker.detail["through_seq"] >= 10
    assert len(tables.rows) <= 2 * (live + 1) + QUEUES + 1, len(tables.rows)
    assert len([r for r in tables.rows if r["action"] == manifest.COMPACT]) == 1
    # the compaction commit: every data file replaced, dataChange false throughout
    actions = _log_actions(store, marker.detail["before_version"] + 1)
    changes = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert changes and all(c["dataChange"] is False for c in changes)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info.get("rocketlake.operation") == manifest.COMPACT
    # every batch reads as it did right after its commit: the latest from the compacted rows,
    # earlier ones from the version they recorded (Delta time travel)
    for seq, files in seen.items():
        got = manifest.load_snapshot(store, as_of_batch=seq)
        assert {p: dict(r) for p, r in got.files.items()} == files, seq
        assert got.batch.batch_seq == seq
    # the checkpoint rows list the queues their batch changed, and the manifest version of its rows
    batches = {b.batch_seq: b for b in tables.batches}
    assert [q["queue_id"] for q in batches[14].queue_offsets] == [0]
    assert [q["queue_id"] for q in batches[13].queue_offsets] == list(range(QUEUES))
    assert batches[13].changed_queues_only and isinstance(batches[13].manifest_version, int)
    assert rowcheck._queues(snap.files, snap.batch, _cfg()) == []


def _cfg():
    from storelib.format.config import StoreConfig
    return StoreConfig(mappedFileSizeConsumeQueue=CQ_FILE)


def test_a_changed_queue_the_rows_disagree_with_is_refused(tmp_path):
    store = storage.Store(str(tmp_path / "store"))
    _batches(store, 1, 2, {}, {})
    snap = manifest.load_snapshot(store)
    wrong = dict(snap.batch, queue_offsets=[{"topic": "t", "queue_id": 0, "max_offset": 7}])
    problems = rowcheck._queues(snap.files, BatchRow(wrong), _cfg())
    assert problems and "checkpoint table says 7" in problems[0][2]


def test_a_store_written_before_opens_and_is_compacted(tmp_path):
    store = storage.Store(str(tmp_path / "store"))
    seen: dict = {}
    queue_next: dict = {}
    with written_before_compaction():
        _batches(store, 1, 8, queue_next, seen)
    old = manifest.read_tables(store)
    assert all(not b.changed_queues_only and b.manifest_version is None for b in old.batches)
    assert len(old.batches[-1].queue_offsets) == QUEUES          # a full map, read as such
    assert rowcheck._queues(manifest.snapshot_of(old).files, old.batches[-1], _cfg()) == []
    _batches(store, 9, 9, queue_next, seen)                       # the first batch of this version
    snap = manifest.load_snapshot(store)
    assert snap.compaction is not None and snap.compaction.detail["through_seq"] == 9
    assert len(_table_rows(store)) == len(snap.files) + 1
    for seq, files in seen.items():                # old batches: the version before the first compaction
        assert {p: dict(r) for p, r in manifest.load_snapshot(store, as_of_batch=seq).files.items()} == files, seq
    _batches(store, 10, 16, queue_next, seen)
    later = manifest.load_snapshot(store).compaction
    assert later.detail["through_seq"] > 9 and later.detail["legacy_version"] == snap.compaction.detail["legacy_version"]
    for seq, files in seen.items():
        assert {p: dict(r) for p, r in manifest.load_snapshot(store, as_of_batch=seq).files.items()} == files, seq


def test_a_small_table_is_not_compacted(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 10_000)
    store = storage.Store(str(tmp_path / "store"))
    _batches(store, 1, 14, {}, {})
    assert manifest.load_snapshot(store).compaction is None


def test_an_earlier_batch_whose_version_was_vacuumed_is_a_clear_error(tmp_path):
    store = storage.Store(str(tmp_path / "store"))
    _batches(store, 1, 12, {}, {})
    tables = manifest.read_tables(store)
    marker = manifest.snapshot_of(tables).compaction
    assert marker is not None
    dt = manifest.open_table(store, paths.MANIFEST_DIR)
    dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    dt = None
    # the latest batches read as before; an earlier one names the damage instead of a wrong snapshot
    assert manifest.load_snapshot(store).batch.batch_seq == 12
    with pytest.raises(CorruptStore):
        manifest.load_snapshot(store, as_of_batch=1)
    assert os.path.isdir(store.path(paths.MANIFEST_DIR))


def test_commands_read_earlier_batches_and_expiries_through_a_compaction(tmp_path):
    """``open_snapshot`` (every command's way in: query, verify, the stream source's batch, the UI)
    serves an earlier batch from the version it recorded; the rows of files a committed expiry
    removed survive compactions (expire deletes what a crash left of them)."""
    from storelib.table.snapshots import open_snapshot
    store = storage.Store(str(tmp_path / "store"))
    seen: dict = {}
    queue_next: dict = {}
    _batches(store, 1, 3, queue_next, seen)
    # an expiry removes queue 3's file (and a later batch never writes it again)
    snap = manifest.load_snapshot(store)
    gone = "consumequeue/t/3/00000000000000000000"
    ck = manifest.checkpoint_row_after(snap.batch, batch_id="expire-4", batch_seq=4, operation="expire",
                                       committed_at=4, detail="{}")
    manifest.commit(store, snap.versions, [manifest.remove_row(snap.files[gone], "expire-4", 4, 4, "{}")], ck,
                    durable=False)
    snap = manifest.load_snapshot(store)
    seen[4] = {p: dict(r) for p, r in snap.files.items()}
    assert gone in snap.removed and gone not in snap.files
    queue_next.pop(("t", 3))
    _batches(store, 5, 16, queue_next, seen, queues=3)
    latest = open_snapshot(store, history=True)
    assert manifest.load_snapshot(store).compaction is not None
    assert gone in latest.removed and gone not in latest.files
    for seq, files in seen.items():
        got = open_snapshot(store, as_of_batch=seq)
        assert {p: dict(r) for p, r in got.files.items()} == files, seq
        assert got.batch_seq == seq and got.pinned == (seq != 16)
