"""jobs/ingest.py --from-store: adopt a RocketMQ broker's store, query it, append to it."""
from __future__ import annotations

import json
import os

import pytest

from conftest import GOLDEN
from support.lockholder import broker_holding, stat_tree
from support.opshelp import mismatches, restore, run, small_config, small_properties, write_messages
from storelib import errors
from storelib.ops import adopt, inspect as inspection
from storelib.ingest import driver as ingest
from storelib.table import manifest
from storelib.io import storage
from storelib.verify import driver as verify
from storelib.format.config import load_config


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """small-roll restored and adopted in place by `spark-submit jobs/ingest.py --from-store`."""
    d = tmp_path_factory.mktemp("imp")
    store = restore("small-roll", "files.json", str(d / "store"))
    res = run("ingest.py", "--store", store, "--from-store", store, "--config", small_properties(d),
              "--json-summary", str(d / "summary.json"), submit=True)
    assert res.returncode == 0, res.stderr[-3000:]
    return store, json.load(open(d / "summary.json"))


def test_import_summary_and_state(imported):
    store, summary = imported
    puts = [json.loads(x) for x in open(os.path.join(GOLDEN, "small-roll", "put_results.jsonl"))]
    last = max(puts, key=lambda p: p["wrote_offset"])
    assert summary["status"] == "committed" and summary["operation"] == "import"
    assert summary["messages"] == 3000 and summary["segments"] == 63 and summary["index_files"] == 25
    assert summary["consumequeue_files"] == 142
    snap = manifest.load_snapshot(storage.Store(store))
    st = ingest.store_state(snap)
    assert st.next_phys == last["wrote_offset"] + last["wrote_bytes"]
    assert st.messages == 3000 and st.index_files == 25
    assert st.index_tail.rel_path == "index/20000101000024000"
    qmax = {}
    for m, p in zip((json.loads(x) for x in open(os.path.join(GOLDEN, "small-roll", "messages.jsonl"))), puts):
        if m["sys_flag"] & 0xC in (0, 8):
            qmax[(m["topic"], m["queue_id"])] = p["queue_offset"] + 1
    assert st.queue_next == qmax
    ck = snap.batch
    assert ck["physic_msg_timestamp"] == last["store_timestamp"]
    assert json.loads(ck["config"])["mappedFileSizeCommitLog"] == 65536


def test_every_golden_query_after_import(imported):
    store, _ = imported
    assert mismatches(inspection.snapshot_reader(store), "small-roll") == []


def test_append_after_import_verifies_deep(imported, spark, tmp_path):
    store, _ = imported
    src = os.path.join(GOLDEN, "small-roll", "messages.jsonl")
    before = manifest.load_snapshot(storage.Store(store)).batch
    s = ingest.run_ingest(spark, store, write_messages(src, str(tmp_path / "more.jsonl"), 0, 100), "jsonl",
                          small_config(), target_splits=2, quiet=True)
    assert s["status"] == "committed" and s["messages"] == 100
    rep = verify.verify_store(store, deep=True)
    assert rep.problems == [], rep.problems[:5]
    snap = manifest.load_snapshot(storage.Store(store))
    assert snap.batch["total_messages"] == 3100 and snap.batch["max_phy_offset"] > before["max_phy_offset"]
    r = inspection.snapshot_reader(store)
    # the first appended message continues its queue and is found by its key
    m0 = json.loads(open(src).readline())
    qo = {(q["topic"], q["queue_id"]): q["max_offset"] for q in before["queue_offsets"]}
    got = r.get_message("g", m0["topic"], m0["queue_id"], qo[(m0["topic"], m0["queue_id"])], 1)
    assert got["status"] == "FOUND" and got["messages"][0]["commitlog_offset"] == before["max_phy_offset"]
    # the import alone still answers the golden queries
    assert mismatches(inspection.snapshot_reader(store, as_of_batch=1), "small-roll") == []


def test_import_copies_into_another_dir(tmp_path):
    src = restore("small-roll", "files.json", str(tmp_path / "broker"))
    dst = str(tmp_path / "lake")
    s = adopt.adopt(None, dst, src, small_config(), quiet=True)
    assert s["status"] == "committed"
    assert os.stat(os.path.join(dst, "commitlog/00000000000000000000")).st_size == 65536
    assert not os.path.exists(os.path.join(src, "_rocketlake"))
    assert mismatches(inspection.snapshot_reader(dst), "small-roll") == []
    again = adopt.adopt(None, dst, dst, small_config(), quiet=True)
    assert again["status"] == "already-committed"
    _zone_maps_prune_alike(dst)


def _zone_maps_prune_alike(store):
    """An adopted broker store's segments get zone maps (from the verify scan): a store-time range
    plans fewer bytes and reads exactly the rows of a whole walk."""
    import numpy as np
    import pyarrow as pa
    from storelib.read import rangescan, splits
    from storelib.table.storefiles import as_store, open_files
    sto = as_store(store)
    files, info = open_files(sto)
    assert all(info.zones(s.base) is not None for s in files.commitlog)
    whole = pa.concat_tables([t for s in files.commitlog for t in rangescan.segment_messages(sto, s)])
    ts = np.sort(whole.column("store_timestamp").to_numpy())
    begin, end = int(ts[len(ts) // 3]), int(ts[len(ts) // 3 + 200])
    plan = splits.plan_splits(sto, files, files.commitlog, split_bytes=16000, info=info, begin=begin, end=end)
    got = pa.concat_tables([rangescan.empty_messages()] + [t for sp in plan
                                                           for t in splits.split_messages(sto, sp, begin, end)])
    t = whole.column("store_timestamp").to_numpy()
    assert got.combine_chunks().equals(whole.filter(pa.array((t >= begin) & (t <= end))).combine_chunks())
    assert 0 < sum(sp.stop - sp.start for sp in plan) < sum(s.valid for s in files.commitlog) / 3


def test_import_refuses_a_damaged_store(tmp_path):
    store = restore("small-roll", "files.json", str(tmp_path / "s"))
    with open(os.path.join(store, "consumequeue/shipping/1/00000000000000000000"), "r+b") as fh:
        fh.truncate(300)
    with pytest.raises(errors.AdoptError, match=r"consumequeue/shipping/1/00000000000000000000@300: file size 300"):
        adopt.adopt(None, store, store, small_config(), quiet=True)
    assert not os.path.exists(os.path.join(store, "_rocketlake"))


def _flip_body_byte(store: str, seg: str = "commitlog/00000000000000065536", k: int = 2) -> int:
    """Flip one bit of the body of record ``k`` of segment ``seg``; returns the record's offset in it."""
    import numpy as np
    from storelib.compute import kernels
    path = os.path.join(store, seg)
    buf = np.fromfile(path, np.uint8)
    starts, _stop, _reason = kernels.walk_records(buf, 0, len(buf))
    at = int(kernels.record_fields(buf, starts[k:k + 1])[kernels.F_BODY_POS][0])
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([b ^ 0x20]))
    return int(starts[k])


def test_import_refuses_a_body_that_is_not_its_crc(tmp_path):
    """A record whose body no longer matches its BODYCRC (a flipped byte the structure does not
    show) is damage the import finds: refused naming the file and the record's offset, nothing
    imported (in place: no ``_rocketlake/``, every file as it was; a copy: no copied file left, no
    directory made), exit 1 from the command. (An import checked the structure only, so the store
    was adopted and ``verify --deep`` then failed on it.)"""
    from support.opshelp import tree_digest
    broker = restore("small-roll", "files.json", str(tmp_path / "broker"))
    pos = _flip_body_byte(broker)
    want = rf"commitlog/00000000000000065536@{pos}: BODYCRC \d+ but the body's crc32"
    before, digest = stat_tree(broker), tree_digest(broker)
    with pytest.raises(errors.AdoptError, match=want):
        adopt.adopt(None, broker, broker, small_config(), quiet=True)
    assert stat_tree(broker) == before and tree_digest(broker) == digest
    assert not os.path.exists(os.path.join(broker, "_rocketlake"))
    lake = tmp_path / "lake"
    with pytest.raises(errors.AdoptError, match=want):
        adopt.adopt(None, str(lake), broker, small_config(), quiet=True)
    assert not lake.exists() and stat_tree(broker) == before
    res = run("ingest.py", "--store", broker, "--from-store", broker, "--config", small_properties(tmp_path))
    assert res.returncode == errors.AdoptError.exit_status and "BODYCRC" in res.stderr, (res.returncode,
                                                                                         res.stderr[-2000:])
    assert stat_tree(broker) == before


def test_import_default_size(tmp_path):
    store = restore("default-size", "files.json", str(tmp_path / "d"))
    s = adopt.adopt(None, store, store, load_config(None), quiet=True)
    assert s["messages"] == 20000 and s["segments"] == 1
    assert mismatches(inspection.snapshot_reader(store), "default-size") == []


def test_import_records_the_brokers_topic_config(tmp_path):
    """The broker's config/topics.json is recorded with the import: a later batch without --topics
    places messages by it, a --topics that disagrees on one of its topics is refused."""
    from storelib.ingest.topics import Topics
    src = restore("small-roll", "files.json", str(tmp_path / "broker"))
    topics = sorted({p.split("/")[1] for p in storage.Store(src).list_files("consumequeue")})[:2]
    os.makedirs(os.path.join(src, "config"))
    table = {t: {"topicName": t, "readQueueNums": 6, "writeQueueNums": 6, "perm": 6} for t in topics}
    table["not-in-store"] = {"topicName": "not-in-store", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
    with open(os.path.join(src, "config", "topics.json"), "w") as fh:
        json.dump({"topicConfigTable": table}, fh)
    dst = str(tmp_path / "lake")
    assert adopt.adopt(None, dst, src, small_config(), quiet=True)["status"] == "committed"
    snap = manifest.load_snapshot(storage.Store(dst))
    rec = snap.last_detail("topics")
    assert rec["placed"] == topics and rec["topics"]["not-in-store"] == [2, 2, 6]
    tcfg, changes = ingest.resolve_topics(snap, None, small_config())
    assert [tcfg.write_queue_nums(t) for t in topics] == [6, 6] and changes == {}
    other = Topics.parse(json.dumps({"topicConfigTable": {topics[0]: {"writeQueueNums": 3}}}), "t.json")
    with pytest.raises(errors.TopicsError, match=f"topic '{topics[0]}' writeQueueNums store=6 given=3"):
        ingest.resolve_topics(snap, other, small_config())
    tcfg, changes = ingest.resolve_topics(snap, other, small_config(), update=True)
    assert changes == {topics[0]: [6, 3]} and tcfg.write_queue_nums(topics[1]) == 6


def test_in_place_import_refuses_a_directory_a_running_broker_locks(tmp_path):
    """A broker running on the directory: refused (BrokerRunning, exit 3, one line), every file
    byte for byte, inode and mtime as it was, no ``_rocketlake/``; the broker gone, it imports."""
    from support.opshelp import tree_digest
    store = restore("small-roll", "files.json", str(tmp_path / "s"))
    lock = os.path.join(store, "lock")
    assert os.path.isfile(lock)              # (a broker creates it when it starts)
    with broker_holding(lock):
        before, digest = stat_tree(store), tree_digest(store)
        with pytest.raises(errors.BrokerRunning, match="running broker"):
            adopt.adopt(None, store, store, small_config(), quiet=True)
        res = run("ingest.py", "--store", store, "--from-store", store, "--config", small_properties(tmp_path))
        assert res.returncode == 3 and "running broker" in res.stderr, res.stderr[-2000:]
        assert stat_tree(store) == before and tree_digest(store) == digest
        assert not os.path.exists(os.path.join(store, "_rocketlake"))
    assert adopt.adopt(None, store, store, small_config(), quiet=True)["status"] == "committed"


def test_in_place_import_clears_what_a_killed_repair_left(tmp_path):
    """A repair killed in a broker's directory left ``_rocketlake/tmp/repair-*``: the in-place
    import, holding the broker lock every repair holds, removes it with its commit."""
    store = restore("small-roll", "files.json", str(tmp_path / "s"))
    dead = os.path.join(store, "_rocketlake", "tmp", "repair-1-dead")
    os.makedirs(dead)
    open(os.path.join(dead, "000000"), "wb").write(b"junk")
    assert os.path.isfile(os.path.join(store, "lock"))
    assert adopt.adopt(None, store, store, small_config(), quiet=True)["status"] == "committed"
    assert not os.path.exists(os.path.join(store, "_rocketlake", "tmp"))


def test_in_place_import_however_the_paths_are_spelt(tmp_path, monkeypatch):
    """`--store` and `--from-store` naming one directory through a symlink, a relative path or a
    trailing slash are an import in place, as the import itself judges it: the command's own check
    compared absolute paths only, so it refused the broker's directory as a non-empty non-store
    (and, once adopted, called it "a rocketlake store, not a broker's directory")."""
    import argparse
    from storelib.cli.preflight import check_import
    broker = restore("small-roll", "files.json", str(tmp_path / "broker"))
    os.symlink(broker, tmp_path / "link")
    props = small_properties(tmp_path)
    monkeypatch.chdir(tmp_path)
    spellings = [(str(tmp_path / "link"), broker), (broker, "link/"), ("broker/", broker)]

    def check(store, src):
        return check_import(argparse.Namespace(store=store, from_store=src, config=props, allow_nonempty=False,
                                               quiet=True))
    for store, src in spellings:
        check(store, src)
    adopt.adopt(None, broker, broker, small_config(), quiet=True)
    for store, src in spellings:
        check(store, src)
    with pytest.raises(errors.ConfigError, match="is a rocketlake store, not a broker's directory"):
        check(str(tmp_path / "other"), "link")


def test_an_import_into_or_around_its_own_source_is_refused(tmp_path):
    """`--store broker/lake --from-store broker` copied the broker's directory into itself (the
    store's own lease and lock files too, as `lake/...`), writing into the source it must only
    read; the reverse nests the source in the store. Both are refused, nothing written."""
    broker = restore("small-roll", "files.json", str(tmp_path / "broker"))
    before = stat_tree(broker)
    with pytest.raises(errors.BadInput, match="is inside the broker's directory"):
        adopt.adopt(None, os.path.join(broker, "lake"), broker + "/", small_config(), quiet=True)
    assert stat_tree(broker) == before
    with pytest.raises(errors.BadInput, match="holds the broker's directory"):
        adopt.adopt(None, str(tmp_path), broker, small_config(), quiet=True)
    assert stat_tree(broker) == before and not os.path.exists(tmp_path / "_rocketlake")
