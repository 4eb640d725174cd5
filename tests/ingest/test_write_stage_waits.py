"""What the write stage's tasks wait on, and beside what (storelib.ingest.write): a segment task's
deletes of the staged records it wrote run off its writing thread (``_Releases``), and a file
task's consume-queue files wait on the disk a few at once (``CQ_WRITES``), the bytes the same."""
from __future__ import annotations

import os
import threading
import time

import pytest

from support import goldenlib
from conftest import golden_set

from storelib.format.config import load_config
from storelib.ingest import write as write_stage
from storelib.ingest.driver import run_ingest
from storelib.io import storage
from storelib.runtime.localrun import LocalSession


class _SlowDeletes:
    """A staging store whose deletes wait until ``gate`` is set (an unlink freeing a split's extents)."""

    def __init__(self, fail: str | None = None):
        self.gate, self.deleted, self.fail = threading.Event(), [], fail

    def delete(self, rel: str) -> None:
        assert self.gate.wait(10)
        if rel == self.fail:
            raise OSError(f"{rel}: cannot delete")
        self.deleted.append(rel)


def test_released_records_are_deleted_off_the_writing_thread_in_order():
    splits = _SlowDeletes()
    releases = write_stage._Releases(splits)
    t0 = time.monotonic()
    for k in range(3):
        releases.submit(f"split-{k}.records")      # returns while the delete waits
    assert time.monotonic() - t0 < 1 and splits.deleted == []
    splits.gate.set()
    releases.close()
    releases.check()
    assert splits.deleted == ["split-0.records", "split-1.records", "split-2.records"]


def test_a_failed_delete_fails_the_task():
    splits = _SlowDeletes(fail="split-1.records")
    splits.gate.set()
    releases = write_stage._Releases(splits)
    for k in range(3):
        releases.submit(f"split-{k}.records")
    releases.close()
    with pytest.raises(OSError, match="split-1.records: cannot delete"):
        releases.check()


def test_consume_queue_files_wait_on_the_disk_together(tmp_path, monkeypatch):
    """A file task's consume-queue fsyncs overlap (at most CQ_WRITES at once) and the store is
    still byte for byte RocketMQ's."""
    real, lock = storage.fsync_fd, threading.Lock()
    now, most = [0], [0]

    def slow_fsync(fd: int) -> None:
        is_cq = "/consumequeue/" in os.readlink(f"/proc/self/fd/{fd}")
        if is_cq:
            with lock:
                now[0] += 1
                most[0] = max(most[0], now[0])
            time.sleep(0.02)          # the disk busy with the segment tasks' streams
        try:
            real(fd)
        finally:
            if is_cq:
                with lock:
                    now[0] -= 1
    monkeypatch.setattr(storage, "fsync_fd", slow_fsync)
    g = golden_set("small-roll")
    cfg = load_config(None, goldenlib.SMALL_ROLL_CONFIG)
    out = run_ingest(LocalSession(), str(tmp_path / "store"), os.path.join(g, "messages.jsonl"), "jsonl", cfg,
                     batch_id="b", quiet=True)
    assert out["status"] == "committed"
    assert goldenlib.compare(g, str(tmp_path / "store")) == []
    assert 2 <= most[0] <= write_stage.CQ_WRITES
