"""The mirror's commit against every other commit path, and stalled past its lease (issue 38).

The broker is the small-roll golden store (RocketMQ 5.3.3's own files); the mirror holds its first
1,500 records (one batch) and the broker's safe point then moves to its end, so the next cycle
commits a second batch. Each writer runs in a process of its own (tests/support/local_ingest.py)
and is held at a kill point by ``ROCKETLAKE_HOLD``.

* Stalled: a cycle stopped (SIGSTOP) past its lease (``ROCKETLAKE_LEASE_TTL=4``) while another
  cycle takes the lease over and commits; on SIGCONT the stalled cycle exits 3 ("lost the writer
  lease"), commits nothing and changes no store file.
* Leases held: while the mirror holds the lease, an ingest, a store-wide expiry, a per-topic expiry
  and a repair are each refused (exit 3, nothing changed), and the mirror is refused while each of
  them holds it.
* Leases off (``ROCKETLAKE_LEASE_TTL=0``: only the conditional Delta commits decide): the mirror
  and another writer both staged and held just before their Delta commit; the one released first
  commits, the other exits 3 and leaves no trace (no file changed, no staging). After the mirror
  lost, its next cycle commits (a repair or an expiry) or, after an ingest appended records the
  broker never wrote, stops with exit 3 naming that batch.

* ``mirror --every``: a SIGTERM while it waits for its next cycle ends it at once (exit 143).

``make test``: the stall between the two Delta commits, the race with an ingest (the mirror
wins) and the SIGTERM; ``ROCKETLAKE_FAULTS=all`` (``make faults``) or ``ROCKETLAKE_LONG=1`` every case.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from support import goldenlib
from conftest import ROOT, golden_set
from support.mirrorhelp import first_batch as mirror_first_batch
from test_nothing_lost import _wait_for, files_state, release_in_turn, write_inputs

from storelib.format import paths
from storelib.io import storage
from storelib.table import manifest
from storelib.verify import driver as verify

pytestmark = pytest.mark.slow

RUNNER = os.path.join(os.path.dirname(goldenlib.__file__), "local_ingest.py")
FULL = os.environ.get("ROCKETLAKE_FAULTS") == "all" or bool(os.environ.get("ROCKETLAKE_LONG"))
OTHERS = ("ingest", "expire", "topic-expire", "repair")
TOPIC_RULES = "audit_log=1,metrics-raw=1"


@pytest.fixture(scope="module")
def first_batch(tmp_path_factory):
    """(broker, mirror after its first batch, inputs, now): the broker's safe point then at its end."""
    base = tmp_path_factory.mktemp("mirror-race")
    broker, store, last_ts = mirror_first_batch(base)
    (base / "inputs").mkdir()
    return broker, store, write_inputs(base / "inputs"), last_ts + 2 * 3600 * 1000


def _run(args: list, env: dict, popen: bool = False, hold: str | None = None):
    e = dict(os.environ, **env, **({"ROCKETLAKE_HOLD": hold} if hold else {}))
    cmd = [sys.executable, RUNNER] + [str(a) for a in args]
    if popen:
        return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)


def _args(who: str, store: str, broker: str, inputs, now: int) -> list:
    return {"mirror": ["mirror", store, broker],
            "ingest": ["ingest", store, inputs / "c.jsonl", inputs / "small.properties", "C"],
            "expire": ["expire", store, "1", now],
            "topic-expire": ["expire", store, "-", now, TOPIC_RULES],
            "repair": ["repair", store]}[who]


def _store(first_batch, tmp_path, damaged: bool) -> str:
    """A copy of the one-batch mirror; ``damaged``: its oldest index file gone (what repair
    restores; a file the mirror's next cycle does not continue)."""
    store = shutil.copytree(first_batch[1], str(tmp_path / "store"))
    if damaged:
        os.remove(os.path.join(store, "index", sorted(os.listdir(os.path.join(store, "index")))[0]))
    return store


def _ops(store: str) -> list:
    return [b["operation"] for b in manifest.load_snapshot(storage.Store(store)).batches]


def _no_staging(store: str) -> None:
    st = storage.Store(store)
    assert not st.exists(paths.STAGING_DIR) or not st.list_files(paths.STAGING_DIR)


def _stop(*procs) -> None:
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()


@pytest.mark.parametrize("point", ["between-delta-tables", "after-files-staged"] if FULL else ["between-delta-tables"])
def test_a_stalled_mirror_never_commits(first_batch, tmp_path, point):
    """A cycle stopped at ``point`` past its lease; a second cycle takes the lease over and commits
    the same records; the stalled one resumes, exits 3 and changes nothing; the mirror is
    RocketMQ's store byte for byte."""
    broker = first_batch[0]
    store = _store(first_batch, tmp_path, False)
    env = {"ROCKETLAKE_LEASE_TTL": "4"}
    gate = str(tmp_path / "gate")
    stalled = _run(["mirror", store, broker], env, popen=True, hold=f"{point}:{gate}")
    try:
        _wait_for(gate + ".reached", stalled)
        os.kill(stalled.pid, signal.SIGSTOP)
        open(gate, "w").close()
        time.sleep(4.5)                                   # past the stalled cycle's lease
        r = _run(["mirror", store, broker], env)
        assert r.returncode == 0 and json.loads(r.stdout)["status"] == "committed", r.stderr[-2000:]
        after = files_state(store)
        os.kill(stalled.pid, signal.SIGCONT)
        _, err = stalled.communicate(timeout=300)
        assert stalled.returncode == 3 and "lost the writer lease" in err, (stalled.returncode, err[-2000:])
    finally:
        _stop(stalled)
    assert files_state(store) == after and _ops(store) == ["mirror", "mirror"]
    assert goldenlib.compare(golden_set("small-roll"), store) == []
    assert verify.verify_store(store, None, deep=True, threads=1).problems == []
    _no_staging(store)


def test_a_cycle_longer_than_the_lease_keeps_it_and_commits(first_batch, tmp_path):
    """A running cycle held before its first Delta commit and again between the two, each time for
    more than twice ``ROCKETLAKE_LEASE_TTL=2``: its keeper thread renews the lease all along, so a
    second cycle started meanwhile is refused (exit 3, nothing changed) and the long one commits."""
    broker = first_batch[0]
    store = _store(first_batch, tmp_path, False)
    env = {"ROCKETLAKE_LEASE_TTL": "2"}
    gates = [str(tmp_path / "staged"), str(tmp_path / "between")]
    long = _run(["mirror", store, broker], env, popen=True,
                hold=f"after-files-staged:{gates[0]},between-delta-tables:{gates[1]}")
    try:
        for gate in gates:
            _wait_for(gate + ".reached", long)
            before = files_state(store)
            time.sleep(5)                                 # 2.5 x the lease's time to live
            renewed = json.loads(open(os.path.join(store, paths.LEASE_PATH)).read())["renewed_ms"]
            assert time.time() * 1000 - renewed < 2000, "the lease was not renewed while the cycle ran"
            r = _run(["mirror", store, broker], env)
            assert r.returncode == 3 and "being written" in r.stderr, (r.returncode, r.stderr[-2000:])
            assert files_state(store) == before
            open(gate, "w").close()
        out, err = long.communicate(timeout=300)
        assert long.returncode == 0 and json.loads(out)["status"] == "committed", (long.returncode, err[-2000:])
    finally:
        _stop(long)
    assert _ops(store) == ["mirror", "mirror"]
    assert goldenlib.compare(golden_set("small-roll"), store) == []
    _no_staging(store)


@pytest.mark.skipif(not FULL, reason="make faults / make long (ROCKETLAKE_FAULTS=all or ROCKETLAKE_LONG=1)")
@pytest.mark.parametrize("other", OTHERS)
@pytest.mark.parametrize("holder", ["mirror", "other"])
def test_the_lease_holder_keeps_the_store(first_batch, tmp_path, other, holder):
    """While one of the mirror and ``other`` holds the lease (between its Delta commits), the
    other is refused with exit 3 and changes nothing; the holder then finishes."""
    broker, _, inputs, now = first_batch
    store = _store(first_batch, tmp_path, other == "repair")
    first, second = ("mirror", other) if holder == "mirror" else (other, "mirror")
    gate = str(tmp_path / "gate")
    p = _run(_args(first, store, broker, inputs, now), {}, popen=True, hold=f"between-delta-tables:{gate}")
    try:
        _wait_for(gate + ".reached", p)
        before = files_state(store)
        r = _run(_args(second, store, broker, inputs, now), {})
        assert r.returncode == 3 and "being written by" in r.stderr, (r.returncode, r.stderr[-2000:])
        assert files_state(store) == before
    finally:
        open(gate, "w").close()
        _, err = p.communicate(timeout=300)
        _stop(p)
    assert p.returncode == 0, err[-2000:]
    assert _ops(store)[-1] == ("mirror" if first == "mirror" else other.split("-")[-1])
    _no_staging(store)


RACES = [(o, w) for o in OTHERS for w in ("mirror", "other")] if FULL else [("ingest", "mirror")]


@pytest.mark.parametrize("other,winner", RACES)
def test_mirror_racing_another_writer(first_batch, tmp_path, other, winner):
    """Leases off: the mirror and ``other`` both stage and wait before their Delta commit; the one
    released first commits; the other then exits 3 (its conditional commit lost) and changes no
    file, leaving no staging; verify --deep is clean; the mirror then goes on where it can."""
    broker, _, inputs, now = first_batch
    store = _store(first_batch, tmp_path, other == "repair")
    env = {"ROCKETLAKE_LEASE_TTL": "0"}
    gates = {w: str(tmp_path / f"gate-{w}") for w in ("mirror", "other")}
    procs = {w: _run(_args(other if w == "other" else "mirror", store, broker, inputs, now), env, popen=True,
                     hold=f"before-delta-commit:{gates[w]}") for w in ("mirror", "other")}
    state, ops = release_in_turn(procs, gates, winner, lambda: (files_state(store), _ops(store)))
    assert files_state(store) == state and _ops(store) == ops and len(ops) == 2
    _no_staging(store)
    damaged_index = other == "repair" and winner == "mirror"
    problems = verify.verify_store(store, None, deep=True, threads=1).problems
    assert problems == [] if not damaged_index else all("index/" in p for p in problems), problems[:5]
    r = _run(["mirror", store, broker], {})
    if other == "ingest" and winner == "other":           # records the broker never wrote: no going on
        assert r.returncode == 3 and "batch 'C' (ingest)" in r.stderr and "new mirror" in r.stderr, r.stderr[-2000:]
        assert files_state(store) == state
    else:
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout)["status"] == ("nothing-new" if winner == "mirror" else "committed")
        assert _ops(store)[-1] == "mirror"


def test_sigterm_between_cycles_stops_the_mirror(first_batch, tmp_path):
    """``mirror --every 30``: a SIGTERM while it waits for its next cycle (after a committed one)
    ends it at once (exit 143), not at some later cycle, and the committed batch stays."""
    broker = first_batch[0]
    store = _store(first_batch, tmp_path, False)
    p = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "mirror", "--from", broker, "--store", store,
                          "--every", "30", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        line = p.stdout.readline()                        # the committed cycle: now it waits 30 s
        assert '"status": "committed"' in line, (line, p.stderr.read() if p.poll() is not None else "")
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGTERM)
        p.wait(timeout=15)
    finally:
        _stop(p)
    assert p.returncode == 143, (p.returncode, p.stderr.read()[-2000:])
    assert _ops(store) == ["mirror", "mirror"]
