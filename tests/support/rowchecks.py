"""What the row-check tests of the writers share (tests/ops/test_expire_row_checks.py,
test_commit_row_checks.py): counting ``rowcheck.check_snapshot``'s calls, a snapshot with a row
verify rejects, and the store's state and batches to compare before and after a refusal."""
from __future__ import annotations

import dataclasses
import os
import shutil

from support.opshelp import tree_digest
from storelib.format import paths
from storelib.io import storage
from storelib.table import rowcheck
from storelib.table.rows import ManifestRow
from storelib.table.snapshots import open_snapshot

__all__ = ["counted_checks", "damaged", "state", "batches", "adopted_and_pending"]


def counted_checks(monkeypatch) -> list:
    """The snapshots ``rowcheck.check_snapshot`` checks from now on (as each caller looks it up,
    ``storefiles.files_from_snapshot``'s import when called included)."""
    seen: list = []
    real = rowcheck.check_snapshot

    def counting(snap, cfg=None):
        seen.append(snap)
        return real(snap, cfg)
    monkeypatch.setattr(rowcheck, "check_snapshot", counting)
    return seen


def damaged(snap):
    """``snap`` with its first consume-queue row claiming 10 valid bytes (verify rejects it)."""
    path = sorted(p for p, r in snap.files.items() if r.kind == "consumequeue")[0]
    files = dict(snap.files)
    files[path] = ManifestRow(dict(files[path], valid_bytes=10))
    return dataclasses.replace(snap, files=files)


def state(store: str) -> dict:
    """Every file of the store but the writer lease's lock (taken and released by every writer,
    and a killed writer's taken over by the next)."""
    return {k: v for k, v in tree_digest(store).items() if k != paths.LEASE_PATH}


def batches(store: str) -> list:
    return [b.batch_id for b in open_snapshot(storage.Store(store), history=True).batches]


def adopted_and_pending(tmp: str, now_ms: int) -> tuple[str, str]:
    """Under ``tmp``: (expire-small adopted, the same with a committed per-topic expiry of
    coupon_issue whose publish a kill cut short, ``after-commit-before-publish``)."""
    from support.opshelp import restore, run, small_config, small_properties
    from storelib.ops import adopt
    plain = restore("expire-small", "files_before.json", os.path.join(tmp, "plain"))
    adopt.adopt(None, plain, plain, small_config(), quiet=True)
    pending = shutil.copytree(plain, os.path.join(tmp, "pending"))
    env = os.environ.get("ROCKETLAKE_FAULT")
    os.environ["ROCKETLAKE_FAULT"] = "after-commit-before-publish"
    try:
        r = run("expire.py", "--store", pending, "--topic", "coupon_issue", "--reserved-hours", "48",
                "--config", small_properties(tmp), "--now", str(now_ms), "--quiet")
    finally:
        os.environ.pop("ROCKETLAKE_FAULT")
        if env is not None:
            os.environ["ROCKETLAKE_FAULT"] = env
    assert r.returncode == -9, r.stderr[-2000:]
    assert storage.Store(pending).exists(paths.STAGING_DIR), "the killed expiry left no publish to finish"
    return plain, pending
