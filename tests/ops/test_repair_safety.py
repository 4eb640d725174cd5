"""repair never makes a store worse (issue 35): after per-topic and store-wide expiry it writes only
the files the committed snapshot holds; it refuses a CommitLog that does not verify against its
manifest rows; it never writes through a file or link planted where it writes; it finishes a pending
publish first and reads a store whose publish is pending; it follows ingest's checkpoint rule; a
broker directory whose sizes its files cannot tell needs --config; a killed repair leaves nothing
where verify or a broker looks. Stores are small-roll's messages ingested in this process
(tests/support/repairstores.py); the end state is checked against RocketMQ's own small-roll store
where the messages are all of it."""
from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from support import goldenlib
from support import repairstores
from conftest import golden_set
from support.opshelp import run, small_config, small_properties
from storelib.errors import RepairError, RepairRefused, exit_code
from storelib.format import commitlog as cl, consumequeue as cq, paths
from storelib.io import storage
from storelib.ops import expire as expire_op, repair as repair_op
from storelib.table import manifest
from storelib.verify import driver as verify

CUT = 1513                    # small-roll cut in two batches: A + B is RocketMQ's store byte for byte
HOUR = 3600 * 1000


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return repairstores.parts(tmp_path_factory.mktemp("repair-inputs"), (CUT,))


@pytest.fixture(scope="module")
def store_ab(inputs, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("repair-ab") / "store")
    repairstores.ingest(out, inputs, "p0", "A")
    repairstores.ingest(out, inputs, "p1", "B")
    return out


@pytest.fixture
def store(store_ab, tmp_path):
    return shutil.copytree(store_ab, str(tmp_path / "store"))


def _batches(store: str) -> list:
    return [b["batch_id"] for b in manifest.load_snapshot(storage.Store(store)).batches]


def _deep(store: str) -> list:
    return [str(p) for p in verify.verify_store(store, small_config(), deep=True, threads=1).problems]


def _newest(store: str) -> int:
    return max(b["max_store_ts"] for b in manifest.load_snapshot(storage.Store(store)).batches)


def _damaging(s: dict) -> list:
    return [f for f in s["findings"] if f["state"] in ("missing", "truncated", "differing", "extra")]


# ---------------------------------------------------------------------------- item 1: expiry
@pytest.mark.parametrize("how", ["topic", "topic-then-store-wide"])
def test_repair_after_expiry_writes_nothing_back(store, how):
    """Per-topic expiry (and then a store-wide one) removes queue files whose records are still in
    the kept segments: repair must not write them back, and with nothing to repair commits nothing."""
    now = _newest(store) + 2 * HOUR
    r = expire_op.expire(store, None, now_ms=now, topic_rules={"metrics-raw": 1, "audit_log": 1}, quiet=True)
    assert r["status"] == "committed" and r["consumequeue_removed"] >= 4
    if how == "topic-then-store-wide":
        r = expire_op.expire(store, 3.5, now_ms=now, quiet=True)
        assert r["status"] == "committed" and r["commitlog_removed"] > 0
    assert _deep(store) == []
    before, batches = repairstores.files_state(store), _batches(store)
    s = repair_op.repair(store, apply=True, quiet=True)
    assert _damaging(s) == [] and s["replaced"] == [] and "batch_id" not in s
    assert s["counts"].get("unlisted", 0) >= (4 if how == "topic" else 0)
    assert repairstores.files_state(store) == before and _batches(store) == batches
    assert _deep(store) == []


def test_repair_after_expiry_replaces_only_the_damaged_file(store):
    """With another file damaged, only it is written (a row for it), never an expired one."""
    now = _newest(store) + 2 * HOUR
    expire_op.expire(store, None, now_ms=now, topic_rules={"metrics-raw": 1}, quiet=True)
    want = repairstores.files_state(store)
    snap = manifest.load_snapshot(storage.Store(store))
    victim = snap.of_kind("consumequeue")[3]["path"]
    os.remove(os.path.join(store, victim))
    s = repair_op.repair(store, apply=True, quiet=True)
    assert s["replaced"] == [victim]
    after = manifest.load_snapshot(storage.Store(store))
    assert after.batch["operation"] == "repair"
    assert [r["path"] for r in after.files.values() if r["batch_id"] == s["batch_id"]] == [victim]
    assert repairstores.files_state(store) == want
    assert _deep(store) == []


def test_a_repair_batch_without_rows_is_read_as_changing_nothing(store):
    """An earlier repair committed a batch with no manifest rows after writing an expired queue file
    back: every command must still open the store; the next repair --apply removes the file the
    expiry had committed as removed, and verify is clean."""
    now = _newest(store) + 2 * HOUR
    r = expire_op.expire(store, None, now_ms=now, topic_rules={"metrics-raw": 1}, quiet=True)
    gone = r["removed"][0]
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    shutil.copy(os.path.join(store, snap.of_kind("consumequeue")[0]["path"]), os.path.join(store, gone))
    ck = manifest.checkpoint_row_after(snap.batch, batch_id="repair-old", batch_seq=snap.batch_seq + 1,
                                       operation="repair", committed_at=manifest.now_ms(),
                                       input_fingerprint="repair:1", messages=0, bytes=0, index_entries=0,
                                       detail=manifest.dumps({"replaced": [gone]}))
    manifest.commit(st, snap.versions, [], ck)
    after = manifest.load_snapshot(st)
    assert after.batch["batch_id"] == "repair-old" and after.files == snap.files
    s = repair_op.repair(store, apply=True, quiet=True)
    assert _damaging(s) == [] and not os.path.exists(os.path.join(store, gone))
    assert _deep(store) == []


def _half_expired_queue(store: str) -> tuple:
    """After a store-wide expiry: (path, first derivable unit) of a queue file whose first units point
    at deleted segments and whose later ones at kept records."""
    snap = manifest.load_snapshot(storage.Store(store))
    min_phy = snap.batch["min_phy_offset"]
    for row in sorted(snap.of_kind("consumequeue"), key=lambda r: r["path"]):
        with open(os.path.join(store, row["path"]), "rb") as fh:
            raw = fh.read(row["valid_bytes"])
        phys = [cq.parse_unit(raw[i:i + cq.UNIT_SIZE])[0] for i in range(0, len(raw), cq.UNIT_SIZE)]
        if phys[0] < min_phy <= phys[-1]:
            return row["path"], next(k for k, p in enumerate(phys) if p >= min_phy)
    raise AssertionError("no queue file straddles the new min phy offset")


@pytest.mark.parametrize("how", ["delete", "zero-head-unit", "truncate-into-head", "zero-kept-unit"])
def test_a_queue_file_whose_head_records_expired(store, how, tmp_path):
    """A store-wide expiry keeps a queue file whose first units point at deleted segments (a broker
    keeps them too: its min offset is the first unit at or past the commitlog's). Damaged there, only
    the file held those units: repair --apply refuses (exit 3, the file named, what to do), changes
    nothing, and once the file is restored from a copy it repairs nothing more. Damaged only where the
    kept records are, it is restored to the manifest's version."""
    expire_op.expire(store, 3.5, now_ms=_newest(store) + 2 * HOUR, quiet=True)
    rel, known = _half_expired_queue(store)
    path = os.path.join(store, rel)
    good = shutil.copy(path, str(tmp_path / "copy"))
    want, batches = repairstores.files_state(store), _batches(store)
    if how == "delete":
        os.remove(path)
    elif how == "truncate-into-head":
        os.truncate(path, (known // 2) * cq.UNIT_SIZE)
    else:
        with open(path, "r+b") as fh:
            fh.seek((0 if how == "zero-head-unit" else known) * cq.UNIT_SIZE)
            fh.write(bytes(cq.UNIT_SIZE))
    if how == "zero-kept-unit":
        s = repair_op.repair(store, apply=True, quiet=True)
        assert s["replaced"] == [rel] and repairstores.files_state(store) == want and _deep(store) == []
        return
    damaged = repairstores.files_state(store)
    dry = repair_op.repair(store, quiet=True)
    assert [f["state"] for f in dry["findings"] if f["path"] == rel] == ["unrestorable"]
    with pytest.raises(RepairRefused) as e:
        repair_op.repair(store, apply=True, quiet=True)
    assert exit_code(e.value) == 3 and e.value.path == rel and "Restore the file from a copy" in str(e.value)
    assert repairstores.files_state(store) == damaged and _batches(store) == batches
    shutil.copy(good, path)
    s = repair_op.repair(store, apply=True, quiet=True)
    assert _damaging(s) == [] and s["replaced"] == [] and _batches(store) == batches and _deep(store) == []


def test_an_index_file_after_the_first_segment_expired(store, tmp_path):
    """Once an expiry deleted the commitlog's first segment, index files are not derivable: a damaged
    one is refused (exit 3, named), nothing changes, and restored from a copy the store is whole."""
    expire_op.expire(store, 3.5, now_ms=_newest(store) + 2 * HOUR, quiet=True)
    rel = sorted(r["path"] for r in manifest.load_snapshot(storage.Store(store)).of_kind("index"))[-1]
    path = os.path.join(store, rel)
    good = shutil.copy(path, str(tmp_path / "copy"))
    os.truncate(path, 1000)
    damaged, batches = repairstores.files_state(store), _batches(store)
    assert [f["state"] for f in repair_op.repair(store, quiet=True)["findings"] if f["path"] == rel] == ["unrestorable"]
    with pytest.raises(RepairRefused) as e:
        repair_op.repair(store, apply=True, quiet=True)
    assert exit_code(e.value) == 3 and e.value.path == rel
    assert repairstores.files_state(store) == damaged and _batches(store) == batches
    shutil.copy(good, path)
    s = repair_op.repair(store, apply=True, quiet=True)
    assert _damaging(s) == [] and s["replaced"] == [] and _deep(store) == []


# ---------------------------------------------------------------------------- item 2: damaged commitlog
def _first_segment(store: str) -> str:
    return os.path.join(store, "commitlog", sorted(os.listdir(os.path.join(store, "commitlog")))[0])


def _second_record(seg: str) -> int:
    with open(seg, "rb") as fh:
        return int.from_bytes(fh.read(4), "big")


@pytest.mark.parametrize("damage", ["magic", "body"])
def test_a_commitlog_that_does_not_verify_is_refused(store, damage, tmp_path):
    seg = _first_segment(store)
    at = _second_record(seg)
    with open(seg, "r+b") as fh:
        if damage == "magic":
            fh.seek(at + cl.POS_MAGIC)
            fh.write(b"\x00\x00\x00\x01")
        else:
            fh.seek(at + 120)                        # inside the body (past every fixed field)
            b = fh.read(1)
            fh.seek(at + 120)
            fh.write(bytes([b[0] ^ 0xFF]))
    os.remove(os.path.join(store, manifest.load_snapshot(storage.Store(store)).of_kind("consumequeue")[0]["path"]))
    before, batches = repairstores.files_state(store), _batches(store)
    with pytest.raises(RepairRefused) as e:
        repair_op.repair(store, apply=True, quiet=True)
    assert e.value.path == "commitlog/" + os.path.basename(seg) and e.value.offset == at, str(e.value)
    if damage == "magic":                                              # (the command line once)
        res = run("repair.py", "--store", store, "--apply")
        assert res.returncode == 3, res.stderr
        assert f"commitlog/{os.path.basename(seg)}@{at}" in res.stderr and "nothing was changed" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    with pytest.raises(RepairRefused):
        repair_op.repair(store, quiet=True)                             # the dry run says so too
    assert repairstores.files_state(store) == before and _batches(store) == batches


def test_broker_directory_derives_up_to_the_first_damaged_record(restored_golden, tmp_path):
    """No manifest: the records before the damaged one are derived (a magic flipped ends the data,
    as does a body that is not its BODYCRC's: a broker's recovery checks it), and the summary and
    the progress lines say where it stopped."""
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    seg = _first_segment(store)
    at = _second_record(seg)
    with open(seg, "r+b") as fh:
        fh.seek(at + cl.POS_MAGIC)
        fh.write(b"\x00\x00\x00\x01")
    res = run("repair.py", "--store", store, "--config", small_properties(tmp_path))
    assert res.returncode == 1
    assert f"commitlog commitlog/{os.path.basename(seg)}: the data ends at byte {at}" in res.stdout
    shutil.rmtree(store)
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    last = os.path.join(store, "commitlog", sorted(os.listdir(os.path.join(store, "commitlog")))[-1])
    with open(last, "r+b") as fh:
        fh.seek(_second_record(last) + 120)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0xFF]))
    s = repair_op.repair(store, small_config(), quiet=True)
    assert s["commitlog"] == [f"commitlog/{os.path.basename(last)}: a damaged record at byte {_second_record(last)}: "
                              "nothing from there on was dispatched"]


# ---------------------------------------------------------------------------- item 3: planted files
def test_a_link_planted_at_the_old_temporary_name_is_never_written_through(restored_golden, tmp_path):
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    seg = _first_segment(store)
    seg_bytes = open(seg, "rb").read()
    cq = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(store, "consumequeue")) for f in fs)[0]
    os.remove(cq)
    os.symlink(seg, cq + ".repair-tmp")
    s = repair_op.repair(store, small_config(), apply=True, quiet=True)
    assert s["replaced"] == [os.path.relpath(cq, store)]
    assert open(seg, "rb").read() == seg_bytes
    assert not os.path.lexists(cq + ".repair-tmp")         # the leftover name is cleared, not followed
    assert goldenlib.compare(golden_set("small-roll"), store) == []


def test_temporary_files_are_created_exclusively(tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"keep me")
    link = tmp_path / "link"
    os.symlink(target, link)
    for name in ("link", "victim"):
        with pytest.raises(RepairError, match="already exists"):
            repair_op.write_exclusive(str(tmp_path / name), b"x" * 10, 20)
    assert target.read_bytes() == b"keep me"
    repair_op.write_exclusive(str(tmp_path / "new"), b"x" * 10, 20)
    assert (tmp_path / "new").read_bytes() == b"x" * 10 + bytes(10)


def test_a_link_on_the_way_to_repairs_own_directories_stops_the_run(restored_golden, tmp_path):
    """``_rocketlake/tmp`` planted as a link to a directory of the store: repair stops before it
    writes anything there."""
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    cq = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(store, "consumequeue")) for f in fs)[1]
    os.remove(cq)
    os.makedirs(os.path.join(store, paths.META_DIR))
    os.symlink(os.path.join(store, "commitlog"), os.path.join(store, paths.TMP_DIR))
    before = repairstores.files_state(store)
    with pytest.raises(RepairError, match="is a link"):
        repair_op.repair(store, small_config(), apply=True, quiet=True)
    assert repairstores.files_state(store) == before
    os.remove(os.path.join(store, paths.TMP_DIR))
    repair_op.repair(store, small_config(), apply=True, quiet=True)
    assert goldenlib.compare(golden_set("small-roll"), store) == []


def test_a_planted_broker_temporary_directory_stops_nothing_and_is_cleared(restored_golden, tmp_path):
    """What a killed repair left under _rocketlake/tmp/ (and a legacy ``.repair-tmp`` beside a
    queue file) is removed by the next run, and neither is something verify reports."""
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    cq = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(store, "consumequeue")) for f in fs)[2]
    os.makedirs(os.path.join(store, paths.TMP_DIR, "repair-1-dead"))
    open(os.path.join(store, paths.TMP_DIR, "repair-1-dead", "000000"), "wb").write(b"junk")
    shutil.copy(cq, cq + ".repair-tmp")
    with open(cq, "r+b") as fh:
        fh.truncate(100)
    repair_op.repair(store, small_config(), apply=True, quiet=True)
    assert not os.path.exists(os.path.join(store, paths.META_DIR)) and not os.path.exists(cq + ".repair-tmp")
    assert goldenlib.compare(golden_set("small-roll"), store) == []


def test_a_broker_directory_repair_whose_tmp_dir_another_writer_removes_as_empty_makes_it_again(
        restored_golden, tmp_path, monkeypatch):
    """Writers holding the writer lease remove ``_rocketlake/tmp`` when they find it empty (an
    in-place import's scratch Delta tables, ``deltacommit._drop``); a broker directory's repair
    takes the broker's lock, not that lease. That directory removed between repair's making of it
    and of its own ``repair-*`` directory in it: made again, and the repair completes."""
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    cq = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(store, "consumequeue")) for f in fs)[0]
    with open(cq, "r+b") as fh:
        fh.truncate(100)
    real, raced = os.mkdir, []

    def racing(path, mode=0o777, **kw):
        if os.path.basename(str(path)).startswith("repair-") and not raced:
            raced.append(path)
            os.rmdir(os.path.dirname(path))            # the other writer found it empty
        return real(path, mode, **kw)
    monkeypatch.setattr(os, "mkdir", racing)
    s = repair_op.repair(store, small_config(), apply=True, quiet=True)
    monkeypatch.undo()
    assert raced and s["replaced"] == [os.path.relpath(cq, store)]
    assert goldenlib.compare(golden_set("small-roll"), store) == []
    assert not os.path.exists(os.path.join(store, paths.META_DIR))


def test_a_commits_scratch_clear_up_during_a_broker_directory_repair_leaves_its_directory(
        restored_golden, tmp_path, monkeypatch):
    """A writer whose commit went through clears what dead commits left under ``_rocketlake/tmp``
    (``ingest.commit.clear_dead_attempts`` -> ``deltacommit.clear_scratch``) while a broker
    directory's repair, held between two file replacements, works in its ``repair-*`` directory
    there: that directory survives, the repair completes, and what a dead commit left (a scratch
    table, a staging being dropped) is removed."""
    from concurrent.futures import ThreadPoolExecutor
    from storelib.ingest import commit as commit_stage
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    queues = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(store, "consumequeue")) for f in fs)
    for q in queues[:2]:
        with open(q, "r+b") as fh:
            fh.truncate(100)
    gate = str(tmp_path / "gate")
    monkeypatch.setenv("ROCKETLAKE_HOLD", f"mid-publish:{gate}")
    pool = ThreadPoolExecutor(1)
    repairing = pool.submit(repair_op.repair, store, small_config(), apply=True, quiet=True)
    try:
        for _ in range(1200):
            if os.path.exists(gate + ".reached") or repairing.done():
                break
            time.sleep(0.05)
        assert os.path.exists(gate + ".reached"), repairing.exception() if repairing.done() else "not reached"
        tmp = os.path.join(store, paths.TMP_DIR)
        working = [n for n in os.listdir(tmp) if n.startswith("repair-")]
        dead = [os.path.join(tmp, "0123456789abcdef0123456789abcdef", "_delta_log"),
                os.path.join(tmp, "drop-attempt-1-2")]
        for d in dead:
            os.makedirs(d)
        commit_stage.clear_dead_attempts(storage.Store(store), [], None)
        assert working and all(os.path.isdir(os.path.join(tmp, n)) for n in working)
        assert not any(os.path.exists(d) for d in dead)
    finally:
        open(gate, "w").close()
        pool.shutdown(wait=True)
    assert sorted(repairing.result()["replaced"]) == sorted(os.path.relpath(q, store) for q in queues[:2])
    assert goldenlib.compare(golden_set("small-roll"), store) == []
    assert not os.path.exists(os.path.join(store, paths.META_DIR))


# ---------------------------------------------------------------------------- item 9: checkpoint rule
def test_checkpoint_rule_is_ingests_when_the_last_put_did_not_wait(tmp_path):
    """small-roll's first 20 messages end with a put whose WAIT is false: physicMsgTimestamp is the
    last put that waited, for repair as for ingest; the repaired file and its rows agree."""
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl")).readlines()[:20]
    assert ["WAIT", "false"] in json.loads(lines[-1])["properties"]
    base = repairstores.parts(tmp_path, (), lines)
    store = str(tmp_path / "store")
    repairstores.ingest(store, base, "p0", "A")
    s = repair_op.repair(store, quiet=True)
    assert _damaging(s) == [], _damaging(s)
    good = open(os.path.join(store, "checkpoint"), "rb").read()
    with open(os.path.join(store, "checkpoint"), "r+b") as fh:
        fh.write(bytes(24))
    s = repair_op.repair(store, apply=True, quiet=True)
    assert s["replaced"] == ["checkpoint"]
    assert open(os.path.join(store, "checkpoint"), "rb").read() == good
    snap = manifest.load_snapshot(storage.Store(store))
    assert snap.batch["physic_msg_timestamp"] == int.from_bytes(good[:8], "big")
    assert _deep(store) == []


# ---------------------------------------------------------------------------- items 4, 10: pending publish
@pytest.mark.slow
def test_repair_of_a_store_whose_publish_is_pending(inputs, tmp_path):
    """B committed, killed before its publish: the dry run reads the committed files (no crash);
    the apply finishes B's publish first, then repairs what is damaged; the store is RocketMQ's."""
    import subprocess
    import sys
    store = str(tmp_path / "store")
    repairstores.ingest(store, inputs, "p0", "A")
    runner = os.path.join(os.path.dirname(repairstores.__file__), "local_ingest.py")
    r = subprocess.run([sys.executable, runner, "ingest", store, os.path.join(inputs, "p1.jsonl"),
                        os.path.join(inputs, "small.properties"), "B"],
                       env=dict(os.environ, ROCKETLAKE_FAULT="after-commit-before-publish"), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == -9, r.stderr[-2000:]
    assert storage.Store(store).exists(paths.STAGING_DIR) and _batches(store) == ["A", "B"]
    s = repair_op.repair(store, quiet=True)
    assert _damaging(s) == [] and s["pending_publish"] == ["B"], _damaging(s)
    a_only = [r["path"] for r in manifest.load_snapshot(storage.Store(store)).of_kind("consumequeue")
              if r["batch_id"] == "A"][0]
    os.remove(os.path.join(store, a_only))
    s = repair_op.repair(store, quiet=True)
    assert [f["path"] for f in _damaging(s)] == [a_only]
    s = repair_op.repair(store, apply=True, quiet=True)
    assert s["replaced"] == [a_only]
    assert not storage.Store(store).exists(paths.STAGING_DIR)
    assert goldenlib.compare(golden_set("small-roll"), store) == []
    assert _deep(store) == []


# ---------------------------------------------------------------------------- #36 item 3: sizes
def test_broker_directory_without_queue_and_index_files_needs_config(restored_golden, tmp_path):
    store = shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))
    shutil.rmtree(os.path.join(store, "consumequeue"))
    shutil.rmtree(os.path.join(store, "index"))
    before = repairstores.files_state(store)
    res = run("repair.py", "--store", store, "--apply")
    assert res.returncode == 2, res.stderr
    assert "--config" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert repairstores.files_state(store) == before
    res = run("repair.py", "--store", store, "--apply", "--config", small_properties(tmp_path))
    assert res.returncode == 0, res.stderr
    assert goldenlib.compare(golden_set("small-roll"), store) == []


# ---------------------------------------------------------------------------- an export's own sizes
def test_repair_of_an_export_takes_the_sizes_its_properties_record(tmp_path):
    """An export without a manifest records its sizes in rocketlake.properties (verify, query and
    import read them): repair must too, rather than guess from the index file's size with the 1:4
    ratio, which fits these sizes' file (21 slots, 21 entries: 544 bytes) as 6 slots and 24 entries
    and would rewrite a sound index file into a damaged one."""
    props = tmp_path / "odd.properties"
    props.write_text("mappedFileSizeCommitLog=65536\nmappedFileSizeConsumeQueue=2000\n"
                     "maxHashSlotNum=21\nmaxIndexNum=21\n")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"topic": "orders", "body": f"order {i}", "store_timestamp": 1717228800000 + i,
                                       "properties": [["KEYS", f"order-{i}"]]}) + "\n" for i in range(3)))
    store, out = str(tmp_path / "store"), str(tmp_path / "export")
    res = run("ingest.py", "--store", store, "--input", str(src), "--config", str(props), "--local", "always")
    assert res.returncode == 0, res.stderr
    res = run("export.py", "--store", store, "--to", out)
    assert res.returncode == 0, res.stderr
    before = repairstores.files_state(out)
    for mode in ((), ("--apply",)):
        res = run("repair.py", "--store", out, *mode)
        assert res.returncode == 0, res.stdout + res.stderr
        assert '"ok":5' in res.stderr and res.stdout == "", res.stdout + res.stderr
        assert repairstores.files_state(out) == before
    res = run("repair.py", "--store", out, "--config", small_properties(tmp_path))
    assert res.returncode == 2 and "maxHashSlotNum" in res.stderr, res.stderr
    # the one choice repair and the mirror make: the export's sizes while its properties are there
    from storelib.format.config import load_config
    from storelib.table.storeinfo import broker_config
    sized = broker_config(storage.Store(out))
    assert sized.source == "export" and (sized.config.maxHashSlotNum, sized.config.maxIndexNum) == (21, 21)
    with pytest.raises(Exception, match="maxHashSlotNum"):
        broker_config(storage.Store(out), small_config(), small_config())
    os.remove(os.path.join(out, "rocketlake.properties"))
    guessed = broker_config(storage.Store(out), load_config(None))
    assert guessed.source == "files" and (guessed.config.maxHashSlotNum, guessed.config.maxIndexNum) == (6, 24)
