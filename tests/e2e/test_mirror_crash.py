"""A mirror cycle's commit killed at every kill point it passes (a real SIGKILL,
``ROCKETLAKE_FAULT``) and cut by the crash simulator after every durable step (tests/support/crashfs,
as tests/e2e/test_crash_sim.py does for ingest): the broker is the small-roll golden store (RocketMQ
5.3.3's own files) whose safe point moves from its 1,500th record to its end.

After every kill or cut: the mirror opens; before the switch its files are exactly the first
batch's and only that batch is visible, after it the second batch is; verify --deep finds nothing;
the next cycle ends in RocketMQ's store byte for byte (goldenlib.compare) with no staging left.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from support import goldenlib
from conftest import ROOT, golden_set
from support.crashfs.availability import unavailable_reason
from test_crash_sim import ALL_POINTS, TORN, _record, _states
from support.mirrorhelp import first_batch as mirror_first_batch
from test_nothing_lost import files_state

from storelib.format import paths
from storelib.io import storage
from storelib.ops import mirror
from storelib.runtime.faults import POST_COMMIT_POINTS
from storelib.table import manifest
from storelib.verify import driver as verify

pytestmark = pytest.mark.slow

# The points a mirror cycle passes, with how often to let each pass first (a later file).
POINTS = {"after-segment-write": 1, "mid-file-write": 3, "after-files-staged": 0, "before-delta-commit": 0,
          "between-delta-tables": 0, "after-commit-before-publish": 0, "mid-apply": 0, "mid-publish": 4,
          "after-publish-before-cleanup": 0}


@pytest.fixture(scope="module")
def first_batch(tmp_path_factory):
    """(broker, mirror after its first batch): the broker's safe point then moved to its end."""
    broker, store, _ = mirror_first_batch(tmp_path_factory.mktemp("mirror-crash"))
    return broker, store


def _batches(store: str) -> list:
    return [b["batch_id"] for b in manifest.load_snapshot(storage.Store(store)).batches]


def _finish(store: str, broker: str, label) -> None:
    assert verify.verify_store(store, None, deep=False, threads=1).problems == [], label
    out = mirror.mirror_broker(broker, store, quiet=True)
    assert out["status"] == ("nothing-new" if len(_batches(store)) == 2 and out["status"] != "committed"
                             else "committed"), (label, out)
    assert len(_batches(store)) == 2, label
    assert goldenlib.compare(golden_set("small-roll"), store) == [], label
    assert not storage.Store(store).exists(paths.STAGING_DIR), label
    assert verify.verify_store(store, None, deep=True, threads=1).problems == [], label


# make test: a point before the switch, the switch itself, one in the publish; every one with
# ROCKETLAKE_FAULTS=all (make faults).
SAMPLED = ("mid-file-write", "between-delta-tables", "mid-publish")
KILL_POINTS = list(POINTS) if os.environ.get("ROCKETLAKE_FAULTS") == "all" else list(SAMPLED)


def _cycle_killed_at(point: str, broker: str, store: str, marker) -> None:
    """``rocketlake mirror --once`` in a process of its own, SIGKILLed at ``point``."""
    faults = {"ROCKETLAKE_FAULT": point, "ROCKETLAKE_FAULT_SKIP": str(POINTS[point]),
              "ROCKETLAKE_FAULT_MARKER": str(marker)}
    cmd = [sys.executable, "-m", "storelib.cli.main", "mirror", "--from", broker, "--store", store, "--once"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT, **faults},
                       cwd=ROOT, timeout=300)
    assert r.returncode == -9 and marker.read_text().startswith(point), (r.returncode, r.stderr[-2000:])


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_at(first_batch, tmp_path, point):
    broker, seed = first_batch
    store = str(tmp_path / "mirror")
    shutil.copytree(seed, store)
    before, first = files_state(store), _batches(store)
    _cycle_killed_at(point, broker, store, tmp_path / "marker")
    seen = _batches(store)
    if point in POST_COMMIT_POINTS:
        assert len(seen) == 2 and seen[0] == first[0], seen
    else:
        assert seen == first and files_state(store) == before, point
    _finish(store, broker, point)


@pytest.mark.skipif(bool(unavailable_reason()), reason=f"no crash simulator: {unavailable_reason()}")
@pytest.mark.timeout(3600 if ALL_POINTS else 900)     # every distinct cut: 474 s alone, over 900 s beside make crash's others
def test_power_cuts_during_a_mirror_cycle(first_batch, tmp_path):
    broker, seed = first_batch
    fs, out = _record(tmp_path, seed, ["mirror", "{store}", broker])
    assert out["status"] == "committed"
    before, first = files_state(seed), _batches(seed)
    n = 0
    for label, k, returned, state in _states(fs, tmp_path, 6):
        store = os.path.join(state, "store")
        seen = _batches(store)
        assert seen in (first, first + [out["batch_id"]]), (label, seen)
        if k >= returned:
            assert len(seen) == 2, (label, "the batch returned, but is not visible")
        if seen == first:
            assert files_state(store) == before, (label, "uncommitted bytes reached a store file")
        _finish(store, broker, label)
        shutil.rmtree(state)
        n += 1
    assert n >= 6 + TORN
