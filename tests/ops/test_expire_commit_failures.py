"""An expiry whose commit fails (storelib.ops.expire ``_commit``, storelib.ingest.commit
``abandon_attempt``), in this process on expire-small: its staging (the staged deletes document)
is removed only when the attempt surely did not commit and the writer still holds its lease; else
it is left for the next writer, which decides from the tables. Never a file deleted, and the error
the caller gets is the commit's. On an object store, a commit whose outcome is unknown:
tests/e2e/test_expiry_deletes.py. A repair's commit takes the same path: its two cases at the end."""
from __future__ import annotations

import pytest

from support.opshelp import copy_store
from storelib.errors import ConcurrentWriteError, LeaseLost
from storelib.format import paths
from storelib.ingest import commit as commit_stage
from storelib.io import storage
from storelib.ops import expire as retention
from storelib.table import manifest, staged_deletes, writerlease
from storelib.table.snapshots import open_snapshot
from storelib.verify import driver as verify

from test_staged_deletes import NOW, adopted  # noqa: F401


def _documents(st) -> list:
    """The staged deletes documents under ``staging/``."""
    if not st.exists(paths.STAGING_DIR):
        return []
    return [f for f in st.list_files(paths.STAGING_DIR) if f.endswith("/" + paths.STAGED_DELETES)]


def _state(st, snap) -> dict:
    return {p: st.exists(p) for p in [*snap.files, *snap.removed]}


def _lease_lost_at_the_second_check(monkeypatch) -> None:
    """The writer's lease checks out once (before the manifest rows), then is lost (before the switch)."""
    real = writerlease.WriterLease.check
    calls = []

    def lost_on_the_second(self):
        calls.append(1)
        if len(calls) >= 2:
            raise LeaseLost("the lease was taken over")
        return real(self)
    monkeypatch.setattr(writerlease.WriterLease, "check", lost_on_the_second)


def _commit_refused_and_table_unreadable(monkeypatch, module) -> None:
    """``module``'s Delta commit refused by a racing writer, and the read of the table that would
    tell whether it went in failing too."""
    def refused(*a, **k):
        raise ConcurrentWriteError("another writer committed version 3 of _rocketlake/checkpoints first")

    def unreachable(*a, **k):
        raise OSError("the store did not answer")
    monkeypatch.setattr(module.manifest, "commit", refused)
    monkeypatch.setattr(module.commit_stage, "is_committed", unreachable)


def test_a_failed_read_of_the_table_leaves_the_attempt_and_raises_the_commits_error(adopted, tmp_path, monkeypatch):  # noqa: F811
    """A racing writer's commit refuses the expiry's; the read that would tell whether it
    committed fails too (the store unreachable): the caller gets the refusal (exit 3), not the
    read's error, and the staged document stays for the next writer."""
    store = copy_store(adopted, str(tmp_path / "store"))
    st = storage.Store(store)
    snap = open_snapshot(st, history=True)
    before = _state(st, snap)

    _commit_refused_and_table_unreadable(monkeypatch, retention)
    with pytest.raises(ConcurrentWriteError) as e:
        retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    assert "another writer committed" in str(e.value)
    monkeypatch.undo()
    assert len(_documents(st)) == 1 and _state(st, snap) == before
    # the next writer (another expiry) clears the dead attempt after its commit and expires as asked
    out = retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    assert out["status"] == "committed" and not st.exists(paths.STAGING_DIR)
    assert not any(st.exists(p) for p in out["removed"])
    assert verify.verify_store(store, deep=True).problems == []


def test_a_lease_lost_between_the_tables_leaves_everything_to_the_writer_that_took_over(adopted, tmp_path, monkeypatch):  # noqa: F811
    """The lease is lost after the manifest rows went in, before the switch: the expiry raises
    ``LeaseLost`` and touches nothing more (its staging is not this writer's to remove any more);
    the next writer clears the dead attempt after its own commit."""
    store = copy_store(adopted, str(tmp_path / "store"))
    st = storage.Store(store)
    snap = open_snapshot(st, history=True)
    before = _state(st, snap)
    _lease_lost_at_the_second_check(monkeypatch)
    dropped = []
    monkeypatch.setattr(retention.commit_stage, "undo_attempt", lambda *a: dropped.append(a))
    with pytest.raises(LeaseLost):
        retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    monkeypatch.undo()
    assert dropped == [] and len(_documents(st)) == 1 and _state(st, snap) == before
    after = open_snapshot(st, history=True)
    assert after.batch.batch_id == snap.batch.batch_id                    # the switch never went in
    assert after.versions.manifest == snap.versions.manifest + 1          # (the rows did: a dead attempt's)
    out = retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    assert out["status"] == "committed" and not st.exists(paths.STAGING_DIR)
    assert not any(st.exists(p) for p in out["removed"])
    assert verify.verify_store(store, deep=True).problems == []


def test_a_local_commit_that_went_in_and_then_failed_is_not_undone(adopted, tmp_path, monkeypatch):  # noqa: F811
    """Local stores: the commit went in (its log entry linked), then something after it failed
    (an fsync's EIO): the table says committed, so nothing is undone, and the next writer
    finishes the deletes from the staged document."""
    store = copy_store(adopted, str(tmp_path / "store"))
    st = storage.Store(store)
    _expire_failing_after(monkeypatch, store, manifest, "commit", OSError(5, "Input/output error"))
    snap = open_snapshot(st, history=True)
    assert snap.batch.operation == "expire" and len(_documents(st)) == 1
    gone = set(snap.removed)
    assert gone and all(st.exists(p) for p in gone)
    assert commit_stage.finish_pending_publish(st, snap) == 1
    assert not any(st.exists(p) for p in gone) and not st.exists(paths.STAGING_DIR)
    assert verify.verify_store(store, deep=True).problems == []


def test_a_failure_before_the_commit_removes_the_attempts_staging(adopted, tmp_path, monkeypatch):  # noqa: F811
    store = copy_store(adopted, str(tmp_path / "store"))
    _expire_failing_after(monkeypatch, store, staged_deletes, "stage", OSError(28, "No space left on device"))
    assert not storage.Store(store).exists(paths.STAGING_DIR)


def _expire_failing_after(monkeypatch, store: str, module, name: str, error: Exception) -> None:
    """An expiry of ``store`` whose ``module.name`` is done, then fails with ``error`` (the
    expiry raises it)."""
    real = getattr(module, name)

    def done_then_failed(*a, **k):
        real(*a, **k)
        raise error
    monkeypatch.setattr(module, name, done_then_failed)
    with pytest.raises(type(error)):
        retention.expire(store, 48, NOW, quiet=True, housekeeping=False)
    monkeypatch.undo()


@pytest.fixture
def damaged_rocketlake_store(restored_golden, tmp_path):
    """small-roll adopted as a rocketlake store, then a consume-queue file removed: a repair's work."""
    import os
    import shutil
    from support.opshelp import small_config
    from storelib.ops import adopt
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    adopt.adopt(None, store, store, small_config(), quiet=True)
    cq = sorted(os.path.relpath(os.path.join(d, f), store)
                for d, _, fs in os.walk(os.path.join(store, "consumequeue")) for f in fs)
    os.remove(os.path.join(store, cq[5]))
    return store


def _staged_attempts(st) -> list:
    return st.list_files(paths.STAGING_DIR) if st.exists(paths.STAGING_DIR) else []


def test_a_repair_refused_whose_read_of_the_table_fails_raises_the_refusal(damaged_rocketlake_store, monkeypatch):
    """As for an expiry: the repair's commit is refused and the read that would tell whether it
    committed fails: the caller gets the refusal, not the read's error, and the staged files stay
    for the next writer; the next repair commits and the store verifies clean."""
    from storelib.ops import repair as repair_op
    store = damaged_rocketlake_store
    st = storage.Store(store)

    _commit_refused_and_table_unreadable(monkeypatch, repair_op)
    with pytest.raises(ConcurrentWriteError):
        repair_op.repair(store, apply=True, quiet=True)
    monkeypatch.undo()
    assert _staged_attempts(st), "the attempt's staged files are left for the next writer"
    s = repair_op.repair(store, apply=True, quiet=True)
    assert len(s["replaced"]) == 1 and not st.exists(paths.STAGING_DIR)
    assert verify.verify_store(store, deep=True).problems == []


def test_a_repair_that_lost_its_lease_between_the_tables_touches_nothing(damaged_rocketlake_store, monkeypatch):
    """The lease is lost after the repair's manifest rows went in, before the switch: it raises
    ``LeaseLost`` and removes nothing (the store is another writer's now)."""
    from storelib.ops import repair as repair_op
    store = damaged_rocketlake_store
    st = storage.Store(store)
    _lease_lost_at_the_second_check(monkeypatch)
    dropped = []
    monkeypatch.setattr(repair_op.commit_stage, "undo_attempt", lambda *a: dropped.append(a))
    with pytest.raises(LeaseLost):
        repair_op.repair(store, apply=True, quiet=True)
    monkeypatch.undo()
    assert dropped == [] and _staged_attempts(st)
    s = repair_op.repair(store, apply=True, quiet=True)
    assert len(s["replaced"]) == 1 and not st.exists(paths.STAGING_DIR)
    assert verify.verify_store(store, deep=True).problems == []
