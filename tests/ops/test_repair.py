"""repair: consume-queue files, index files and the checkpoint rebuilt from the CommitLog of stores
RocketMQ itself wrote (the golden sets), damaged in every way the issue lists, compared byte for
byte with what RocketMQ wrote (goldenlib.compare)."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from support import goldenlib
from conftest import golden_set
from support.opshelp import run, small_config, small_properties
from storelib.errors import BrokerRunning
from storelib.io import storage
from storelib.ops import adopt, repair as repair_op
from storelib.table import manifest
from storelib.verify import driver as verify

DAMAGE_STATES = ("missing", "truncated", "differing", "extra")


def _files(store: str, sub: str) -> list:
    return sorted(os.path.relpath(os.path.join(d, f), store) for d, _, fs in os.walk(os.path.join(store, sub))
                  for f in fs)


def _stat(store: str) -> dict:
    out = {}
    for sub in ("consumequeue", "index"):
        for rel in _files(store, sub):
            st = os.stat(os.path.join(store, rel))
            out[rel] = (st.st_ino, st.st_mtime_ns)
    st = os.stat(os.path.join(store, "checkpoint"))
    out["checkpoint"] = (st.st_ino, st.st_mtime_ns)
    return out


def _poke(path: str, at: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(data)


@pytest.fixture
def small_roll(restored_golden, tmp_path):
    """A private copy of small-roll (64 KiB segments, 30-unit queue files, 255-entry index
    files; IPv6 hosts, transactions, delay topics among its messages)."""
    return shutil.copytree(restored_golden("small-roll"), str(tmp_path / "store"))


def _damage(store: str) -> dict:
    """One of each damage kind; returns path -> the state a dry run must report."""
    cq = _files(store, "consumequeue")
    idx = _files(store, "index")
    want = {}
    os.remove(os.path.join(store, cq[0]))
    want[cq[0]] = "missing"
    with open(os.path.join(store, cq[1]), "r+b") as fh:
        fh.truncate(100)                                   # mid-unit
    want[cq[1]] = "truncated"
    _poke(os.path.join(store, cq[2]), 0, bytes(600))       # zero-filled
    want[cq[2]] = "differing"
    _poke(os.path.join(store, cq[3]), 25, b"\x07")         # a unit's physical offset flipped
    want[cq[3]] = "differing"
    _poke(os.path.join(store, cq[4]), 40 + 8, b"\x00\x00\x7f\x00")   # a unit's size
    want[cq[4]] = "differing"
    gone = [r for r in cq if r.startswith("consumequeue/refund/")]
    shutil.rmtree(os.path.join(store, "consumequeue", "refund"))     # a whole topic directory
    want.update(dict.fromkeys(gone, "missing"))
    os.remove(os.path.join(store, idx[3]))                 # an index file in the middle
    _poke(os.path.join(store, idx[5]), 40 + 64 * 4 + 20 * 7 + 5, b"\x09")     # an entry's phys
    want[idx[5]] = "differing"
    _poke(os.path.join(store, idx[6]), 36, b"\x00\x00\x00\x05")       # header indexCount
    want[idx[6]] = "differing"
    _poke(os.path.join(store, idx[7]), 40 + 4 * 9, b"\x00\x00\x00\x00")   # a slot head zeroed
    want[idx[7]] = "differing"
    with open(os.path.join(store, idx[-1]), "r+b") as fh:
        fh.truncate(1000)                                  # the newest index file cut short
    want[idx[-1]] = "truncated"
    _poke(os.path.join(store, "checkpoint"), 3, b"\x11")
    want["checkpoint"] = "differing"
    return want


def test_clean_golden_store_has_nothing_to_repair(small_roll, monkeypatch):
    s = repair_op.repair(small_roll, small_config(), quiet=True)
    assert s["records"] == 3000 and s["counts"] == {"ok": len(s["findings"])}
    kinds = {f["kind"] for f in s["findings"]}
    assert kinds == {"consumequeue", "index", "checkpoint"}
    from storelib.ops import rebuild
    monkeypatch.setattr(rebuild, "RANGE_RECORDS", 7)       # a segment's records in pieces on threads
    s = repair_op.repair(small_roll, small_config(), threads=99, quiet=True)
    assert s["records"] == 3000 and s["counts"] == {"ok": len(s["findings"])} and s["commitlog"] == []


def test_damaged_commitlog_record_ends_the_dispatch(small_roll):
    """A record whose TOTALSIZE no longer fits its parts: what follows it is not dispatched (a
    broker's recovery ends the data there too); the queues' units past it are reported."""
    seg = os.path.join(small_roll, "commitlog", sorted(os.listdir(os.path.join(small_roll, "commitlog")))[-1])
    with open(seg, "rb") as fh:
        head = fh.read(8)
    first = int.from_bytes(head[:4], "big")
    _poke(seg, first, b"\x00\x00\x00\x30")                 # the second record's TOTALSIZE: 48 bytes
    s = repair_op.repair(small_roll, small_config(), quiet=True)
    assert s["commitlog"] == [f"commitlog/{os.path.basename(seg)}: a damaged record at byte {first}: nothing from "
                              "there on was dispatched"]
    assert s["records"] < 3000 and any(f["state"] == "differing" for f in s["findings"])


def test_damage_reported_then_repaired_byte_identical(small_roll):
    store = small_roll
    want = _damage(store)
    before = _stat(store)
    res = run("repair.py", "--store", store, "--config", small_properties(os.path.dirname(store)),
              "--json-summary", os.path.join(os.path.dirname(store), "dry.json"))
    assert res.returncode == 1, res.stderr                 # a dry run that finds damage
    assert _stat(store) == before                          # ... and writes nothing
    dry = json.load(open(os.path.join(os.path.dirname(store), "dry.json")))
    found = {f["path"]: f for f in dry["findings"] if f["state"] != "ok"}
    for path, state in want.items():
        assert found[path]["state"] == state, (path, found.get(path))
    assert sum(f["kind"] == "index" and f["state"] == "missing" for f in found.values()) == 1
    assert found["checkpoint"]["detail"].startswith("physicMsgTimestamp is ")
    unit = next(f for p, f in found.items() if p.startswith("consumequeue/") and want.get(p) == "differing"
                and "unit 1 " in f["detail"])
    assert "should be (phys " in unit["detail"]
    assert set(found) - set(want) == {next(f["path"] for f in found.values() if f["kind"] == "index"
                                           and f["state"] == "missing")}
    s = repair_op.repair(store, small_config(), apply=True, quiet=True)
    assert sorted(s["replaced"]) == sorted(found)
    assert goldenlib.compare(golden_set("small-roll"), store) == []
    after = _stat(store)
    untouched = set(before) - set(found)
    assert untouched and all(after[p] == before[p] for p in untouched)
    again = repair_op.repair(store, small_config(), quiet=True)
    assert set(again["counts"]) == {"ok"}


def test_random_damage_is_repaired(small_roll):
    """Random bytes of random consume-queue and index files overwritten or cut (seeded)."""
    rng = random.Random(int(os.environ.get("REPAIR_SEED", "22")))
    store = small_roll
    targets = rng.sample(_files(store, "consumequeue"), 12) + rng.sample(_files(store, "index"), 4)
    for rel in targets:
        path = os.path.join(store, rel)
        size = os.path.getsize(path)
        if rng.random() < 0.25:
            with open(path, "r+b") as fh:
                fh.truncate(rng.randrange(size))
        else:
            _poke(path, rng.randrange(min(size, 600)), bytes([rng.randrange(256)]) * rng.randrange(1, 9))
    s = repair_op.repair(store, small_config(), quiet=True)
    assert {f["path"] for f in s["findings"] if f["state"] in DAMAGE_STATES} <= set(targets) | {"checkpoint"}
    repair_op.repair(store, small_config(), apply=True, quiet=True)
    assert goldenlib.compare(golden_set("small-roll"), store) == []


_HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_refuses_a_store_a_running_broker_locks(small_roll, tmp_path):
    store = small_roll
    os.remove(os.path.join(store, _files(store, "consumequeue")[0]))
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, os.path.join(store, "lock")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = _stat(store)
        with pytest.raises(BrokerRunning):
            repair_op.repair(store, small_config(), apply=True, quiet=True)
        res = run("repair.py", "--store", store, "--apply", "--config", small_properties(tmp_path))
        assert res.returncode == 3 and "running broker" in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert _stat(store) == before
    finally:
        holder.kill()
        holder.wait()
    repair_op.repair(store, small_config(), apply=True, quiet=True)      # the broker gone: it goes on
    assert goldenlib.compare(golden_set("small-roll"), store) == []


def test_expired_store_keeps_what_it_cannot_derive(tmp_path):
    """expire-small after RocketMQ's own expiry: the commitlog starts at 21 segments in, so the
    queues' first units have no record left; index files are left as they are."""
    from support.opshelp import restore
    store = restore("expire-small", "files_after.json", str(tmp_path / "store"))
    s = repair_op.repair(store, small_config(), quiet=True)
    assert not [f for f in s["findings"] if f["state"] in DAMAGE_STATES], s["counts"]
    partial = next(f for f in s["findings"] if "kept as found" in f["detail"])
    path = os.path.join(store, partial["path"])
    good = open(path, "rb").read()
    _poke(path, len(good) - 600 + 20 * 29, b"\x01" * 20)        # the file's last unit
    s = repair_op.repair(store, small_config(), apply=True, quiet=True)
    assert s["replaced"] == [partial["path"]] and open(path, "rb").read() == good
    assert any(f["kind"] == "index" and f["state"] == "underived" for f in s["findings"])


def test_rocketlake_store_repair_is_a_batch_and_verifies(small_roll):
    store = small_roll
    adopt.adopt(None, store, store, small_config(), quiet=True)
    cq = _files(store, "consumequeue")
    os.remove(os.path.join(store, cq[5]))
    _poke(os.path.join(store, _files(store, "index")[2]), 40 + 64 * 4 + 20 * 3, b"\xff\xff")
    _poke(os.path.join(store, "checkpoint"), 9, b"\x42")
    s = repair_op.repair(store, apply=True, quiet=True)
    assert len(s["replaced"]) == 3 and s["batch_seq"] == 2
    snap = manifest.load_snapshot(storage.Store(store))
    assert snap.batch["operation"] == "repair" and snap.batch["batch_id"] == s["batch_id"]
    assert [b["operation"] for b in snap.batches] == ["import", "repair"]
    assert verify.verify_store(store, deep=True).problems == []
    assert goldenlib.compare(golden_set("small-roll"), store) == []


@pytest.mark.spark
def test_spark_tasks_per_segment(small_roll, spark):
    store = small_roll
    os.remove(os.path.join(store, _files(store, "index")[0]))
    s = repair_op.repair(store, small_config(), apply=True, spark=spark, quiet=True)
    assert s["segments"] == 63 and len(s["replaced"]) == 1
    assert goldenlib.compare(golden_set("small-roll"), store) == []


def test_a_5_5_store_keeps_its_sixth_checkpoint_value(tmp_path):
    """rocketmqVersion=5.5: the checkpoint's sixth value (the commitlog offset of the last record
    with a queue unit) is part of the file. Repair derives it (a store of that line, with or
    without its manifest, has nothing to repair) and verify of the broker's view reads it as the
    line's, not as a non-zero byte past the layout."""
    import dataclasses
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    from support.rmqfeatures import message
    cfg = dataclasses.replace(small_config(), rocketmqVersion="5.5")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(message("orders", i % 2, i, 1_717_000_000_000 + i, [("KEYS", f"k{i}")])) + "\n"
                           for i in range(40)))
    store = str(tmp_path / "store")
    run_ingest(LocalSession(), store, str(inp), "jsonl", cfg, batch_id="b0", quiet=True)
    broker = shutil.copytree(store, str(tmp_path / "broker"), ignore=shutil.ignore_patterns("_rocketlake*"))
    assert int.from_bytes(open(os.path.join(broker, "checkpoint"), "rb").read()[40:48], "big") > 0
    for s in (store, broker):
        found = repair_op.plan_repair(storage.Store(s), cfg,
                                      snap=manifest.load_snapshot(storage.Store(s)) if s == store else None)
        assert {f["path"]: f["state"] for f in found["findings"] if f["state"] != "ok"} == {}, s
    assert verify.verify_store(broker, cfg, deep=True).problems == []
