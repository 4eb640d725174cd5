"""The store key rocketmqVersion (docs/FORMAT.md §12) and the checkpoint rules (§4), without
Spark (storelib.runtime.localrun): 4.9's refusals and bytes, 4.9's reader answers, the checkpoint's
physicMsgTimestamp (the last put that waited), and verify after a broker wrote its offsets into
the checkpoint, followed by an append."""
from __future__ import annotations

import json
import os
import struct

import pytest


from storelib.format import checkpoint as ckpt, indexfile
from storelib.cli import common as cli
from storelib.verify import driver as verify
from storelib.errors import ConfigError, InputError
from storelib.format.config import load_config
from storelib.ingest.driver import run_ingest
from storelib.runtime.localrun import LocalSession
from storelib.read.query import open_store

SMALL = {"mappedFileSizeCommitLog": 4096, "mappedFileSizeConsumeQueue": 60, "maxHashSlotNum": 8,
         "maxIndexNum": 16, "flushDiskType": "ASYNC_FLUSH"}


def msg(i: int, topic: str = "T", props: str = "", ts: int | None = None, qid: int = 0) -> dict:
    pairs = [p.split("\x01") for p in props.split("\x02") if p]
    return {"topic": topic, "queue_id": qid, "body_b64": "aGk=", "store_timestamp": ts or 1_700_000_000_000 + i,
            "born_host": "10.0.0.1:1", "store_host": "10.0.0.2:10911", "properties": pairs,
            "properties_string": props}


def ingest(tmp_path, store: str, batch: str, msgs: list, **cfg):
    inp = tmp_path / f"{batch}.jsonl"
    inp.write_text("".join(json.dumps(m) + "\n" for m in msgs))
    return run_ingest(LocalSession(), store, str(inp), "jsonl", load_config(None, {**SMALL, **cfg}),
                      batch_id=batch, quiet=True)


def test_config_values_and_refusals():
    assert load_config(None, {}).rocketmqVersion == "5"
    assert load_config(None, {"rocketmqVersion": "4.9"}).line_4_9
    for bad in ({"rocketmqVersion": "5.3.3"}, {"rocketmqVersion": "4"},
                {"rocketmqVersion": "4.9", "enabledAppendPropCRC": "true"}):
        with pytest.raises(ConfigError):
            load_config(None, bad)
    assert "rocketmqVersion" in load_config(None, {}).file_shaping()


def test_4_9_refuses_a_long_topic_naming_the_row_and_keeps_the_store(tmp_path):
    store = str(tmp_path / "s")
    ingest(tmp_path, store, "b0", [msg(0)], rocketmqVersion="4.9")
    with pytest.raises(InputError) as e:
        ingest(tmp_path, store, "b1", [msg(1), msg(2, topic="x" * 128)], rocketmqVersion="4.9")
    assert cli.exit_code(e.value) == 2
    assert "b1.jsonl line 2" in str(e.value) and "4.9" in str(e.value), str(e.value)
    assert open_store(store).get_max_offset_in_queue("T", 0) == 1
    # the same topic is a V2 record in a 5 store
    ingest(tmp_path, str(tmp_path / "five"), "b0", [msg(2, topic="x" * 128)])
    # the line is the store's: a batch asking for the other one is refused
    with pytest.raises(ConfigError, match="rocketmqVersion"):
        ingest(tmp_path, store, "b2", [msg(3)])


def _index_headers(store: str) -> list[bytes]:
    d = os.path.join(store, indexfile.DIR)
    return [open(os.path.join(d, n), "rb").read(indexfile.HEADER_SIZE) for n in sorted(os.listdir(d))]


def test_index_file_without_entries_keeps_index_count_0_in_4_9(tmp_path):
    s49, s5 = str(tmp_path / "s49"), str(tmp_path / "s5")
    for store, line in ((s49, "4.9"), (s5, "5")):
        ingest(tmp_path, store, "b0", [msg(0), msg(1)], rocketmqVersion=line)   # no keys: no entries
    assert _index_headers(s49) == [bytes(40)]
    assert _index_headers(s5) == [bytes(36) + struct.pack(">i", 1)]
    # the first key of a later batch: both lines write the whole header
    for store, line in ((s49, "4.9"), (s5, "5")):
        ingest(tmp_path, store, "b1", [msg(2, props="KEYS\x01k1\x02")], rocketmqVersion=line)
        assert verify.verify_store(store, deep=True, threads=1).problems == []
        assert len(open_store(store).query_message("T", "k1", 32, 0, 2**62)["phy_offsets"]) == 1
    assert _index_headers(s49) == _index_headers(s5)


def _physic(store: str) -> int:
    return ckpt.Checkpoint.from_bytes(open(os.path.join(store, ckpt.FILE_NAME), "rb").read()).physic_msg_timestamp


def test_physic_msg_timestamp_is_the_last_waiting_put(tmp_path):
    store = str(tmp_path / "s")
    ingest(tmp_path, store, "b0", [msg(0, ts=5000), msg(1, props="WAIT\x01false\x02", ts=6000),
                                   msg(2, props="WAIT\x01yes\x02", ts=7000)])
    assert _physic(store) == 5000
    ingest(tmp_path, store, "b1", [msg(3, props="WAIT\x01False\x02", ts=8000)])
    assert _physic(store) == 5000                       # no put of this batch waited
    ingest(tmp_path, store, "b2", [msg(4, props="a\x01b\x02WAIT\x01TRUE\x02", ts=9000),
                                   msg(5, props="WAIT\x01\x02", ts=9500)])
    assert _physic(store) == 9500                       # an empty WAIT is no property: it waits
    assert verify.verify_store(store, threads=1).problems == []
    none = str(tmp_path / "none")
    ingest(tmp_path, none, "b0", [msg(0, props="WAIT\x01false\x02")])
    assert _physic(none) == 0


def test_verify_accepts_what_a_broker_writes_into_the_checkpoint_then_appends(tmp_path):
    store = str(tmp_path / "s")
    ingest(tmp_path, store, "b0", [msg(i) for i in range(5)])
    path = os.path.join(store, ckpt.FILE_NAME)
    data = open(path, "rb").read()
    max_phy = open_store(store).get_max_phy_offset()

    def write(at: int, value: int) -> None:
        with open(path, "r+b") as fh:
            fh.seek(at)
            fh.write(struct.pack(">q", value))

    write(ckpt.POS_CONFIRM_PHY_OFFSET, max_phy)         # what a broker's shutdown writes
    write(ckpt.POS_MASTER_FLUSHED_OFFSET, max_phy)
    assert verify.verify_store(store, threads=1).problems == []
    write(ckpt.POS_CONFIRM_PHY_OFFSET, max_phy + 1)
    assert [p for p in verify.verify_store(store, threads=1).problems] == \
        [f"checkpoint@32: confirm_phy_offset {max_phy + 1} outside [0, max physical offset {max_phy}]"]
    write(ckpt.POS_CONFIRM_PHY_OFFSET, max_phy)
    write(ckpt.POS_LOGICS_MSG_TIMESTAMP, 1)             # not a broker's to change
    assert any("sha256 differs" in p for p in verify.verify_store(store, threads=1).problems)
    with open(path, "r+b") as fh:
        fh.write(data[:ckpt.POS_MASTER_FLUSHED_OFFSET])
    ingest(tmp_path, store, "b1", [msg(i) for i in range(5, 9)])
    assert verify.verify_store(store, deep=True, threads=1).problems == []
    assert open(path, "rb").read()[24:40] == bytes(16)
    assert open_store(store).get_max_offset_in_queue("T", 0) == 9


def test_4_9_readers_min_offset_and_offset_by_time(tmp_path):
    """A queue wholly below the commit log's min offset: 4.9 answers min 0, 5 the max; 4.9's
    getOffsetInQueueByTime picks the file by modification time and answers the nearer unit."""
    from storelib.read.consumequeue import QueueReader
    s49, s5 = str(tmp_path / "s49"), str(tmp_path / "s5")
    for store, line in ((s49, "4.9"), (s5, "5")):
        ingest(tmp_path, store, "b0", [msg(i, ts=10_000 + 1000 * i, qid=i % 2) for i in range(8)], rocketmqVersion=line)
    r49, r5 = open_store(s49), open_store(s5)
    # a commit-log min offset past queue 0's last unit and inside queue 1's (as after expiry)
    last0 = r49.get_commit_log_offset_in_queue("T", 0, 3)
    for r in (r49, r5):
        r.commitlog.min_offset = lambda last0=last0: last0 + 1
        r.queues = QueueReader(r.queues.store, r.queues.consume_queues, r.config, r.commitlog)
    assert (r49.get_min_offset_in_queue("T", 0), r5.get_min_offset_in_queue("T", 0)) == (0, 4)
    # queue 1's first file (units 0..2) lies below it: both lines look no further
    assert (r49.get_min_offset_in_queue("T", 1), r5.get_min_offset_in_queue("T", 1)) == (0, 0)
    r49, r5 = open_store(s49), open_store(s5)
    # queue 1 holds store times 11000, 13000, 15000, 17000 (files of 3 units: 0-2, 3); every file
    # was modified after these times, so 4.9 searches the first: its nearest unit, up to 2
    assert [r49.get_offset_in_queue_by_time("T", 1, t) for t in (11000, 13900, 14100, 99999)] == [0, 1, 2, 2]
    assert r5.get_offset_in_queue_by_time("T", 1, 99999) == 4        # 5 clamps to the max
    cq = os.path.join(s49, "consumequeue", "T", "1")
    first = os.path.join(cq, sorted(os.listdir(cq))[0])
    os.utime(first, ns=(1, 1))                                        # modified "before" any time
    r49 = open_store(s49)
    assert r49.get_offset_in_queue_by_time("T", 1, 11000) == 3       # the last file, its only unit


def test_5_5_indexes_tags_and_keeps_the_last_queue_message_offset(tmp_path):
    """rocketmqVersion=5.5: a topic#T#tags entry after a tagged message's other keys (not for a
    ROLLBACK message), and checkpoint position 40 = the last consume-queue message's offset."""
    s55, s5 = str(tmp_path / "s55"), str(tmp_path / "s5")
    batch = [msg(0, props="TAGS\x01a\x02KEYS\x01k1 k2\x02"), msg(1, props="TAGS\x01b\x02"),
             dict(msg(2, props="TAGS\x01c\x02"), sys_flag=0xC), msg(3)]
    for store, line in ((s55, "5.5"), (s5, "5")):
        ingest(tmp_path, store, "b0", batch, rocketmqVersion=line)
        assert verify.verify_store(store, deep=True, threads=1).problems == []
    h55 = indexfile.IndexHeader.parse(_index_headers(s55)[0])
    h5 = indexfile.IndexHeader.parse(_index_headers(s5)[0])
    assert (h55.index_count, h5.index_count) == (1 + 2 + 2, 1 + 2)      # KEYS k1 k2; tags a, b (c: ROLLBACK)
    r = open_store(s55)
    last_cq = r.get_commit_log_offset_in_queue("T", 0, 2)                   # message 3 (2 is a ROLLBACK)
    assert [r.query_message("T", "T#" + t, 32, 0, 2**62)["phy_offsets"] for t in "abc"] == \
        [[0], [r.get_commit_log_offset_in_queue("T", 0, 1)], []]
    ck55 = open(os.path.join(s55, ckpt.FILE_NAME), "rb").read()
    ck5 = open(os.path.join(s5, ckpt.FILE_NAME), "rb").read()
    assert ckpt.Checkpoint.from_bytes(ck55).logics_physical_offset == last_cq and ck55[:40] == ck5[:40]
    assert ck5[40:] == bytes(len(ck5) - 40)
    ingest(tmp_path, s55, "b1", [dict(msg(4), sys_flag=0x4)], rocketmqVersion="5.5")  # PREPARED: no unit
    assert ckpt.Checkpoint.from_bytes(open(os.path.join(s55, ckpt.FILE_NAME), "rb").read()).logics_physical_offset \
        == last_cq
    assert verify.verify_store(s55, deep=True, threads=1).problems == []
