"""What an ingest that lost its lease removes on a local store (``driver._abandon``): its own
attempt's staging directory only, and only when that attempt did not commit. The writer that
took the lease over stages under an attempt of its own (of the same batch id, at worst), and a
committed batch whose publish is unfinished keeps its staging for that writer to finish
(``finish_pending_publish``). The lost writer's ``rmdir`` of the emptied ``staging/<batch>`` and
``staging/`` may fall between two ``mkdir`` calls of the new writer making its own staging
directory there: the new writer makes the parent again (``storage.make_dirs``) instead of failing
for a directory that was empty."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import GOLDEN
from support import rowchecks
from support.opshelp import tree_digest
from storelib.errors import LeaseLost
from storelib.format import paths
from storelib.ingest import commit, driver
from storelib.io import storage
from storelib.runtime.progress import Progress
from storelib.table.snapshots import open_snapshot

NOW = json.load(open(os.path.join(GOLDEN, "expire-small", "config.json")))["expire"]["now_ms"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(an adopted store, the same with a committed expiry whose publish a kill cut short)."""
    return rowchecks.adopted_and_pending(str(tmp_path_factory.mktemp("lostlease")), NOW)


def _copy(src: str, dst) -> str:
    return shutil.copytree(src, str(dst))


def _run(st: storage.Store, batch_id: str, attempt: str) -> driver._Run:
    """The lost writer's run, as ``_abandon`` sees it (no Spark job of its own left to cancel)."""
    return driver._Run(None, st, None, Progress(True), [], None, batch_id, "f" * 64, 0.0, attempt=attempt,
                       staging=f"{paths.STAGING_DIR}/{batch_id}/{attempt}")


def _stage(st: storage.Store, staging: str) -> None:
    for rel in ("commitlog/00000000000000000000", "consumequeue/t/0/00000000000000000000"):
        st.write_file(f"{staging}/{rel}", [f"{staging} {rel}".encode()])


def _lost(st: storage.Store, run: driver._Run) -> None:
    driver._abandon(run, LeaseLost("the lease was taken over"), committing=True)


def test_a_lost_writer_removes_its_own_attempt_and_nothing_the_new_writer_staged(stores, tmp_path):
    plain, _ = stores
    store = _copy(plain, tmp_path / "store")
    st = storage.Store(store)
    lost = _run(st, "b-same", "a1")
    _stage(st, lost.staging)
    for other in ("b-same/a2", "b-other/a3"):            # the new lease holder's (the same batch id, or not)
        _stage(st, f"{paths.STAGING_DIR}/{other}")
    before = {k: v for k, v in rowchecks.state(store).items() if not k.startswith(lost.staging + "/")}
    _lost(st, lost)
    assert not st.exists(lost.staging)
    assert rowchecks.state(store) == before, "the lost writer removed or changed what it did not stage"


def test_a_lost_writer_whose_attempt_committed_leaves_its_staging_for_the_next_writers_publish(stores, tmp_path):
    _, pending = stores
    store = _copy(pending, tmp_path / "store")
    st = storage.Store(store)
    b = commit.pending_publishes(st, open_snapshot(st, history=True))[-1]
    run = _run(st, b.batch_id, b.attempt_id)
    assert st.exists(run.staging)
    before = tree_digest(store)
    _lost(st, run)
    assert tree_digest(store) == before, "a committed attempt's staging, needed by its publish, was removed"


def test_a_new_writers_staging_made_while_the_lost_writer_empties_staging_dir_is_made_again(stores, tmp_path,
                                                                                          monkeypatch):
    """The lost writer's drop runs between the new writer's look at ``staging/`` (there) and its
    ``mkdir`` of ``staging/<its batch>`` (the real interleaving, forced): ``staging/`` is gone,
    emptied and removed, and the new writer's staged file is written all the same."""
    plain, _ = stores
    store = _copy(plain, tmp_path / "store")
    st = storage.Store(store)
    lost = _run(st, "b-old", "a1")
    _stage(st, lost.staging)
    mine = f"{paths.STAGING_DIR}/b-new/a2/commitlog/00000000000000000000"
    real, raced = os.mkdir, []

    def racing(path, mode=0o777, **kw):
        if not raced and str(path) == st.path(f"{paths.STAGING_DIR}/b-new"):
            raced.append(path)
            commit.undo_attempt(st, lost.staging, lost.batch_id, "a1")   # what _abandon does on a local store
            assert not st.exists(paths.STAGING_DIR)
        return real(path, mode, **kw)
    monkeypatch.setattr(os, "mkdir", racing)
    st.write_file(mine, [b"the new writer's"])
    monkeypatch.undo()
    assert raced and st.read(mine) == b"the new writer's"
