"""The writers other than expire (tests/ops/test_expire_row_checks.py) never build on a snapshot
whose rows they have not checked (``rowcheck.check_snapshot``): a mirror cycle on the snapshot it
reads under the lease; ``repair --apply`` on the one it reads again once it holds the lease, and on
the one it reads after finishing a publish a kill cut short. A damaged row is refused
(``CorruptStore``) and nothing is committed. The stores: a mirror of the small-roll golden broker
after its first cycle (tests/support/mirrorhelp.py); expire-small (RocketMQ's own files) adopted,
one consume-queue file truncated for repair to replace, and the same with a per-topic expiry
killed right after its commit."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import GOLDEN
from support.mirrorhelp import first_batch
from support.opshelp import edit_row
from support import rowchecks
from storelib.errors import CorruptStore
from storelib.format import paths
from storelib.io import storage
from storelib.ops import expire as expire_op, mirror, repair as repair_op
from storelib.table.snapshots import open_snapshot

NOW = json.load(open(os.path.join(GOLDEN, "expire-small", "config.json")))["expire"]["now_ms"]


def test_a_mirror_cycle_refuses_a_damaged_row(tmp_path):
    """A cycle with new records below the safe point, on a mirror one of whose rows verify
    rejects: refused before it stages or commits anything."""
    broker, store, _ = first_batch(tmp_path)
    edit_row(store, lambda r: r["kind"] == "consumequeue", lambda r: r.update(valid_bytes=10))
    before, batches = rowchecks.state(store), rowchecks.batches(store)
    with pytest.raises(CorruptStore):
        mirror.mirror_broker(broker, store, quiet=True)
    assert rowchecks.batches(store) == batches, "a mirror cycle committed on rows verify rejects"
    assert rowchecks.state(store) == before, "a refused mirror cycle changed the store"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(adopted expire-small, the same with a committed per-topic expiry whose publish a kill cut
    short); in both, a consume-queue file of a topic the expiry keeps truncated (repair replaces it)."""
    plain, pending = rowchecks.adopted_and_pending(str(tmp_path_factory.mktemp("commitchecks")), NOW)
    for store in (plain, pending):
        snap = open_snapshot(storage.Store(store), history=True)
        rel = sorted(p for p, r in snap.files.items() if r.kind == "consumequeue" and r.topic != "coupon_issue")[-1]
        with open(os.path.join(store, rel), "r+b") as fh:
            fh.truncate(snap.files[rel].valid_bytes // 2)
    return plain, pending


def _damaged_read(monkeypatch, module, nth: int) -> list:
    """``module.open_snapshot`` giving its ``nth`` read (1-based) with a damaged row; the reads."""
    real, reads = module.open_snapshot, []

    def reading(*a, **kw):
        reads.append(1)
        snap = real(*a, **kw)
        return rowchecks.damaged(snap) if len(reads) == nth else snap
    monkeypatch.setattr(module, "open_snapshot", reading)
    return reads


def test_repair_refuses_a_damaged_row_read_under_the_lease(stores, tmp_path, monkeypatch):
    """The snapshot repair reads again once it holds the lease has a row verify rejects (the one
    it read first had not): refused, nothing committed, no file replaced."""
    store = shutil.copytree(stores[0], str(tmp_path / "store"))
    before, batches = rowchecks.state(store), rowchecks.batches(store)
    reads = _damaged_read(monkeypatch, repair_op, 2)
    with pytest.raises(CorruptStore):
        repair_op.repair(store, apply=True, quiet=True)
    monkeypatch.undo()
    assert len(reads) == 2, f"{len(reads)} snapshot reads: the test shows nothing"
    assert rowchecks.batches(store) == batches, "repair committed on a snapshot it had not checked"
    assert rowchecks.state(store) == before, "a refused repair changed the store"


def test_repair_refuses_a_damaged_row_read_after_the_publish_is_finished(stores, tmp_path, monkeypatch):
    """The snapshot read once the pending publish is finished (``expire.finish_pending``) has a
    row verify rejects: refused, nothing committed (the committed expiry's publish is finished)."""
    store = shutil.copytree(stores[1], str(tmp_path / "store"))
    batches = rowchecks.batches(store)
    reads = _damaged_read(monkeypatch, expire_op, 1)
    with pytest.raises(CorruptStore):
        repair_op.repair(store, apply=True, quiet=True)
    monkeypatch.undo()
    assert len(reads) == 1, f"{len(reads)} snapshot reads after the publish: the test shows nothing"
    assert not storage.Store(store).exists(paths.STAGING_DIR), "the pending publish was not finished"
    assert rowchecks.batches(store) == batches, "repair committed on a snapshot it had not checked"


@pytest.mark.parametrize("op", ["repair", "expire"])
def test_no_pending_delete_is_looked_for_on_an_unchecked_snapshot(stores, tmp_path, monkeypatch, op):
    """The snapshot read once the pending publish is finished is checked before the deletes of
    earlier expiries are looked for on it (``expire.finish_pending_deletes``): refused with none
    of its rows built on."""
    store = shutil.copytree(stores[1], str(tmp_path / "store"))
    reads = _damaged_read(monkeypatch, expire_op, 1 if op == "repair" else 2)     # (expire reads first)
    real, given = expire_op.finish_pending_deletes, []

    def recording(store, snap, every=False):
        given.append(snap)
        return real(store, snap, every)
    monkeypatch.setattr(expire_op, "finish_pending_deletes", recording)
    with pytest.raises(CorruptStore):
        if op == "repair":
            repair_op.repair(store, apply=True, quiet=True)
        else:
            expire_op.expire(store, 48, NOW, quiet=True, housekeeping=False)
    monkeypatch.undo()
    assert len(reads) == (1 if op == "repair" else 2), f"{len(reads)} snapshot reads: the test shows nothing"
    assert given == [], "pending deletes were looked for on a snapshot not checked yet"


@pytest.mark.parametrize("op,checks", [("mirror", 1), ("repair", 2), ("repair-pending", 3)])
def test_each_snapshot_a_writer_builds_on_is_checked_once(stores, tmp_path, monkeypatch, op, checks):
    """A mirror cycle checks the one snapshot it reads; repair the one it reads first (a dry run's
    too), the one it reads under the lease, and the one it reads once a pending publish is
    finished: each once (and, undamaged, the cycle or the repair commits)."""
    if op == "mirror":
        broker, store, _ = first_batch(tmp_path)
        seen = rowchecks.counted_checks(monkeypatch)
        assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"
    else:
        store = shutil.copytree(stores[op == "repair-pending"], str(tmp_path / "store"))
        batches = rowchecks.batches(store)
        seen = rowchecks.counted_checks(monkeypatch)
        s = repair_op.repair(store, apply=True, quiet=True)
        assert len(s["replaced"]) == 1 and rowchecks.batches(store) == batches + [s["batch_id"]], s
    assert len(seen) == checks and len({id(s) for s in seen}) == checks, \
        f"{len(seen)} checks of {len({id(s) for s in seen})} snapshots, {checks} expected"
