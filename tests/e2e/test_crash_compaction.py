"""The manifest table's compaction (storelib/table/manifest.py) and the checkpoints table's merge
(storelib/table/ckmerge.py) under kill points and power cuts.

The seed: small-roll's first part cut into eight batches written as a version before compaction
wrote them (full queue maps in the checkpoint rows, no manifest version recorded, never
compacted), so the next batch B, written by this version, commits and then compacts the table
(its rows then outnumber twice the live ones). Killed at each ``COMPACT_POINTS`` point of B's
commit (``make faults``: ``ROCKETLAKE_FAULTS=all``), and cut at the durable steps of B's commit
from its switch on, the compaction's among them, on the crash simulator (tests/support/crashfs;
``make test``: three; ``make crash``, ``CRASH_POINTS=0``: every distinct one):

* the store opens, every seed batch reads as it did (``--as-of-batch``), B is visible once it
  was committed, nothing of it before (the store's files as the seed's until its switch);
* verify --deep finds nothing;
* the rerun ends in RocketMQ's own bytes (the golden small-roll store); after a kill, the next
  batch's commit compacts the table.

B's commit also merges the checkpoints table's files (the seed's eight, ``MERGE_MIN_FILES`` here):
killed at each ``MERGE_POINTS`` point (``make faults``), and cut inside the merge (its merged data
file in the table, no version naming it yet) besides the cuts above; every seed batch reads as it
did, whole (``--as-of-batch``, its queue offsets included) and in a writer's lean read.

And B not compacting (its rows under ``COMPACT_MIN_ROWS``) merges the manifest table's files (the
seed's eight) before the checkpoints table's: killed at each ``MANIFEST_MERGE_POINTS`` point
(``make faults``), and cut inside that merge (``make test``; ``make crash``: every distinct cut from
B's switch on); every seed batch reads the same files as before.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
from unittest import mock

import pytest

from support import goldenlib
from conftest import golden_set
from support.crashfs.availability import unavailable_reason
from storelib.format import paths
from storelib.io import storage
from support.compaction import written_before_compaction
from storelib.runtime.faults import COMPACT_POINTS, MANIFEST_MERGE_POINTS, MERGE_POINTS
from storelib.table import ckmerge, manifest

from test_crash_sim import _check_ingest, _deep, _in_process_ingest, _open, _record, inputs  # noqa: F401
from test_nothing_lost import files_state, ingest

pytestmark = [pytest.mark.slow]
PARTS = 8
SEED = [f"A{i}" for i in range(PARTS)]
ALL_POINTS = os.environ.get("CRASH_POINTS", "") == "0"
MOST = 3                  # cuts from the switch on (make test); CRASH_POINTS=0: every distinct one
ALL_FAULTS = os.environ.get("ROCKETLAKE_FAULTS") == "all"


def _as_of(store: str) -> dict:
    """Each seed batch as ``--as-of-batch`` reads it: its files, and its checkpoint row whole and in a
    writer's lean read (the latter from the merged file once merged)."""
    s = storage.Store(store)
    out = {}
    for b in SEED:
        snap, lean = manifest.load_snapshot(s, b), manifest.load_snapshot(s, b, queue_offsets=False)
        out[b] = (sorted((p, r["checksum"], r["valid_bytes"]) for p, r in snap.files.items()),
                  sorted(dict(snap.batch).items()), sorted(dict(lean.batch).items()))
    return out


def _merged(store: str) -> bool:
    """Whether the checkpoints table's seed rows are in one merged data file."""
    return len(set(manifest.read_tables(storage.Store(store), queue_offsets=False).sources.values())) < PARTS


@pytest.fixture(scope="module", autouse=True)
def _small_tables():
    """Compaction as soon as the dead rows outnumber the live ones (not only past 10,000), here
    and in the runs of tests/support/local_ingest.py."""
    with mock.patch.object(manifest, "COMPACT_MIN_ROWS", 0), mock.patch.object(ckmerge, "MERGE_MIN_FILES", PARTS), \
            mock.patch.dict(os.environ, {"ROCKETLAKE_TEST_COMPACT_MIN_ROWS": "0",
                                         "ROCKETLAKE_TEST_MERGE_MIN_FILES": str(PARTS)}):
        yield


@pytest.fixture(scope="module")
def seed(inputs, tmp_path_factory):  # noqa: F811
    """(seed store, its files, each seed batch's files, the uninterrupted result's files)."""
    lines = (inputs / "a.jsonl").read_text().splitlines(keepends=True)
    step = -(-len(lines) // PARTS)
    for i in range(PARTS):
        (inputs / f"a{i}.jsonl").write_text("".join(lines[i * step:(i + 1) * step]))
    store = str(tmp_path_factory.mktemp("compaction-seed") / "store")
    with written_before_compaction():
        for i, b in enumerate(SEED):
            _in_process_ingest(inputs, store, f"a{i}", b, durable=False)
    assert manifest.load_snapshot(storage.Store(store)).compaction is None
    ref = str(tmp_path_factory.mktemp("compaction-ref") / "store")
    shutil.copytree(store, ref)
    _in_process_ingest(inputs, ref, "b", "B", durable=False)
    assert _compacted(ref), "batch B did not compact the seed's manifest table"
    assert _merged(ref) and not _merged(store), "batch B did not merge the seed's checkpoints table"
    assert goldenlib.compare(golden_set("small-roll"), ref) == []
    return store, files_state(store), _as_of(store), files_state(ref)


def _compacted(store: str) -> bool:
    snap = manifest.load_snapshot(storage.Store(store))
    return snap.compaction is not None and snap.compaction.detail["through_seq"] == snap.batch.batch_seq


def _expect(as_of: dict):
    def check(store: str) -> list:
        problems = goldenlib.compare(golden_set("small-roll"), store)
        if _as_of(store) != as_of:
            problems.append("a seed batch reads other files than before")
        return problems
    return check


def _killed(inputs, seed, tmp_path, point: str, check) -> str:  # noqa: F811
    """B killed at ``point``, after its switch: B committed, every seed batch as it was, nothing
    damaged, ``check(store)``; B's rerun finds it committed and ends in the uninterrupted run's
    files; then C's commit. The store."""
    seed_store, _, as_of, want = seed
    store = str(tmp_path / "store")
    shutil.copytree(seed_store, store)
    marker = str(tmp_path / "marker")
    r = ingest(inputs, store, "b", "B", {"ROCKETLAKE_FAULT": point, "ROCKETLAKE_FAULT_MARKER": marker})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    assert open(marker).read().startswith(point)
    assert _open(store) == SEED + ["B"]
    check(store)
    assert _as_of(store) == as_of
    assert _deep(store, inputs) == []
    out = _in_process_ingest(inputs, store, "b", "B", durable=False)
    assert out["status"] == "already-committed", out
    assert files_state(store) == want
    _in_process_ingest(inputs, store, "c", "C", durable=False)
    assert _open(store) == SEED + ["B", "C"]
    assert _as_of(store) == as_of and _deep(store, inputs) == []
    return store


@pytest.mark.skipif(not ALL_FAULTS, reason="kill points: make faults (ROCKETLAKE_FAULTS=all); make test cuts power")
@pytest.mark.parametrize("point", COMPACT_POINTS)
def test_compaction_killed(inputs, seed, tmp_path, point):  # noqa: F811
    store = _killed(inputs, seed, tmp_path, point, lambda store: None)
    # the next batch's commit compacts what the killed one did not (after-compaction: B's stands)
    snap = manifest.load_snapshot(storage.Store(store))
    assert snap.compaction is not None and snap.compaction.detail["through_seq"] == (
        PARTS + 1 if point == "after-compaction" else PARTS + 2)


@pytest.mark.skipif(not ALL_FAULTS, reason="kill points: make faults (ROCKETLAKE_FAULTS=all); make test cuts power")
@pytest.mark.parametrize("point", MERGE_POINTS)
def test_checkpoints_merge_killed(inputs, seed, tmp_path, point):  # noqa: F811
    def check(store):
        assert _compacted(store) and _merged(store) == (point == "after-checkpoints-merge")
    store = _killed(inputs, seed, tmp_path, point, check)
    assert _merged(store)                   # the next batch's commit merges what the killed one did not


@pytest.mark.skipif(bool(unavailable_reason()), reason=f"no crash simulator: {unavailable_reason()}")
@pytest.mark.timeout(3600 if ALL_POINTS else 900)     # every distinct cut: ~100 of ~8 s on a loaded machine
def test_power_cuts_during_a_compacting_batch(inputs, seed, tmp_path):  # noqa: F811
    seed_store, seed_files, as_of, _ = seed
    fs, out = _record(tmp_path, seed_store, ["ingest", "{store}", inputs / "b.jsonl", inputs / "small.properties", "B"])
    assert out["status"] == "committed"
    switch = next(ev.n for ev in fs.events if ev.path and "checkpoints/_delta_log" in ev.path)
    cuts = [k for k in fs.cut_points(distinct=True) if k >= switch - 1]
    # the checkpoints table's merge: its data file in the table, its log entry not yet
    merge_file = next(ev.n for ev in fs.events if ev.kind == "rename" and ".merged." in (ev.path2 or "")
                      and "/checkpoints/" in ev.path2)
    inside = [k for k in cuts if k >= merge_file][:1]
    if not ALL_POINTS and len(cuts) > MOST:          # spread evenly, the first and the last among them
        cuts = sorted({cuts[round(i * (len(cuts) - 1) / (MOST - 1))] for i in range(MOST)} | set(inside))
    compacting = merging = 0
    for k in cuts:
        label = f"cut after event {k} ({fs.event(k).kind} {fs.event(k).path})"
        state = fs.crash_state(k, str(tmp_path / f"state-{k}"))
        store = os.path.join(state, "store")
        assert _as_of(store) == as_of, label
        compacting += _compacted(store)
        merging += _merged(store)
        _check_ingest(label, k, fs.recording.marks()["returned"], state, inputs, SEED, seed_files, "b", "B",
                      _expect(as_of))
    assert compacting and compacting < len(cuts), "no cut before and after the compaction's commit"
    assert merging and merging < len(cuts), "no cut before and after the checkpoints merge's commit"


def _no_compaction():
    """B's commit does not compact (here and in the runs of tests/support/local_ingest.py), and a
    batch after it in this process merges the manifest table's files whatever its size (C's
    records are fewer than a tenth of the seed's manifest files: ``ckmerge.MERGE_SHARE``)."""
    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(manifest, "COMPACT_MIN_ROWS", 10 ** 9))
    stack.enter_context(mock.patch.object(ckmerge, "MERGE_SHARE", 100.0))
    stack.enter_context(mock.patch.dict(os.environ, {"ROCKETLAKE_TEST_COMPACT_MIN_ROWS": str(10 ** 9)}))
    return stack


def _manifest_merged(store: str) -> bool:
    """Whether the manifest table's seed rows are in one merged data file."""
    dt = manifest.open_table(storage.Store(store), paths.MANIFEST_DIR)
    merged = any(p.endswith(".merged.snappy.parquet") for p in ckmerge.files_of(dt).column("path").to_pylist())
    dt = None
    return merged


@pytest.mark.skipif(not ALL_FAULTS, reason="kill points: make faults (ROCKETLAKE_FAULTS=all); make test cuts power")
@pytest.mark.parametrize("point", MANIFEST_MERGE_POINTS)
def test_manifest_merge_killed(inputs, seed, tmp_path, point):  # noqa: F811
    def check(store):
        assert not _compacted(store) and _manifest_merged(store) == (point == "after-manifest-merge")
        assert not _merged(store)            # (the checkpoints table's merge comes after)
    with _no_compaction():
        store = _killed(inputs, seed, tmp_path, point, check)
    assert _manifest_merged(store) and _merged(store)   # the next batch's commit merges what the killed one did not


@pytest.mark.skipif(bool(unavailable_reason()), reason=f"no crash simulator: {unavailable_reason()}")
@pytest.mark.timeout(3600 if ALL_POINTS else 900)
def test_power_cuts_inside_the_manifest_merge(inputs, seed, tmp_path):  # noqa: F811
    seed_store, seed_files, as_of, _ = seed
    with _no_compaction():
        fs, out = _record(tmp_path, seed_store, ["ingest", "{store}", inputs / "b.jsonl", inputs / "small.properties",
                                                 "B"])
        assert out["status"] == "committed"
        switch = next(ev.n for ev in fs.events if ev.path and "checkpoints/_delta_log" in ev.path)
        cuts = [k for k in fs.cut_points(distinct=True) if k >= switch - 1]

        def renamed(table):
            return next(ev.n for ev in fs.events if ev.kind == "rename" and ".merged." in (ev.path2 or "")
                        and f"/{table}/" in ev.path2)
        # make test: the manifest merge's data file in the table, its log entry not yet (once it is
        # durable: the kill after it, make faults); make crash: every cut from the switch on
        inside = [k for k in cuts if renamed("manifest") <= k < renamed("checkpoints")]
        if not ALL_POINTS:
            cuts = inside[:1]
        merging = 0
        for k in cuts:
            label = f"cut after event {k} ({fs.event(k).kind} {fs.event(k).path})"
            state = fs.crash_state(k, str(tmp_path / f"state-{k}"))
            store = os.path.join(state, "store")
            assert _as_of(store) == as_of, label
            assert not _compacted(store), label
            merging += _manifest_merged(store)
            _check_ingest(label, k, fs.recording.marks()["returned"], state, inputs, SEED, seed_files, "b", "B",
                          _expect(as_of))
        assert merging < len(cuts) and (merging or not ALL_POINTS), "no cut before and after the manifest merge's commit"
