"""Manifest and checkpoint rows through real Delta commits (no Spark): which rows a snapshot sees.

A batch's rows count only with its checkpoint row and only those of the ingest attempt it names;
a removal (expire) belongs to the removing batch, whichever attempt wrote the file it removes.
"""
from __future__ import annotations



from storelib.table import manifest, tableread
from storelib.io import storage
from storelib.format import paths


def _ck(batch_id: str, seq: int, attempt: str | None) -> dict:
    cols = {n: None for n in manifest.CHECKPOINTS_SCHEMA.names if n != "attempt_id"}
    cols.update(batch_id=batch_id, batch_seq=seq, operation="ingest", committed_at=seq, messages=1,
                queue_offsets=[])
    return dict(manifest.checkpoint_row(**cols), attempt_id=attempt)


def _add(path: str, batch_id: str, seq: int, attempt: str) -> dict:
    return manifest.file_row("consumequeue", path, batch_id, seq, seq, attempt_id=attempt,
                             topic="t", queue_id=0, valid_bytes=20, file_size=20, count=1)


def test_expiry_removes_files_written_by_earlier_attempts(tmp_path):
    store = storage.Store(str(tmp_path / "store"))
    snap = manifest.load_snapshot(store)
    # batch 1: attempt a1 wrote two files; a dead attempt a0 left a row that must never count
    manifest.commit(store, snap.versions,
                    [_add("consumequeue/t/0/00000000000000000000", "b1", 1, "a1"),
                     _add("consumequeue/t/1/00000000000000000000", "b1", 1, "a1"),
                     _add("consumequeue/t/2/00000000000000000000", "b1", 1, "a0")],
                    _ck("b1", 1, "a1"), durable=False)
    snap = manifest.load_snapshot(store)
    assert sorted(snap.files) == ["consumequeue/t/0/00000000000000000000",
                                  "consumequeue/t/1/00000000000000000000"]
    # batch 2 (attempt a2) rewrites queue 1
    manifest.commit(store, snap.versions, [_add("consumequeue/t/1/00000000000000000000", "b2", 2, "a2")],
                    _ck("b2", 2, "a2"), durable=False)
    snap = manifest.load_snapshot(store)
    # an expiry removes both files: rows copied from add rows of attempts a1 and a2
    removes = [manifest.remove_row(r, "expire-1", 3, 3, "{}") for r in snap.files.values()]
    ck = manifest.checkpoint_row_after(snap.batch, batch_id="expire-1", batch_seq=3, operation="expire",
                                       committed_at=3)
    manifest.commit(store, snap.versions, removes, ck, durable=False)
    after = manifest.load_snapshot(store)
    assert after.batch["batch_id"] == "expire-1"
    assert after.files == {}, f"expired files still listed: {sorted(after.files)}"
    # earlier snapshots are unchanged
    assert sorted(manifest.load_snapshot(store, as_of_batch="b2").files) == sorted(snap.files)


def test_each_commit_names_its_batch_for_delta_history(tmp_path):
    """Both tables' commits carry the batch id as the commit's userMetadata (what delta-spark's
    DESCRIBE HISTORY shows) and as rocketlake.batch_id."""
    import json
    store = storage.Store(str(tmp_path / "store"))
    snap = manifest.load_snapshot(store)
    manifest.commit(store, snap.versions, [_add("consumequeue/t/0/00000000000000000000", "b1", 1, "a1")],
                    _ck("b1", 1, "a1"), durable=False)
    for table in (paths.MANIFEST_DIR, paths.CHECKPOINTS_DIR):
        lines = store.read(f"{table}/_delta_log/00000000000000000000.json").decode().splitlines()
        info = [json.loads(x)["commitInfo"] for x in lines if '"commitInfo"' in x][0]
        assert info["userMetadata"] == "b1" and info["rocketlake.batch_id"] == "b1", info
    assert {h["batch_id"] for h in tableread.history(store)} == {"b1"}
