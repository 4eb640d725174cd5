"""A writer stalled past its lease after its batch's commit (in the housekeeping: the manifest
table's compaction or merge, the checkpoints table's merge; in its publish; before its clean-up)
touches the store no more.

Batch B's commit is due to compact and to merge (the seed of tests/e2e/test_crash_compaction.py);
at ``before-manifest-merge`` it does not compact, so it merges the manifest table's files first
(the lease checked right after that point: without that check B's merge goes in, a version
added by a writer that lost its lease).
B's writer is held at a point after its switch and stopped (SIGSTOP) for longer than its lease.
Writer C takes the stale lease (finishing B's publish first) and is held with its own batch staged,
not committed. B's writer then resumes: it adds no table version, leaves C's staged attempt alone,
and ends without an error, saying what it left (its batch was committed before the stall). C is
released and commits. The store holds the seed, B and C once each, every seed batch reads as
before, verify --deep finds nothing.
"""
from __future__ import annotations

import contextlib
import os
import shutil

import pytest

from storelib.format.paths import CHECKPOINTS_DIR, MANIFEST_DIR, STAGING_DIR
from support.stall import stalled_past_lease

from test_crash_compaction import (SEED, _as_of, _compacted, _manifest_merged, _merged, _no_compaction,  # noqa: F401
                                   _small_tables, seed)
from test_crash_sim import _deep, _open, inputs  # noqa: F401
from test_nothing_lost import ingest

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
POINTS = ["before-compaction", "before-manifest-merge", "before-checkpoints-merge", "after-commit-before-publish",
          "mid-apply", "mid-publish", "after-publish-before-cleanup"]


# make test: the stall before the clean-up (where clearing attempts that never committed would take
# the new writer's); every point: make faults
@pytest.mark.parametrize("point", [p if ALL or p == POINTS[-1] else
                                   pytest.param(p, marks=pytest.mark.skip(reason="make faults (ROCKETLAKE_FAULTS=all)"))
                                   for p in POINTS])
def test_a_writer_stalled_after_its_commit_touches_the_store_no_more(inputs, seed, tmp_path, point):  # noqa: F811
    seed_store, _, as_of, _ = seed
    store = str(tmp_path / "store")
    shutil.copytree(seed_store, store)
    merging = point == "before-manifest-merge"           # (B's commit does not compact: it merges the manifest table)
    with _no_compaction() if merging else contextlib.nullcontext(), \
            stalled_past_lease(tmp_path, TTL, point, lambda env: ingest(inputs, store, "b", "B", env, popen=True),
                               lambda env: ingest(inputs, store, "c", "C", env, popen=True)) as stall:
        held = _logs_and_staging(store)
        assert any(p.startswith(f"{STAGING_DIR}/C/") for p in held), "C staged nothing"
        rc, err = stall.resume_stalled()
        assert rc == 0, err[-2000:]
        assert "lost the store's lease after its commit" in err, err[-2000:]
        assert _logs_and_staging(store) == held, "the stalled writer changed the tables or C's attempt"
        rc, err = stall.release_taker()
        assert rc == 0, err[-2000:]
    assert _open(store) == SEED + ["B", "C"]
    assert _as_of(store) == as_of
    assert _merged(store) and (point != "before-compaction" or _compacted(store))
    assert not merging or not (_compacted(store) or _manifest_merged(store))
    assert _deep(store, inputs) == []
