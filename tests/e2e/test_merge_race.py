"""The manifest table's merge (storelib/table/ckmerge.py) racing another writer's commit.

Batch B's commit is due a merge of the manifest table's files (the seed of
tests/e2e/test_crash_compaction.py, B not compacting). B's writer is held at ``mid-manifest-merge``
(its lease checked, the merged data file in the table, the log entry naming it not yet written) and
stopped there (SIGSTOP) past its lease: the window between a lease check and the write after it,
which no lease closes. Another writer takes the store over (finishing B's publish first), an ingest
of C or a per-topic expiry, and is held just before its Delta commit (``before-delta-commit``,
planned on B's version). Both go for the same next version of the manifest table, and only its
conditional commit decides:

* ``other`` first: it commits and is held before its clean-up; B resumes, its merge's log entry is
  refused (the version is taken: the commit's data file is taken out again), B adds no table
  version, leaves the tables and the staging as the other left them, and ends without an error
  (its batch was committed before the stall), saying it lost the lease after its commit;
* ``other-ended``: the same, the other writer ended first: its clean-up cleared the scratch log
  B's merge was to commit from, so B's merge fails before its commit (its merged data file stays
  in the table, named by no version: what a vacuum removes), with the same outcome;
* ``merge`` first: B resumes and its merge goes in (``dataChange = false``: the same rows); the
  other's commit is then refused: it exits 3, changes no store file and no table, and leaves no
  staging; its rerun commits.

A log entry written over the winner's instead of refused fails the ``other`` and ``merge`` cases.
Either way no row is lost or written twice (every row of the seed and B as before the race, each
row of the store once), every batch reads as it did (``--as-of-batch``: its files and its checkpoint
row), verify --deep finds nothing. ``make faults`` (``ROCKETLAKE_FAULTS=all``) only: processes.
"""
from __future__ import annotations

import collections
import json
import os
import shutil

import pytest

from storelib.format.paths import MANIFEST_DIR, STAGING_DIR
from storelib.io import storage
from storelib.table import ckmerge, manifest
from support.stall import stalled_past_lease, wait_for

from test_crash_compaction import SEED, _compacted, _manifest_merged, _no_compaction, _small_tables, seed  # noqa: F401
from test_crash_ops import RULES, _now
from test_crash_sim import _deep, _open, inputs  # noqa: F401
from test_housekeeping_stall import _logs_and_staging
from test_nothing_lost import files_state, run

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("ROCKETLAKE_FAULTS") != "all",
                                 reason="races of processes: make faults (ROCKETLAKE_FAULTS=all)")]
TTL = 4


def _other(inputs, store: str, other: str, cleanup_gate: str):  # noqa: F811
    """The starter (``support.stall``) of the writer racing B, held also before its clean-up
    (``cleanup_gate``: whose end would clear what B's merge has staged)."""
    if other == "ingest":
        args = ["ingest", store, inputs / "c.jsonl", inputs / "small.properties", "C"]
    else:
        args = ["expire", store, "-", _now(inputs), RULES]

    def start(env: dict):
        hold = env.get("ROCKETLAKE_HOLD")
        env = dict(env, ROCKETLAKE_HOLD=f"{hold},after-publish-before-cleanup:{cleanup_gate}") if hold else env
        return run(args, env, popen=True)
    return start


def _rows(store: str) -> tuple:
    """Every manifest row and every checkpoint row of the tables' latest versions, as text."""
    tables = manifest.read_tables(storage.Store(store))
    return ([json.dumps(dict(r), sort_keys=True, default=str) for r in tables.rows],
            [json.dumps(dict(b), sort_keys=True, default=str) for b in tables.batches])


def _reads(store: str, batches: list) -> dict:
    """Each of ``batches`` as ``--as-of-batch`` reads it: its files and its checkpoint row."""
    s = storage.Store(store)
    out = {}
    for b in batches:
        snap = manifest.load_snapshot(s, b)
        out[b] = (sorted((p, r["checksum"], r["valid_bytes"]) for p, r in snap.files.items()), dict(snap.batch))
    return out


def _unnamed(store: str) -> list:
    """The manifest table's data files no version of it names."""
    dt = manifest.open_table(storage.Store(store), MANIFEST_DIR)
    named = set(ckmerge.files_of(dt).column("path").to_pylist())
    dt = None
    return [n for n in os.listdir(os.path.join(store, MANIFEST_DIR)) if n.endswith(".parquet") and n not in named]


def _once(rows: list) -> list:
    """The rows of ``rows`` (``_rows``) that stand more than once, a commit's time aside."""
    seen = collections.Counter(json.dumps({k: v for k, v in json.loads(r).items() if k != "committed_at"},
                                          sort_keys=True) for r in rows)
    return [r for r, n in seen.items() if n > 1]


def _stall_b(inputs, store: str):  # noqa: F811
    return lambda env: run(["ingest", store, inputs / "b.jsonl", inputs / "small.properties", "B"], env, popen=True)


@pytest.mark.parametrize("first", ["other", "other-ended", "merge"])
@pytest.mark.parametrize("other", ["ingest", "expire"])
def test_the_manifest_merge_racing_another_commit(inputs, seed, tmp_path, other, first):  # noqa: F811
    store = str(tmp_path / "store")
    shutil.copytree(seed[0], store)
    cleanup = str(tmp_path / "gate-cleanup")
    start_other = _other(inputs, store, other, cleanup)
    with _no_compaction(), stalled_past_lease(tmp_path, TTL, "mid-manifest-merge", _stall_b(inputs, store), start_other,
                                              taker_point="before-delta-commit") as stall:
        assert _open(store) == SEED + ["B"]               # (B's publish finished by the other writer)
        before, reads = _rows(store), _reads(store, SEED + ["B"])
        if first != "merge":
            if first == "other-ended":                    # (its clean-up cleared what B's merge staged)
                open(cleanup, "w").close()
                rc, err = stall.release_taker()
                assert rc == 0, err[-2000:]
            else:                                         # (committed, before its clean-up)
                open(stall.taker_gate, "w").close()
                wait_for(cleanup + ".reached", stall.taker)
            tables = _logs_and_staging(store)
            rc, err = stall.resume_stalled()
            assert rc == 0, err[-2000:]
            assert "lost the store's lease after its commit" in err, err[-2000:]
            assert _logs_and_staging(store) == tables, "B's merge went in after the other writer's commit"
            assert len(_unnamed(store)) == (first == "other-ended"), _unnamed(store)
            open(cleanup, "w").close()
            rc, err = stall.release_taker()
            assert rc == 0, err[-2000:]
        else:
            rc, err = stall.resume_stalled()
            assert rc == 0, err[-2000:]
            assert _manifest_merged(store), "B's merge did not go in"
            state, tables = files_state(store), _logs_and_staging(store)
            open(cleanup, "w").close()
            rc, err = stall.release_taker()
            assert rc == 3 and "another writer committed" in err, (rc, err[-2000:])
            assert files_state(store) == state and sorted(_rows(store)[0]) == sorted(before[0])
            assert {p: n for p, n in _logs_and_staging(store).items() if not p.startswith(STAGING_DIR)} == \
                {p: n for p, n in tables.items() if not p.startswith(STAGING_DIR)}
            assert not any(p.startswith(STAGING_DIR) for p in _logs_and_staging(store)), "the loser left its staging"
            r = start_other({})
            _, err = r.communicate(timeout=300)
            assert r.returncode == 0, err[-2000:]
    after = _rows(store)
    assert not collections.Counter(before[0]) - collections.Counter(after[0]), "a row of the seed or B is gone"
    assert after[1][:len(before[1])] == before[1]
    assert len(after[1]) == len(before[1]) + 1 and _once(after[0]) == [] and _once(after[1]) == []
    assert _open(store)[:-1] == SEED + ["B"] and not _compacted(store)
    assert _reads(store, SEED + ["B"]) == reads
    assert _deep(store, inputs) == []
