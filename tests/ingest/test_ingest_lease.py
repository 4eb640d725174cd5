"""Writer lease and conditional Delta commits: the two guards against concurrent writers."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


from storelib.table import manifest, writerlease
from storelib.io import storage
from storelib.table.writerlease import WriterLease
from storelib.errors import ConcurrentWriteError
from storelib.format import paths


def test_lease_is_exclusive_and_released(tmp_path):
    st = storage.Store(str(tmp_path / "store"))
    a = WriterLease(st, "a")
    a.acquire()
    holder = json.loads(st.read(paths.LEASE_PATH))
    assert holder["batch_id"] == "a" and holder["pid"] == os.getpid()
    with pytest.raises(ConcurrentWriteError, match="being written by batch 'a'"):
        WriterLease(st, "b").acquire()
    a.renew()
    a.release()
    assert not st.exists(paths.LEASE_PATH)
    b = WriterLease(st, "b")
    b.acquire()
    b.release()


def test_stale_lease_of_a_dead_process_is_taken_over(tmp_path):
    st = storage.Store(str(tmp_path / "store"))
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead = WriterLease(st, "dead")
    dead.acquire()
    doc = json.loads(st.read(paths.LEASE_PATH))
    doc["pid"] = p.pid                          # as if a SIGKILLed driver had left it
    st.write_file(paths.LEASE_PATH, [json.dumps(doc).encode()])
    assert WriterLease.is_stale(doc)
    nxt = WriterLease(st, "next")
    nxt.acquire()
    assert json.loads(st.read(paths.LEASE_PATH))["batch_id"] == "next"
    dead.release()                              # not its lease any more: leaves it alone
    assert json.loads(st.read(paths.LEASE_PATH))["batch_id"] == "next"
    nxt.release()
    # Another host's lease: stale only once it was not renewed for the TTL.
    doc = {"batch_id": "far", "host": "elsewhere", "pid": 1, "token": "t", "renewed_ms": manifest.now_ms()}
    assert not WriterLease.is_stale(doc)
    doc["renewed_ms"] -= int(writerlease.LEASE_TTL_S * 1000) + 1000
    assert WriterLease.is_stale(doc)


def _rows(batch_id):
    row = dict.fromkeys(manifest.MANIFEST_SCHEMA.names)
    row.update(batch_id=batch_id, batch_seq=1, action="add", kind="checkpoint", path="checkpoint",
               committed_at=1, attempt_id="x")
    ck = dict.fromkeys(manifest.CHECKPOINTS_SCHEMA.names)
    ck.update(batch_id=batch_id, batch_seq=1, operation="ingest", committed_at=1, attempt_id="x",
              config="{}", detail="{}")
    return [row], ck


def test_conditional_commits_let_exactly_one_writer_win(tmp_path):
    st = storage.Store(str(tmp_path / "store"))
    snap = manifest.load_snapshot(st)               # both writers planned on the empty store
    manifest.commit(st, snap.versions, *_rows("winner"))
    with pytest.raises(ConcurrentWriteError):
        manifest.commit(st, snap.versions, *_rows("loser"))
    after = manifest.load_snapshot(st)
    assert [b["batch_id"] for b in after.batches] == ["winner"]
    # on a table that exists, the stale version loses too, before writing a manifest row
    snap2 = manifest.load_snapshot(st)
    rows, ck = _rows("second")
    rows[0]["batch_seq"] = ck["batch_seq"] = 2
    manifest.commit(st, snap2.versions, rows, ck)
    rows, ck = _rows("late")
    rows[0]["batch_seq"] = ck["batch_seq"] = 2
    with pytest.raises(ConcurrentWriteError):
        manifest.commit(st, snap2.versions, rows, ck)
    mf = manifest.read_rows(manifest.open_table(st, paths.MANIFEST_DIR))
    assert sorted(r["batch_id"] for r in mf) == ["second", "winner"]


def test_progress_line_reports_tasks_segments_and_rate():
    """Progress polls sc.statusTracker() (no SparkListener): tasks done, segments, msgs/s."""
    from types import SimpleNamespace
    from storelib.runtime.progress import Progress

    class Tracker:
        def getActiveStageIds(self):
            return [7]

        def getStageInfo(self, sid):
            return SimpleNamespace(numTasks=5, numCompletedTasks=2, numActiveTasks=2, name="x")

    sc = SimpleNamespace(statusTracker=lambda: Tracker())
    p = Progress(quiet=True, sc=sc)
    p._stage = {"name": "write", "tasks": 5, "segments": 60, "messages": 3000}
    p._stage_t0 -= 10
    line = p.line()
    assert line.startswith("write: stage 7: 2/5 tasks (2 running)")
    assert "segments written ~24/60" in line and "msgs/s" in line
