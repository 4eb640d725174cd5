"""Per-topic expiry and the streaming sink's commit under power cuts, kill points, a racing writer
and a stalled writer (issue 35: every commit path under the crash simulator and the kill points).

* power cuts (tests/support/crashfs, as tests/e2e/test_crash_sim.py): each operation runs once on
  the simulator; in the state a cut leaves after each chosen durable step the store opens, nothing
  uncommitted is visible (the files as before the operation until its switch), what returned is
  visible, verify --deep is clean, and the rerun ends in the uninterrupted result;
* kill points (storelib.runtime.faults: ``EXPIRE_POINTS`` for expire, the ingest's driver points
  for the sink's commit, which runs the ingest in its process): SIGKILL there, then the same checks;
* a per-topic expiry against an ingest holding the lease (and the other way round) is refused
  at the lease and changes nothing; one stalled past its lease (SIGSTOP) while an ingest takes
  the store over never commits and deletes nothing.

``make test`` runs a few points of each; ``CRASH_POINTS=0`` every power-cut point and
``ROCKETLAKE_FAULTS=all`` every kill point (``make crash``, ``make faults``, ``make long``).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from support import goldenlib
from conftest import ROOT, golden_set
from support.crashfs.availability import unavailable_reason
from storelib.io import storage
from storelib.runtime.faults import DRIVER_POINTS, EXPIRE_POINTS

from test_crash_sim import TORN, _deep, _in_process_ingest, _open, _record, _states, inputs, store_a  # noqa: F401
from test_nothing_lost import _wait_for, files_state
from test_housekeeping_stall import _logs_and_staging
from support.stall import stalled_past_lease

pytestmark = [pytest.mark.slow]
needs_crashfs = pytest.mark.skipif(bool(unavailable_reason()), reason=f"no crash simulator: {unavailable_reason()}")

RUNNER = os.path.join(ROOT, "tests", "support", "local_ingest.py")
ALL_FAULTS = os.environ.get("ROCKETLAKE_FAULTS") == "all"
RULES = "metrics-raw=1,audit_log=1"
QUERY, MICRO_BATCH = "query-1", 5
SINK_BATCH = f"stream-{QUERY}-{MICRO_BATCH}"
SINK_POINTS = [p for p in DRIVER_POINTS if p != "after-scan"] if ALL_FAULTS else ["between-delta-tables"]
TOPIC_EXPIRE_POINTS = list(EXPIRE_POINTS) if ALL_FAULTS else ["between-delta-tables", "mid-delete"]


def _now(base) -> int:
    return max(json.loads(x)["store_timestamp"] for x in open(base / "a.jsonl")) + 2 * 3600 * 1000


def _runner(args: list, env: dict | None = None, popen: bool = False):
    cmd = [sys.executable, RUNNER] + [str(a) for a in args]
    e = dict(os.environ, **(env or {}))
    if popen:
        return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)


def _rules() -> dict:
    return {t: float(h) for t, h in (x.split("=") for x in RULES.split(","))}


def _topic_expire(store: str, now: int) -> dict:
    from storelib.ops.expire import expire
    return expire(store, None, now_ms=now, quiet=True, topic_rules=_rules())


@pytest.fixture(scope="module")
def two_batches(inputs, store_a, tmp_path_factory):  # noqa: F811
    """A store of A and B, and the files a per-topic expiry of it leaves (uninterrupted)."""
    tmp = tmp_path_factory.mktemp("crash-ops")
    seed = str(tmp / "seed")
    shutil.copytree(store_a, seed)
    _in_process_ingest(inputs, seed, "b", "B")
    ref = str(tmp / "ref")
    shutil.copytree(seed, ref)
    s = _topic_expire(ref, _now(inputs))
    assert s["status"] == "committed" and len(s["removed"]) >= 4, s
    return seed, files_state(seed), files_state(ref)


def _sink(base, store: str) -> dict:
    from support.local_ingest import sink_commit
    return sink_commit(store, str(base / "b.jsonl"), str(base / "small.properties"), QUERY, str(MICRO_BATCH))


def _no_leftovers(store: str) -> None:
    st = storage.Store(store)
    assert not st.exists("_rocketlake/staging") or not st.list_files("_rocketlake/staging")
    assert not st.exists("_rocketlake/incoming") or not st.list_files("_rocketlake/incoming")


# ----------------------------------------------------------------------------- per-topic expiry
def _check_topic_expire(label, store, inputs, seed_files, want, must_be_visible):  # noqa: F811
    seen = _open(store)
    assert seen[:2] == ["A", "B"] and len(seen) in (2, 3), (label, seen)
    if must_be_visible:
        assert len(seen) == 3, (label, "the expiry returned, but is not visible")
    if len(seen) == 2:
        assert files_state(store) == seed_files, (label, "files changed before the switch")
    assert _deep(store, inputs) == [], label
    _topic_expire(store, _now(inputs))
    assert files_state(store) == want, label
    assert len(_open(store)) == 3 and _deep(store, inputs) == [], label


@needs_crashfs
def test_power_cuts_during_topic_expire(inputs, two_batches, tmp_path):  # noqa: F811
    seed, seed_files, want = two_batches
    fs, out = _record(tmp_path, seed, ["expire", "{store}", "-", _now(inputs), RULES])
    assert out["status"] == "committed"
    n = 0
    for label, k, returned, state in _states(fs, tmp_path, 4):
        _check_topic_expire(label, os.path.join(state, "store"), inputs, seed_files, want, k >= returned)
        shutil.rmtree(state)
        n += 1
    assert n >= 4 + TORN


@pytest.mark.parametrize("point", TOPIC_EXPIRE_POINTS)
def test_topic_expire_killed(inputs, two_batches, tmp_path, point):  # noqa: F811
    seed, seed_files, want = two_batches
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    marker = str(tmp_path / "marker")
    r = _runner(["expire", store, "-", _now(inputs), RULES],
                {"ROCKETLAKE_FAULT": point, "ROCKETLAKE_FAULT_MARKER": marker})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    assert open(marker).read().startswith(point)
    _check_topic_expire(point, store, inputs, seed_files, want, False)


# ----------------------------------------------------------------------------- the streaming sink's commit
def _check_sink(label, store, inputs, before_files, must_be_visible):  # noqa: F811
    seen = _open(store)
    assert seen in (["A"], ["A", SINK_BATCH]), (label, seen)
    if must_be_visible:
        assert seen == ["A", SINK_BATCH], (label, "the commit returned, but the batch is not visible")
    if seen == ["A"]:
        assert files_state(store) == before_files, (label, "uncommitted bytes reached a store file")
    assert _deep(store, inputs) == [], label
    out = _sink(inputs, store)                  # Spark runs the micro-batch again after a failure
    assert out["status"] in ("committed", "already-committed"), (label, out)
    assert _open(store) == ["A", SINK_BATCH], label          # exactly once
    assert goldenlib.compare(golden_set("small-roll"), store) == [], label
    _no_leftovers(store)


@needs_crashfs
def test_power_cuts_during_the_sink_commit(inputs, store_a, tmp_path):  # noqa: F811
    fs, out = _record(tmp_path, store_a, ["sink", "{store}", inputs / "b.jsonl", inputs / "small.properties",
                                          QUERY, MICRO_BATCH])
    assert out["status"] == "committed" and out["batch_id"] == SINK_BATCH
    before = files_state(store_a)
    n = 0
    for label, k, returned, state in _states(fs, tmp_path, 4):
        store = os.path.join(state, "store")
        _check_sink(label, store, inputs, before, k >= returned)
        shutil.rmtree(state)
        n += 1
    assert n >= 4 + TORN


@pytest.mark.parametrize("point", SINK_POINTS)
def test_sink_commit_killed(inputs, store_a, tmp_path, point):  # noqa: F811
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    before = files_state(store_a)
    r = _runner(["sink", store, inputs / "b.jsonl", inputs / "small.properties", QUERY, MICRO_BATCH],
                {"ROCKETLAKE_FAULT": point})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    _check_sink(point, store, inputs, before, False)


# ----------------------------------------------------------------------------- racing and stalled writers
def test_topic_expire_and_an_ingest_take_turns(inputs, two_batches, tmp_path):  # noqa: F811
    """A per-topic expiry while an ingest holds the lease is refused (exit 3) and changes nothing;
    an ingest while a per-topic expiry holds it likewise; each finishes afterwards."""
    seed, seed_files, want = two_batches
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    gate = str(tmp_path / "gate")
    e = _runner(["expire", store, "-", _now(inputs), RULES], {"ROCKETLAKE_HOLD": f"between-delta-tables:{gate}"},
                popen=True)
    try:
        _wait_for(gate + ".reached", e)
        before = files_state(store)
        r = _runner(["ingest", store, inputs / "c.jsonl", inputs / "small.properties", "C"])
        assert r.returncode == 3 and "being written by batch" in r.stderr, (r.returncode, r.stderr[-2000:])
        assert files_state(store) == before
    finally:
        open(gate, "w").close()
        _, err = e.communicate(timeout=300)
    assert e.returncode == 0, err[-2000:]
    assert files_state(store) == want and _deep(store, inputs) == []
    gate2 = str(tmp_path / "gate2")
    w = _runner(["ingest", store, inputs / "c.jsonl", inputs / "small.properties", "C"],
                {"ROCKETLAKE_HOLD": f"between-delta-tables:{gate2}"}, popen=True)
    try:
        _wait_for(gate2 + ".reached", w)
        before = files_state(store)
        r = _runner(["expire", store, "-", _now(inputs) + 3600 * 1000, RULES])
        assert r.returncode == 3 and "being written by batch 'C'" in r.stderr, (r.returncode, r.stderr[-2000:])
        assert files_state(store) == before
    finally:
        open(gate2, "w").close()
        _, err = w.communicate(timeout=300)
    assert w.returncode == 0, err[-2000:]
    assert _open(store)[-1] == "C" and _deep(store, inputs) == []


def _expiry_and_ingest(base, store: str) -> tuple:
    """The starters (``support.stall``) of a per-topic expiry of ``store`` and of an ingest of C into it."""
    return (lambda env: _runner(["expire", store, "-", _now(base), RULES], env, popen=True),
            lambda env: _runner(["ingest", store, base / "c.jsonl", base / "small.properties", "C"], env,
                                popen=True))


def test_a_stalled_topic_expire_never_commits(inputs, two_batches, tmp_path):  # noqa: F811
    """A per-topic expiry stopped (SIGSTOP) between its two Delta commits for longer than its
    lease; an ingest takes the stale lease and commits. The expiry resumes: it finds the lease
    gone, exits 3, commits nothing and deletes nothing."""
    seed, seed_files, _ = two_batches
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    with stalled_past_lease(tmp_path, 4, "between-delta-tables", *_expiry_and_ingest(inputs, store),
                            taker_point=None) as stall:
        rc, err = stall.release_taker()
        assert rc == 0, err[-2000:]
        after_ingest = files_state(store)
        rc, err = stall.resume_stalled()
        assert rc == 3, err[-2000:]
        assert "lost the writer lease" in err
    assert _open(store) == ["A", "B", "C"]
    assert files_state(store) == after_ingest
    assert set(seed_files) <= set(after_ingest)          # no file the expiry would remove is gone
    assert _deep(store, inputs) == []


@pytest.mark.skipif(not ALL_FAULTS, reason="stalls: make faults (ROCKETLAKE_FAULTS=all)")
@pytest.mark.parametrize("point", ["after-commit-before-publish", "mid-delete", "after-publish-before-cleanup"])
def test_a_topic_expire_stalled_after_its_commit_commits_nothing_more(inputs, two_batches, tmp_path, point):  # noqa: F811
    """A per-topic expiry stopped (SIGSTOP) after its switch for longer than its lease; an ingest
    takes the stale lease and is held with its batch staged. The expiry resumes: it says its batch
    is committed and what it left, exits 0, commits nothing and leaves the ingest's staged attempt
    alone (it may finish deleting files its committed batch removed: nobody's any more). The
    ingest finished the expiry's deletes before staging its batch, as after a crash, and commits."""
    seed, seed_files, want = two_batches
    expired = set(seed_files) - set(want)
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    with stalled_past_lease(tmp_path, 4, point, *_expiry_and_ingest(inputs, store)) as stall:
        held = files_state(store), _logs_and_staging(store)
        assert any(p.startswith("_rocketlake/staging/C/") for p in held[1]), "C staged nothing"
        assert expired and not expired & set(held[0]), "C did not finish the stalled expiry's deletes first"
        rc, err = stall.resume_stalled()
        assert rc == 0, err[-2000:]
        assert "lost the store's lease after its commit" in err, err[-2000:]
        now = files_state(store)
        assert all(held[0].get(p) == h for p, h in now.items()), "the stalled expiry wrote a store file"
        assert _logs_and_staging(store) == held[1], "the stalled expiry changed the tables or C's attempt"
        rc, err = stall.release_taker()
        assert rc == 0, err[-2000:]
    assert _open(store)[:2] == ["A", "B"] and _open(store)[-1] == "C" and len(_open(store)) == 4
    assert not expired & set(files_state(store)) and _deep(store, inputs) == []
    r = _runner(["expire", store, "-", _now(inputs), RULES])
    assert r.returncode == 0, r.stderr[-2000:]
    assert _deep(store, inputs) == []
