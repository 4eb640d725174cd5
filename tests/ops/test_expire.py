"""jobs/expire.py against the expire-small golden set (RocketMQ's own fileReservedTime run)."""
from __future__ import annotations

import json
import os

import pytest

from conftest import GOLDEN
from support.opshelp import mismatches, restore, run, small_config
from storelib.ops import adopt, expire as retention, inspect as inspection
from storelib.table import manifest, tableread
from storelib.table.rows import queue_ends
from storelib.read import query
from storelib.io import storage
from storelib.verify import driver as verify
from storelib.format import paths

SET = os.path.join(GOLDEN, "expire-small")


@pytest.fixture(scope="module")
def expired(tmp_path_factory):
    """expire-small's store before expiry, adopted, then expired by `python jobs/expire.py`."""
    store = restore("expire-small", "files_before.json", str(tmp_path_factory.mktemp("exp") / "store"))
    adopt.adopt(None, store, store, small_config(), quiet=True)
    now = json.load(open(os.path.join(SET, "config.json")))["expire"]["now_ms"]
    dry = run("expire.py", "--store", store, "--reserved-hours", "48", "--now", str(now), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert manifest.load_snapshot(storage.Store(store)).batch["operation"] == "import"
    res = run("expire.py", "--store", store, "--reserved-hours", "48", "--now", str(now),
              "--json-summary", os.path.join(os.path.dirname(store), "summary.json"))
    assert res.returncode == 0, res.stderr
    summary = json.load(open(os.path.join(os.path.dirname(store), "summary.json")))
    return store, summary, dry.stdout


def test_removes_exactly_rocketmqs_files(expired):
    store, summary, dry_out = expired
    deleted = json.load(open(os.path.join(SET, "deleted.json")))["deleted"]
    want = sorted(deleted["commitlog"] + deleted["consumequeue"] + deleted["index"])
    assert sorted(summary["removed"]) == want
    assert sorted(line.split(" ", 2)[2] for line in dry_out.splitlines() if line.startswith("would remove")) == want
    after = {f["path"] for f in json.load(open(os.path.join(SET, "files_after.json")))["files"]}
    on_disk = {os.path.relpath(os.path.join(d, f), store) for d, _, fs in os.walk(store) for f in fs}
    on_disk = {p for p in on_disk if not p.startswith("_rocketlake")}
    assert on_disk == after - {"compaction/position-checkpoint.bak"}   # the broker's re-open created that one
    assert summary["min_phy_offset"] == 21 * 65536
    assert summary["housekeeping"]["manifest"]["checkpoint"] is True


def test_one_commit_with_remove_rows_and_expire_checkpoint(expired):
    store, summary, _ = expired
    st = storage.Store(store)
    snap = manifest.load_snapshot(st)
    b = snap.batch
    assert b["operation"] == "expire" and b["batch_seq"] == 2 and b["min_phy_offset"] == 1376256
    prev = snap.batches[0]
    for k in ("max_phy_offset", "total_messages", "physic_msg_timestamp", "config"):
        assert b[k] == prev[k]
    # an expiry changes no queue's next offset: its row lists none, the queues' ends stay the first batch's
    assert b["queue_offsets"] == [] and b.changed_queues_only
    assert queue_ends(snap.files.values()) == {(q["topic"], q["queue_id"]): q["max_offset"] for q in prev["queue_offsets"]}
    rows = [r for r in manifest.read_rows(manifest.open_table(st, paths.MANIFEST_DIR))
            if r["batch_id"] == b["batch_id"]]
    assert len(rows) == 39 and all(r["action"] == "remove" for r in rows)
    assert all({"reason", "when"} <= set(json.loads(r["detail"])) for r in rows)
    hist = [h for h in tableread.history(st) if h["rocketlake_operation"] == "expire"]
    assert {h["table"] for h in hist} == {"manifest", "checkpoints"}
    # the import is still readable as of its batch
    old = manifest.load_snapshot(st, 1)
    assert len(old.of_kind("commitlog")) == 51


def test_golden_answers_after_expiry(expired):
    store, _, _ = expired
    reader = inspection.snapshot_reader(store)
    assert reader.get_min_phy_offset() == 1376256
    assert mismatches(reader, "expire-small") == []
    if hasattr(query, "open_store"):                     # the query module's own snapshot reader
        assert mismatches(query.open_store(store), "expire-small") == []


def test_verify_after_expiry_and_rerun_is_noop(expired):
    store, _, _ = expired
    assert verify.verify_store(store, deep=True).problems == []
    again = retention.expire(store, 48, json.load(open(os.path.join(SET, "config.json")))["expire"]["now_ms"],
                             quiet=True, housekeeping=False)
    assert again["status"] == "nothing-to-do" and again["removed"] == []


def test_never_the_last_segment(tmp_path):
    store = restore("expire-small", "files_before.json", str(tmp_path / "s"))
    adopt.adopt(None, store, store, small_config(), quiet=True)
    s = retention.expire(store, 0, 10**15, quiet=True)            # everything is "old"
    snap = manifest.load_snapshot(storage.Store(store))
    segs = snap.of_kind("commitlog")
    assert len(segs) == 1 and segs[0]["path"] == "commitlog/00000000000003276800"
    idx = snap.of_kind("index")
    assert idx[-1]["path"] == "index/20000101000024000"                # the newest is never removed
    assert idx[0]["max_offset"] >= 3276800                             # the walk stops at the first kept
    assert all(len([r for r in snap.of_kind("consumequeue") if (r["topic"], r["queue_id"]) == q]) == 1
               for q in {(r["topic"], r["queue_id"]) for r in snap.of_kind("consumequeue")})
    r = inspection.snapshot_reader(store)
    assert r.get_min_phy_offset() == 3276800
    assert r.get_min_offset_in_queue("early_sms", 0) == r.get_max_offset_in_queue("early_sms", 0)
    assert s["commitlog_removed"] == 50
    assert verify.verify_store(store, deep=True).problems == []
