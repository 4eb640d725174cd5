"""A mirror cycle on the moto S3 server reads the extent lists of only the files it can continue
(the mirror's last segment, each queue's last consume-queue file, the newest index file), each
once and all of them at once, as the ingest does (``write.version_context``): the lists of the
files behind them are never read. small-roll (RocketMQ 5.3.3's own files) is mirrored in small
cycles with an inline bound of one extent, so nearly every continued file's row names lists."""
from __future__ import annotations

import threading
import time

import pytest

from support import goldenlib, objstores, s3server
from support.mirrorhelp import records, set_safe
from conftest import golden_set

BUCKET = "rocketlake-mirror-lists"
CYCLES = 4
SLOW = 0.05            # seconds each list read takes: overlapping reads show as overlapping spans


@pytest.fixture
def mirrored(tmp_path, monkeypatch):
    """(store, broker, end timestamp): a mirror of small-roll's first records in ``CYCLES`` cycles."""
    from storelib.ops import mirror
    broker = goldenlib.restore(golden_set("small-roll"), str(tmp_path / "broker"))
    _, _, ts = records(broker)
    with s3server.moto(BUCKET) as (env, _):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        uri = f"s3://{BUCKET}/m"
        with objstores.small_batches():
            for k in range(1, CYCLES + 1):
                set_safe(broker, int(ts[k * (len(ts) - 1) // (CYCLES + 1)]))
                assert mirror.mirror_broker(broker, uri, quiet=True)["status"] == "committed"
            set_safe(broker, int(ts.max()) + 1)
            yield uri, broker


def _list_reads(monkeypatch) -> list:
    """(object, start, end) of every extent-list object read from now on, each read ``SLOW`` long."""
    from storelib.io import extentlists, storage
    real, seen, lock = storage.Store.read, [], threading.Lock()

    def read(self, rel, *a, **kw):
        if not rel.endswith(extentlists.SUFFIX):
            return real(self, rel, *a, **kw)
        t0 = time.monotonic()
        time.sleep(SLOW)
        out = real(self, rel, *a, **kw)
        with lock:
            seen.append((rel, t0, time.monotonic()))
        return out
    monkeypatch.setattr(storage.Store, "read", read)
    return seen


def _named_lists(rows) -> set:
    from storelib.io import extentlists
    return {x.object_rel for r in rows for x in extentlists.lists_from_detail(r.detail.get("extent_lists"))}


def test_a_cycle_reads_the_lists_of_the_files_it_can_continue_at_once_and_once_each(mirrored, monkeypatch):
    from storelib.io import extentlists, storage
    from storelib.ops import mirror
    from storelib.table import manifest
    from storelib.table.rows import FileKind
    uri, broker = mirrored
    snap = manifest.load_snapshot(storage.Store(uri), queue_offsets=False)
    rows = list(snap.files.values())
    last_seg = max((r for r in rows if r.kind == FileKind.COMMITLOG), key=lambda r: r.base_offset)
    behind = _named_lists(r for r in rows if r.kind == FileKind.COMMITLOG and r is not last_seg)
    assert behind, "no segment behind the mirror's last one names an extent list: the test shows nothing"
    extentlists._CACHE.clear()                         # a cycle's process starts with none read
    seen = _list_reads(monkeypatch)
    with objstores.small_batches():
        assert mirror.mirror_broker(broker, uri, quiet=True)["status"] == "committed"
    read = [rel for rel, _, _ in seen]
    assert len(read) > 1, f"the cycle read {len(read)} extent lists: the test shows nothing"
    assert len(set(read)) == len(read), f"a list read twice: {sorted(read)}"
    assert not set(read) & behind, f"lists of files the cycle cannot continue read: {sorted(set(read) & behind)}"
    starts = sorted(t0 for _, t0, _ in seen)
    first_end = min(t1 for _, _, t1 in seen)
    assert starts[1] < first_end, "the lists were read one after another"
