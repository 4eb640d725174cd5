"""An expiry's staged deletes (storelib.table.staged_deletes), in this process on expire-small:
the document it writes before its commit, the next writer finishing it from the document alone
(no read of the manifest table), what a finish refuses, and the fallback for an older version's
interrupted expiry. Kills, power cuts, stalls and object stores: tests/e2e/test_expiry_deletes.py,
tests/e2e/test_crash_expiry_deletes.py."""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import GOLDEN
from support.opshelp import copy_store, restore, small_config
from storelib.errors import CorruptStore
from storelib.format import paths
from storelib.ingest import commit as commit_stage
from storelib.io import storage
from storelib.ops import adopt, expire as retention
from storelib.table import manifest, staged_deletes
from storelib.table.snapshots import open_snapshot
from storelib.verify import driver as verify

NOW = json.load(open(os.path.join(GOLDEN, "expire-small", "config.json")))["expire"]["now_ms"]


class _CutShort(Exception):
    """The publish cut short right after the commit (as a crash there leaves it)."""


@pytest.fixture(scope="module")
def adopted(tmp_path_factory):
    store = restore("expire-small", "files_before.json", str(tmp_path_factory.mktemp("staged") / "store"))
    adopt.adopt(None, store, store, small_config(), quiet=True)
    return store


def _cut_short(monkeypatch):
    def boom(*a, **k):
        raise _CutShort()
    monkeypatch.setattr(retention.staged_deletes, "delete", boom)


def _interrupted(adopted, tmp_path, monkeypatch) -> str:
    """A copy of ``adopted`` whose expiry committed and did not delete a file."""
    store = copy_store(adopted, str(tmp_path / "store"))
    _cut_short(monkeypatch)
    with pytest.raises(_CutShort):
        retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    monkeypatch.undo()
    return store


def _reads(monkeypatch) -> list:
    """Reads of a Delta table's rows from here on, besides a snapshot's own (``read_tables``:
    every writer opens the snapshot it continues), by the function that made them."""
    calls: list = []
    real = manifest.read_rows

    def counted(*a, **k):
        caller = sys._getframe(1).f_code.co_name
        if caller != "_table_rows":
            calls.append(caller)
        return real(*a, **k)
    monkeypatch.setattr(manifest, "read_rows", counted)
    return calls


def test_the_next_writer_finishes_the_deletes_from_the_staged_document_alone(adopted, tmp_path, monkeypatch):
    store = _interrupted(adopted, tmp_path, monkeypatch)
    st = storage.Store(store)
    snap = open_snapshot(st, history=True)
    b = snap.batch
    assert b.operation == "expire" and b.attempt_id
    staging = f"{paths.STAGING_DIR}/{b.batch_id}/{b.attempt_id}"
    doc = staged_deletes.read(st, staging)
    gone = set(snap.removed)
    assert doc is not None and set(doc.files) == gone and len(gone) > 10 and doc.objects == ()
    assert all(st.exists(p) for p in gone)                       # nothing deleted before the publish
    calls = _reads(monkeypatch)
    assert commit_stage.finish_pending_publish(st, snap) == 1
    assert calls == [], "knowing and finishing the deletes read the manifest table"
    assert not any(st.exists(p) for p in gone) and not st.exists(paths.STAGING_DIR)
    assert commit_stage.finish_pending_publish(st, snap) == 0
    assert verify.verify_store(store, deep=True).problems == []


def test_an_expiry_with_nothing_pending_reads_no_manifest_rows_for_deletes(adopted, tmp_path, monkeypatch):
    store = copy_store(adopted, str(tmp_path / "store"))
    assert retention.expire(store, 48, NOW, quiet=True, housekeeping=False)["status"] == "committed"
    calls = _reads(monkeypatch)
    again = retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    assert again["status"] == "nothing-to-do" and calls == []


@pytest.mark.parametrize("how", ["a live file", "outside the store", "not removed by it", "another batch's",
                                 "an object outside", "garbage"])
def test_a_document_naming_what_its_batch_did_not_remove_is_refused(adopted, tmp_path, monkeypatch, how):
    store = _interrupted(adopted, tmp_path, monkeypatch)
    st = storage.Store(store)
    snap = open_snapshot(st, history=True)
    b = snap.batch
    staging = f"{paths.STAGING_DIR}/{b.batch_id}/{b.attempt_id}"
    rel = staged_deletes.document(staging)
    doc = json.loads(st.read(rel))
    live = sorted(snap.files)[0]
    if how == "a live file":
        doc["files"].append(live)
    elif how == "outside the store":
        doc["files"].append("commitlog/../../elsewhere")
    elif how == "not removed by it":
        doc["files"].append("commitlog/99999999999999999999")
    elif how == "another batch's":
        doc["batch_seq"] += 1
    elif how == "an object outside":
        doc["objects"].append("commitlog/00000000000000000000")
    before = {p: st.exists(p) for p in [*snap.removed, live]}
    st.write_file(rel, [b"{not json" if how == "garbage" else json.dumps(doc).encode()])
    with pytest.raises(CorruptStore) as e:
        commit_stage.finish_pending_publish(st, snap)
    assert rel in str(e.value) and "nothing was deleted" in str(e.value)
    assert {p: st.exists(p) for p in before} == before and st.exists(rel)


def test_an_older_versions_interrupted_expiry_is_finished_by_the_next_expire(adopted, tmp_path, monkeypatch):
    """An older version staged nothing and recorded no attempt: the next expire finds its
    deletes from the snapshot's rows (``finish_pending_deletes``)."""
    store = copy_store(adopted, str(tmp_path / "store"))

    class _NoAttempt:
        hex = type("NoHex", (), {"__getitem__": lambda self, k: None})()
    monkeypatch.setattr(retention, "uuid", type("NoUuid", (), {"uuid4": staticmethod(lambda: _NoAttempt())}))
    monkeypatch.setattr(retention.staged_deletes, "stage", lambda *a, **k: None)
    _cut_short(monkeypatch)
    with pytest.raises(_CutShort):
        retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    monkeypatch.undo()
    st = storage.Store(store)
    snap = open_snapshot(st, history=True)
    assert snap.batch.attempt_id is None and not st.exists(paths.STAGING_DIR)
    gone = set(snap.removed)
    assert gone and all(st.exists(p) for p in gone)
    assert commit_stage.finish_pending_publish(st, snap) == 0         # nothing staged to know it by
    again = retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    assert again["status"] == "nothing-to-do" and not any(st.exists(p) for p in gone)
    assert verify.verify_store(store, deep=True).problems == []
    assert retention.finish_pending_deletes(st, open_snapshot(st, history=True)) == []


def test_a_repair_dry_run_names_a_pending_expiry_as_unfinished_deletes(adopted, tmp_path, monkeypatch, capsys):
    from storelib.ops import repair as repair_op
    store = _interrupted(adopted, tmp_path, monkeypatch)
    b = open_snapshot(storage.Store(store), history=True).batch
    s = repair_op.repair(store, small_config())
    err = capsys.readouterr().err
    assert s["pending_publish"] == [b.batch_id]
    assert f"expiry {b.batch_id} is committed but its deletes are unfinished" in err, err[-2000:]
    assert "its files were read from its staging" not in err


@pytest.mark.parametrize("how", ["a file no batch removed", "an earlier expiry's file"])
def test_a_writer_whose_snapshot_comes_from_the_cache_refuses_what_the_batch_did_not_remove(
        adopted, tmp_path, monkeypatch, how):
    """The cache holds live rows only: the check that each file was removed by the batch reads
    that batch's remove rows from the manifest table then (not skipped)."""
    from storelib.table import snapcache
    store = copy_store(adopted, str(tmp_path / "store"))
    st = storage.Store(store)
    first = retention.expire(store, 50, NOW, quiet=True, housekeeping=False)     # an earlier expiry
    assert first["status"] == "committed" and first["removed"]
    _cut_short(monkeypatch)
    with pytest.raises(_CutShort):
        retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    monkeypatch.undo()
    assert snapcache.refresh(st)                # (the cut left the previous batch's cache: stale)
    snap = open_snapshot(st)
    b = snap.batch
    assert snap.source == "cache" and b.operation == "expire" and b.attempt_id
    staging = f"{paths.STAGING_DIR}/{b.batch_id}/{b.attempt_id}"
    rel = staged_deletes.document(staging)
    doc = json.loads(st.read(rel))
    if how == "a file no batch removed":       # a broker's file in the store's directory, in no row
        extra = "commitlog/99999999999999999999"
        st.write_file(extra, [b"x" * 64])
    else:                                        # removed, by the earlier expiry, and left there again
        extra = first["removed"][0]
        st.write_file(extra, [b"x" * 64])
    doc["files"].append(extra)
    st.write_file(rel, [json.dumps(doc).encode()])
    pending = [p for p in doc["files"] if p != extra]
    assert all(st.exists(p) for p in pending)
    with pytest.raises(CorruptStore) as e:
        commit_stage.finish_pending_publish(st, snap)
    assert rel in str(e.value) and f"{extra!r} is not a file its committed rows removed" in str(e.value)
    assert st.exists(extra) and all(st.exists(p) for p in pending) and st.exists(rel)
    # the document as the expiry wrote it: finished from the cached snapshot, one filtered read
    doc["files"].remove(extra)
    st.write_file(rel, [json.dumps(doc).encode()])
    st.delete(extra)
    assert commit_stage.finish_pending_publish(st, open_snapshot(st)) == 1
    assert not any(st.exists(p) for p in pending) and not st.exists(paths.STAGING_DIR)
    assert verify.verify_store(store, deep=True).problems == []


def test_verify_takes_a_pending_delete_only_when_it_is_the_file_the_expiry_removed(adopted, tmp_path, monkeypatch):
    """A crash-cut expiry leaves the files it removed until the next writer deletes them: verify
    passes them over, but only with the bytes their removed rows record. Another file under such
    a name (same size, other bytes) is an extra file: a broker would load it as the store's first
    segment, queue file or index."""
    store = _interrupted(adopted, tmp_path, monkeypatch)
    st = storage.Store(store)
    snap = open_snapshot(st, history=True)
    assert verify.verify_store(store).problems == []
    seg = min(p for p in snap.removed if p.startswith("commitlog/"))
    cq = min(p for p in snap.removed if p.startswith("consumequeue/"))
    for rel in (seg, cq):
        path = st.path(rel)
        data = bytearray(open(path, "rb").read())
        data[7] ^= 0xFF
        open(path, "wb").write(bytes(data))
    problems = verify.verify_store(store).problems
    assert {p.split("@", 1)[0] for p in problems if "extra file" in p} == {seg, cq}, problems
