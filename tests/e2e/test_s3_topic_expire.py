"""The per-topic expire (``expire --topic``, storelib.ops.topic_retention) on an object store, on the
moto S3 server, and what it reads on a local store.

The store: two of small-roll's six parts as two small batches on S3 (tests/support/objstores.py,
as the object sweep's tests build them: continued files' rows name extent-list objects),
expired per topic (``RULES``; the other topics are kept) two hours after the second part's
newest message, with a vacuum of retention 0; a few objects under a committed attempt that no
row names give the expire's sweep objects to delete. The local store: the same two batches.

* Reads: the plan opens the snapshot's files as every reader does
  (``storefiles.files_from_snapshot``): a manifest row ``rowcheck.check_snapshot`` refuses, and an
  index row whose extents are damaged (every reader refuses it; the plan reads no index file),
  make the expire refuse with ``CorruptStore`` and change nothing (store objects and files, the
  Delta tables' versions), on a local store and on S3; a dry run on a local store whose last
  batch's publish a kill cut short plans what it plans once that publish is finished (it reads
  the staged copies, as readers do).
* Kills (SIGKILL at each of the expire's points, ``EXPIRE_POINTS``, of its sweep's,
  ``SWEEP_POINTS``, and before its snapshot cache is written; ``mid-delete`` in make test, every
  one under ROCKETLAKE_FAULTS=all): what
  the killed expire had not committed is not visible (the snapshot and the bucket as before);
  the store verifies, every object its live rows name is there, and the topics it keeps answer
  as before as of every committed batch; a rerun finishes with the manifest rows and the
  objects of an uninterrupted run, and leaves no staging.
* A per-topic expire stopped (SIGSTOP) between its two Delta commits past its lease, while an
  ingest takes the store over and commits, never commits and deletes nothing (under
  ROCKETLAKE_FAULTS=all, as the S3 case of a damaged queue row).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import ROOT
from support import objstores, opshelp
from storelib.errors import CorruptStore
from storelib.runtime.faults import EXPIRE_POINTS, SWEEP_POINTS

pytestmark = pytest.mark.slow

ALL = os.environ.get("ROCKETLAKE_FAULTS") == "all"
BUCKET = "rocketlake-topic-expire"
SEED = 2
RULES = "metrics-raw=1,audit_log=1"
KEPT = ("trace_topic", "shipping", "notify_sms")         # topics without a rule: kept for ever
# and the snapshot cache's write after the commit (its new base, "cache-after-base", comes only
# after more batches than this store has: the cache's own tests kill it there)
POINTS = EXPIRE_POINTS + SWEEP_POINTS + ("cache-before-write",)
KILL_POINTS = POINTS if ALL else ("mid-delete",)
RUNNER = os.path.join(ROOT, "tests", "support", "local_ingest.py")


def _rules() -> dict:
    return {t: float(h) for t, h in (x.split("=") for x in RULES.split(","))}


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """(env, client, parts, cfg, tmp, now, ref, before): the S3 store ``seed/``; ``ref``: what an
    uninterrupted per-topic expire of a copy leaves (its live rows and bucket objects);
    ``before``: the seed's rows and its kept topics' view (``_kept_view``)."""
    tmp = tmp_path_factory.mktemp("topic-expire")
    with objstores.seeded(BUCKET, tmp_path_factory, tmp, SEED) as (env, client, parts, cfg):
        from storelib.io import storage
        _unnamed_objects(storage.Store(f"s3://{BUCKET}/seed"))
        objstores.ingest(str(tmp / "local"), parts[:SEED - 1], cfg)        # the local store, its last batch below
        shutil.copytree(tmp / "local", tmp / "local-cut")
        objstores.ingest(str(tmp / "local"), parts[SEED - 1:SEED], cfg, SEED - 1)
        now = objstores.now_after(parts[SEED - 1])
        ref = objstores.copy_prefix(client, BUCKET, "seed", "ref")
        r = _expire(env, ref, now)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        assert out["status"] == "committed" and out["consumequeue_removed"] >= 4, out
        assert out["housekeeping"]["objects"]["deleted"] > 0, "the sweep had nothing to delete: its points go untested"
        seed_rows = _rows(f"s3://{BUCKET}/seed")
        yield env, client, parts, cfg, tmp, now, (_rows(ref), objstores.store_objects(client, BUCKET, "ref")), \
            (seed_rows, _kept_view(f"s3://{BUCKET}/seed", seed_rows[0]))


def _unnamed_objects(st) -> None:
    """Objects under the first batch's attempt that no row names, as a file's superseded versions
    leave once the rows naming them are compacted away and vacuumed: the sweep's to delete."""
    from storelib.format import paths
    from storelib.table import manifest
    first = manifest.load_snapshot(st).batches[0]
    for k in range(4):
        st.write_file(f"{paths.OBJECTS_DIR}/{first.batch_id}/{first.attempt_id}/superseded/{k}", [b"x" * 100])


def _expire(env: dict, uri: str, now: int, more: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, RUNNER, "expire", uri, "-", str(now), RULES],
                          env=dict(os.environ, **env, ROCKETLAKE_TEST_VACUUM_HOURS="0", **(more or {})),
                          capture_output=True, text=True, timeout=300)


def _rows(uri: str) -> tuple:
    """(the committed batches' ids, path -> (size, valid bytes, checksum, detail) of the live rows)."""
    from storelib.io import storage
    from storelib.table import manifest
    snap = manifest.load_snapshot(storage.Store(uri))
    return ([b.batch_id for b in snap.batches],
            {p: (r.file_size, r.valid_bytes, r.checksum, r.get("detail")) for p, r in snap.files.items()})


def _kept_view(uri: str, batches: list) -> dict:
    """(batch, topic, queue) -> digest of every message the queue serves as of that batch, for the
    kept topics."""
    from storelib.read.query import open_store
    out = {}
    for b in batches:
        r = open_store(uri, as_of_batch=b)
        for (topic, qid) in sorted(r.files.consume_queues):
            if topic not in KEPT:
                continue
            lo, hi = r.get_min_offset_in_queue(topic, qid), r.get_max_offset_in_queue(topic, qid)
            got = r.get_by_queue_offset(topic, qid, lo, hi - lo)
            out[(b, topic, qid)] = (lo, hi, hashlib.sha256(json.dumps(got, sort_keys=True, default=str).encode()).hexdigest())
    return out


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_per_topic_expire_killed_on_s3_loses_nothing_and_its_rerun_finishes(seed, point, tmp_path):
    env, client, parts, cfg, tmp, now, (ref_rows, ref_objects), (before_rows, view) = seed
    name = f"kill-{point}"
    uri = objstores.copy_prefix(client, BUCKET, "seed", name)
    before_objects = objstores.store_objects(client, BUCKET, name)
    marker = str(tmp_path / "marker")
    r = _expire(env, uri, now, {"ROCKETLAKE_FAULT": point, "ROCKETLAKE_FAULT_MARKER": marker})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    assert open(marker).read().startswith(point)
    cut = _rows(uri)
    if cut[0] == before_rows[0]:             # not committed: nothing of it visible, nothing deleted
        assert cut == before_rows, point
        assert objstores.store_objects(client, BUCKET, name) == before_objects, point
    else:
        assert cut == ref_rows, point
    objstores.live_objects_there(client, BUCKET, name, uri)
    assert _kept_view(uri, before_rows[0]) == view, f"{point}: a kept topic reads otherwise"
    r = _expire(env, uri, now)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _rows(uri) == ref_rows, point
    assert objstores.store_objects(client, BUCKET, name) == ref_objects, point
    assert not objstores.keys(client, BUCKET, f"{name}/_rocketlake/staging/"), f"{point}: staging left behind"
    objstores.live_objects_there(client, BUCKET, name, uri)
    assert _kept_view(uri, before_rows[0]) == view, f"{point}: a kept topic reads otherwise after the rerun"


@pytest.mark.skipif(not ALL, reason="make faults (ROCKETLAKE_FAULTS=all); make test stalls the local one (test_crash_ops)")
def test_a_per_topic_expire_stalled_past_its_lease_on_s3_never_commits(seed, tmp_path):
    """Stopped (SIGSTOP) between its two Delta commits for longer than its lease while an ingest
    takes the stale lease and commits the next part: once resumed it finds the lease gone, exits
    3, commits nothing and deletes nothing. Only the stalled expiry has the short lease (4 s); the
    ingest's (20 s: the stall lasts past it) leaves it 10 s between renewals, which a loaded host
    can need on S3 (with 4 s, a 2 s gap once lost the ingest its own lease: exit 3)."""
    from support.stall import stalled_past_lease
    env, client, parts, cfg, tmp, now, _, (before_rows, view) = seed
    uri = objstores.copy_prefix(client, BUCKET, "seed", "stall")
    before = objstores.store_objects(client, BUCKET, "stall")
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}

    def expire(lease: dict) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, RUNNER, "expire", uri, "-", str(now), RULES],
                                env=dict(os.environ, **env, **lease), **pipes)

    def ingest(lease: dict) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, RUNNER, "ingest", uri, str(parts[SEED]), str(tmp / "small.properties"),
                                 f"b{SEED}"], env=dict(os.environ, **env, **lease), **pipes)
    with stalled_past_lease(tmp_path, 4, "between-delta-tables", expire, ingest, taker_point=None,
                            taker_ttl=20) as stall:
        rc, err = stall.release_taker()
        assert rc == 0, err[-2000:]
        taken = objstores.store_objects(client, BUCKET, "stall")
        rc, err = stall.resume_stalled()
        assert rc == 3, err[-2000:]
        assert "lost the writer lease" in err, err[-2000:]
    batches, files = _rows(uri)
    assert batches == before_rows[0] + [f"b{SEED}"], batches
    assert set(before_rows[1]) <= set(files), "a file the stalled expiry would remove is gone"
    assert objstores.store_objects(client, BUCKET, "stall") == taken and set(before) <= set(taken)
    objstores.live_objects_there(client, BUCKET, "stall", uri)
    assert _kept_view(uri, before_rows[0]) == view


def test_every_kill_point_is_one_the_expire_passes():
    from storelib.runtime import faults
    assert set(POINTS) <= set(faults.EXPIRE_POINTS) | set(faults.SWEEP_POINTS) | set(faults.CACHE_POINTS) \
        and set(KILL_POINTS) <= set(POINTS)


# ----------------------------------------------------------------------------- what the plan reads
def _bad_extents(r: dict) -> None:
    d = json.loads(r["detail"])
    d["extents"] = [["not", "an", "extent"]]
    r["detail"] = json.dumps(d)


DAMAGES = {
    # a row rowcheck.check_snapshot refuses (verify reports it)
    "queue-valid-bytes-10": (lambda r: r["kind"] == "consumequeue" and r["topic"] in KEPT,
                             lambda r: r.update(valid_bytes=10)),
    # an index row whose extents cannot be read: every reader refuses the snapshot, though the plan
    # reads no index file (object stores only: a local row names no extents)
    "index-extents": (lambda r: r["kind"] == "index", _bad_extents),
}


# (make test: a row check_snapshot refuses on a local store, damaged extents on S3; both on S3 under make faults)
@pytest.mark.parametrize("where,damage", [("local", "queue-valid-bytes-10"), ("s3", "index-extents")]
                         + ([("s3", "queue-valid-bytes-10")] if ALL else []))
def test_a_damaged_row_makes_a_per_topic_expire_refuse_and_change_nothing(seed, where, damage, tmp_path):
    from storelib.ops.expire import expire
    from storelib.read.query import open_store
    env, client, parts, cfg, tmp, now, _, _ = seed
    name = f"damaged-{damage}"
    if where == "local":
        uri = str(tmp_path / "store")
        shutil.copytree(tmp / "local", uri)
    else:
        uri = objstores.copy_prefix(client, BUCKET, "seed", name)
    opshelp.edit_row(uri, *DAMAGES[damage])
    with pytest.raises(CorruptStore):
        open_store(uri)                    # (what every reader refuses)

    def state():
        return opshelp.tree_digest(uri) if where == "local" else objstores.digest(client, BUCKET, name)
    before = state()
    for dry in (True, False):
        with pytest.raises(CorruptStore) as e:
            expire(uri, None, now_ms=now, dry_run=dry, quiet=True, topic_rules=_rules())
        assert "rocketlake verify" in str(e.value) or "manifest extents" in str(e.value), str(e.value)
        assert state() == before, f"a refused per-topic expire (dry run: {dry}) changed the store"


def test_a_dry_run_reads_a_cut_short_publish_as_readers_do(seed, tmp_path):
    """The last batch of a local store committed, its publish killed before it began (its new files
    only in its staging directory, its continued ones not patched yet): a per-topic dry run plans
    what it plans once the publish is finished."""
    from storelib.ingest import commit as commit_stage
    from storelib.io import storage
    from storelib.ops.expire import expire
    from storelib.table.snapshots import open_snapshot
    env, client, parts, cfg, tmp, now, _, _ = seed
    store = str(tmp_path / "store")
    shutil.copytree(tmp / "local-cut", store)
    r = subprocess.run([sys.executable, RUNNER, "ingest", store, str(parts[SEED - 1]), str(tmp / "small.properties"),
                        f"b{SEED - 1}"], env=dict(os.environ, ROCKETLAKE_FAULT="after-commit-before-publish"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    st = storage.Store(store)
    assert commit_stage.pending_publishes(st, open_snapshot(st, history=True)), "the kill left no publish to finish"

    def plan() -> dict:
        got = expire(store, None, now_ms=now, dry_run=True, quiet=True, topic_rules=_rules())
        return {k: got[k] for k in ("removed", "queue_min_offsets", "held_back", "min_phy_offset")}
    cut = plan()
    assert commit_stage.finish_pending_publish(st, open_snapshot(st, history=True)) == 1
    assert cut == plan() and cut["removed"]
