"""Writers share ``_rocketlake/tmp`` (scratch Delta tables, staging directories being dropped) and
each removes it when it finds it empty (``rmdir``: never another writer's file). A writer making
its own entry there meanwhile must not fail for it: a writer that lost its lease then ended with
a missing file (exit 1) instead of as a concurrent writer (exit 3), tests/e2e/test_ingest_race.py."""
from __future__ import annotations

import os

from storelib.format import paths
from storelib.ingest import commit
from storelib.io import storage


def test_make_dirs_makes_a_parent_another_writer_removed_meanwhile(tmp_path, monkeypatch):
    """``os.makedirs`` fails with ENOENT when a parent it made is removed before its next
    ``mkdir`` (another writer's ``rmdir`` of an empty ``_rocketlake/tmp``): made again."""
    real, failed = os.makedirs, []

    def racing(path, mode=0o777, exist_ok=False):
        if not failed:
            failed.append(path)
            raise FileNotFoundError(2, "No such file or directory", path)
        return real(path, mode, exist_ok)
    monkeypatch.setattr(os, "makedirs", racing)
    target = str(tmp_path / "_rocketlake" / "tmp" / "x" / "_delta_log")
    storage.make_dirs(target)
    assert failed and os.path.isdir(target)


def test_a_staging_dropped_while_another_writer_removes_the_empty_tmp_dir_is_still_dropped(tmp_path, monkeypatch):
    """``drop_staging`` renames the staging directory into ``_rocketlake/tmp`` to delete it; that
    directory removed between its making and the rename (another writer's ``rmdir``), the rename
    is tried again, and the staging directory is gone."""
    st = storage.Store(str(tmp_path))
    staging = f"{paths.STAGING_DIR}/b1/a1"
    os.makedirs(st.path(staging))
    open(st.path(f"{staging}/f"), "wb").close()
    real, raced = os.rename, []

    def racing(src, dst):
        if not raced:
            raced.append(dst)
            os.rmdir(os.path.dirname(dst))         # the other writer found it empty
        return real(src, dst)
    monkeypatch.setattr(os, "rename", racing)
    commit.drop_staging(st, staging, durable=False)
    assert raced and not os.path.exists(st.path(staging))
    assert not os.path.exists(st.path(paths.TMP_DIR))
