"""``verify --deep``'s cross-file checks (storelib/verify/cross.py) read a consume-queue or index
file for a segment only when its units or entries point into that segment, and read each such
file once per verify, not once per segment: counted on the golden small-roll store (63 segments
of 64 KiB, 142 queue files, 25 index files), locally (the files opened) and on the moto S3 server
(the bytes downloaded)."""
from __future__ import annotations

import dataclasses
import os
import threading
from collections import Counter

import numpy as np
import pytest

from support import s3server
from support.opshelp import restore
from storelib.format import consumequeue, indexfile
from storelib.format.config import load_config
from storelib.verify import access, driver

SMALL = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 600, "maxHashSlotNum": 64,
         "maxIndexNum": 256}
BUCKET = "rocketlake-verify-cross"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return restore("small-roll", "files.json", str(tmp_path_factory.mktemp("cross") / "small-roll"))


def _phys_of_files(store: str, cfg) -> dict:
    """store-relative path -> the commitlog offsets its units / entries point at, as a broker
    reads them: every unit of a queue's full files, a last file's up to the first not in use;
    index entries 1 .. indexCount - 1."""
    out = {}
    cq_root = os.path.join(store, "consumequeue")
    for dp, _, names in os.walk(cq_root):
        names = sorted(names)
        for k, name in enumerate(names):
            data = np.fromfile(os.path.join(dp, name), np.uint8)[:cfg.cq_file_size]
            u = consumequeue.decode_units(data[:len(data) // consumequeue.UNIT_SIZE * consumequeue.UNIT_SIZE])
            n = consumequeue.valid_units(u) if k == len(names) - 1 else len(u)
            out[os.path.relpath(os.path.join(dp, name), store)] = u["phys"][:n].astype(np.int64)
    for name in os.listdir(os.path.join(store, "index")):
        data = np.fromfile(os.path.join(store, "index", name), np.uint8)
        count = indexfile.IndexHeader.parse(data[:indexfile.HEADER_SIZE].tobytes()).to_dict()["index_count"]
        at = indexfile.entries_offset(cfg)
        ents = data[at:at + count * indexfile.ENTRY_SIZE].view(indexfile.ENTRY_DTYPE)
        out["index/" + name] = ents["phys"][1:].astype(np.int64)
    return out


def _segments_met(store: str, cfg) -> dict:
    """path -> how many commitlog segments its units / entries point into."""
    F = cfg.mappedFileSizeCommitLog
    bases = sorted(int(n) for n in os.listdir(os.path.join(store, "commitlog")))
    return {rel: len(set((phys[phys >= bases[0]] // F).tolist()) & {b // F for b in bases})
            for rel, phys in _phys_of_files(store, cfg).items()}


def _opens(monkeypatch) -> Counter:
    """From now on: the FileData built of each store-relative path (an open locally, a download on
    an object store)."""
    seen, lock, real = Counter(), threading.Lock(), access.FileData.__init__

    def init(self, store, rel):
        with lock:
            seen[rel] += 1
        real(self, store, rel)
    monkeypatch.setattr(access.FileData, "__init__", init)
    return seen


def _reads(monkeypatch) -> Counter:
    """From now on: the bytes read of each store-relative path through ``Store.read``."""
    from storelib.io import storage
    seen, lock, real = Counter(), threading.Lock(), storage.Store.read

    def read(self, rel, *a, **kw):
        out = real(self, rel, *a, **kw)
        with lock:
            seen[rel] += len(out)
        return out
    monkeypatch.setattr(storage.Store, "read", read)
    return seen


def _targets(counts: Counter) -> Counter:
    return Counter({rel: n for rel, n in counts.items() if rel.startswith(("consumequeue/", "index/"))})


@pytest.mark.parametrize("threads", [1, 2])
def test_a_segment_opens_only_the_files_pointing_into_it(small, monkeypatch, threads):
    cfg = load_config(None, SMALL)
    met = _segments_met(small, cfg)
    assert len(met) == 142 + 25 and sum(met.values()) > len(met)     # files spanning several segments
    opens = _opens(monkeypatch)
    assert driver.verify_store(small, cfg, threads=threads).ok
    structural = _targets(opens)               # each file once, by its own task
    opens.clear()
    rep = driver.verify_store(small, cfg, deep=True, threads=threads)
    assert rep.ok, rep.problems[:5]
    cross = _targets(opens) - structural       # the segment tasks' opens of queue and index files
    # never for a segment the file does not point into (the base: every file for every segment,
    # 63 x 167), and each file once however many segments it points into
    assert not [rel for rel, n in cross.items() if n > min(1, met.get(rel, 0))], cross
    assert sum(cross.values()) <= sum(1 for n in met.values() if n)


def test_on_an_object_store_each_file_is_downloaded_once(small, monkeypatch):
    """The segment tasks of a deep verify, on the store's copy on moto (planned on the local
    copy: a plan without a manifest reads every queue unit by a ranged read), count the bytes
    they read of queue and index files (their own tasks, which read each file whole, not run)."""
    from concurrent.futures import ThreadPoolExecutor
    from storelib.io import storage
    from storelib.verify.commitlog import ScanBuffers
    cfg = load_config(None, SMALL)
    met = _segments_met(small, cfg)
    sizes = {rel: os.path.getsize(os.path.join(small, rel)) for rel in met}
    ctx, tasks, problems = driver.plan(storage.Store(small), cfg, None, deep=True)
    assert not problems
    segments = [t for t in tasks if t["kind"] == "commitlog"]
    with s3server.moto(BUCKET) as (env, client), ThreadPoolExecutor(8) as pool:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        files = [os.path.relpath(os.path.join(dp, n), small) for dp, _, ns in os.walk(small) for n in ns]
        list(pool.map(lambda rel: client.upload_file(os.path.join(small, rel), BUCKET, "s/" + rel), files))
        s3 = storage.Store(f"s3://{BUCKET}/s")
        on_s3 = dataclasses.replace(ctx, store=s3.uri, local_store=s3, threads=1, scan_buffers=ScanBuffers())
        reads = _reads(monkeypatch)
        found = [p for r in pool.map(lambda t: driver.run_task(on_s3, t), segments) for p in r["problems"]]
    assert found == []
    # each segment read by its own task only (the per-offset checks of records the scan left to
    # the slow path read the task's copy)
    segment_bytes = sum(os.path.getsize(os.path.join(small, t["path"])) for t in segments)
    assert sum(n for rel, n in reads.items() if rel.startswith("commitlog/")) == segment_bytes
    cross = _targets(reads)
    # each file the segments point into downloaded once (not once per segment: 63 times), and a
    # few ranged reads of each for its bounds: a queue's last file's units in use, otherwise the
    # header and two offsets
    last_files = {os.path.dirname(rel): rel for rel in sorted(met) if rel.startswith("consumequeue/")}.values()
    allowed = {rel: (sizes[rel] if met[rel] else 0) + (sizes[rel] if rel in last_files else 64) for rel in met}
    assert not [(rel, n, allowed[rel]) for rel, n in cross.items() if n > allowed[rel]]
    assert sum(cross.values()) <= sum(allowed.values()) < sum(sizes.values()) * 3


def _damaged_copy(small: str, dest: str) -> tuple[str, str]:
    """A copy of ``small`` with one index header's beginTimestamp off by one (a deep verify's
    header check names it) and a unit in the middle of a queue's last file not in use (the
    broker's search of that file trusts units are written in order): (index, queue file) damaged."""
    import shutil
    shutil.copytree(small, dest)
    idx = os.path.join(dest, "index", sorted(os.listdir(os.path.join(dest, "index")))[0])
    with open(idx, "r+b") as fh:
        ts = int.from_bytes(fh.read(8), "big")
        fh.seek(indexfile.HEADER_BEGIN_TIMESTAMP)
        fh.write((ts + 1).to_bytes(8, "big"))
    for dp, _, names in sorted(os.walk(os.path.join(dest, "consumequeue"))):
        if names:
            last = os.path.join(dp, sorted(names)[-1])
            u = consumequeue.decode_units(np.fromfile(last, np.uint8))
            n = consumequeue.valid_units(u)
            if n >= 4:
                with open(last, "r+b") as fh:
                    fh.seek((n // 2) * consumequeue.UNIT_SIZE + consumequeue.UNIT_TOTALSIZE)
                    fh.write(b"\0\0\0\0")
                return os.path.relpath(idx, dest), os.path.relpath(last, dest)
    raise AssertionError("no queue with four units in its last file")


def test_an_object_store_plan_reads_each_queue_once_and_index_tasks_read_records_only(small, tmp_path, monkeypatch):
    """A deep verify of a store without a manifest on moto: the plan (``StoreFiles.scan``) reads
    each queue's last file by one request, at once for all queues (not a request per step of a
    binary search); an index task's header checks read the records at its begin/end offsets, not
    their segments. The answers are those of the local copy, on a damaged copy too."""
    from concurrent.futures import ThreadPoolExecutor
    from storelib.io import storage
    from storelib.table.storefiles import StoreFiles
    from storelib.verify.commitlog import ScanBuffers
    cfg = load_config(None, SMALL)
    bad_idx, bad_cq = _damaged_copy(small, str(tmp_path / "damaged"))
    queues = {os.path.dirname(rel) for rel in _segments_met(small, cfg) if rel.startswith("consumequeue/")}
    with s3server.moto(BUCKET) as (env, client), ThreadPoolExecutor(8) as pool:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        for root, prefix in ((small, "s"), (str(tmp_path / "damaged"), "d")):
            files = [os.path.relpath(os.path.join(dp, n), root) for dp, _, ns in os.walk(root) for n in ns]
            list(pool.map(lambda rel, root=root, prefix=prefix:
                          client.upload_file(os.path.join(root, rel), BUCKET, f"{prefix}/{rel}"), files))
        seen, lock, real = Counter(), threading.Lock(), storage.Store.read

        def read(self, rel, *a, **kw):
            out = real(self, rel, *a, **kw)
            if not self.os_paths:
                with lock:
                    seen[rel.split("/")[0], "requests"] += 1
                    seen[rel.split("/")[0], "bytes"] += len(out)
            return out
        monkeypatch.setattr(storage.Store, "read", read)
        for prefix, local in (("s", small), ("d", str(tmp_path / "damaged"))):
            s3 = storage.Store(f"s3://{BUCKET}/{prefix}")
            seen.clear()
            ctx, tasks, problems = driver.plan(s3, cfg, None, deep=True)
            assert not problems
            assert seen["consumequeue", "requests"] <= len(queues), seen      # base: 609 for 69 queues
            assert StoreFiles.scan(s3, cfg) == StoreFiles.scan(storage.Store(local), cfg)
            on_s3 = dataclasses.replace(ctx, store=s3.uri, local_store=s3, threads=1, scan_buffers=ScanBuffers())
            lctx, ltasks, _ = driver.plan(storage.Store(local), cfg, None, deep=True)
            index = [t for t in tasks if t["kind"] == "index"]
            assert len(index) == 25 and index == [t for t in ltasks if t["kind"] == "index"]
            seen.clear()
            found = sorted(p for t in index for p in driver.run_task(on_s3, t)["problems"])
            # two records per file, each a read of a few KiB (one longer record a second read);
            # base: 50 segments of 64 KiB downloaded whole
            assert seen["commitlog", "requests"] <= 2 * len(index) + 4, seen
            assert seen["commitlog", "bytes"] <= 2 * len(index) * 8192, seen
            assert found == sorted(p for t in index for p in driver.run_task(lctx, t)["problems"])
            if prefix == "d":
                assert [p.path for p in found] == [bad_idx] and "begin_timestamp" in found[0].what, found
                assert next(f for q in StoreFiles.scan(s3, cfg).consume_queues.values() for f in q
                            if f.rel == bad_cq).units > 0
            else:
                assert found == []
