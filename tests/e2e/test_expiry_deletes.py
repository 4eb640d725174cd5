"""An expiry's deletes that a kill or a lost lease cut short are finished by the next writer,
whatever it is (an ingest, the streaming sink), not only by the next expire.

Seed: small-roll's A and B (tests/e2e/test_crash_sim.py's inputs). An expiry, store-wide
(``fileReservedTime``) or per topic (``topicRetention``), is killed (SIGKILL) right after its
commit or in the middle of its deletes, or stopped (SIGSTOP) there past its lease; then batch C
is ingested. Afterwards, without another expire: the files are those of an uninterrupted expiry
followed by C, byte for byte (what a broker started on the directory loads: no expired file),
no expired file is left, every committed batch's snapshot lists what it did, verify --deep is
clean and no staging is left. On an object store (moto) likewise, the expired files' objects
(every version's) gone and the live files' objects all there.

Staged but not committed: an ingest started while an expiry holds the lease with its deletes
document staged (and the reverse) is refused at once and changes nothing; an expiry killed with its
document written, before its switch, leaves a dead attempt whose files the next ingest keeps.

``make test`` runs the store-wide expiry killed mid-delete and the stall there, the ingest refused
while an expiry is staged and the kill before the switch; ``make faults`` (ROCKETLAKE_FAULTS=all)
every case.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal

import pytest

from support import s3server
from support.longrun import faults_only
from storelib.format import paths
from storelib.io import storage
from storelib.ops.expire import expire
from storelib.ops.topic_retention import parse_rules
from storelib.table import manifest

from test_crash_sim import _deep, _in_process_ingest, _open, inputs, store_a  # noqa: F401
from support.stall import stalled_past_lease, wait_for
from test_nothing_lost import files_state, run as _runner

pytestmark = [pytest.mark.slow]

ALL = os.environ.get("ROCKETLAKE_FAULTS") == "all"
RULES = "metrics-raw=1,audit_log=1"
TTL = 4


def now_of(base) -> int:
    """Two hours after A's newest message: A's old segments expire under a 1-hour rule."""
    return max(json.loads(x)["store_timestamp"] for x in open(base / "a.jsonl")) + 2 * 3600 * 1000


def seed_of_a_and_b(inputs, store_a, tmp) -> str:  # noqa: F811
    """``tmp``/seed: a store of A and B."""
    seed = str(tmp / "seed")
    shutil.copytree(store_a, seed)
    _in_process_ingest(inputs, seed, "b", "B")
    return seed


def _expire_args(rule: str, store: str, base) -> list:
    """local_ingest.py's arguments of the store-wide or the per-topic expiry of ``store``."""
    return ["expire", store, "1", now_of(base)] if rule == "store-wide" else ["expire", store, "-", now_of(base), RULES]


def _views(store: str) -> dict:
    """Every committed batch's snapshot: (path, checksum, valid bytes) of its files."""
    s = storage.Store(store)
    return {b: sorted((p, r["checksum"], r["valid_bytes"]) for p, r in manifest.load_snapshot(s, b).files.items())
            for b in _open(store)}


def _sink(base, store: str) -> dict:
    from support.local_ingest import sink_commit
    return sink_commit(store, str(base / "b.jsonl"), str(base / "small.properties"), "query-1", "5")


NEXT = {"ingest": lambda base, store: _in_process_ingest(base, store, "c", "C", durable=False),
        "sink": _sink}


@pytest.fixture(scope="module")
def seeds(inputs, store_a, tmp_path_factory):  # noqa: F811
    """(seed store of A and B, {(rule, next writer): (expired paths, files, batch views) of an
    uninterrupted expiry with that rule followed by that writer})."""
    tmp = tmp_path_factory.mktemp("expiry-deletes")
    seed = seed_of_a_and_b(inputs, store_a, tmp)
    want = {}
    for rule, writer in [("store-wide", "ingest"), ("topic", "ingest")] + ([("store-wide", "sink")] if ALL else []):
        ref = str(tmp / f"ref-{rule}-{writer}")
        shutil.copytree(seed, ref)
        out = expire(ref, 1 if rule == "store-wide" else None, now_ms=now_of(inputs), quiet=True,
                     topic_rules=None if rule == "store-wide" else parse_rules(RULES))
        removed = out["removed"]
        assert out["status"] == "committed" and len(removed) >= 4
        NEXT[writer](inputs, ref)
        want[rule, writer] = removed, files_state(ref), _views(ref)
    return seed, want


def _finished(label, store, inputs, want) -> None:  # noqa: F811
    removed, files, views = want
    st = storage.Store(store)
    assert not [p for p in removed if st.exists(p)], (label, "expired files left after the next writer")
    assert files_state(store) == files, (label, "the files differ from an uninterrupted expiry's")
    assert _views(store) == views, label
    assert _deep(store, inputs) == [], label
    assert not st.exists(paths.STAGING_DIR), label


@pytest.mark.parametrize("rule,point,writer", [
    ("store-wide", "mid-delete", "ingest"),
    faults_only("store-wide", "after-commit-before-publish", "ingest"),
    faults_only("topic", "mid-delete", "ingest"),
    faults_only("topic", "after-commit-before-publish", "ingest"),
    faults_only("store-wide", "mid-delete", "sink"),
])
def test_the_next_writer_finishes_a_killed_expirys_deletes(inputs, seeds, tmp_path, rule, point, writer):  # noqa: F811
    seed, want = seeds
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    r = _runner(_expire_args(rule, store, inputs), {"ROCKETLAKE_FAULT": point})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    removed = want[rule, writer][0]
    assert any(storage.Store(store).exists(p) for p in removed), "the kill left nothing to finish"
    out = NEXT[writer](inputs, store)
    assert out["status"] == "committed", out
    _finished(f"{rule} {point} {writer}", store, inputs, want[rule, writer])


@pytest.mark.parametrize("point", ["mid-delete", faults_only("after-commit-before-publish")])
def test_the_writer_that_takes_over_from_a_stalled_expiry_finishes_its_deletes(inputs, seeds, tmp_path, point):  # noqa: F811
    """The expiry stopped past its lease after its commit; an ingest takes the store over and
    finishes the deletes before its own batch. The expiry then resumes, says it lost the lease
    and changes nothing more."""
    seed, want = seeds
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    expiry = lambda env: _runner(_expire_args("store-wide", store, inputs), env, popen=True)  # noqa: E731
    ingest = lambda env: _runner(["ingest", store, inputs / "c.jsonl", inputs / "small.properties", "C"], env,  # noqa: E731
                                 popen=True)
    with stalled_past_lease(tmp_path, TTL, point, expiry, ingest, taker_point=None) as stall:
        rc, err = stall.release_taker()
        assert rc == 0, err[-2000:]
        _finished(point, store, inputs, want["store-wide", "ingest"])
        after = files_state(store)
        rc, err = stall.resume_stalled()
        assert rc == 0, err[-2000:]
        assert "lost the store's lease after its commit" in err, err[-2000:]
    assert files_state(store) == after
    _finished(f"{point}, resumed", store, inputs, want["store-wide", "ingest"])


# ----------------------------------------------------------------------------- staged, not committed
def _staging_and_logs(store: str) -> dict:
    """path -> sha256 of every file of the staging and of the two Delta logs."""
    out = {}
    for rel in (paths.STAGING_DIR, f"{paths.MANIFEST_DIR}/_delta_log", f"{paths.CHECKPOINTS_DIR}/_delta_log"):
        for root, _, names in os.walk(os.path.join(store, rel)):
            for n in names:
                with open(os.path.join(root, n), "rb") as fh:
                    out[os.path.relpath(os.path.join(root, n), store)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def _refused_while_held(store: str, held, gate: str, other: list, holder: str) -> None:
    """``held`` (a writer's process, held at ``gate``) holds the lease with its attempt staged:
    ``other`` (local_ingest.py's arguments) is refused at once (exit 3) and changes no store file,
    no staged file and no table; then ``held`` goes on to its end (exit 0)."""
    try:
        wait_for(gate + ".reached", held)
        before = files_state(store), _staging_and_logs(store)
        assert any(p.endswith("/" + paths.STAGED_DELETES) for p in before[1]) == (holder == "expiry"), before[1]
        r = _runner(other)
        assert r.returncode == 3 and "being written by batch" in r.stderr, (r.returncode, r.stderr[-2000:])
        assert (files_state(store), _staging_and_logs(store)) == before, "the refused writer changed the store"
    finally:
        open(gate, "w").close()
        _, err = held.communicate(timeout=300)
    assert held.returncode == 0, err[-2000:]


def test_an_ingest_started_while_an_expiry_is_staged_is_refused_and_changes_nothing(inputs, seeds, tmp_path):  # noqa: F811
    """The expiry holds the lease (not stalled: renewing it) with its deletes document staged,
    before its Delta commit; an ingest starting then is refused and touches nothing. The expiry
    commits and deletes; the ingest run again commits: the store is an uninterrupted expiry's
    followed by that ingest's, byte for byte."""
    seed, want = seeds
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    gate = str(tmp_path / "gate")
    expiry = _runner(_expire_args("store-wide", store, inputs), {"ROCKETLAKE_HOLD": f"before-delta-commit:{gate}"},
                     popen=True)
    ingest = ["ingest", store, inputs / "c.jsonl", inputs / "small.properties", "C"]
    _refused_while_held(store, expiry, gate, ingest, "expiry")
    r = _runner(ingest)
    assert r.returncode == 0, r.stderr[-2000:]
    _finished("an ingest refused while an expiry was staged", store, inputs, want["store-wide", "ingest"])


@pytest.mark.skipif(not ALL, reason="races of processes: make faults (ROCKETLAKE_FAULTS=all)")
def test_an_expiry_started_while_an_ingest_is_staged_is_refused_and_changes_nothing(inputs, seeds, tmp_path):  # noqa: F811
    seed, want = seeds
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    gate = str(tmp_path / "gate")
    ingest = _runner(["ingest", store, inputs / "c.jsonl", inputs / "small.properties", "C"],
                     {"ROCKETLAKE_HOLD": f"before-delta-commit:{gate}"}, popen=True)
    _refused_while_held(store, ingest, gate, _expire_args("store-wide", store, inputs), "ingest")
    assert _open(store) == ["A", "B", "C"]
    r = _runner(_expire_args("store-wide", store, inputs))
    assert r.returncode == 0, r.stderr[-2000:]
    st = storage.Store(store)
    assert len(_open(store)) == 4 and not [p for p in want["store-wide", "ingest"][0] if st.exists(p)]
    assert _deep(store, inputs) == [] and not st.exists(paths.STAGING_DIR)


@pytest.fixture(scope="module")
def kept(inputs, seeds, tmp_path_factory):  # noqa: F811
    """(files, batch views) of the seed followed by C alone (an expiry that never committed)."""
    ref = str(tmp_path_factory.mktemp("expiry-kept") / "ref")
    shutil.copytree(seeds[0], ref)
    NEXT["ingest"](inputs, ref)
    return files_state(ref), _views(ref)


@pytest.mark.parametrize("point", ["before-delta-commit", faults_only("between-delta-tables")])
def test_an_expiry_killed_before_its_switch_leaves_its_files_to_the_next_ingest(inputs, seeds, kept, tmp_path, point):  # noqa: F811
    """Killed with its deletes document written, before its switch: the document is a dead
    attempt's, not a committed batch's, so the next ingest deletes none of what it lists (clears it
    after its own commit); every file still reads; the store is the seed followed by C alone."""
    seed, want = seeds
    store = str(tmp_path / "store")
    shutil.copytree(seed, store)
    r = _runner(_expire_args("store-wide", store, inputs), {"ROCKETLAKE_FAULT": point})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    st = storage.Store(store)
    listed = [p for p in _staging_and_logs(store) if p.endswith("/" + paths.STAGED_DELETES)]
    removed = want["store-wide", "ingest"][0]
    assert len(listed) == 1 and all(st.exists(p) for p in removed) and _open(store) == ["A", "B"]
    assert NEXT["ingest"](inputs, store)["status"] == "committed"
    assert all(st.exists(p) for p in removed), "the next writer deleted what a dead attempt listed"
    assert _open(store) == ["A", "B", "C"]
    assert (files_state(store), _views(store)) == kept
    assert _deep(store, inputs) == [] and not st.exists(paths.STAGING_DIR)


# ----------------------------------------------------------------------------- object stores
BUCKET = "rocketlake-expiry-deletes"


def _objects_of(snap_rows, paths_: set) -> set:
    """Objects every ``add`` row of ``paths_`` names (its extents, its paged head's layers)."""
    out = set()
    for r in snap_rows:
        if r["action"] == "add" and r["path"] in paths_:
            d = json.loads(r.get("detail") or "{}")
            out.update(e[2] for e in d.get("extents") or [])
            out.update((d.get("head") or {}).get("layers") or [])
    return out


def _copy_of_seed(client, prefix: str) -> str:
    """The URI of a copy of ``seed/`` at ``prefix/``."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="seed/")
    for o in (o for page in pages for o in page.get("Contents", [])):
        client.copy_object(Bucket=BUCKET, Key=prefix + o["Key"][len("seed"):], CopySource={"Bucket": BUCKET, "Key": o["Key"]})
    return f"s3://{BUCKET}/{prefix}"


def _expired_objects(uri: str) -> tuple:
    """(the store, the objects of the files its latest batch, a committed expiry, removed)."""
    st = storage.Store(uri)
    snap = manifest.load_snapshot(st)
    rows = manifest.read_rows(manifest.open_table(st, paths.MANIFEST_DIR))
    gone = _objects_of(rows, set(snap.removed))
    assert snap.batch["operation"] == "expire" and gone
    return st, gone


@pytest.fixture(scope="module")
def s3_seed(inputs):  # noqa: F811
    """(env, boto3 client) of a moto server whose ``seed/`` holds A and B."""
    if not ALL:
        pytest.skip("make faults (ROCKETLAKE_FAULTS=all)")
    with s3server.moto(BUCKET) as (env, client):
        for part, b in (("a", "A"), ("b", "B")):
            r = _runner(["ingest", f"s3://{BUCKET}/seed", inputs / f"{part}.jsonl", inputs / "small.properties", b], env)
            assert r.returncode == 0, r.stderr[-2000:]
        yield env, client


@pytest.mark.parametrize("point", ["mid-delete", "after-commit-before-publish"])
def test_on_s3_the_next_ingest_deletes_a_killed_expirys_objects(inputs, s3_seed, point, monkeypatch):  # noqa: F811
    env, client = s3_seed
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    uri = _copy_of_seed(client, point)
    r = _runner(_expire_args("store-wide", uri, inputs), dict(env, ROCKETLAKE_FAULT=point))
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-2000:])
    st, gone = _expired_objects(uri)
    assert any(st.exists(o) for o in gone)
    r = _runner(["ingest", uri, inputs / "c.jsonl", inputs / "small.properties", "C"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    snap = manifest.load_snapshot(st)
    assert _open(uri) == ["A", "B", snap.batches[2]["batch_id"], "C"]
    assert not [o for o in gone if st.exists(o)], "objects of expired files left after the ingest"
    live = _objects_of(list(snap.files.values()), set(snap.files))
    assert live and all(st.exists(o) for o in live) and not live & gone
    assert _deep(uri, inputs) == []
    assert not st.exists(paths.STAGING_DIR) or not st.list_files(paths.STAGING_DIR)


def test_on_s3_an_expiry_whose_commit_outcome_is_unknown_leaves_its_deletes_to_the_next_writer(
        inputs, s3_seed, monkeypatch):  # noqa: F811
    """The switch's PUT fails with no answer (a timeout: not a refused conditional put), and a read
    of the table then finds no commit; the PUT lands afterwards. The expiry must have left its
    staged document: the next ingest finishes the committed expiry's deletes from it."""
    from storelib.ops import expire as retention
    env, client = s3_seed
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    uri = _copy_of_seed(client, "unknown")
    real, sent = retention.manifest.commit, []

    def no_answer(*a, **k):
        sent.append((a, k))
        raise OSError("Generic S3 error: error sending request: operation timed out")
    monkeypatch.setattr(retention.manifest, "commit", no_answer)
    with pytest.raises(OSError, match="timed out"):
        expire(uri, 1, now_ms=now_of(inputs), quiet=True)
    monkeypatch.setattr(retention.manifest, "commit", real)
    a, k = sent[0]
    real(*a, **dict(k, lease=None))                   # the PUT lands after the writer gave up
    st, gone = _expired_objects(uri)
    assert all(st.exists(o) for o in gone)
    # a writer whose snapshot came from the cache reads the expiry's remove rows from the table
    from storelib.table import snapcache, staged_deletes
    from storelib.table.snapshots import open_snapshot
    assert snapcache.refresh(st)
    cached = open_snapshot(st)
    assert cached.source == "cache"
    assert staged_deletes.removed_by(st, cached.batch, cached) == set(manifest.load_snapshot(st).removed)
    r = _runner(["ingest", uri, inputs / "c.jsonl", inputs / "small.properties", "C"], env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not [o for o in gone if st.exists(o)], "objects of the expired files left after the ingest"
    assert _deep(uri, inputs) == []
    assert not st.exists(paths.STAGING_DIR) or not st.list_files(paths.STAGING_DIR)
