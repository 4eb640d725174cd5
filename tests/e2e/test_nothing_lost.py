"""Nothing committed is lost, nothing uncommitted is seen: kills, stalls, expiry after a crash,
appends over damage. Spark-free: every ingest runs in its own process through
``tests/support/local_ingest.py`` (storelib.runtime.localrun: the same encode, write and commit code).

Scenario: small-roll cut in A = messages [0, 1513) and B = the rest; A + B in any split is
RocketMQ's small-roll store byte for byte.
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
from support.repairstores import files_state
from support.stall import wait_for as _wait_for
from conftest import golden_set, ROOT

from storelib.io import checksum, storage
from storelib.ingest import commit as commit_stage
from storelib.table import manifest, writerlease
from storelib.verify import driver as verify
from storelib.format.config import load_config
from storelib.format import paths
from storelib.errors import LeaseLost

pytestmark = pytest.mark.slow          # processes of their own: `make check` runs tests/ingest/test_local_store.py

RUNNER = os.path.join(ROOT, "tests", "support", "local_ingest.py")
SMALL = goldenlib.SMALL_ROLL_CONFIG
CUT = 1513


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    base = write_inputs(tmp_path_factory.mktemp("nothing-lost"))
    store_a = str(base / "store-a")
    r = ingest(base, store_a, "a", "A")
    assert r.returncode == 0, r.stderr[-3000:]
    # A ends exactly where an index file is full: a store whose last index file is half full
    # (a batch continues it) holds only C
    r = ingest(base, str(base / "store-c"), "c", "A")
    assert r.returncode == 0, r.stderr[-3000:]
    return base, store_a


def write_inputs(base):
    """small-roll cut at CUT into a.jsonl and b.jsonl, its first 40 messages as c.jsonl, and the
    small sizes as small.properties, in ``base``; returns ``base``."""
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl")).readlines()
    (base / "a.jsonl").write_text("".join(lines[:CUT]))
    (base / "b.jsonl").write_text("".join(lines[CUT:]))
    (base / "c.jsonl").write_text("".join(lines[:40]))
    (base / "small.properties").write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    return base


def run(args: list, env: dict | None = None, popen: bool = False):
    e = dict(os.environ, **(env or {}))
    cmd = [sys.executable, RUNNER] + [str(a) for a in args]
    if popen:
        return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)


def ingest(base, store, part, batch, env=None, popen=False):
    return run(["ingest", store, base / f"{part}.jsonl", base / "small.properties", batch], env, popen)


def copy_of(store_a, tmp_path) -> str:
    store = str(tmp_path / "store")
    shutil.copytree(store_a, store)
    return store


def batches(store: str) -> list:
    return [b["batch_id"] for b in manifest.load_snapshot(storage.Store(store)).batches]


def deep_problems(store: str) -> list:
    rep = verify.verify_store(store, load_config(None, SMALL), deep=True, threads=1)
    return rep.problems


def storecmp(store: str) -> list:
    return goldenlib.compare(golden_set("small-roll"), store)


# --------------------------------------------------------------------------- F1
def test_expire_after_a_crashed_publish_loses_nothing(work, tmp_path):
    """B is killed after its commit, before its publish; an expiry runs next; then a rerun of B
    and a new batch C. The expiry finishes B's publish first (it holds the lease): no committed
    file is lost, verify passes after every step, and B's rerun says "already committed"."""
    base, store_a = work
    store = copy_of(store_a, tmp_path)
    r = ingest(base, store, "b", "B", {"ROCKETLAKE_FAULT": "after-commit-before-publish"})
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    assert batches(store) == ["A", "B"]
    assert storage.Store(store).list_files(paths.STAGING_DIR), "the kill left nothing to publish"
    # expire nothing-but-the-oldest: far enough in the future that old segments go
    newest = max(json.loads(x)["store_timestamp"] for x in open(base / "a.jsonl"))
    r = run(["expire", store, 1, newest + 2 * 3600 * 1000])
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["status"] == "committed" and out["commitlog_removed"] > 0, out
    assert not storage.Store(store).exists(paths.STAGING_DIR)
    assert deep_problems(store) == []
    r = ingest(base, store, "b", "B")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "already-committed", r.stderr[-2000:]
    r = ingest(base, store, "c", "C")
    assert r.returncode == 0, r.stderr[-2000:]
    assert deep_problems(store) == []
    assert batches(store)[-1] == "C"


def test_publish_never_skips_a_missing_staged_file(work, tmp_path):
    """A committed batch whose staged file and final file are both gone: finishing its publish
    fails loudly, naming the file (skipping it would leave the batch half there)."""
    base, store_a = work
    store = copy_of(store_a, tmp_path)
    r = ingest(base, store, "b", "B", {"ROCKETLAKE_FAULT": "after-commit-before-publish"})
    assert r.returncode == -signal.SIGKILL
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    staged = [x for x in snap.files.values() if x["batch_id"] == "B" and x.get("staged_path")]
    assert staged
    victim = staged[0]
    os.remove(st.path(victim["staged_path"]))
    if st.exists(victim["path"]):
        os.remove(st.path(victim["path"]))
    with pytest.raises(Exception, match="neither its staged copy nor the file"):
        commit_stage.finish_pending_publish(st, snap)


# --------------------------------------------------------------------------- F6
@pytest.mark.parametrize("point", ["before-delta-commit", "between-delta-tables"])
def test_nothing_of_an_uncommitted_batch_reaches_a_store_file(work, tmp_path, point):
    """Killed before its switch (also after its manifest rows were committed), a batch leaves
    every store file as it was: a broker started on the directory, and verify, see exactly A.
    The rerun then gives RocketMQ's bytes."""
    base, store_a = work
    store = copy_of(store_a, tmp_path)
    before = files_state(store)
    r = ingest(base, store, "b", "B", {"ROCKETLAKE_FAULT": point})
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    assert files_state(store) == before
    assert batches(store) == ["A"]
    assert deep_problems(store) == []
    r = ingest(base, store, "b", "B")
    assert r.returncode == 0, r.stderr[-2000:]
    assert storecmp(store) == []
    assert not storage.Store(store).exists(paths.STAGING_DIR)


# --------------------------------------------------------------------------- F2
def release_in_turn(procs: dict, gates: dict, winner: str, between):
    """Writers held at their gates (``ROCKETLAKE_HOLD``), released in turn: ``winner`` first (it
    must exit 0), then ``between()`` (the store after the winner), then the others (each must lose:
    exit 3); returns what ``between`` returned. Every process is gone afterwards."""
    try:
        for w, p in procs.items():
            _wait_for(gates[w] + ".reached", p)
        open(gates[winner], "w").close()
        _, err = procs[winner].communicate(timeout=300)
        assert procs[winner].returncode == 0, err[-2000:]
        seen = between()
        for w, p in procs.items():
            if w != winner:
                open(gates[w], "w").close()
                _, err = p.communicate(timeout=300)
                assert p.returncode == 3, (w, p.returncode, err[-2000:])
        return seen
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("takeover", ["commits", "holds"])
def test_a_stalled_writer_never_commits_after_losing_its_lease(work, tmp_path, takeover):
    """Writer 1 stops (SIGSTOP) between its two Delta commits for longer than its lease. Writer 2
    takes the stale lease and ingests the same batch: ``commits`` runs to the end, ``holds`` stops
    just before its own first commit. Writer 1 then resumes: it finds the lease gone, exits 3 and
    commits nothing; in ``holds`` writer 2 is then released and commits. Either way the store is
    RocketMQ's byte for byte, with A and B once each."""
    base, store_a = work
    store = copy_of(store_a, tmp_path)
    env = {"ROCKETLAKE_LEASE_TTL": "4"}
    gate1 = str(tmp_path / "gate1")
    w1 = ingest(base, store, "b", "B", dict(env, ROCKETLAKE_HOLD=f"between-delta-tables:{gate1}"), popen=True)
    try:
        _wait_for(gate1 + ".reached", w1)
        os.kill(w1.pid, signal.SIGSTOP)
        open(gate1, "w").close()
        time.sleep(4.5)                                   # past writer 1's lease
        if takeover == "commits":
            r = ingest(base, store, "b", "B", env)
            assert r.returncode == 0, r.stderr[-2000:]
            os.kill(w1.pid, signal.SIGCONT)
            out, err = w1.communicate(timeout=300)
            assert w1.returncode == 3, err[-2000:]
            assert "lost the writer lease" in err or "another writer committed" in err
        else:
            gate2 = str(tmp_path / "gate2")
            w2 = ingest(base, store, "b", "B", dict(env, ROCKETLAKE_HOLD=f"before-delta-commit:{gate2}"), popen=True)
            try:
                _wait_for(gate2 + ".reached", w2)
                os.kill(w1.pid, signal.SIGCONT)
                out, err = w1.communicate(timeout=300)
                assert w1.returncode == 3, err[-2000:]
                assert "lost the writer lease" in err
                assert batches(store) == ["A"]
            finally:
                open(gate2, "w").close()
                out2, err2 = w2.communicate(timeout=300)
            assert w2.returncode == 0, err2[-2000:]
    finally:
        if w1.poll() is None:
            os.kill(w1.pid, signal.SIGCONT)
            w1.kill()
    assert batches(store) == ["A", "B"]
    assert storecmp(store) == []
    assert deep_problems(store) == []


def test_lease_check_fails_after_a_stall_or_a_takeover(tmp_path, monkeypatch):
    st = storage.Store(str(tmp_path / "s"))
    lease = writerlease.WriterLease(st, "x")
    lease.acquire()
    lease.check()                                       # fresh: fine
    real = writerlease._clocks
    monkeypatch.setattr(writerlease, "_clocks", lambda: tuple(c + writerlease.LEASE_TTL_S for c in real()))
    with pytest.raises(LeaseLost, match="not renewed"):
        lease.check()
    with pytest.raises(LeaseLost):             # and it stays lost
        lease.renew()
    monkeypatch.setattr(writerlease, "_clocks", real)
    lease.release()
    other = writerlease.WriterLease(st, "y")
    lease2 = writerlease.WriterLease(st, "z")
    lease2.acquire()
    doc = json.loads(st.read(paths.LEASE_PATH))
    doc["token"] = other.token
    st.write_file(paths.LEASE_PATH, [json.dumps(doc).encode()])
    with pytest.raises(LeaseLost, match="lost the writer lease"):
        lease2.check()


# --------------------------------------------------------------------------- F5
def _active(store: str, kind: str) -> dict:
    snap = manifest.load_snapshot(storage.Store(store))
    rows = snap.of_kind(kind)
    return max(rows, key=lambda r: (r.get("base_offset") or 0, r["path"])) if kind == "commitlog" else rows[-1]


def _damage_flip_last_record(store: str) -> str:
    row = _active(store, "commitlog")
    p = os.path.join(store, row["path"])
    with open(p, "r+b") as fh:
        fh.seek(row["valid_bytes"] - 10)
        b = fh.read(1)
        fh.seek(row["valid_bytes"] - 10)
        fh.write(bytes([b[0] ^ 0x01]))
    return row["path"]


def _damage_truncate_segment(store: str) -> str:
    row = _active(store, "commitlog")
    os.truncate(os.path.join(store, row["path"]), row["valid_bytes"])
    return row["path"]


def _damage_zero_tail_garbage(store: str) -> str:
    row = _active(store, "commitlog")
    with open(os.path.join(store, row["path"]), "r+b") as fh:
        fh.seek(row["file_size"] - 100)
        fh.write(b"\x07" * 10)
    return row["path"]


def _damage_zero_queue_file(store: str) -> str:
    snap = manifest.load_snapshot(storage.Store(store))
    row = [r for r in snap.of_kind("consumequeue") if r["topic"] == "order_events" and r["queue_id"] == 0][-1]
    with open(os.path.join(store, row["path"]), "r+b") as fh:
        fh.write(bytes(row["valid_bytes"]))
    return row["path"]


def _damage_index_entry(store: str) -> str:
    row = _active(store, "index")
    with open(os.path.join(store, row["path"]), "r+b") as fh:
        fh.seek(row["valid_bytes"] - 3)
        fh.write(b"\xff")
    return row["path"]


@pytest.mark.parametrize("damage", [_damage_flip_last_record, _damage_truncate_segment, _damage_zero_tail_garbage,
                                    _damage_zero_queue_file, _damage_index_entry],
                         ids=lambda f: f.__name__[len("_damage_"):])
def test_an_append_never_launders_damage(work, tmp_path, damage):
    """The committed bytes a batch continues are checked before it builds on them: the append
    fails naming the damaged file, commits nothing and changes no store file; verify still sees
    the damage."""
    base, store_a = work
    store = copy_of(store_a if damage is not _damage_index_entry else str(base / "store-c"), tmp_path)
    rel = damage(store)
    before = files_state(store)
    assert deep_problems(store), "the damage is not one verify sees"
    r = ingest(base, store, "b", "B")
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert rel in r.stderr and "nothing was committed" in r.stderr, r.stderr[-2000:]
    assert batches(store) == ["A"]
    assert files_state(store) == before
    assert deep_problems(store)


def test_block_digest_of_a_file_is_what_the_append_checks(work):
    """The manifest row of the active segment carries the digest of its last, partial block (the
    check above compares against it)."""
    _, store_a = work
    row = _active(store_a, "commitlog")
    blocks = checksum.digests_from_detail(json.loads(row["detail"])["blocks"])
    data = open(os.path.join(store_a, row["path"]), "rb").read()[:row["valid_bytes"]]
    assert blocks[-1] == checksum.block_digest(data[(len(blocks) - 1) * checksum.BLOCK_SIZE:])


# --------------------------------------------------------------------------- F7
def _export(store: str, target: str, as_of=None) -> dict:
    from storelib.table.export import export_store
    return export_store(store, target, as_of_batch=as_of, durable=False)


@pytest.fixture(scope="module")
def three_batches(work):
    """A, B (small-roll whole) and C (40 messages more): a store whose files later batches continued."""
    base, store_a = work
    store = str(base / "store-abc")
    shutil.copytree(store_a, store)
    for part, batch in (("b", "B"), ("c", "C")):
        r = ingest(base, store, part, batch)
        assert r.returncode == 0, r.stderr[-2000:]
    return store


def test_every_snapshot_exports_and_verifies(work, three_batches, tmp_path):
    """Export and verify of every batch's snapshot: A gives the store as it was after A, B gives
    RocketMQ's small-roll store, and verify of each finds nothing."""
    _, store_a = work
    cfg = load_config(None, SMALL)
    out_a = str(tmp_path / "a")
    _export(three_batches, out_a, "A")
    assert files_state(out_a) == files_state(store_a)
    out_b = str(tmp_path / "b")
    _export(three_batches, out_b, "2")
    assert storecmp(out_b) == []
    for b in ("A", "B", "C"):
        assert verify.verify_store(three_batches, cfg, deep=True, as_of_batch=b, threads=1).problems == [], b


def test_a_failed_export_leaves_no_target(work, three_batches, tmp_path):
    from storelib.errors import ExportError
    store = str(tmp_path / "store")
    shutil.copytree(three_batches, store)
    row = _active(store, "commitlog")
    with open(os.path.join(store, row["path"]), "r+b") as fh:
        fh.seek(10)
        fh.write(b"\xee")
    target = str(tmp_path / "out")
    with pytest.raises(ExportError, match="do not match the manifest checksum"):
        _export(store, target)
    assert not os.path.exists(target)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".out.export-")]


@pytest.mark.parametrize("point", ["after-commit-before-publish", "mid-apply"])
def test_export_and_verify_while_a_batch_is_published(work, tmp_path, point):
    """A writer stopped after its switch, its publish not done (``mid-apply``: half its patches
    applied): export of the latest snapshot gives RocketMQ's bytes (files read through the staged
    patches and copies), export of the earlier one the store before the batch, and verify of
    both finds nothing. The writer then finishes."""
    base, store_a = work
    store = copy_of(store_a, tmp_path)
    gate = str(tmp_path / "gate")
    w = ingest(base, store, "b", "B", {"ROCKETLAKE_HOLD": f"{point}:{gate}"}, popen=True)
    try:
        _wait_for(gate + ".reached", w)
        cfg = load_config(None, SMALL)
        _export(store, str(tmp_path / "latest"))
        assert storecmp(str(tmp_path / "latest")) == []
        _export(store, str(tmp_path / "earlier"), "A")
        assert files_state(str(tmp_path / "earlier")) == files_state(store_a)
        assert verify.verify_store(store, cfg, deep=True, threads=1).problems == []
        assert verify.verify_store(store, cfg, deep=True, as_of_batch="A", threads=1).problems == []
    finally:
        open(gate, "w").close()
        out, err = w.communicate(timeout=300)
    assert w.returncode == 0, err[-2000:]
    assert storecmp(store) == []


# --------------------------------------------------------------------------- races
RACE_POINTS = ["after-files-staged", "between-delta-tables", "after-commit-before-publish", "mid-apply",
               "mid-publish"]


@pytest.mark.parametrize("point", RACE_POINTS)
def test_expire_and_export_racing_an_ingest(work, tmp_path, point):
    """An ingest stopped at a hold point: an expiry meanwhile is refused at the lease (exit 3)
    and changes nothing; an export of the latest snapshot gives exactly the committed batches
    (A before the switch, A + B after it: RocketMQ's bytes); then the ingest finishes and the
    store is RocketMQ's."""
    base, store_a = work
    store = copy_of(store_a, tmp_path)
    gate = str(tmp_path / "gate")
    w = ingest(base, store, "b", "B", {"ROCKETLAKE_HOLD": f"{point}:{gate}",
                                      "ROCKETLAKE_FAULT_SKIP": "0"}, popen=True)
    try:
        _wait_for(gate + ".reached", w)
        before = files_state(store)
        newest = max(json.loads(x)["store_timestamp"] for x in open(base / "a.jsonl"))
        r = run(["expire", store, 1, newest + 2 * 3600 * 1000])
        assert r.returncode == 3 and "being written by batch 'B'" in r.stderr, (r.returncode, r.stderr[-2000:])
        assert files_state(store) == before
        out = str(tmp_path / "export")
        summary = _export(store, out)
        if batches(store) == ["A"]:
            assert files_state(out) == files_state(store_a)
        else:
            assert summary["batch_id"] == "B" and storecmp(out) == []
    finally:
        open(gate, "w").close()
        _, err = w.communicate(timeout=300)
    assert w.returncode == 0, err[-2000:]
    assert storecmp(store) == []
