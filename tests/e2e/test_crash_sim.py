"""Power cuts anywhere: ingest (a first and an appended batch), expire and adopt, each run once
on the crash simulator (tests/support/crashfs: a FUSE file system that keeps un-fsync'd data only until
a cut), then checked in the state a power cut leaves after each chosen fsync, rename and link
(and, with torn writes, at random points).

After every cut:
* the store opens (both Delta tables readable, the snapshot loads);
* nothing uncommitted is visible: until the operation's switch the store's files (all but
  ``_rocketlake/``) are exactly as before it, and the visible batches are the earlier ones;
* every batch whose operation returned (a mark in the trace) is visible;
* verify --deep finds nothing;
* the rerun (in this process, no Spark: storelib.runtime.localrun) ends in the uninterrupted result:
  RocketMQ's bytes for the ingests, the same files for expire and adopt.

Which points: every distinct durable state from the first Delta step on (the commits, the
publish, the cleanup), and points spread evenly over the staging before it, at most a number per
operation (30 for an appended batch, 10-12 for the others: 64 in all, with the torn states);
``CRASH_POINTS=0`` (``make crash``) runs every distinct point.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from support import goldenlib
from conftest import ROOT, golden_set
from support.crashfs.availability import unavailable_reason

from storelib.table import manifest, snapcache
from storelib.io import storage
from storelib.verify import driver as verify
from storelib.format.config import load_config

from test_nothing_lost import files_state, write_inputs
from storelib.format import paths

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(unavailable_reason()), reason=f"no crash simulator: {unavailable_reason()}")]

RUNNER = os.path.join(ROOT, "tests", "support", "local_ingest.py")
ALL_POINTS = os.environ.get("CRASH_POINTS", "") == "0"
TORN = 2                                                        # torn states per operation


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return write_inputs(tmp_path_factory.mktemp("crash-inputs"))


def _cfg(base):
    return load_config(str(base / "small.properties"))


def _in_process_ingest(base, store: str, part: str, batch: str, durable: bool = True) -> dict:
    """An ingest in this process; ``durable=False`` (the reruns after a cut: their own durability
    is not what is checked) skips the fsyncs (flushDiskType is not a file-shaping key)."""
    import dataclasses
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    cfg = _cfg(base) if durable else dataclasses.replace(_cfg(base), flushDiskType="ASYNC_FLUSH")
    return run_ingest(LocalSession(), store, str(base / f"{part}.jsonl"), "jsonl", cfg, batch_id=batch, quiet=True)


@pytest.fixture(scope="module")
def store_a(inputs, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("crash-a") / "store")
    _in_process_ingest(inputs, out, "a", "A")
    return out


def _record(tmp_path, seed_store: str | None, args: list, record_writes: bool = True):
    """Run ``tests/support/local_ingest.py ARGS`` (``{store}`` stands for the store on the mount) once on
    the crash simulator over a copy of ``seed_store`` (None: an empty directory); the recorded
    file system, after the run, and the run's result."""
    from support.crashfs import LazyFS
    backing = tmp_path / "backing"
    backing.mkdir()
    if seed_store is not None:
        shutil.copytree(seed_store, backing / "store")
    fs = LazyFS(str(backing), workdir=str(tmp_path / "fs"), record_writes=record_writes)
    with fs:
        store = os.path.join(fs.mountpoint, "store")
        cmd = [sys.executable, RUNNER] + [a.replace("{store}", store) for a in map(str, args)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        fs.mark("returned")
    return fs, json.loads(r.stdout)


def _points(fs, most: int) -> list:
    """Every distinct durable state from the first Delta step on, and points spread evenly over
    the staging before it; at most ``most`` (spread evenly, the last one always), unless all
    points are asked for."""
    cuts = fs.cut_points(distinct=True)
    delta = next((ev.n for ev in fs.events if ev.path and ("_delta_log" in ev.path or "/_rocketlake/tmp" in ev.path)),
                 cuts[-1])
    late = [k for k in cuts if k >= delta - 2]
    early = [k for k in cuts if k < delta - 2]
    if ALL_POINTS:
        return cuts
    picked = early[::max(1, len(early) // 8)] + late
    if len(picked) > most:
        step = len(picked) / most
        picked = sorted({picked[int(i * step)] for i in range(most)} | {late[-1]})
    return picked


def _states(fs, tmp_path, most: int):
    """(label, event, state directory) of every chosen point, then TORN torn states after
    random points (a random subset of the un-fsync'd writes kept as well)."""
    returned = fs.recording.marks()["returned"]
    points = _points(fs, most)
    for k in points:
        yield f"cut after event {k} ({fs.event(k).kind} {fs.event(k).path})", k, returned, \
            fs.crash_state(k, str(tmp_path / f"state-{k}"))
    rng = random.Random(7)
    for i in range(TORN):
        k = rng.choice(points)
        yield f"torn state after event {k} (seed {i})", k, returned, \
            fs.crash_state_random(k, str(tmp_path / f"torn-{k}-{i}"), seed=i)


def _open(store: str) -> list:
    return [b["batch_id"] for b in manifest.load_snapshot(storage.Store(store)).batches]


def _deep(store: str, base) -> list:
    return verify.verify_store(store, _cfg(base), deep=True, threads=1).problems


def _check_ingest(label, k, returned, state, base, before_batches, before_files, part, batch, expect):
    store = os.path.join(state, "store")
    if not os.path.isdir(store):                     # a first batch cut before any directory was durable
        assert before_batches == [], label
        os.makedirs(store)
    seen = _open(store)
    assert seen in (before_batches, before_batches + [batch]), (label, seen)
    cached = snapcache.load(storage.Store(store))        # its base and delta, if used, are the tables' snapshot
    if cached is not None:
        snap = manifest.load_snapshot(storage.Store(store))
        assert (cached.batch, cached.files) == (snap.batch, snap.files), (label, "the snapshot cache differs")
    if k >= returned:
        assert seen == before_batches + [batch], (label, "the batch returned, but is not visible")
    if seen == before_batches:
        assert files_state(store) == before_files, (label, "uncommitted bytes reached a store file")
    assert _deep(store, base) == [], label
    out = _in_process_ingest(base, store, part, batch, durable=False)
    assert out["status"] in ("committed", "already-committed"), (label, out)
    assert expect(store) == [], label
    assert not storage.Store(store).exists(paths.STAGING_DIR), label
    assert os.path.getsize(os.path.join(store, paths.LOCK_FILE)) == 0, label     # the rerun's: it stays
    shutil.rmtree(state)


def test_power_cuts_during_an_appended_batch(inputs, store_a, tmp_path):
    fs, out = _record(tmp_path, store_a, ["ingest", "{store}", inputs / "b.jsonl", inputs / "small.properties", "B"])
    assert out["status"] == "committed"
    before = files_state(store_a)
    n = 0
    for label, k, returned, state in _states(fs, tmp_path, 16):
        _check_ingest(label, k, returned, state, inputs, ["A"], before, "b", "B",
                      lambda s: goldenlib.compare(golden_set("small-roll"), s))
        n += 1
    assert n >= 16 + TORN


def test_power_cuts_during_a_first_batch(inputs, store_a, tmp_path):
    fs, out = _record(tmp_path, None, ["ingest", "{store}", inputs / "a.jsonl", inputs / "small.properties", "A"])
    want = files_state(store_a)
    for label, k, returned, state in _states(fs, tmp_path, 6):
        _check_ingest(label, k, returned, state, inputs, [], {}, "a", "A",
                      lambda s: [] if files_state(s) == want else ["not the store of batch A"])


def test_power_cuts_during_expire(inputs, store_a, tmp_path):
    """Expire on a store of A and B, far enough in the future that old segments go; the rerun of
    the same expiry ends in the files of an uninterrupted one."""
    seed = str(tmp_path / "seed")
    shutil.copytree(store_a, seed)
    _in_process_ingest(inputs, seed, "b", "B")
    newest = max(json.loads(x)["store_timestamp"] for x in open(inputs / "a.jsonl"))
    now = newest + 2 * 3600 * 1000
    ref = str(tmp_path / "ref")
    shutil.copytree(seed, ref)
    from storelib.ops.expire import expire
    assert expire(ref, 1, now_ms=now, quiet=True)["status"] == "committed"
    want = files_state(ref)
    before = files_state(seed)
    fs, out = _record(tmp_path, seed, ["expire", "{store}", 1, now])
    assert out["status"] == "committed"
    for label, k, returned, state in _states(fs, tmp_path, 7):
        store = os.path.join(state, "store")
        seen = _open(store)
        assert seen[:2] == ["A", "B"] and len(seen) in (2, 3), (label, seen)
        if k >= returned:
            assert len(seen) == 3, label
        if len(seen) == 2:
            assert files_state(store) == before, label
        assert _deep(store, inputs) == [], label
        expire(store, 1, now_ms=now, quiet=True)
        assert files_state(store) == want, label
        assert _deep(store, inputs) == [], label
        shutil.rmtree(state)


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def test_power_cuts_during_adopt(inputs, tmp_path):
    """Adopting a broker's directory in place: before the commit the directory is the broker's
    as it was (no batch); after it, the import batch; the rerun adopts (or says it did)."""
    seed = str(tmp_path / "seed")
    goldenlib.restore(golden_set("small-roll"), seed)
    for junk in ("abort", "abort.bak", "lock"):
        if os.path.exists(os.path.join(seed, junk)):
            os.remove(os.path.join(seed, junk))
    before = files_state(seed)
    fs, out = _record(tmp_path, seed, ["adopt", "{store}", inputs / "small.properties"])
    assert out["status"] == "committed"
    from storelib.ops.adopt import adopt
    for label, k, returned, state in _states(fs, tmp_path, 6):
        store = os.path.join(state, "store")
        seen = _open(store)
        assert len(seen) in (0, 1), (label, seen)
        if k >= returned:
            assert len(seen) == 1, label
        # (a cut while the adopt held the broker lock it made leaves that file, empty, as a broker does)
        after = files_state(store)
        assert after.pop("lock", _EMPTY_SHA256) == _EMPTY_SHA256 and after == before, label
        res = adopt(None, store, store, _cfg(inputs), quiet=True)
        assert res["status"] in ("committed", "already-committed"), (label, res)
        assert len(_open(store)) == 1 and _deep(store, inputs) == [], label
        shutil.rmtree(state)
