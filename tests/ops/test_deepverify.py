"""``verify --deep`` of a directory without a manifest finds at least what repair's dry run finds
(issue 36 item 2): every missing, truncated or differing queue and index file, by the same
derivation from the CommitLog (``storelib.ops.deepverify`` over ``ops.repair.plan_repair``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from support import repairstores
from conftest import ROOT
from storelib.errors import ConfigError, RepairRefused, exit_code
from storelib.io import storage
from storelib.ops import deepverify, expire as expire_op
from storelib.ops.repair import repair
from storelib.table import manifest
from storelib.table.export import QUEUE_STARTS_KEY, export_store, recorded_queue_starts

from test_ops_check import base  # noqa: F401 - the two-batch demo store


@pytest.fixture(scope="module")
def exported(base):  # noqa: F811
    tmp, store = base
    out = str(tmp / "exported-for-verify")
    export_store(store, out)
    return out


def _remove_index(d):
    for f in os.listdir(os.path.join(d, "index")):
        os.remove(os.path.join(d, "index", f))


def _all_queue_files(d) -> list:
    out = []
    for dp, _, fs in os.walk(os.path.join(d, "consumequeue")):
        out += [os.path.join(dp, f) for f in fs]
    return sorted(out)


def _queue_file(d, k=0):
    return _all_queue_files(d)[k]


def _truncate_queue(d):
    with open(_queue_file(d, 3), "r+b") as fh:
        fh.truncate(40)


def _queue_files(d) -> dict:
    """queue directory -> its files, in offset order."""
    out: dict = {}
    for f in _all_queue_files(d):
        out.setdefault(os.path.dirname(f), []).append(f)
    return out


def _remove_queue(d):
    """The second file of a queue (an export's queue may start late, never have a hole)."""
    os.remove(next(fs[1] for _, fs in sorted(_queue_files(d).items()) if len(fs) > 1))


def _remove_first_queue_file_of_a_broker_directory(d):
    """A broker's directory (no rocketlake.properties): a queue's first file gone while the
    CommitLog still holds its records is damage."""
    os.remove(os.path.join(d, "rocketlake.properties"))
    os.remove(next(fs[0] for _, fs in sorted(_queue_files(d).items()) if len(fs) > 1))


def _zero_unit(d):
    with open(_queue_file(d, 7), "r+b") as fh:
        fh.seek(20)
        fh.write(bytes(20))


def _slot(d):
    idx = sorted(os.listdir(os.path.join(d, "index")))[1]
    with open(os.path.join(d, "index", idx), "r+b") as fh:
        fh.seek(40 + 4 * 7)
        fh.write(b"\x00\x00\x00\x00")


DAMAGES = {"index-removed": _remove_index, "queue-truncated": _truncate_queue, "queue-removed": _remove_queue,
           "queue-unit-zeroed": _zero_unit, "index-slot-cleared": _slot,
           "broker-first-queue-file-removed": _remove_first_queue_file_of_a_broker_directory}


def test_clean_export_is_clean(exported):
    assert deepverify.verify_store(exported, deep=True).problems == []


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_deep_verify_finds_what_repair_finds(exported, tmp_path, damage):
    d = str(tmp_path / "dmg")
    shutil.copytree(exported, d)
    DAMAGES[damage](d)
    found = repair(d, quiet=True)["findings"]
    repair_paths = {f["path"] for f in found if f["state"] in ("missing", "truncated", "differing", "extra")
                    and f["kind"] in ("consumequeue", "index")}
    assert repair_paths, "the damage must be one repair's dry run sees"
    rep = deepverify.verify_store(d, deep=True)
    named = {p.split("@", 1)[0] for p in rep.problems}
    assert repair_paths <= named, (repair_paths - named, rep.problems[:8])


def test_command_line_fails_on_a_directory_without_index_files(exported, tmp_path):
    d = str(tmp_path / "dmg")
    shutil.copytree(exported, d)
    _remove_index(d)
    res = subprocess.run([sys.executable, "-m", "storelib.cli.main", "verify", "--store", d, "--deep"], cwd=ROOT,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert res.returncode == 1, res.stderr
    assert "index/" in res.stdout and "missing index file" in res.stdout


# ---------------------------------------------------------------------------- an export after a topic's retention
@pytest.fixture(scope="module")
def retained_export(base, tmp_path_factory):  # noqa: F811
    """The demo store after one topic's own retention removed all but each queue's last file (their
    records stay in the CommitLog: the other topics keep every segment), exported."""
    _, store = base
    tmp = tmp_path_factory.mktemp("retained")
    work = shutil.copytree(store, str(tmp / "store"))
    snap = manifest.load_snapshot(storage.Store(work))
    per_topic: dict = {}
    for r in snap.of_kind("consumequeue"):
        per_topic.setdefault(r["path"].split("/")[1], []).append(r["path"])
    topic = max(sorted(per_topic), key=lambda t: len(per_topic[t]))
    now = max(b["max_store_ts"] for b in snap.batches) + 3600 * 1000
    r = expire_op.expire(work, None, now_ms=now, topic_rules={topic: 0}, quiet=True)
    assert r["status"] == "committed" and r["consumequeue_removed"] > 0 and r["commitlog_removed"] == 0
    out = str(tmp / "export")
    export_store(work, out)
    return out, topic


def _first_files(d) -> list:
    """The first file of every queue (a retained topic's queue starts late)."""
    return [fs[0] for _, fs in sorted(_queue_files(d).items())]


def test_export_records_where_each_queue_starts(retained_export):
    """rocketlake.properties says where each queue's first file starts (a key a broker ignores);
    the files before a retained queue's start are not missing, and repair writes none of them back."""
    d, topic = retained_export
    starts = recorded_queue_starts(storage.Store(d))
    on_disk = {os.path.relpath(os.path.dirname(f), os.path.join(d, "consumequeue")): int(os.path.basename(f)) // 20
               for f in _first_files(d)}
    assert starts == on_disk and any(v > 0 for k, v in starts.items() if k.startswith(topic + "/"))
    assert deepverify.verify_store(d, deep=True).problems == []
    before = repairstores.files_state(d)
    s = repair(d, apply=True, quiet=True)
    assert s["replaced"] == [] and s["removed"] == [] and repairstores.files_state(d) == before
    assert any(f["state"] == "unlisted" and f"/{topic}/" in f["path"] for f in s["findings"])


@pytest.mark.parametrize("which", ["retained-topic", "other-topic"])
def test_a_lost_first_queue_file_of_an_export(retained_export, tmp_path, which):
    """A queue's first file gone from an export: verify --deep names it (the recorded start tells it
    from a file retention removed) and repair --apply restores exactly it."""
    d = shutil.copytree(retained_export[0], str(tmp_path / "dmg"))
    topic = retained_export[1]
    want = repairstores.files_state(d)
    victim = next(f for f in _first_files(d) if (f"/{topic}/" in f) == (which == "retained-topic"))
    os.remove(victim)
    rel = os.path.relpath(victim, d)
    problems = deepverify.verify_store(d, deep=True).problems
    assert any(p.startswith(rel + "@") and "missing" in p for p in problems), problems[:8]
    s = repair(d, apply=True, quiet=True)
    assert s["replaced"] == [rel] and repairstores.files_state(d) == want
    assert deepverify.verify_store(d, deep=True).problems == []


def test_export_queue_starts_edited_by_hand(retained_export, tmp_path):
    """A recorded queue-start line that is not what export wrote: one line naming the file (exit 2)."""
    d = shutil.copytree(retained_export[0], str(tmp_path / "edited"))
    props = os.path.join(d, "rocketlake.properties")
    text = open(props).read()
    with open(props, "w") as fh:
        fh.write(text.replace(f"{QUEUE_STARTS_KEY}={{", f"{QUEUE_STARTS_KEY}=[{{"))
    with pytest.raises(ConfigError) as e:
        repair(d, quiet=True)
    assert props in str(e.value) and QUEUE_STARTS_KEY in str(e.value) and exit_code(e.value) == 2


@pytest.fixture(scope="module")
def expired_export(base, tmp_path_factory):  # noqa: F811
    """The demo store after a store-wide expiry removed its first segments, exported: some queue
    files start with units whose records are gone."""
    _, store = base
    tmp = tmp_path_factory.mktemp("expired")
    work = shutil.copytree(store, str(tmp / "store"))
    segs = sorted(manifest.load_snapshot(storage.Store(work)).of_kind("commitlog"), key=lambda r: r["base_offset"])
    r = expire_op.expire(work, 1, now_ms=segs[2]["max_store_ts"] + 3600 * 1000 + 1, quiet=True)
    assert r["status"] == "committed" and 0 < r["commitlog_removed"] < len(segs) - 1
    out = str(tmp / "export")
    export_store(work, out)
    return out, r["min_phy_offset"]


def _half_expired(d, min_phy: int) -> str:
    for f in _all_queue_files(d):
        raw = open(f, "rb").read()
        first, last = 0, max(i for i in range(0, len(raw), 20) if raw[i + 8:i + 12] != bytes(4))
        if int.from_bytes(raw[first:first + 8], "big") < min_phy <= int.from_bytes(raw[last:last + 8], "big"):
            return f
    raise AssertionError("no queue file straddles the min phy offset")


@pytest.mark.parametrize("how", ["delete", "zero-first-unit"])
def test_an_export_queue_file_damaged_where_its_records_expired(expired_export, tmp_path, how):
    """In a directory without a manifest too, units whose records an expiry deleted are only in
    their file: damaged there, verify --deep names the file and repair --apply refuses it (exit 3),
    changing nothing, where it used to write zeros a broker's recovery stops at."""
    d = shutil.copytree(expired_export[0], str(tmp_path / "dmg"))
    victim = _half_expired(d, expired_export[1])
    rel = os.path.relpath(victim, d)
    if how == "delete":
        os.remove(victim)
    else:
        with open(victim, "r+b") as fh:
            fh.write(bytes(20))
    problems = deepverify.verify_store(d, deep=True).problems
    assert any(p.startswith(rel + "@") and "unrestorable" in p for p in problems), problems[:8]
    before = repairstores.files_state(d)
    with pytest.raises(RepairRefused) as e:
        repair(d, apply=True, quiet=True)
    assert e.value.path == rel and exit_code(e.value) == 3 and repairstores.files_state(d) == before
