"""A writer stalled past its lease after its batch's commit (in the housekeeping: the manifest
table's compaction, the checkpoints table's merge; in its publish; before its clean-up) touches the
store no more.

Batch B's commit is due to compact and to merge (the seed of tests/e2e/test_crash_compaction.py).
B's writer is held at a point after its switch and stopped (SIGSTOP) for longer than its lease.
Writer C takes the stale lease (finishing B's publish first) and is held with its own batch staged,
not committed. B's writer then resumes: it adds no table version, leaves C's staged attempt alone,
and ends without an error, saying what it left (its batch was committed before the stall). C is
released and commits. The store holds the seed, B and C once each, every seed batch reads as
before, verify --deep finds nothing.
"""
from __future__ import annotations

import os
import shutil
import signal
import time

import pytest

from storelib.format.paths import CHECKPOINTS_DIR, MANIFEST_DIR, STAGING_DIR

from test_crash_compaction import SEED, _as_of, _compacted, _merged, _small_tables, seed  # noqa: F401
from test_crash_sim import _deep, _open, inputs  # noqa: F401
from test_nothing_lost import _wait_for, ingest

pytestmark = [pytest.mark.slow]
TTL = 4


def _files(store: str, *rels: str) -> dict:
    """(path, size) of every file under ``rels`` of ``store``."""
    out = {}
    for rel in rels:
        for root, _, names in os.walk(os.path.join(store, rel)):
            for n in names:
                p = os.path.join(root, n)
                out[os.path.relpath(p, store)] = os.path.getsize(p)
    return out


def _logs_and_staging(store: str) -> dict:
    return _files(store, f"{MANIFEST_DIR}/_delta_log", f"{CHECKPOINTS_DIR}/_delta_log", STAGING_DIR)


ALL = os.environ.get("ROCKETLAKE_FAULTS") == "all"
POINTS = ["before-compaction", "before-checkpoints-merge", "after-commit-before-publish", "mid-apply", "mid-publish",
          "after-publish-before-cleanup"]


# make test: the stall before the clean-up (where clearing attempts that never committed would take
# the new writer's); every point: make faults
@pytest.mark.parametrize("point", [p if ALL or p == POINTS[-1] else
                                   pytest.param(p, marks=pytest.mark.skip(reason="make faults (ROCKETLAKE_FAULTS=all)"))
                                   for p in POINTS])
def test_a_writer_stalled_after_its_commit_touches_the_store_no_more(inputs, seed, tmp_path, point):  # noqa: F811
    seed_store, _, as_of, _ = seed
    store = str(tmp_path / "store")
    shutil.copytree(seed_store, store)
    env = {"ROCKETLAKE_LEASE_TTL": str(TTL)}
    gate_b, gate_c = str(tmp_path / "gate-b"), str(tmp_path / "gate-c")
    b = ingest(inputs, store, "b", "B", dict(env, ROCKETLAKE_HOLD=f"{point}:{gate_b}"), popen=True)
    c = None
    try:
        _wait_for(gate_b + ".reached", b)
        os.kill(b.pid, signal.SIGSTOP)
        open(gate_b, "w").close()
        time.sleep(TTL + 0.5)                              # past B's lease
        c = ingest(inputs, store, "c", "C", dict(env, ROCKETLAKE_HOLD=f"after-files-staged:{gate_c}"), popen=True)
        _wait_for(gate_c + ".reached", c)
        held = _logs_and_staging(store)
        assert any(p.startswith(f"{STAGING_DIR}/C/") for p in held), "C staged nothing"
        os.kill(b.pid, signal.SIGCONT)
        _, err = b.communicate(timeout=300)
        assert b.returncode == 0, err[-2000:]
        assert "lost the store's lease after its commit" in err, err[-2000:]
        assert _logs_and_staging(store) == held, "the stalled writer changed the tables or C's attempt"
        open(gate_c, "w").close()
        _, err = c.communicate(timeout=300)
        assert c.returncode == 0, err[-2000:]
    finally:
        for p in (b, c):
            if p is not None and p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
    assert _open(store) == SEED + ["B", "C"]
    assert _as_of(store) == as_of
    assert _merged(store) and (point != "before-compaction" or _compacted(store))
    assert _deep(store, inputs) == []
