"""An expiry checks the rows of each snapshot it builds on once (``rowcheck.check_snapshot``,
directly or through ``storefiles.files_from_snapshot``), and never builds on one it has not
checked: the snapshot it reads, and the one it reads again once it finished a publish a kill
cut short (``expire.finish_pending``). A damaged row is refused, and nothing is committed, on
every path: per topic and store-wide, with or without a pending publish, and when only the
snapshot read after the publish holds it. The store: expire-small (RocketMQ's own files),
adopted; the pending publish: a per-topic expiry killed right after its commit."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import GOLDEN
from support import rowchecks
from storelib.errors import CorruptStore
from storelib.format import paths
from storelib.io import storage
from storelib.ops import expire as retention

NOW = json.load(open(os.path.join(GOLDEN, "expire-small", "config.json")))["expire"]["now_ms"]
RULES = {"coupon_issue": 48}
LATER = {"notify_sms": 24}          # a second per-topic expiry's rule (the first's files are gone)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(adopted store, the same with a committed per-topic expiry whose publish a kill cut short)."""
    return rowchecks.adopted_and_pending(str(tmp_path_factory.mktemp("rowchecks")), NOW)


def _copy(src: str, tmp_path, name: str) -> str:
    return shutil.copytree(src, str(tmp_path / name))


def _expire(store: str, rules: dict | None):
    if rules:
        return retention.expire(store, None, NOW, topic_rules=rules, quiet=True, housekeeping=False)
    return retention.expire(store, 48, NOW, quiet=True, housekeeping=False)


@pytest.mark.parametrize("rules,pending,checks", [(RULES, False, 1), (None, False, 1), (LATER, True, 2),
                                                  (None, True, 2)])
def test_an_expiry_checks_each_snapshot_it_builds_on_once(stores, tmp_path, monkeypatch, rules, pending, checks):
    store = _copy(stores[pending], tmp_path, "store")
    seen = rowchecks.counted_checks(monkeypatch)
    out = _expire(store, rules)
    assert out["status"] == "committed", out
    assert len(seen) == checks and len({id(s) for s in seen}) == checks, \
        f"{len(seen)} checks of {len({id(s) for s in seen})} snapshots, {checks} expected"
    assert not storage.Store(store).exists(paths.STAGING_DIR)


@pytest.mark.parametrize("rules", [RULES, None], ids=["per-topic", "store-wide"])
@pytest.mark.parametrize("pending", [False, True], ids=["nothing-pending", "publish-pending"])
def test_a_damaged_row_is_refused_before_anything_changes(stores, tmp_path, rules, pending):
    from support.opshelp import edit_row
    store = _copy(stores[pending], tmp_path, "store")
    edit_row(store, lambda r: r["kind"] == "consumequeue", lambda r: r.update(valid_bytes=10))
    before = rowchecks.state(store)
    with pytest.raises(CorruptStore):
        _expire(store, rules)
    assert rowchecks.state(store) == before, "a refused expiry changed the store (or finished its pending publish)"


@pytest.mark.parametrize("rules", [LATER, None], ids=["per-topic", "store-wide"])
def test_a_damaged_row_read_after_the_publish_is_finished_is_refused(stores, tmp_path, monkeypatch, rules):
    """The snapshot the expiry reads again once it finished the pending publish holds a row
    verify rejects (the one it read first did not): refused, nothing committed."""
    store = _copy(stores[True], tmp_path, "store")
    batches = rowchecks.batches(store)
    real, reads = retention.open_snapshot, []

    def second_damaged(*a, **kw):
        reads.append(1)
        snap = real(*a, **kw)
        return rowchecks.damaged(snap) if len(reads) > 1 else snap
    monkeypatch.setattr(retention, "open_snapshot", second_damaged)
    with pytest.raises(CorruptStore):
        _expire(store, rules)
    monkeypatch.undo()
    assert len(reads) == 2, f"{len(reads)} snapshot reads: the test shows nothing"
    assert not storage.Store(store).exists(paths.STAGING_DIR), "the pending publish was not finished"
    assert rowchecks.batches(store) == batches, "an expiry built on a snapshot it had not checked"
