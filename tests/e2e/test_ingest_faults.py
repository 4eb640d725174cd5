"""Crash safety: SIGKILL at fault points of an ingest (every point with `make faults`), then a rerun.

Scenario: small-roll cut in two batches, A = messages [0, 1513) (it ends exactly when an index
file is full), committed once per session; B = the rest. For each fault point a copy of the
A-store runs batch B in a fresh Python process with a local SparkSession (tests/support/ingest_runner.py:
a real Spark job, a real SIGKILL) and ``ROCKETLAKE_FAULT=<point>``:

* driver points: the process is SIGKILLed (exit -9) where the marker file says;
* executor points: the Python worker is SIGKILLed; local mode does not retry, so the job fails and
  the driver exits 1 after removing what the attempt staged;
* before the checkpoint-table commit: every store file is byte-identical to before, the committed
  snapshot (batches, live files) and the checkpoint table's version are unchanged;
* after it (post-commit points): batch B is committed, readers see it through the manifest.

``test_rerun_finishes_every_killed_batch`` then reruns batch B on every store of the points above
in one process (no fault): the store is byte-identical to the golden set (goldenlib.compare), the manifest
lists every file once with a matching checksum, batches A and B once each, no staging, no lease.
``test_executor_kill_is_retried`` kills one task attempt with retries allowed (mid-segment, and
after a split's staged records were released): the retry writes its own staging path and the
result is still golden.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from support import goldenlib
from conftest import golden_set, ROOT

from storelib.io import checksum, storage
from storelib.ingest import commit as commit_stage
from storelib.runtime import faults
from storelib.table import manifest
from storelib.format import paths

pytestmark = pytest.mark.slow

PY = sys.executable
RUNNER = os.path.join(ROOT, "tests", "support", "ingest_runner.py")
SMALL = goldenlib.SMALL_ROLL_CONFIG
CUT = 1513

# point -> ROCKETLAKE_FAULT_SKIP (let it pass a few times: a later file, a partly done publish)
POINTS = {
    "after-lease": 0, "encode-split": 0, "mid-records-write": 0, "after-scan": 0, "after-plan": 0,
    "mid-segment-write": 1, "after-records-released": 0, "after-segment-write": 2, "mid-file-write": 3,
    "after-files-staged": 0,
    "before-delta-commit": 0, "between-delta-tables": 0, "after-commit-before-publish": 0, "mid-apply": 0,
    "mid-publish": 40, "after-publish-before-cleanup": 0,
}
# `make test` kills at these (both stages' writers, both Delta commits and the publish);
# ROCKETLAKE_FAULTS=all (`make faults`) at every point above.
SAMPLED = ("mid-records-write", "mid-segment-write", "mid-file-write",
           "before-delta-commit", "between-delta-tables", "mid-publish")
KILL_POINTS = list(POINTS) if os.environ.get("ROCKETLAKE_FAULTS") == "all" else list(SAMPLED)
KILLED: dict = {}     # point -> store left by the killed run (for the rerun test)
TRIED: list = []      # the points test_kill_at ran in this session


def test_every_fault_point_is_tested():
    assert set(POINTS) == set(faults.POINTS) and set(SAMPLED) <= set(POINTS)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    base = tmp_path_factory.mktemp("faults")
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl"), encoding="utf-8").readlines()
    (base / "a.jsonl").write_text("".join(lines[:CUT]), encoding="utf-8")
    (base / "b.jsonl").write_text("".join(lines[CUT:]), encoding="utf-8")
    (base / "small.properties").write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    (base / "topics.json").write_text('{"topicConfigTable": {}}')
    store_a = str(base / "store-a")
    r = run_jobs(base, [job(base, store_a, "a")], "base")
    assert r.returncode == 0, r.stderr[-3000:]
    return base, store_a


def job(base, store, part, batch_id=None, result=None) -> dict:
    return {"store": store, "input": str(base / f"{part}.jsonl"), "config": str(base / "small.properties"),
            "batch_id": batch_id or part.upper(), "topics": str(base / "topics.json"), "partitions": 2,
            "quiet": True, "result": result}


def run_jobs(base, jobs, name, env_extra=None, master="local[2]", popen=False):
    spec = base / f"{name}.json"
    spec.write_text(json.dumps({"master": master, "jobs": jobs}))
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)
    for k in [k for k in env if k.startswith("ROCKETLAKE_") and k != "ROCKETLAKE_ALLOW_EMPTY_BODY"]:
        del env[k]
    env.update(env_extra or {})
    cmd = [PY, RUNNER, str(spec)]
    if popen:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          start_new_session=True)


def files_state(store: str) -> dict:
    """Every file outside _rocketlake/: rel path -> sha256; not an empty ``lock`` (the broker lock
    every writer holds: storelib.io.brokerlock; made by the first, it stays)."""
    out = {}
    for d, _, files in os.walk(store):
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, store)
            if rel == paths.LOCK_FILE and os.path.getsize(p) == 0:
                continue
            if not rel.startswith(paths.META_DIR):
                with open(p, "rb") as fh:
                    out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return out


def snapshot_state(store: str) -> tuple:
    snap = manifest.load_snapshot(storage.Store(store))
    files = {p: (r["batch_id"], r["checksum"], r["valid_bytes"]) for p, r in snap.files.items()}
    return [b["batch_id"] for b in snap.batches], files, snap.versions.checkpoints


def check_consistent(store: str, batch_ids: list) -> None:
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    assert [b["batch_id"] for b in snap.batches] == batch_ids
    assert [b["batch_seq"] for b in snap.batches] == list(range(1, len(batch_ids) + 1))
    on_disk = set(files_state(store))
    assert set(snap.files) == on_disk
    for path, r in snap.files.items():
        assert checksum.checksum_of_bytes(st.read(path, 0, r["valid_bytes"])) == r["checksum"], path
    # The visible rows: exactly one per file of each batch's attempt (no duplicates).
    mf = manifest.read_rows(manifest.open_table(st, paths.MANIFEST_DIR))
    ck = {b["batch_id"]: b for b in snap.batches}
    live = [r for r in mf if r["batch_id"] in ck and r["attempt_id"] == ck[r["batch_id"]]["attempt_id"]]
    keys = [(r["batch_id"], r["path"]) for r in live]
    assert len(keys) == len(set(keys))
    assert not st.exists(paths.STAGING_DIR), "staging left behind"
    assert not st.exists(paths.LEASE_PATH), "writer lease left behind"


def storecmp(store: str) -> list:
    """Differences from the small-roll golden store ([] = byte-identical)."""
    return goldenlib.compare(golden_set("small-roll"), store)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_at(point, work, tmp_path):
    base, store_a = work
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    before_files, before_snap = files_state(store), snapshot_state(store)
    marker = tmp_path / "marker"
    TRIED.append(point)
    r = run_jobs(base, [job(base, store, "b")], f"kill-{point}",
                 {"ROCKETLAKE_FAULT": point, "ROCKETLAKE_FAULT_SKIP": str(POINTS[point]),
                  "ROCKETLAKE_FAULT_MARKER": str(marker)})
    assert marker.exists() and marker.read_text().startswith(point), (r.returncode, r.stderr[-3000:])
    KILLED[point] = store     # rerun even if a check below fails: the rerun must repair it all the same
    if point in faults.DRIVER_POINTS:
        assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
    else:
        assert r.returncode == 1, r.stderr[-3000:]
        assert "exited unexpectedly" in r.stderr or "crashed" in r.stderr or "Python worker" in r.stderr
    st = storage.Store(store)
    if point in faults.POST_COMMIT_POINTS:
        batches, files, _ = snapshot_state(store)
        assert batches == ["A", "B"]
        assert all(f[0] in ("A", "B") for f in files.values())
        # Readers see the committed batch whole, its publish unfinished or not: files it
        # continues are read through their staged patches, new ones from their staged copies.
        # Finishing the publish (what the next writer does first; here on a copy, without
        # Spark) gives RocketMQ's bytes.
        finished = str(tmp_path / "finished")
        shutil.copytree(store, finished)
        fst = storage.Store(finished)
        commit_stage.finish_pending_publish(fst, manifest.load_snapshot(fst))
        assert storecmp(finished) == []
        assert not fst.exists(paths.STAGING_DIR)
        assert _reader_answers(store) == _reader_answers(finished)
    else:
        # Before the switch no store file changes, whatever the batch had staged (a broker
        # started on the directory now would find exactly batch A).
        assert files_state(store) == before_files
        got = snapshot_state(store)
        assert got[0] == before_snap[0] and got[1] == before_snap[1] and got[2] == before_snap[2]
        if point in faults.EXECUTOR_POINTS:
            # the driver survived: it removed what this attempt staged and released the lease
            assert not st.exists(paths.STAGING_DIR) and not st.exists(paths.LEASE_PATH)
    # no process of the killed run is left writing into the store
    time.sleep(0.2)


def test_rerun_finishes_every_killed_batch(work):
    base, _ = work
    if not TRIED:
        pytest.skip("test_kill_at did not run in this session: there is nothing to rerun")
    # every point tried must have fired: a point that never killed its run proves nothing
    assert sorted(KILLED) == sorted(TRIED), f"fault points that never fired: {sorted(set(TRIED) - set(KILLED))}"
    jobs = [job(base, s, "b", result=s + ".rerun.json") for s in KILLED.values()]
    r = run_jobs(base, jobs, "reruns")
    assert r.returncode == 0, r.stderr[-3000:]
    for point, store in KILLED.items():
        res = json.load(open(store + ".rerun.json"))
        want = "already-committed" if point in faults.POST_COMMIT_POINTS else "committed"
        assert res["summary"]["status"] == want, (point, res)
        diffs = storecmp(store)
        assert diffs == [], (point, diffs[:20])
        check_consistent(store, ["A", "B"])
        assert os.path.getsize(os.path.join(store, paths.LOCK_FILE)) == 0, point     # held, then left


@pytest.mark.parametrize("point", ["mid-segment-write", "after-records-released"])
def test_executor_kill_is_retried(work, tmp_path, point):
    """One task attempt SIGKILLed with task retries on: the retry stages its own copy, only the
    driver's commit publishes, and the store is golden. ``after-records-released``: the killed
    attempt had written a split's records into their segment and deleted the staged copy, so
    the retry encodes those rows again from the input."""
    base, store_a = work
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    marker = tmp_path / "marker"
    r = run_jobs(base, [job(base, store, "b")], f"retry-{point}",
                 {"ROCKETLAKE_FAULT": point, "ROCKETLAKE_FAULT_ONCE": "1",
                  "ROCKETLAKE_FAULT_MARKER": str(marker)}, master="local[2,4]")
    assert r.returncode == 0, r.stderr[-3000:]
    assert marker.read_text().startswith(point)
    assert storecmp(store) == []
    check_consistent(store, ["A", "B"])


def _reader_answers(store: str) -> str:
    from storelib.format.config import load_config
    from storelib.read.query import StoreReader
    from storelib.table.storefiles import StoreFiles
    cfg = load_config(None, SMALL)
    r = StoreReader(store, cfg, files=StoreFiles.from_snapshot(store, config=cfg))
    out = {"max": r.get_max_phy_offset(), "min": r.get_min_phy_offset()}
    for t, q in [("order_events", 0), ("user-login", 0), ("order_events", 1)]:
        out[f"{t}/{q}"] = [r.get_max_offset_in_queue(t, q), r.get_message("g", t, q, 0, 8)]
    return json.dumps(out, default=str, sort_keys=True)


def test_concurrent_writers_one_commits_the_other_leaves_no_trace(work, tmp_path):
    """Writer W holds the store (paused with its files staged); a second ingest L fails at once
    with exit 3 and a clear message, leaves no manifest row, no staging, no file change; queries
    meanwhile see the last committed batch; W then commits the golden store."""
    base, store_a = work
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    before = _reader_answers(store)
    gate = tmp_path / "gate"
    w = run_jobs(base, [job(base, store, "b")], "winner",
                 {"ROCKETLAKE_HOLD": f"after-files-staged:{gate}"}, popen=True)
    try:
        deadline = time.time() + 300
        while not os.path.exists(str(gate) + ".reached"):
            assert w.poll() is None, w.communicate()[1][-3000:]
            assert time.time() < deadline, "the writer never reached its files-staged point"
            time.sleep(0.2)
        st = storage.Store(store)
        assert st.exists(paths.LEASE_PATH) and st.list_files(paths.STAGING_DIR)
        files_during, snap_during = files_state(store), snapshot_state(store)
        # Readers see batch A only, exactly as before the ingest started.
        assert _reader_answers(store) == before
        assert snap_during[0] == ["A"]
        # The second writer (other data, other batch id) fails early and clearly.
        (base / "c.jsonl").write_text("".join(open(base / "a.jsonl").readlines()[:50]))
        staged = set(st.list_files(paths.STAGING_DIR))
        r = run_jobs(base, [job(base, store, "c", batch_id="L")], "loser")
        assert r.returncode == 3, r.stderr[-3000:]
        assert "concurrent writer" in r.stderr and "'B'" in r.stderr
        assert files_state(store) == files_during and snapshot_state(store) == snap_during
        assert set(st.list_files(paths.STAGING_DIR)) == staged      # nothing of L, W's intact
        mf = manifest.read_rows(manifest.open_table(st, paths.MANIFEST_DIR))
        assert not [x for x in mf if x["batch_id"] == "L"]
    finally:
        gate.write_text("go")
        out, err = w.communicate(timeout=300)
    assert w.returncode == 0, err[-3000:]
    assert storecmp(store) == []
    check_consistent(store, ["A", "B"])
