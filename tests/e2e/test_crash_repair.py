"""repair under power cuts, kills, a stall past its lease and a racing writer (issue 35).

Three stores, each damaged the same way (a queue file gone, an index entry flipped, the checkpoint
zeroed): small-roll's messages ingested as batches A and B (a rocketlake store), small-roll adopted
in place (an adopted broker store) and small-roll's broker directory itself (no manifest). An
uninterrupted ``repair --apply`` gives RocketMQ's small-roll store byte for byte on each.

* Power cuts (`make test`: the rocketlake and the adopted store at a few points; `make crash`: all
  three at every point; the crash simulator, tests/support/crashfs; test_crash_sim's recording and choice of
  points): after every cut the store opens; until the repair's switch its files are exactly the
  damaged ones and its batches the earlier ones; once the run returned the repair batch is visible;
  a committed repair reads clean (verify --deep, its files read through the staging while the
  publish is unfinished); a broker directory's files are each the old or the new version. The rerun
  gives RocketMQ's bytes, verify finds nothing, no staging or temporary file is left.
* Kills (SIGKILL at each fault point repair passes, storelib.runtime.faults): the same checks; `make
  test` kills at ``KILL_SAMPLED``, ``ROCKETLAKE_FAULTS=all`` (`make faults`) at every point.
* A repair stopped (SIGSTOP) after staging its files for longer than its lease while an ingest
  commits: it exits 3, commits nothing, and every file the ingest committed is intact.
* A repair and an ingest racing with leases off (`make test`: the ingest released first; `make long`:
  either way) (``ROCKETLAKE_LEASE_TTL=0``), both held just before
  their Delta commit and released together: exactly one commits, the other exits 3 and leaves no
  trace; a rerun of the loser converges.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from support import goldenlib
from support import repairstores
from conftest import golden_set
from support.crashfs.availability import unavailable_reason
from support.opshelp import small_config
from storelib.format import paths
from storelib.io import storage
from storelib.ops import repair as repair_op
from storelib.table import manifest
from storelib.verify import driver as verify
from test_crash_sim import ALL_POINTS, TORN, _record, _states
from test_nothing_lost import _wait_for, release_in_turn

pytestmark = pytest.mark.slow

RUNNER = os.path.join(os.path.dirname(repairstores.__file__), "local_ingest.py")
CUT = 1513
KILL_POINTS_ROCKETLAKE = ("after-lease", "after-files-staged", "before-delta-commit", "between-delta-tables",
                          "after-commit-before-publish", "mid-publish", "after-publish-before-cleanup")
KILL_POINTS_BROKER = ("mid-publish", "after-publish-before-cleanup")
KILL_SAMPLED = (("ingested", "between-delta-tables"), ("adopted", "after-commit-before-publish"),
                ("ingested", "mid-publish"), ("broker", "mid-publish"))
ALL_KILLS = os.environ.get("ROCKETLAKE_FAULTS") == "all"
LONG = ALL_POINTS or bool(os.environ.get("ROCKETLAKE_LONG"))
# `make test`: the rocketlake and the adopted store at a few points; `make crash` / `make long`: all three at every point
CUT_CASES = [("ingested", 8), ("adopted", 5), ("broker", 4)] if LONG else [("ingested", 4), ("adopted", 2)]
no_crashfs = pytest.mark.skipif(bool(unavailable_reason()), reason=f"no crash simulator: {unavailable_reason()}")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return repairstores.parts(tmp_path_factory.mktemp("crash-repair-inputs"), (CUT,))


def _damage(store: str) -> None:
    cq = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(store, "consumequeue")) for f in fs)
    os.remove(cq[3])
    idx = sorted(os.listdir(os.path.join(store, "index")))
    with open(os.path.join(store, "index", idx[2]), "r+b") as fh:
        fh.seek(40 + 64 * 4 + 20 * 3 + 6)
        fh.write(b"\x5a")
    with open(os.path.join(store, "checkpoint"), "r+b") as fh:
        fh.write(bytes(24))


@pytest.fixture(scope="module")
def seeds(inputs, restored_golden, tmp_path_factory):
    """kind -> a damaged store of that kind (copied by each test)."""
    base = tmp_path_factory.mktemp("crash-repair-seeds")
    ingested = str(base / "ingested")
    repairstores.ingest(ingested, inputs, "p0", "A")
    repairstores.ingest(ingested, inputs, "p1", "B")
    adopted = repairstores.adopted(restored_golden("small-roll"), str(base / "adopted"))
    broker = str(base / "broker")
    shutil.copytree(restored_golden("small-roll"), broker)
    for junk in ("abort", "abort.bak", "lock"):
        if os.path.exists(os.path.join(broker, junk)):
            os.remove(os.path.join(broker, junk))
    out = {"ingested": ingested, "adopted": adopted, "broker": broker}
    for store in out.values():
        _damage(store)
    return out


def _batches(store: str) -> list:
    return [b["batch_id"] for b in manifest.load_snapshot(storage.Store(store)).batches]


def _deep(store: str) -> list:
    return [str(p) for p in verify.verify_store(store, small_config(), deep=True, threads=1).problems]


def _rerun(kind: str, store: str, label) -> None:
    """The rerun ends in RocketMQ's store, verify clean, nothing of repair's own left behind."""
    repair_op.repair(store, small_config() if kind == "broker" else None, apply=True, threads=1, quiet=True)
    assert goldenlib.compare(golden_set("small-roll"), store) == [], label
    assert _deep(store) == [], label
    st = storage.Store(store)
    assert not st.exists(paths.STAGING_DIR) and not st.exists(paths.TMP_DIR), label
    if kind == "broker":
        assert not st.exists(paths.META_DIR), label


def _args(kind: str, inputs) -> list:
    return ["repair", "{store}"] + ([os.path.join(inputs, "small.properties")] if kind == "broker" else [])


@no_crashfs
@pytest.mark.parametrize("kind,most", CUT_CASES)
def test_power_cuts_during_repair(kind, most, inputs, seeds, tmp_path):
    seed = seeds[kind]
    before = repairstores.files_state(seed)
    ref = shutil.copytree(seed, str(tmp_path / "ref"))
    repair_op.repair(ref, small_config() if kind == "broker" else None, apply=True, quiet=True)
    after = repairstores.files_state(ref)
    batches = _batches(seed) if kind != "broker" else None
    fs, out = _record(tmp_path, seed, _args(kind, inputs))
    assert len(out["replaced"]) == 3, out
    n = 0
    for label, k, returned, state in _states(fs, tmp_path, most):
        store = os.path.join(state, "store")
        files = repairstores.files_state(store)
        if kind == "broker":
            assert all(files.get(p) in (before.get(p), after.get(p)) for p in set(before) | set(after)), label
        else:
            seen = _batches(store)
            assert seen[:-1] == batches or seen == batches, (label, seen)
            if k >= returned:
                assert len(seen) == len(batches) + 1, (label, "the repair returned, but its batch is not visible")
            if seen == batches:
                assert files == before, (label, "a file changed before the repair committed")
            else:
                assert _deep(store) == [], label
        _rerun(kind, store, label)
        shutil.rmtree(state)
        n += 1
    print(f"repair power cuts, {kind} store: {n} states ({len(fs.cut_points(distinct=True))} distinct points)")
    assert n >= min(most, 3) + TORN or ALL_POINTS


def _kill_cases() -> list:
    if not ALL_KILLS:
        return list(KILL_SAMPLED)
    return [(k, p) for k in ("ingested", "adopted") for p in KILL_POINTS_ROCKETLAKE] + \
        [("broker", p) for p in KILL_POINTS_BROKER]


@pytest.mark.parametrize("kind,point", _kill_cases())
def test_kill_at_each_fault_point_then_rerun(kind, point, inputs, seeds, tmp_path):
    store = shutil.copytree(seeds[kind], str(tmp_path / "store"))
    before = repairstores.files_state(store)
    batches = _batches(store) if kind != "broker" else None
    args = [str(a).replace("{store}", store) for a in _args(kind, inputs)]
    r = subprocess.run([sys.executable, RUNNER] + args, env=dict(os.environ, ROCKETLAKE_FAULT=point),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, (point, r.returncode, r.stderr[-2000:])
    if kind != "broker":
        seen = _batches(store)
        committed = point in ("after-commit-before-publish", "mid-publish", "after-publish-before-cleanup")
        assert len(seen) == len(batches) + committed, (point, seen)
        if not committed:
            assert repairstores.files_state(store) == before, point
        else:
            assert _deep(store) == [], point
    else:
        assert not [p for p in verify.verify_store(store, small_config(), deep=True, threads=1).problems
                    if "repair" in str(p) or paths.META_DIR in str(p)]
    _rerun(kind, store, point)


@pytest.fixture(scope="module")
def partial(inputs, tmp_path_factory):
    """A store of batch A with a file gone that batch B does not continue (a full index file)."""
    store = str(tmp_path_factory.mktemp("crash-repair-partial") / "store")
    repairstores.ingest(store, inputs, "p0", "A")
    idx = sorted(os.listdir(os.path.join(store, "index")))
    os.remove(os.path.join(store, "index", idx[0]))
    return store


def test_a_repair_stalled_past_its_lease_changes_nothing(inputs, partial, tmp_path):
    """Repair stops (SIGSTOP) with its files staged, past its lease; B is ingested and commits;
    on SIGCONT the repair exits 3 and commits nothing, B's files are intact; a rerun repairs."""
    store = shutil.copytree(partial, str(tmp_path / "store"))
    env = dict(os.environ, ROCKETLAKE_LEASE_TTL="4")
    gate = str(tmp_path / "gate")
    w = subprocess.Popen([sys.executable, RUNNER, "repair", store],
                         env=dict(env, ROCKETLAKE_HOLD=f"after-files-staged:{gate}"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(gate + ".reached", w)
        os.kill(w.pid, signal.SIGSTOP)
        open(gate, "w").close()
        time.sleep(4.5)                                  # past the repair's lease
        r = subprocess.run([sys.executable, RUNNER, "ingest", store, os.path.join(inputs, "p1.jsonl"),
                            os.path.join(inputs, "small.properties"), "B"], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        committed = {p: repairstores.files_state(store).get(p) for p in repairstores.files_state(store)}
        os.kill(w.pid, signal.SIGCONT)
        _, err = w.communicate(timeout=300)
        assert w.returncode == 3, err[-2000:]
        assert "lost the writer lease" in err or "another writer committed" in err
    finally:
        if w.poll() is None:
            os.kill(w.pid, signal.SIGCONT)
            w.kill()
            w.wait()
    assert _batches(store) == ["A", "B"]
    assert repairstores.files_state(store) == committed
    problems = _deep(store)
    assert problems and all(p.startswith("index/") for p in problems), problems   # only the file still missing
    _rerun("ingested", store, "after the stall")


@pytest.mark.parametrize("winner", ["repair", "ingest"] if LONG else ["ingest"])
def test_repair_racing_an_ingest(inputs, partial, tmp_path, winner):
    """Leases off: both pass the lease, stage, and wait before their Delta commit; the one
    released first commits, the other must then lose the conditional commit (exit 3) without a
    trace; its rerun converges to RocketMQ's store."""
    store = shutil.copytree(partial, str(tmp_path / "store"))
    env = dict(os.environ, ROCKETLAKE_LEASE_TTL="0")
    gates = {w: str(tmp_path / f"gate-{w}") for w in ("repair", "ingest")}
    procs = {
        "repair": subprocess.Popen([sys.executable, RUNNER, "repair", store],
                                   env=dict(env, ROCKETLAKE_HOLD=f"before-delta-commit:{gates['repair']}"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        "ingest": subprocess.Popen([sys.executable, RUNNER, "ingest", store, os.path.join(inputs, "p1.jsonl"),
                                    os.path.join(inputs, "small.properties"), "B"],
                                   env=dict(env, ROCKETLAKE_HOLD=f"before-delta-commit:{gates['ingest']}"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)}
    loser = "ingest" if winner == "repair" else "repair"
    state = release_in_turn(procs, gates, winner, lambda: repairstores.files_state(store))
    assert repairstores.files_state(store) == state             # the loser changed no store file
    assert len(_batches(store)) == 2
    assert not storage.Store(store).exists(paths.STAGING_DIR)
    if loser == "ingest":
        repairstores.ingest(store, inputs, "p1", "B")
    _rerun("ingested", store, f"{loser} lost")
