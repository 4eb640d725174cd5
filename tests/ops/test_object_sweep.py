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
* An expire killed (SIGKILL) in its sweep (``mid-sweep-delete`` in make test; every
  ``SWEEP_POINTS`` under ROCKETLAKE_FAULTS=all) loses nothing; its rerun finishes the sweep.

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
from storelib.runtime.faults import SWEEP_POINTS

pytestmark = pytest.mark.slow

ALL = os.environ.get("ROCKETLAKE_FAULTS") == "all"
BUCKET = "rocketlake-sweep"
NOTHING = 10 ** 6            # a retention under which nothing expires: the expire is its housekeeping alone


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    with objstores.seeded(BUCKET, tmp, objstores.BATCHES - 1) as (env, client, parts, cfg):
        yield env, client, parts, cfg, tmp


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
    from storelib.table.export import export_store
    export_store(uri, str(out), as_of_batch=as_of)
    return str(out)


def _unnamed(client, store: str) -> dict:
    """Objects of the store no row of any data file in its manifest directory names."""
    named = objstores.named_by_rows(client, BUCKET, store)
    return {o: n for o, n in objstores.store_objects(client, BUCKET, store).items() if o not in named}


def test_expire_sweeps_only_what_no_retained_version_names(seed):
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
    views = {b: _export(uri, tmp / f"before-{b}", b) for b in {old[0], old[-1], snap.batch.batch_id}}
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


def _faults_only(*values):
    return pytest.param(*values, marks=pytest.mark.skipif(not ALL, reason="make faults (ROCKETLAKE_FAULTS=all)"))


@pytest.mark.parametrize("point", [_faults_only(p) if p != "mid-sweep-delete" else p for p in SWEEP_POINTS])
def test_an_expire_killed_in_its_sweep_loses_nothing_and_its_rerun_finishes(seed, point):
    from storelib.verify import driver as verify
    env, client, parts, cfg, tmp = seed
    uri = objstores.copy_prefix(client, BUCKET, "seed", f"kill-{point}")
    ref = _export(uri, tmp / f"kill-{point}-before")
    before = objstores.store_objects(client, BUCKET, f"kill-{point}")
    args = [sys.executable, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "expire", uri, str(NOTHING),
            str(objstores.now_after(parts[-2]))]
    run_env = dict(os.environ, **env, ROCKETLAKE_TEST_VACUUM_HOURS="0")
    r = subprocess.run(args, env=dict(run_env, ROCKETLAKE_FAULT=point), capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    cut = objstores.store_objects(client, BUCKET, f"kill-{point}")
    assert _unnamed(client, f"kill-{point}"), "the kill left nothing to sweep"
    assert (len(cut) < len(before)) == (point == "mid-sweep-delete")
    assert _same_tree(_export(uri, tmp / f"kill-{point}-cut"), ref) and verify.verify_store(uri).problems == []
    r = subprocess.run(args, env=run_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _unnamed(client, f"kill-{point}") == {}
    assert _same_tree(_export(uri, tmp / f"kill-{point}-after"), ref) and verify.verify_store(uri).problems == []
