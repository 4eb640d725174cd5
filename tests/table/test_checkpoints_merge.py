"""The checkpoints table's merge (storelib/table/ckmerge.py, run by ``manifest.commit``): its data
files (one per batch) are merged, ``dataChange = false``, so a writer's read of the table opens a
number of files bounded whatever the batches; every batch still reads as before (``--as-of-batch``
at each one, the lean read and the whole one, the readers listing every batch's queues), the
committed snapshot's versions are a read's, and the latest batch's row is never merged.
"""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.compaction import written_before_compaction
from storelib.format import paths
from storelib.io import storage
from storelib.table import ckmerge, deltacommit, manifest, snapshots, tableread

from test_compaction import QUEUES, _batches, _ck, _cq

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


def _adds(files) -> pa.Table:
    """A table version's data files as ``ckmerge.files_of`` gives them."""
    return pa.table({"path": [f[0] for f in files], "size_bytes": [f[1] for f in files],
                     "min.batch_seq": [f[2] for f in files], "max.batch_seq": [f[3] for f in files]})


def test_a_merge_takes_the_lowest_tier_with_enough_files_and_never_the_latest_batch(monkeypatch):
    monkeypatch.setattr(ckmerge, "MERGE_BASE_BYTES", 100)
    monkeypatch.setattr(ckmerge, "MERGE_TARGET_BYTES", 100 * 4 * 4)
    small = [(f"s{i}", 10, i, i) for i in range(1, 4)]                   # tier 0: below 100 bytes
    mid = [(f"m{i}", 150, 10 + i, 10 + i) for i in range(4)]           # tier 1: 100-400 bytes
    big = [("b", 1600, 20, 30)]                                          # never merged again
    assert ckmerge.due(_adds(small + mid + big), 99) == [(p, n) for p, n, _, _ in mid]
    assert ckmerge.due(_adds(small + [("s4", 10, 4, 4)] + mid), 99) == [(f"s{i}", 10) for i in range(1, 5)]
    assert ckmerge.due(_adds(small + [("s4", 10, 4, 4)]), 4) is None           # the latest batch's file stays
    assert ckmerge.due(_adds(small + [("s4", 10, 4, None)]), 9) is None        # no statistics: left as it is
    over = [(f"m{i}", 390, 10 + i, 10 + i) for i in range(5)]                # at most MERGE_TARGET_BYTES at once
    assert ckmerge.due(_adds(over), 99) == [(p, n) for p, n, _, _ in over[:4]]


# ---------------------------------------------------------------------------- the manifest table
def _manifest_files(store) -> list:
    dt = manifest.open_table(store, paths.MANIFEST_DIR)
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    dt = None
    return adds


def _checkpoint_adds(store, rel: str) -> list:
    """The ``add`` actions of the table's newest Delta checkpoint."""
    log = store.path(f"{rel}/_delta_log")
    newest = max(n for n in os.listdir(log) if n.endswith(".checkpoint.parquet"))
    return [a for a in pq.read_table(os.path.join(log, newest), columns=["add"]).column("add").to_pylist() if a]


def _stats_columns(store, rel: str) -> set:
    """The columns whose statistics the ``add`` actions of the table's commits hold."""
    log = store.path(f"{rel}/_delta_log")
    out: set = set()
    for n in sorted(os.listdir(log)):
        if n.endswith(".json"):
            for line in open(os.path.join(log, n), encoding="utf-8"):
                add = json.loads(line).get("add")
                if add and add.get("stats"):
                    out |= set(json.loads(add["stats"]).get("minValues", {}))
    return out


def test_the_manifest_tables_files_and_its_delta_checkpoint_stay_bounded_between_compactions(tmp_path, monkeypatch):
    """Small batches that never compact the manifest table (its rows stay under
    ``COMPACT_MIN_ROWS``): its data files are merged like the checkpoints table's, every Delta
    checkpoint of either table lists a bounded number of files whose statistics are the batch
    sequence's alone, and every batch reads as before (files, rows, dead attempts' rows)."""
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 10 ** 9)
    monkeypatch.setattr(deltacommit, "CHECKPOINT_INTERVAL", 5)
    store = storage.Store(str(tmp_path / "store"))
    queue_next: dict = {}
    seen: dict = {}
    rows: dict = {}
    for seq in range(1, LAST + 1):
        _batches(store, seq, seq, queue_next, seen)
        tables = manifest.read_tables(store)
        rows[seq] = sorted((r["batch_seq"], r["path"], r["attempt_id"], r["count"]) for r in tables.rows)
        assert tables.versions.rows == len(rows[seq])            # (compaction's count: every row, dead ones too)
        adds = _manifest_files(store)
        assert len(adds) <= ckmerge.MERGE_MIN_FILES + 2, (seq, len(adds))
        latest = [a for a in adds if a["max.batch_seq"] == seq]
        assert len(latest) == 1 and latest[0]["min.batch_seq"] == seq
    assert manifest.load_snapshot(store).compaction is None
    merged = [a for a in _manifest_files(store) if a["path"].endswith(".merged.snappy.parquet")]
    assert merged, f"no merge of the manifest table in {LAST} batches"
    for rel in (paths.MANIFEST_DIR, paths.CHECKPOINTS_DIR):
        assert len(_checkpoint_adds(store, rel)) <= ckmerge.MERGE_MIN_FILES + 2, rel
        assert _stats_columns(store, rel) == {"batch_seq"}, rel
    # the same rows, each batch's in the order it wrote them, the dead attempts' kept (and never visible)
    for a in merged:
        seqs = pq.read_table(store.path(f"{paths.MANIFEST_DIR}/{a['path']}"), columns=["batch_seq"]).column(0)
        assert seqs.to_pylist() == sorted(seqs.to_pylist())
    assert sum(1 for r in rows[LAST] if r[2] == "dead") == LAST
    for seq in range(1, LAST + 1):
        snap = manifest.load_snapshot(store, seq)
        assert {p: dict(r) for p, r in snap.files.items()} == seen[seq], seq
    latest = manifest.load_snapshot(store)
    assert {(b, s, a) for b, s, a in latest.versions.stray} == {(f"b{s}", s, "dead") for s in range(1, LAST + 1)}
    ops = [h for h in tableread.history(store) if h["table"] == "manifest" and h["rocketlake_operation"] == "merge"]
    assert len(ops) == len(merged) or len(ops) >= 1


def test_the_committed_snapshot_knows_the_manifest_merge_version_and_no_table_is_opened_again(tmp_path, monkeypatch):
    import deltalake
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 10 ** 9)
    store = storage.Store(str(tmp_path / "store"))
    queue_next: dict = {}
    _batches(store, 1, 4, queue_next, {})
    opened: list = []

    class Counted(deltalake.DeltaTable):
        def __init__(self, *a, **k):
            opened.append(a[0])
            super().__init__(*a, **k)
    monkeypatch.setattr(deltalake, "DeltaTable", Counted)
    for seq in (5, 6):                 # 5: both tables merged (batches 1-4); 6: neither
        snap = manifest.load_snapshot(store)
        queue_next[("t", 0)] += 1
        opened.clear()
        committed = manifest.commit(store, snap.versions, [_cq(seq, 0, queue_next[("t", 0)])], _ck(seq, queue_next),
                                    durable=False)
        # one Delta table a commit (its scratch log), the merges' own commits: none to decide
        assert len(opened) == (4 if seq == 5 else 2), opened
        read = manifest.load_snapshot(store)
        assert committed.versions.manifest == read.versions.manifest == snap.versions.manifest + (2 if seq == 5 else 1)
        assert committed.versions.checkpoints == read.versions.checkpoints
        assert committed.versions.rows == read.versions.rows
        assert {p: dict(r) for p, r in committed.files.items()} == {p: dict(r) for p, r in read.files.items()}


def test_a_store_created_without_the_statistics_property_keeps_every_columns_and_merges(tmp_path, monkeypatch):
    """A store whose tables were created before ``TABLE_PROPERTIES`` (every column's statistics):
    nothing is rewritten; its batches append files with every column's statistics, its merged
    files carry the batch sequence's, and the merges bound its files all the same."""
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 10 ** 9)
    store = storage.Store(str(tmp_path / "store"))
    queue_next: dict = {}
    seen: dict = {}
    with monkeypatch.context() as m:
        m.setattr(ckmerge, "TABLE_PROPERTIES", {})
        _batches(store, 1, 1, queue_next, seen)
    _batches(store, 2, 9, queue_next, seen)
    for rel in (paths.MANIFEST_DIR, paths.CHECKPOINTS_DIR):
        assert "delta.dataSkippingStatsColumns" not in _configuration(store, rel)
        assert {"batch_id", "batch_seq", "committed_at"} <= _stats_columns(store, rel), rel
    adds = _manifest_files(store)
    assert len(adds) <= ckmerge.MERGE_MIN_FILES + 2 and any(a["path"].endswith(".merged.snappy.parquet") for a in adds)
    for seq in range(1, 10):
        assert {p: dict(r) for p, r in manifest.load_snapshot(store, seq).files.items()} == seen[seq], seq


def _configuration(store, rel: str) -> dict:
    dt = manifest.open_table(store, rel)
    conf = dict(dt.metadata().configuration)
    dt = None
    return conf



def test_a_manifest_merge_stays_within_its_share_of_the_batch_and_a_small_store_compacts_instead(tmp_path, monkeypatch):
    """Batches too small for a merge of their manifest files (``MERGE_SHARE`` of their record
    bytes) leave them until the table has ``COMPACT_MIN_FILES``; then, when the compacted
    rows are at most twice the batch's (every batch rewrites most live rows), the commit compacts:
    the table's files and its Delta checkpoint stay bounded, and no batch uploads a merge."""
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 10 ** 9)
    monkeypatch.setattr(manifest, "COMPACT_MIN_FILES", 6)
    monkeypatch.setattr(deltacommit, "CHECKPOINT_INTERVAL", 5)
    assert ckmerge.due(_adds([(f"s{i}", 10, i, i) for i in range(1, 5)]), 9, budget=39) is None
    assert ckmerge.due(_adds([(f"s{i}", 10, i, i) for i in range(1, 5)]), 9, budget=40) is not None
    store = storage.Store(str(tmp_path / "store"))
    queue_next: dict = {}
    seen: dict = {}
    snap = manifest.load_snapshot(store)
    for seq in range(1, LAST + 1):                 # every batch changes every queue: 4 rows of 5 live
        rows = []
        for q in range(QUEUES):
            queue_next[("t", q)] = queue_next.get(("t", q), 0) + 1
            rows.append(_cq(seq, q, queue_next[("t", q)]))
        committed = manifest.commit(store, snap.versions, rows, dict(_ck(seq, queue_next), bytes=1000),
                                    durable=False)
        snap = manifest.load_snapshot(store)
        assert committed.versions.manifest == snap.versions.manifest
        seen[seq] = {p: dict(r) for p, r in snap.files.items()}
        adds = _manifest_files(store)
        assert len(adds) <= manifest.COMPACT_MIN_FILES and not any(".merged." in a["path"] for a in adds), seq
    assert snap.compaction is not None
    assert len(_checkpoint_adds(store, paths.MANIFEST_DIR)) <= manifest.COMPACT_MIN_FILES
    for seq in range(1, LAST + 1):
        assert {p: dict(r) for p, r in manifest.load_snapshot(store, seq).files.items()} == seen[seq], seq


def test_a_run_of_expiries_merges_the_manifest_tables_files(tmp_path, monkeypatch):
    """An expiry writes no records (``bytes`` 0): its commit still gets a share of the manifest
    merge (``ckmerge.share``), so a run of expiries alone keeps the table's files bounded (before:
    a file each until a compaction), and every batch reads as before."""
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 10 ** 9)
    monkeypatch.setattr(manifest, "COMPACT_MIN_FILES", 10 ** 9)
    monkeypatch.setattr(ckmerge, "MERGE_MIN_FILES", 8)
    store = storage.Store(str(tmp_path / "store"))
    sealed = [f"consumequeue/old/{i}/00000000000000000000" for i in range(24)]
    first = [_cq(1, q, 1) for q in range(QUEUES)] + [
        dict(_cq(1, 0, 1), path=p, topic="old", queue_id=i) for i, p in enumerate(sealed)]
    manifest.commit(store, manifest.load_snapshot(store).versions, first, dict(_ck(1, {}), bytes=10 ** 6),
                    durable=False)
    seen = {}
    for seq, gone in enumerate(sealed, start=2):
        snap = manifest.load_snapshot(store)
        ck = manifest.checkpoint_row_after(snap.batch, batch_id=f"expire-{seq}", batch_seq=seq, operation="expire",
                                           committed_at=seq, bytes=0, detail="{}")
        manifest.commit(store, snap.versions, [manifest.remove_row(snap.files[gone], f"expire-{seq}", seq, seq, "{}")],
                        ck, durable=False)
        seen[seq] = {p: dict(r) for p, r in manifest.load_snapshot(store).files.items()}
        adds = _manifest_files(store)
        assert len(adds) <= ckmerge.MERGE_MIN_FILES + 2, (seq, len(adds))
    assert any(a["path"].endswith(".merged.snappy.parquet") for a in _manifest_files(store))
    assert ckmerge.share(0) > 0 and ckmerge.share(1000) == int(ckmerge.MERGE_SHARE * 1000)
    snap = manifest.load_snapshot(store)
    assert set(snap.removed) == set(sealed) and not set(snap.files) & set(sealed)
    for seq, files in seen.items():
        assert {p: dict(r) for p, r in manifest.load_snapshot(store, seq).files.items()} == files, seq
