"""The broker lock (``ops.brokerlock``) an in-place adopt and a broker directory's repair hold on
``<store>/lock``: held whatever the directory or the path to it looks like, never through a link."""
from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import time

import pytest

from support.lockholder import broker_holding, lock_state
from support.opshelp import PY, restore, small_config, small_properties, tree_digest
from storelib import errors
from storelib.ops import adopt, repair as repair_op
from storelib.table import manifest
from storelib.verify import driver as verify

_EMPTY = hashlib.sha256(b"").hexdigest()


def _spy_commit(monkeypatch, lock: str) -> list:
    """What another process finds of ``lock`` when the adopt commits."""
    seen: list = []
    real = manifest.commit

    def commit(*a, **k):
        seen.append(lock_state(lock) if os.path.exists(lock) else "absent")
        return real(*a, **k)
    monkeypatch.setattr(manifest, "commit", commit)
    return seen


def _differing_queues(store: str, n: int) -> list:
    """``n`` consume-queue files with a unit's tag code changed: a structural verify passes them, a
    repair replaces them."""
    queues = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(store, "consumequeue")) for f in fs)
    for q in queues[:n]:
        with open(q, "r+b") as fh:
            fh.seek(12)
            fh.write(b"\x7f" * 8)
    return queues[:n]


@pytest.mark.parametrize("lock_file", [True, False], ids=["broker-lock-file", "no-lock-file"])
def test_a_broker_directory_repair_and_an_in_place_import_exclude_each_other(tmp_path, lock_file):
    """A repair of a broker's directory (another process, held between two file replacements)
    holds the broker lock, on the broker's ``lock`` or, in a directory without one (a copy), on
    one it makes: an in-place import meanwhile is refused and changes nothing; both then go
    through one after the other, the store verifies, and the directory keeps a ``lock`` (its own,
    or the one the repair made: a broker may have opened it meanwhile)."""
    from conftest import ROOT
    store = restore("small-roll", "files.json", str(tmp_path / "s"))
    assert os.path.isfile(os.path.join(store, "lock"))
    if not lock_file:
        os.remove(os.path.join(store, "lock"))
    _differing_queues(store, 2)
    gate = str(tmp_path / "gate")
    env = dict(os.environ, ROCKETLAKE_HOLD=f"mid-publish:{gate}")
    repair = subprocess.Popen([PY, os.path.join(ROOT, "jobs", "repair.py"), "--store", store, "--apply", "--config",
                               small_properties(tmp_path)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not os.path.exists(gate + ".reached") and repair.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(gate + ".reached"), repair.communicate()[1][-2000:]
        digest = tree_digest(store)
        with pytest.raises(errors.BrokerRunning):
            adopt.adopt(None, store, store, small_config(), quiet=True)
        assert tree_digest(store) == digest
    finally:
        open(gate, "w").close()
        _, err = repair.communicate(timeout=120)
    assert repair.returncode == 0, err[-2000:]
    assert os.path.getsize(os.path.join(store, "lock")) == (4 if lock_file else 0)
    assert adopt.adopt(None, store, store, small_config(), quiet=True)["status"] == "committed"
    assert verify.verify_store(store).problems == []
    assert os.path.getsize(os.path.join(store, "lock")) == (4 if lock_file else 0)


def test_an_in_place_import_without_a_lock_file_holds_one_it_leaves(tmp_path, monkeypatch):
    """No ``lock`` in the directory: the import holds one while it commits (a broker starting then
    is refused) and leaves it, empty, as a broker's constructor does (a broker that opened it
    meanwhile locks that very file); a refused import leaves the store's files byte for byte."""
    store = restore("small-roll", "files.json", str(tmp_path / "s"))
    lock = os.path.join(store, "lock")
    os.remove(lock)
    open(os.path.join(store, "abort"), "wb").close()
    digest = tree_digest(store)
    with pytest.raises(errors.AdoptError, match="did not shut down cleanly"):
        adopt.adopt(None, store, store, small_config(), quiet=True)
    assert tree_digest(store) == dict(digest, lock=_EMPTY)
    os.remove(os.path.join(store, "abort"))
    seen = _spy_commit(monkeypatch, lock)
    assert adopt.adopt(None, store, store, small_config(), quiet=True)["status"] == "committed"
    assert seen == ["held"] and os.path.getsize(lock) == 0 and lock_state(lock) == "free"


@pytest.mark.parametrize("what", ["link", "directory"])
def test_a_lock_that_is_not_a_regular_file_is_refused(tmp_path, what):
    """``lock`` a symbolic link to a file outside the store, or a directory: an in-place import and a
    repair refuse (StorePathError, exit 1) before anything is opened through it or written, the
    file outside never locked."""
    store = restore("small-roll", "files.json", str(tmp_path / "s"))
    lock = os.path.join(store, "lock")
    os.remove(lock)
    outside = str(tmp_path / "outside")
    with open(outside, "wb") as fh:
        fh.write(b"lock")
    if what == "link":
        os.symlink(outside, lock)
    else:
        os.mkdir(lock)
    digest, outside_stat = tree_digest(store), os.stat(outside)
    with pytest.raises(errors.StorePathError, match="not a regular file"):
        adopt.adopt(None, store, store, small_config(), quiet=True)
    with pytest.raises(errors.StorePathError, match="not a regular file"):
        repair_op.repair(store, small_config(), apply=False, quiet=True)
    assert tree_digest(store) == digest and os.path.lexists(lock)
    assert not os.path.exists(os.path.join(store, "_rocketlake"))
    assert os.stat(outside).st_mtime_ns == outside_stat.st_mtime_ns and open(outside, "rb").read() == b"lock"


def test_an_in_place_import_through_a_symlinked_path_holds_the_lock(tmp_path, monkeypatch):
    """``--store`` a symbolic link to the directory ``--from-store`` names: the same directory,
    adopted in place (not refused as a copy into a non-empty directory) under its broker lock."""
    store = restore("small-roll", "files.json", str(tmp_path / "s"))
    link = str(tmp_path / "link")
    os.symlink(store, link)
    seen = _spy_commit(monkeypatch, os.path.join(store, "lock"))
    assert adopt.adopt(None, link, store, small_config(), quiet=True)["status"] == "committed"
    assert seen == ["held"]
    assert verify.verify_store(store).problems == []


def test_an_in_place_import_given_a_relative_store_holds_the_lock(tmp_path, monkeypatch):
    """``--store`` relative, ``--from-store`` absolute: one directory, its lock held at the commit."""
    store = restore("small-roll", "files.json", str(tmp_path / "s"))
    monkeypatch.chdir(tmp_path)
    seen = _spy_commit(monkeypatch, os.path.join(store, "lock"))
    assert adopt.adopt(None, "s", store, small_config(), quiet=True)["status"] == "committed"
    assert seen == ["held"] and lock_state(os.path.join(store, "lock")) == "free"


@pytest.mark.parametrize("case", ["alone", "held-by-another", "beside-a-commitlog", "not-empty", "held-here"])
def test_a_refused_first_runs_directory_goes_only_with_nothing_but_a_free_empty_lock(tmp_path, case):
    """``remove_made_dir``: the directory a refused first run made, with the empty ``lock`` its
    writers held, goes; a ``lock`` another process (or this one) holds, a non-empty one (a broker's)
    or one beside anything else (a broker makes its directories before it opens ``lock``) stays,
    and so does the directory, without an error (every caller cleans up after a run that already
    failed or did nothing: its own outcome is what it reports)."""
    from storelib.io import brokerlock, storage
    root = tmp_path / "store"
    root.mkdir()
    lock = root / "lock"
    lock.write_bytes(b"lock" if case == "not-empty" else b"")
    if case == "beside-a-commitlog":
        (root / "commitlog").mkdir()
    if case == "alone":
        assert brokerlock.remove_made_dir(str(root)) is True
        assert not root.exists()
        assert brokerlock.remove_made_dir(str(root)) is False      # gone already: nothing to do, no error
        return
    held = brokerlock.hold_broker_lock(storage.Store(str(root)), shared=True) if case == "held-here" else None
    with broker_holding(str(lock)) if case == "held-by-another" else contextlib.nullcontext():
        try:
            assert brokerlock.remove_made_dir(str(root)) is False    # it stays, and that is no error
            assert root.is_dir()
            if held is not None:
                assert lock_state(str(lock)) == "held"       # this process's own lock survived the attempt
        finally:
            if held is not None:
                held.release()
    # (read only now: closing an fd of the file in this process would drop its own lock)
    assert lock.read_bytes() == (b"lock" if case == "not-empty" else b"")
