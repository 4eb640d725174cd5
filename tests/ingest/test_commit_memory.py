"""What a commit holds at once (issue 40 item 4: the driver at 10^10 messages peaked in its
commit, ~160,000 manifest rows a batch): one copy of the batch's rows. The rows the ingest's
commit builds (``commit._file_rows``) are the rows the Delta commit writes, the compaction
rewrites and the committed snapshot holds: no copy of each, no read-back through Arrow; and
the rows share their column names.
"""
from __future__ import annotations

import tracemalloc

from storelib.ingest import commit
from storelib.ingest.staged_file import StagedFile
from storelib.io import storage
from storelib.table import manifest
from storelib.table.rows import FileKind, ManifestRow

N = 3000          # consume-queue files a batch, every one continued by the next batch


def _batch(snap: manifest.Snapshot, n: int = N) -> tuple[list, dict]:
    """A batch continuing ``n`` consume-queue files (6 units each a batch), its rows as the
    ingest's commit builds them."""
    seq = snap.batch_seq + 1
    key = dict(batch_id=f"b{seq}", batch_seq=seq, committed_at=seq, attempt_id=f"a{seq}")
    cqs = [StagedFile(FileKind.CONSUMEQUEUE, f"consumequeue/t{q // 16:04d}/{q % 16}/00000000000000000000",
                      6_000_000, 120 * seq, "ab" * 32, ["ab" * 32], staged_path=f"staging/b{seq}/cq{q}",
                      topic=f"t{q // 16:04d}", queue_id=q % 16, count=6 * seq, min_offset=0, max_offset=6 * seq,
                      min_phys=0, max_phys=seq) for q in range(n)]
    rows = commit._file_rows(snap, [], cqs, [], key)
    cols = {c: None for c in manifest.CHECKPOINTS_SCHEMA.names if c != "attempt_id"}
    cols.update(key, operation="ingest", messages=6 * n, detail="{}",
                queue_offsets=manifest.queue_offsets({(f"t{q // 16:04d}", q % 16): 6 * seq for q in range(n)}))
    return rows, manifest.checkpoint_row(**cols)


def _store_of_two_batches(tmp_path, monkeypatch) -> tuple[storage.Store, manifest.Snapshot]:
    """A store whose third batch of ``_batch`` compacts the manifest table."""
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 0)
    store = storage.Store(str(tmp_path / "store"))
    snap = manifest.load_snapshot(store)
    for _ in (1, 2):
        rows, ck = _batch(snap)
        manifest.commit(store, snap.versions, rows, ck, durable=False)
        snap = manifest.load_snapshot(store)
    return store, snap


def test_the_commit_compaction_and_snapshot_hold_the_rows_built(tmp_path, monkeypatch):
    """The committed snapshot's live rows and the compaction's rows are the very rows the commit
    was given (main: a copy of each read back through Arrow, a ``FileKind`` not being a plain
    str, and one more copy for each of the compaction and the snapshot); the snapshot still
    equals a read of the tables."""
    store, snap = _store_of_two_batches(tmp_path, monkeypatch)
    rows, ck = _batch(snap)
    assert all(type(r) is ManifestRow and type(r["kind"]) is str for r in rows)
    compacted: list = []
    compact = manifest._compact

    def compacting(st, version, crows, *a, **kw):
        compacted.extend(crows)
        return compact(st, version, crows, *a, **kw)
    monkeypatch.setattr(manifest, "_compact", compacting)
    committed = manifest.commit(store, snap.versions, rows, ck, durable=False)
    assert committed is not None and committed.compaction is not None and len(compacted) == N + 1
    assert all(committed.files[r["path"]] is r for r in rows), "the committed snapshot holds copies of the rows"
    assert all(r is committed.files[r["path"]] for r in compacted[:-1]), "the compaction holds copies of the rows"
    read = manifest.load_snapshot(store)
    assert committed.files == read.files and committed.batch == read.batch and committed.versions == read.versions
    assert committed.compaction == read.compaction


def test_a_commit_peak_per_row_is_bounded(tmp_path, monkeypatch):
    """The Python memory a commit of N rows over N live files (with its compaction) allocates at
    its peak, per row (main: ~3 more copies of each row)."""
    store, snap = _store_of_two_batches(tmp_path, monkeypatch)
    rows, ck = _batch(snap)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        committed = manifest.commit(store, snap.versions, rows, ck, durable=False)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert committed is not None and committed.compaction is not None
    assert peak / N < 1200, f"a commit allocated {peak / N:.0f} bytes a row at its peak"


def test_rows_share_their_column_names():
    """Each row built holds the schema's name strings, not its own (~1.4 KB a row on main), and
    ``kind`` as the plain string stored."""
    a = manifest.file_row(FileKind.CONSUMEQUEUE, "consumequeue/t/0/00000000000000000000", "b", 1, 1, topic="t",
                          queue_id=0)
    b = manifest.file_row("index", "index/20261129000000000", "b", 1, 1)
    assert list(a) == list(b) == manifest.MANIFEST_SCHEMA.names
    assert all(x is y for x, y in zip(a, b))
    assert type(a["kind"]) is str and a["kind"] == "consumequeue"
