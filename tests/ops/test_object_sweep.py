"""The object sweep (storelib.table.objsweep), run by expire's housekeeping on object stores, on
the moto S3 server: a store of small batches whose manifest table compacts
(tests/support/objstores.py) leaves objects only superseded rows named.

* Expire with the default vacuum retention deletes none an older version still names: exports
  as of earlier batches (Delta time travel) are byte-for-byte what they were. With a vacuum of
  every replaced data file (retention 0) the sweep deletes every object no row of any data file
  left names, and the latest snapshot still exports and verifies as before.
* A sweep racing an ingest (its attempt uploading, then between its two commits) deletes garbage
  but none of that attempt's objects, nor any object the rows it commits name: the batch reads
  back as RocketMQ's golden store. A stray attempt that never committed is left to the
  dead-attempt clean-up.
* An expire whose sweep stalls (SIGSTOP) past its lease at ``mid-sweep-delete`` while an ingest
  takes the store over and commits a batch deletes nothing once it resumes (it checks its lease
  before each batch of deletes): the store is RocketMQ's golden store and verifies.
* The other paths that change an object store's manifest: a per-topic expire that runs at the
  sweep's ``mid-sweep-delete`` (the sweep's lease lost) commits, and the store verifies with every
  object its live rows name there, and so does a mirror cycle (make faults); while the sweep
  holds its lease another writer is refused (make faults); repair --apply and adopt never write
  an object store holding a manifest.
* An expire killed (SIGKILL) in its sweep (``mid-sweep-delete`` in make test; every
  ``SWEEP_POINTS`` under ROCKETLAKE_FAULTS=all, ``before-sweep-state`` included; make test stops
  one there in process, tests/ops/test_sweep_state.py) loses nothing and writes no sweep state;
  its rerun finishes the sweep and writes it.

The measurement line (objects and bytes in the bucket with and without the sweep) is printed by
the first test (``-s``).
"""
from __future__ import annotations

import filecmp
import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, golden_set
from support import goldenlib, objstores
from support.longrun import faults_only
from storelib.runtime.faults import SWEEP_POINTS

pytestmark = pytest.mark.slow

ALL = os.environ.get("ROCKETLAKE_FAULTS") == "all"
BUCKET = "rocketlake-sweep"
NOTHING = 10 ** 6            # a retention under which nothing expires: the expire is its housekeeping alone


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    with objstores.seeded(BUCKET, tmp_path_factory, tmp, objstores.BATCHES - 1) as (env, client, parts, cfg):
        yield env, client, parts, cfg, tmp


@pytest.fixture(scope="module")
def seed_export(seed) -> str:
    """The export of the seed's latest snapshot, once: what each copy of it exports before a test
    changes it (the copies hold the same objects), the reference the tests compare with."""
    env, client, parts, cfg, tmp = seed
    return _export(f"s3://{BUCKET}/seed", tmp / "seed-export")


def _same_tree(a, b) -> bool:
    """Two exports hold the same files, byte for byte (but the properties file, which names the
    directory it was exported to)."""
    cmp = filecmp.dircmp(a, b, ignore=["rocketlake.properties"])
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_same_tree(os.path.join(a, d), os.path.join(b, d))
                                               for d in cmp.common_dirs)


def _export(uri: str, out, as_of=None) -> str:
    """The store as of ``as_of`` (latest: None), exported to compare with another export: without
    fsyncs, which were most of an export's time here and which nothing here reads back."""
    from storelib.table.export import export_store
    export_store(uri, str(out), as_of_batch=as_of, durable=False)
    return str(out)


def _unnamed(client, store: str) -> dict:
    """Objects of the store no row of any data file in its manifest directory names."""
    named = objstores.named_by_rows(client, BUCKET, store)
    return {o: n for o, n in objstores.store_objects(client, BUCKET, store).items() if o not in named}


def test_expire_sweeps_only_what_no_retained_version_names(seed, seed_export):
    from storelib.errors import CorruptStore
    from storelib.io import storage
    from storelib.ops.expire import expire
    from storelib.table import manifest
    from storelib.verify import driver as verify
    env, client, parts, cfg, tmp = seed
    uri = objstores.copy_prefix(client, BUCKET, "seed", "kept")
    st = storage.Store(uri)
    snap = manifest.load_snapshot(st)
    marker = snap.compaction
    assert marker is not None, "the batches never compacted the manifest table: the scenario tests nothing"
    old = [b.batch_id for b in snap.batches if b.batch_seq < int(marker.detail["through_seq"])]
    assert old, "no batch before the last compaction"
    before = objstores.store_objects(client, BUCKET, "kept")
    only_old = set(before) - objstores.named_by_rows(client, BUCKET, "kept", objstores.latest_data_files(uri))
    assert only_old, "no object is named by replaced rows alone: the scenario tests nothing"
    views = {b: _export(uri, tmp / f"before-{b}", b) for b in {old[0], old[-1]}}
    views[snap.batch.batch_id] = seed_export
    now = objstores.now_after(parts[-2])

    kept = expire(uri, NOTHING, now_ms=now, quiet=True)
    assert kept["status"] == "nothing-to-do", kept
    assert objstores.store_objects(client, BUCKET, "kept") == before, "the sweep deleted what a retained version names"
    for b, ref in views.items():
        assert _same_tree(_export(uri, tmp / f"after-{b}", b), ref), f"as of {b}: not what it was before the sweep"

    swept = expire(uri, NOTHING, now_ms=now, quiet=True, vacuum_retention_hours=0)
    after = objstores.store_objects(client, BUCKET, "kept")
    left = _unnamed(client, "kept")
    assert left == {}, f"{len(left)} objects ({sum(left.values())} bytes) no row names are left in the bucket"
    assert kept["housekeeping"]["objects"]["deleted"] == 0, kept
    got = swept["housekeeping"]["objects"]
    assert got["deleted"] == len(before) - len(after) >= len(only_old) and got["uncommitted"] == 0, got
    assert _same_tree(_export(uri, tmp / "latest-after", snap.batch.batch_id), views[snap.batch.batch_id])
    assert verify.verify_store(uri).problems == []
    with pytest.raises(CorruptStore):              # (the vacuum, not the sweep, ends the older versions)
        _export(uri, tmp / "vacuumed", old[0])
    print(f"\nsweep: {len(parts) - 1} batches, manifest compacted; bucket objects {len(before)} "
          f"({sum(before.values())} bytes) without the sweep, {len(after)} ({sum(after.values())} bytes) after it")


def test_a_sweep_racing_an_ingest_spares_its_attempt_and_what_it_names(seed, monkeypatch):
    from storelib.format import paths
    from storelib.ingest import commit as commit_stage
    from storelib.io import storage
    from storelib.table import manifest, objsweep
    from storelib.verify import driver as verify
    env, client, parts, cfg, tmp = seed
    uri = objstores.copy_prefix(client, BUCKET, "seed", "race")
    st = storage.Store(uri)
    dt = manifest.open_table(st, paths.MANIFEST_DIR)
    dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)    # garbage for the sweep
    dt = None
    stray = f"{paths.OBJECTS_DIR}/b9/deadattempt/local-x/commitlog/00000000000000000000.0"
    st.write_file(stray, [b"an attempt that never committed"])
    real, seen = commit_stage.fault, {}

    def racing(point: str) -> None:
        if point in ("before-delta-commit", "between-delta-tables"):
            mine = {o for o in objstores.store_objects(client, BUCKET, "race") if o.startswith(f"{paths.OBJECTS_DIR}/b5/")}
            seen[point] = objsweep.sweep(st), mine
            left = set(objstores.store_objects(client, BUCKET, "race"))
            assert mine and mine <= left and stray in left, point
        real(point)
    monkeypatch.setattr(commit_stage, "fault", racing)
    with objstores.small_batches():
        objstores.ingest(uri, parts[-1:], cfg, objstores.BATCHES - 1)
    monkeypatch.undo()
    assert set(seen) == {"before-delta-commit", "between-delta-tables"}
    assert seen["before-delta-commit"][0]["deleted"] > 0, "the racing sweep found no garbage: it tests little"
    assert seen["before-delta-commit"][0]["uncommitted"] >= len(seen["before-delta-commit"][1]) + 1
    assert manifest.load_snapshot(st).batch.batch_id == f"b{objstores.BATCHES - 1}"
    assert goldenlib.compare(golden_set("small-roll"), _export(uri, tmp / "race-export")) == []
    assert verify.verify_store(uri).problems == []
    assert not st.exists(stray), "the dead attempt's objects outlived the next commit's clean-up"


def _expire_args(uri: str, parts) -> list:
    return [sys.executable, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "expire", uri, str(NOTHING),
            str(objstores.now_after(parts[-2]))]


def test_a_sweep_stalled_past_its_lease_deletes_nothing_once_another_writer_committed(seed, tmp_path):
    from support.stall import stalled_past_lease
    from storelib.verify import driver as verify
    env, client, parts, cfg, tmp = seed
    uri = objstores.copy_prefix(client, BUCKET, "seed", "stall")
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}

    def expire(lease: dict) -> subprocess.Popen:
        return subprocess.Popen(_expire_args(uri, parts),
                                env=dict(os.environ, **env, **lease, ROCKETLAKE_TEST_VACUUM_HOURS="0"), **pipes)

    def ingest(lease: dict) -> subprocess.Popen:          # the last batch, as the seed's were written
        args = [sys.executable, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest", uri,
                str(parts[-1]), str(tmp / "small.properties"), f"b{objstores.BATCHES - 1}"]
        return subprocess.Popen(args, env=dict(os.environ, **env, **lease, ROCKETLAKE_TEST_INLINE_EXTENTS="1",
                                               ROCKETLAKE_TEST_COMPACT_MIN_ROWS="0"), **pipes)
    with stalled_past_lease(tmp_path, 6, "mid-sweep-delete", expire, ingest, taker_point=None) as stall:
        rc, err = stall.release_taker()
        assert rc == 0, err[-2000:]
        held = objstores.store_objects(client, BUCKET, "stall")
        assert any(o.startswith(f"{objstores.OBJECTS}b{objstores.BATCHES - 1}/") for o in held)
        assert _unnamed(client, "stall"), "the stalled sweep has nothing left to delete: the stall tests nothing"
        rc, err = stall.resume_stalled()
        assert rc == 0, err[-2000:]
        assert objstores.store_objects(client, BUCKET, "stall") == held, "the sweep deleted after it lost its lease"
        assert "lost the writer lease" in err, err[-2000:]
    assert goldenlib.compare(golden_set("small-roll"), _export(uri, tmp / "stall-export")) == []
    assert verify.verify_store(uri).problems == []


def _vacuumed(st) -> None:
    """Every replaced manifest data file vacuumed: garbage for the sweep."""
    from storelib.format import paths
    from storelib.table import manifest
    dt = manifest.open_table(st, paths.MANIFEST_DIR)
    dt.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    dt = None


def test_a_sweep_racing_a_per_topic_expire_leaves_what_its_version_names(seed, seed_export):
    from storelib.io import storage
    from storelib.ops.expire import expire
    from storelib.table import objsweep
    env, client, parts, cfg, tmp = seed
    uri = objstores.copy_prefix(client, BUCKET, "seed", "topic-race")
    st = storage.Store(uri)
    _vacuumed(st)
    ref = seed_export
    ran = {}

    def racing(point: str) -> None:
        if point == "mid-sweep-delete":
            ran[point] = expire(uri, None, now_ms=objstores.now_after(parts[-2]), quiet=True,
                                topic_rules={"metrics-raw": 1})
    got = objsweep.sweep(st, fault=racing)
    done = ran["mid-sweep-delete"]
    assert done["status"] == "committed" and done["consumequeue_removed"] > 0, done
    assert got["deleted"] > 0, "the racing sweep found no garbage: it tests little"
    objstores.live_objects_there(client, BUCKET, "topic-race", uri)
    out = _export(uri, tmp / "topic-race-after")
    left = {os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs}
    assert left and not left & set(done["removed"])
    for rel in left - {"rocketlake.properties", "checkpoint"}:
        assert filecmp.cmp(os.path.join(out, rel), os.path.join(ref, rel), shallow=False), rel


@pytest.mark.skipif(not ALL, reason="make faults (ROCKETLAKE_FAULTS=all)")
def test_a_sweep_racing_a_mirror_cycle_leaves_what_its_batch_names(seed):
    """A store the mirror wrote in small cycles (the broker: small-roll's golden store, its safe
    point moved by hand), swept while its last cycle commits: it reads back as the broker."""
    from conftest import golden_set as golden
    from support import goldenlib, mirrorhelp
    from storelib.io import storage
    from storelib.ops import mirror
    from storelib.table import objsweep
    env, client, parts, cfg, tmp = seed
    broker = goldenlib.restore(golden("small-roll"), str(tmp / "mirror-broker"))
    _, _, ts = mirrorhelp.records(broker)
    uri = f"s3://{BUCKET}/mirror"
    with objstores.small_batches():
        for k in (400, 800, 1200, 1600, 2000):
            mirrorhelp.set_safe(broker, int(ts[k]))
            assert mirror.mirror_broker(broker, uri, quiet=True)["status"] == "committed"
    st = storage.Store(uri)
    _vacuumed(st)
    mirrorhelp.set_safe(broker, int(ts.max()) + 1)
    ran = {}

    def racing(point: str) -> None:
        if point == "mid-sweep-delete":
            with objstores.small_batches():
                ran[point] = mirror.mirror_broker(broker, uri, quiet=True)
    got = objsweep.sweep(st, fault=racing)
    assert ran["mid-sweep-delete"]["status"] == "committed" and got["deleted"] > 0, (ran, got)
    objstores.live_objects_there(client, BUCKET, "mirror", uri)
    assert goldenlib.compare(golden("small-roll"), _export(uri, tmp / "mirror-export")) == []


def test_repair_and_adopt_never_write_an_object_store_with_a_manifest(seed):
    from conftest import golden_set as golden
    from storelib.errors import AdoptError, RepairError
    from storelib.ops.adopt import adopt
    from storelib.ops.repair import repair
    env, client, parts, cfg, tmp = seed
    uri = f"s3://{BUCKET}/seed"
    before = objstores.keys(client, BUCKET, "seed/")
    with pytest.raises(RepairError, match="local stores only"):
        repair(uri, cfg, apply=True, quiet=True)
    with pytest.raises(AdoptError, match="already has a rocketlake manifest"):
        adopt(None, uri, os.path.join(golden("small-roll"), "store"), cfg, quiet=True)
    assert objstores.keys(client, BUCKET, "seed/") == before


@pytest.mark.skipif(not ALL, reason="make faults (ROCKETLAKE_FAULTS=all)")
def test_while_a_sweep_holds_its_lease_another_writer_is_refused(seed, tmp_path):
    from storelib.errors import ConcurrentWriteError
    from storelib.ops.expire import expire
    from support.stall import wait_for
    env, client, parts, cfg, tmp = seed
    uri = objstores.copy_prefix(client, BUCKET, "seed", "held")
    gate = str(tmp_path / "gate")
    proc = subprocess.Popen(_expire_args(uri, parts), env=dict(os.environ, **env, ROCKETLAKE_TEST_VACUUM_HOURS="0",
                                                               ROCKETLAKE_HOLD=f"mid-sweep-delete:{gate}"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(gate + ".reached", proc)
        held = objstores.store_objects(client, BUCKET, "held")
        with pytest.raises(ConcurrentWriteError):
            expire(uri, None, now_ms=objstores.now_after(parts[-2]), quiet=True, topic_rules={"metrics-raw": 1})
        with pytest.raises(ConcurrentWriteError):
            objstores.ingest(uri, parts[-1:], cfg, objstores.BATCHES - 1)
        assert objstores.store_objects(client, BUCKET, "held") == held
    finally:
        open(gate, "w").close()
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert _unnamed(client, "held") == {}
    objstores.live_objects_there(client, BUCKET, "held", uri)


@pytest.mark.parametrize("point", [faults_only(p) if p != "mid-sweep-delete" else p for p in SWEEP_POINTS])
def test_an_expire_killed_in_its_sweep_loses_nothing_and_its_rerun_finishes(seed, seed_export, point):
    from storelib.format import paths
    from storelib.io import storage
    from storelib.table import sweepstate
    from storelib.verify import driver as verify
    env, client, parts, cfg, tmp = seed
    uri = objstores.copy_prefix(client, BUCKET, "seed", f"kill-{point}")
    ref = seed_export
    before = objstores.store_objects(client, BUCKET, f"kill-{point}")
    args = _expire_args(uri, parts)
    run_env = dict(os.environ, **env, ROCKETLAKE_TEST_VACUUM_HOURS="0")
    r = subprocess.run(args, env=dict(run_env, ROCKETLAKE_FAULT=point), capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    cut = objstores.store_objects(client, BUCKET, f"kill-{point}")
    state = f"kill-{point}/{paths.SWEEP_STATE}"
    assert not objstores.keys(client, BUCKET, state), "the killed sweep wrote its state"
    if point == "before-sweep-state":            # (every unnamed object deleted: the state alone is left to write)
        assert len(cut) < len(before) and _unnamed(client, f"kill-{point}") == {}
    else:
        assert _unnamed(client, f"kill-{point}"), "the kill left nothing to sweep"
        assert (len(cut) < len(before)) == (point == "mid-sweep-delete")
    assert _same_tree(_export(uri, tmp / f"kill-{point}-cut"), ref) and verify.verify_store(uri).problems == []
    r = subprocess.run(args, env=run_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _unnamed(client, f"kill-{point}") == {}
    assert sweepstate.read(storage.Store(uri)) is not None, "the rerun's sweep wrote no state"
    assert _same_tree(_export(uri, tmp / f"kill-{point}-after"), ref) and verify.verify_store(uri).problems == []
