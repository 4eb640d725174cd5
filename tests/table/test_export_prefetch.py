"""An export from an object store reads its next small files ahead on threads (table/export.py
``_Prefetch``): each read is a request or several, and files read one after another cost an
export of many small files the sum of their round trips. The export still takes them in path
order; index files and checkpoints (heads rebuilt), large files and local stores are read as
before. (That the exported bytes are unchanged: every export test on the moto server.)"""
from __future__ import annotations

import threading
import time

import pytest

from storelib.table import export, storefiles
from storelib.table.rows import FileKind


class _SlowStore:
    """A store whose reads take a while and note how many run at once."""

    def __init__(self, local: bool):
        self.local = local
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.reads: list[str] = []

    def read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.reads.append(rel)
        time.sleep(0.05)
        with self.lock:
            self.running -= 1
        if rel.endswith("missing"):
            raise FileNotFoundError(rel)
        return rel.encode()[:length]


def _rows() -> list[dict]:
    small = [{"path": f"commitlog/{i:020d}", "kind": FileKind.COMMITLOG, "valid_bytes": 20} for i in range(12)]
    return small + [{"path": "index/1", "kind": FileKind.INDEX, "valid_bytes": 20},
                    {"path": "checkpoint", "kind": FileKind.CHECKPOINT, "valid_bytes": 20},
                    {"path": "commitlog/large", "kind": FileKind.COMMITLOG, "valid_bytes": export.PREFETCH_BYTES + 1}]


@pytest.fixture(autouse=True)
def _final_paths(monkeypatch):
    monkeypatch.setattr(storefiles, "reading_path", lambda store, row, staged: row["path"])


def test_small_files_of_an_object_store_are_read_ahead_in_parallel_and_taken_in_order():
    store, rows = _SlowStore(local=False), _rows()
    with export._Prefetch(store, rows, set()) as ahead:
        got = [ahead.take(i) for i in range(len(rows))]
    assert got[:12] == [(r["path"], r["path"].encode()[:20]) for r in rows[:12]]
    assert got[12:] == [None, None, None]                      # index, checkpoint, large: read by the export
    assert store.most > 1 and sorted(store.reads) == sorted(r["path"] for r in rows[:12])


def test_a_local_store_is_read_as_before_and_a_missing_file_raises_where_it_is_taken():
    local = _SlowStore(local=True)
    with export._Prefetch(local, _rows(), set()) as ahead:
        assert ahead.take(0) is None and ahead.pool is None
    assert local.reads == []
    rows = _rows()[:3]
    rows[1] = dict(rows[1], path="commitlog/missing")
    with export._Prefetch(_SlowStore(local=False), rows, set()) as ahead:
        assert ahead.take(0) is not None
        with pytest.raises(FileNotFoundError):
            ahead.take(1)
