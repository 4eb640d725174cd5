"""What the write stage's file tasks wait on (storelib.ingest.write): a task's consume-queue files
wait on the disk a few at once (``CQ_WRITES``), the bytes the same."""
from __future__ import annotations

import os
import threading
import time

from support import goldenlib
from conftest import golden_set

from storelib.format.config import load_config
from storelib.ingest import write as write_stage
from storelib.ingest.driver import run_ingest
from storelib.io import storage
from storelib.runtime.localrun import LocalSession


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
