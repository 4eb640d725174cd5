"""The checkpoints table's merge (storelib/table/ckmerge.py, run by ``manifest.commit``): its data
files (one per batch) are merged, ``dataChange = false``, so a writer's read of the table opens a
number of files bounded whatever the batches; every batch still reads as before (``--as-of-batch``
at each one, the lean read and the whole one, the readers listing every batch's queues), the
committed snapshot's versions are a read's, and the latest batch's row is never merged.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.compaction import written_before_compaction
from storelib.format import paths
from storelib.io import storage
from storelib.table import ckmerge, manifest, snapshots, tableread

from test_compaction import _batches, _ck, _cq

LAST = 17


@pytest.fixture(autouse=True)
def _small(monkeypatch):
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 0)
    monkeypatch.setattr(ckmerge, "MERGE_MIN_FILES", 4)
    monkeypatch.setattr(ckmerge, "ROW_GROUP_ROWS", 3)


def _files(store) -> list:
    dt = manifest.open_table(store, paths.CHECKPOINTS_DIR)
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    dt = None
    return adds


def test_the_files_stay_few_and_every_batch_reads_as_before(tmp_path):
    store = storage.Store(str(tmp_path / "store"))
    queue_next: dict = {}
    seen: dict = {}
    whole: dict = {}
    with written_before_compaction():
        _batches(store, 1, 3, queue_next, seen)            # full queue maps, never merged by then
    for seq in range(4, LAST + 1):
        _batches(store, seq, seq, queue_next, seen)
        whole[seq] = [dict(b) for b in manifest.read_tables(store).batches]
        adds = _files(store)
        # at most the small files a merge waits for, the latest batch's and the merged ones
        assert len(adds) <= ckmerge.MERGE_MIN_FILES + 2, (seq, len(adds))
        latest = [a for a in adds if a["max.batch_seq"] == seq]
        assert len(latest) == 1 and latest[0]["min.batch_seq"] == seq and latest[0]["num_records"] == 1
    merged = [a for a in _files(store) if a["num_records"] > 1]
    assert merged, f"no merge in {LAST} batches"
    for a in merged:                                     # batch order, row groups of at most 3 rows
        f = pq.ParquetFile(store.path(f"{paths.CHECKPOINTS_DIR}/{a['path']}"))
        seqs = f.read(columns=["batch_seq"]).column(0).to_pylist()
        assert seqs == sorted(seqs) and (a["min.batch_seq"], a["max.batch_seq"]) == (seqs[0], seqs[-1])
        assert max(f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)) <= 3
    full = manifest.read_tables(store)
    assert [dict(b) for b in full.batches] == whole[LAST]
    assert [dict(b) for b in full.batches[:12]] == whole[12][:12]      # merged rows: the same as before
    lean = manifest.read_tables(store, queue_offsets=False)
    assert [{k: v for k, v in dict(b).items() if k != "queue_offsets"} for b in full.batches] == \
        [{k: v for k, v in dict(b).items() if k != "queue_offsets"} for b in lean.batches]
    assert lean.versions == full.versions and lean.rows == full.rows
    for seq in range(1, LAST + 1):                             # --as-of-batch: files and the batch's own queues
        snap = manifest.load_snapshot(store, seq, queue_offsets=False)
        assert {p: dict(r) for p, r in snap.files.items()} == seen[seq], seq
        assert dict(snap.batch) == whole[LAST][seq - 1], seq
        writer = snapshots.open_snapshot(store, seq, history=True, queue_offsets=False)
        assert dict(writer.batch) == whole[LAST][seq - 1]
    # readers that list every batch's queues (inspect checkpoints, the UI, rocketlake_checkpoints)
    assert [dict(b) for b in snapshots.open_snapshot(store, history=True).batches] == whole[LAST]


def test_the_committed_snapshot_knows_the_merge_version(tmp_path):
    store = storage.Store(str(tmp_path / "store"))
    queue_next: dict = {}
    _batches(store, 1, 4, queue_next, {})
    snap = manifest.load_snapshot(store)
    queue_next[("t", 0)] += 1
    before = len(_files(store))
    committed = manifest.commit(store, snap.versions, [_cq(5, 0, queue_next[("t", 0)])], _ck(5, queue_next),
                                durable=False)
    assert len(_files(store)) < before                   # batch 5's commit merged batches 1-4
    read = manifest.load_snapshot(store)
    assert committed.versions.checkpoints == read.versions.checkpoints == snap.versions.checkpoints + 2
    assert committed.versions.manifest == read.versions.manifest
    assert [dict(b) for b in committed.batches] == [dict(b) for b in read.batches]


def test_a_merge_that_fails_leaves_the_table_and_the_batch_committed(tmp_path, monkeypatch):
    store = storage.Store(str(tmp_path / "store"))
    queue_next: dict = {}
    _batches(store, 1, 4, queue_next, {})
    snap = manifest.load_snapshot(store)

    def broken(*a, **k):
        def write(dt, hooks=None):
            raise OSError("disk full")
        return write
    monkeypatch.setattr(ckmerge, "writer", broken)
    queue_next[("t", 0)] += 1
    committed = manifest.commit(store, snap.versions, [_cq(5, 0, queue_next[("t", 0)])], _ck(5, queue_next),
                                durable=False)
    read = manifest.load_snapshot(store)
    assert read.batch.batch_seq == 5 and len(_files(store)) == 5
    assert committed.versions.checkpoints == read.versions.checkpoints


def test_one_batch_of_a_merged_file_decodes_its_row_groups_alone(tmp_path, monkeypatch):
    store = storage.Store(str(tmp_path / "store"))
    _batches(store, 1, 9, {}, {})
    lean = manifest.read_tables(store, queue_offsets=False)
    src = lean.sources[("b2", 2)]
    assert sum(1 for s in lean.sources.values() if s == src) > 3        # a merged file of several groups
    read = pq.ParquetFile.read_row_groups
    groups: list = []
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups",
                        lambda self, gs, **k: (groups.append(list(gs)), read(self, gs, **k))[1])
    whole = manifest.at_batch(store, lean, 2)
    assert groups == [[0]]
    assert whole.batches[1].queue_offsets == manifest.read_tables(store).batches[1].queue_offsets
    assert tableread.QUEUE_OFFSETS not in whole.batches[0]


class _Adds:
    """A table version's ``add`` actions as ``get_add_actions(flatten=True)`` gives them."""

    def __init__(self, files):
        self.files = files

    def get_add_actions(self, flatten):
        return pa.table({"path": [f[0] for f in self.files], "size_bytes": [f[1] for f in self.files],
                         "min.batch_seq": [f[2] for f in self.files], "max.batch_seq": [f[3] for f in self.files]})


def test_a_merge_takes_the_lowest_tier_with_enough_files_and_never_the_latest_batch(monkeypatch):
    monkeypatch.setattr(ckmerge, "MERGE_BASE_BYTES", 100)
    monkeypatch.setattr(ckmerge, "MERGE_TARGET_BYTES", 100 * 4 * 4)
    small = [(f"s{i}", 10, i, i) for i in range(1, 4)]                   # tier 0: below 100 bytes
    mid = [(f"m{i}", 150, 10 + i, 10 + i) for i in range(4)]           # tier 1: 100-400 bytes
    big = [("b", 1600, 20, 30)]                                          # never merged again
    assert ckmerge.due(_Adds(small + mid + big), 99) == [(p, n) for p, n, _, _ in mid]
    assert ckmerge.due(_Adds(small + [("s4", 10, 4, 4)] + mid), 99) == [(f"s{i}", 10) for i in range(1, 5)]
    assert ckmerge.due(_Adds(small + [("s4", 10, 4, 4)]), 4) is None           # the latest batch's file stays
    assert ckmerge.due(_Adds(small + [("s4", 10, 4, None)]), 9) is None        # no statistics: left as it is
    over = [(f"m{i}", 390, 10 + i, 10 + i) for i in range(5)]                # at most MERGE_TARGET_BYTES at once
    assert ckmerge.due(_Adds(over), 99) == [(p, n) for p, n, _, _ in over[:4]]
