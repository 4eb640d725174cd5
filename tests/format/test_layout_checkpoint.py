"""The checkpoint file layout (storelib/format/checkpoint.py; docs/FORMAT.md §4), without Spark."""
from __future__ import annotations

import json
import os

from support import goldenlib
from conftest import golden_set
from storelib.format import checkpoint as ckpt


def _golden_checkpoint(name: str = "small-roll") -> bytes:
    root, files = goldenlib.load_listing(golden_set(name))
    f = next(f for f in files if f["path"] == ckpt.FILE_NAME)
    return b"".join(goldenlib.golden_blocks(os.path.join(root, f["stored_as"]), f["size"]))


def test_layout():
    assert [ckpt.POS_PHYSIC_MSG_TIMESTAMP, ckpt.POS_LOGICS_MSG_TIMESTAMP, ckpt.POS_INDEX_MSG_TIMESTAMP,
            ckpt.POS_MASTER_FLUSHED_OFFSET, ckpt.POS_CONFIRM_PHY_OFFSET] == [0, 8, 16, 24, 32]
    assert ckpt.LAYOUT_SIZE == 40 and ckpt.FILE_SIZE == 4096
    c = ckpt.Checkpoint(1, -2, 3, 4, 5)
    raw = c.to_bytes()
    assert len(raw) == ckpt.FILE_SIZE and raw[ckpt.LAYOUT_SIZE:] == bytes(ckpt.FILE_SIZE - ckpt.LAYOUT_SIZE)
    assert raw[ckpt.POS_LOGICS_MSG_TIMESTAMP:ckpt.POS_LOGICS_MSG_TIMESTAMP + 8] == (-2).to_bytes(8, "big", signed=True)
    assert ckpt.Checkpoint.from_bytes(raw) == c
    assert ckpt.Checkpoint.from_bytes(raw[:ckpt.LAYOUT_SIZE]) == c
    assert ckpt.Checkpoint.from_bytes(raw[:ckpt.LAYOUT_SIZE - 1]) == ckpt.Checkpoint()     # too short: zeros
    assert c.to_dict() == {"physic_msg_timestamp": 1, "logics_msg_timestamp": -2, "index_msg_timestamp": 3,
                           "master_flushed_offset": 4, "confirm_phy_offset": 5, "logics_physical_offset": 0}
    # the newest 5.x line's sixth value (rocketmqVersion=5.5)
    assert ckpt.POS_LOGICS_PHYSICAL_OFFSET == 40 and ckpt.LAYOUT_SIZE_5_5 == 48
    c6 = ckpt.Checkpoint(1, -2, 3, 4, 5, 6)
    raw6 = c6.to_bytes()
    assert raw6[:40] == raw[:40] and raw6[40:48] == (6).to_bytes(8, "big") and ckpt.Checkpoint.from_bytes(raw6) == c6


def test_golden_checkpoint_round_trips_and_holds_the_put_times():
    data = _golden_checkpoint()
    c = ckpt.Checkpoint.from_bytes(data)
    assert c.to_bytes() == data
    with open(os.path.join(golden_set("small-roll"), "put_results.jsonl"), encoding="utf-8") as fh:
        puts = [json.loads(line) for line in fh]
    assert c.physic_msg_timestamp == puts[-1]["store_timestamp"]          # the last message put
    last_cq = [p for p in puts if p["stored_sys_flag"] & 0xC in (0, 0x8)][-1]
    assert c.logics_msg_timestamp == last_cq["store_timestamp"]           # the last one with a queue unit
    assert c.index_msg_timestamp > 0 and c.master_flushed_offset == c.confirm_phy_offset == 0


def test_physic_msg_timestamp_keeps_only_a_positive_store_time():
    """RocketMQ's group commit sets physicMsgTimestamp only to a store time > 0 (CommitLog's
    GroupCommitService and FlushRealTimeService, 4.9 and 5.x alike): waited puts stored at time 0
    or before leave the previous value."""
    import numpy as np
    from storelib.format.checkpoint import physic_msg_timestamp
    ts = np.array([5, 2, -2998, 0], np.int64)
    assert physic_msg_timestamp(ts, np.array([True, True, True, True]), 0) == 2
    assert physic_msg_timestamp(ts[2:], np.array([True, True]), 7) == 7
    assert physic_msg_timestamp(ts[2:], np.array([True, True]), None) is None
    assert physic_msg_timestamp(ts, np.array([True, False, True, False]), 0) == 5


def test_logics_msg_timestamp_on_the_5_5_line_keeps_only_a_positive_store_time():
    """4.9 and 5.3: the dispatch sets logicsMsgTimestamp to every queued store time, whatever its
    sign. 5.5.1: the dispatch sets tmpLogicsMsgTimestamp, which the consume-queue flush copies
    only when > 0 (ConsumeQueueStore.FlushConsumeQueueService.doFlush)."""
    from storelib.format.checkpoint import logics_msg_timestamp
    assert logics_msg_timestamp(-2998, 7, line_5_5=False) == -2998
    assert logics_msg_timestamp(0, 7, line_5_5=False) == 0
    assert logics_msg_timestamp(-2998, 7, line_5_5=True) == 7
    assert logics_msg_timestamp(0, 0, line_5_5=True) == 0
    assert logics_msg_timestamp(5, 7, line_5_5=True) == 5
    assert logics_msg_timestamp(None, 7, line_5_5=True) == logics_msg_timestamp(None, 7, line_5_5=False) == 7
