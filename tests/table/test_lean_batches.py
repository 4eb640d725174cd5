"""A writer's read of the checkpoints table (storelib/table/manifest.py ``read_tables(queue_offsets=False)``):
each checkpoint row lists the queues its batch changed (``queue_offsets``: all 160,000 of them at
10^10 messages when every batch continues every queue), so reading that column of every row grows
with the batches. A writer reads it for the latest batch alone, and ``--as-of-batch`` for the
snapshot's own batch; every other field, every snapshot and every rowcheck finding are those of a
whole read, for stores written before the compaction (full maps) and after (changed queues).
"""
from __future__ import annotations

import dataclasses

import pytest

from support.compaction import written_before_compaction
from storelib.errors import CorruptStore
from storelib.format import paths
from storelib.format.config import StoreConfig
from storelib.io import storage
from storelib.table import manifest, rowcheck, snapshots, tableread

from test_compaction import _batches


def _without(row) -> dict:
    return {k: v for k, v in dict(row).items() if k != "queue_offsets"}


def test_a_writer_reads_the_queue_offsets_of_the_latest_batch_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 0)
    store = storage.Store(str(tmp_path / "store"))
    queue_next: dict = {}
    with written_before_compaction():
        _batches(store, 1, 4, queue_next, {})             # full queue maps
    _batches(store, 5, 12, queue_next, {})                 # changed queues, compacted
    reads: list = []
    read = tableread._queue_offsets_of
    monkeypatch.setattr(tableread, "_queue_offsets_of", lambda row: (reads.append(row["batch_seq"]), read(row))[1])
    full = manifest.read_tables(store)
    assert reads == []
    lean = manifest.read_tables(store, queue_offsets=False)
    assert reads == [12]                                   # one data file's column, the latest batch's
    assert [_without(b) for b in lean.batches] == [_without(b) for b in full.batches]
    assert dict(lean.batches[-1]) == dict(full.batches[-1])
    assert all("queue_offsets" not in b for b in lean.batches[:-1])
    with pytest.raises(KeyError, match="read without queue_offsets"):
        len(lean.batches[0].queue_offsets)
    assert lean.rows == full.rows and lean.versions == full.versions
    cfg = StoreConfig(mappedFileSizeConsumeQueue=6_000_000)
    for seq in (1, 4, 5, 9, 11, 12, None):                 # --as-of-batch: the snapshot's own batch whole
        whole = manifest.load_snapshot(store, seq)
        part = manifest.load_snapshot(store, seq, queue_offsets=False)
        assert dict(part.batch) == dict(whole.batch) and part.files == whole.files, seq
        assert part.removed == whole.removed and part.compaction == whole.compaction
        assert rowcheck.snapshot_problems(part, cfg) == rowcheck.snapshot_problems(whole, cfg)
        writer = snapshots.open_snapshot(store, seq, history=True, queue_offsets=False)
        assert dict(writer.batch) == dict(whole.batch) and dict(writer.files) == whole.files
    # readers that list every batch's queues (inspect checkpoints, the UI, rocketlake_checkpoints) read them all
    assert [dict(b) for b in snapshots.open_snapshot(store, history=True).batches] == [dict(b) for b in full.batches]
    assert len(full.batches[0].queue_offsets) == 4


def test_a_data_file_of_the_batch_asked_for_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 0)
    store = storage.Store(str(tmp_path / "store"))
    _batches(store, 1, 3, {}, {})
    lean = manifest.read_tables(store, queue_offsets=False)
    gone = dataclasses.replace(lean, sources={**lean.sources, ("b2", 2): lean.sources[("b2", 2)] + ".gone"})
    with pytest.raises(CorruptStore, match=paths.CHECKPOINTS_DIR):
        manifest.at_batch(store, gone, 2)
    assert "queue_offsets" in manifest.at_batch(store, lean, 2).batches[1]
