"""An expiry checks the rows of each snapshot it builds on once (``rowcheck.check_snapshot``,
directly or through ``storefiles.files_from_snapshot``), and never builds on one it has not
checked: the snapshot it reads, and the one it reads again once it finished a publish a kill
cut short (``expire.finish_pending``). A damaged row is refused, and nothing is committed, on
every path: per topic and store-wide, with or without a pending publish, and when only the
snapshot read after the publish holds it. The store: expire-small (RocketMQ's own files),
adopted; the pending publish: a per-topic expiry killed right after its commit."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest

from conftest import GOLDEN
from support.opshelp import restore, run, small_config, small_properties, tree_digest
from storelib.errors import CorruptStore
from storelib.format import paths
from storelib.io import storage
from storelib.ops import adopt, expire as retention
from storelib.table import rowcheck
from storelib.table.rows import ManifestRow
from storelib.table.snapshots import open_snapshot

NOW = json.load(open(os.path.join(GOLDEN, "expire-small", "config.json")))["expire"]["now_ms"]
RULES = {"coupon_issue": 48}
LATER = {"notify_sms": 24}          # a second per-topic expiry's rule (the first's files are gone)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(adopted store, the same with a committed per-topic expiry whose publish a kill cut short)."""
    tmp = tmp_path_factory.mktemp("rowchecks")
    plain = restore("expire-small", "files_before.json", str(tmp / "plain"))
    adopt.adopt(None, plain, plain, small_config(), quiet=True)
    pending = shutil.copytree(plain, str(tmp / "pending"))
    env = os.environ.get("ROCKETLAKE_FAULT")
    os.environ["ROCKETLAKE_FAULT"] = "after-commit-before-publish"
    try:
        r = run("expire.py", "--store", pending, "--topic", "coupon_issue", "--reserved-hours", "48",
                "--config", small_properties(tmp), "--now", str(NOW), "--quiet")
    finally:
        os.environ.pop("ROCKETLAKE_FAULT")
        if env is not None:
            os.environ["ROCKETLAKE_FAULT"] = env
    assert r.returncode == -9, r.stderr[-2000:]
    assert storage.Store(pending).exists(paths.STAGING_DIR), "the killed expiry left no publish to finish"
    return plain, pending


def _copy(src: str, tmp_path, name: str) -> str:
    return shutil.copytree(src, str(tmp_path / name))


def _checks(monkeypatch) -> list:
    """The snapshots ``rowcheck.check_snapshot`` checks from now on (expire's own calls and those
    of ``storefiles.files_from_snapshot``, which imports it when called)."""
    seen: list = []
    real = rowcheck.check_snapshot

    def counting(snap, cfg=None):
        seen.append(snap)
        return real(snap, cfg)
    monkeypatch.setattr(rowcheck, "check_snapshot", counting)
    return seen


def _expire(store: str, rules: dict | None):
    if rules:
        return retention.expire(store, None, NOW, topic_rules=rules, quiet=True, housekeeping=False)
    return retention.expire(store, 48, NOW, quiet=True, housekeeping=False)


def _batches(store: str) -> list:
    return [b.batch_id for b in open_snapshot(storage.Store(store), history=True).batches]


@pytest.mark.parametrize("rules,pending,checks", [(RULES, False, 1), (None, False, 1), (LATER, True, 2),
                                                  (None, True, 2)])
def test_an_expiry_checks_each_snapshot_it_builds_on_once(stores, tmp_path, monkeypatch, rules, pending, checks):
    store = _copy(stores[pending], tmp_path, "store")
    seen = _checks(monkeypatch)
    out = _expire(store, rules)
    assert out["status"] == "committed", out
    assert len(seen) == checks and len({id(s) for s in seen}) == checks, \
        f"{len(seen)} checks of {len({id(s) for s in seen})} snapshots, {checks} expected"
    assert not storage.Store(store).exists(paths.STAGING_DIR)


def _damage(snap):
    """``snap`` with its first consume-queue row claiming 10 valid bytes (verify rejects it)."""
    path = sorted(p for p, r in snap.files.items() if r.kind == "consumequeue")[0]
    files = dict(snap.files)
    files[path] = ManifestRow(dict(files[path], valid_bytes=10))
    return dataclasses.replace(snap, files=files)


@pytest.mark.parametrize("rules", [RULES, None], ids=["per-topic", "store-wide"])
@pytest.mark.parametrize("pending", [False, True], ids=["nothing-pending", "publish-pending"])
def test_a_damaged_row_is_refused_before_anything_changes(stores, tmp_path, rules, pending):
    from support.opshelp import edit_row
    store = _copy(stores[pending], tmp_path, "store")
    edit_row(store, lambda r: r["kind"] == "consumequeue", lambda r: r.update(valid_bytes=10))
    before = _state(store)
    with pytest.raises(CorruptStore):
        _expire(store, rules)
    assert _state(store) == before, "a refused expiry changed the store (or finished its pending publish)"


def _state(store: str) -> dict:
    """Every file of the store but the writer lease's lock (the killed expiry's, which the next
    writer takes over and releases)."""
    return {k: v for k, v in tree_digest(store).items() if k != paths.LEASE_PATH}


@pytest.mark.parametrize("rules", [LATER, None], ids=["per-topic", "store-wide"])
def test_a_damaged_row_read_after_the_publish_is_finished_is_refused(stores, tmp_path, monkeypatch, rules):
    """The snapshot the expiry reads again once it finished the pending publish holds a row
    verify rejects (the one it read first did not): refused, nothing committed."""
    store = _copy(stores[True], tmp_path, "store")
    batches = _batches(store)
    real, reads = retention.open_snapshot, []

    def second_damaged(*a, **kw):
        reads.append(1)
        snap = real(*a, **kw)
        return _damage(snap) if len(reads) > 1 else snap
    monkeypatch.setattr(retention, "open_snapshot", second_damaged)
    with pytest.raises(CorruptStore):
        _expire(store, rules)
    monkeypatch.undo()
    assert len(reads) == 2, f"{len(reads)} snapshot reads: the test shows nothing"
    assert not storage.Store(store).exists(paths.STAGING_DIR), "the pending publish was not finished"
    assert _batches(store) == batches, "an expiry built on a snapshot it had not checked"
