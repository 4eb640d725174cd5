"""The ``checkpoint`` file: the one definition of its layout (docs/FORMAT.md §4).

4096 bytes (``FILE_SIZE``), five int64 at the start (``LAYOUT_SIZE`` 40 bytes), rest zero; the
newest 5.x line (5.5, ``rocketmqVersion=5.5``) has a sixth (``LAYOUT_SIZE_5_5`` 48 bytes)::

    @POS_PHYSIC_MSG_TIMESTAMP   0   physicMsgTimestamp   store time of the last message put
    @POS_LOGICS_MSG_TIMESTAMP   8   logicsMsgTimestamp   store time of the last message written to a consume queue
    @POS_INDEX_MSG_TIMESTAMP   16   indexMsgTimestamp    endTimestamp of the last filled (rolled) index file, else 0
    @POS_MASTER_FLUSHED_OFFSET 24   masterFlushedOffset  0 (HA/controller only)
    @POS_CONFIRM_PHY_OFFSET    32   confirmPhyOffset     0 after a write run (a broker's recovery sets it on re-open)
    @POS_LOGICS_PHYSICAL_OFFSET 40  logicsPhysicalOffset 5.5: commit-log offset of the last message written to a
                                                         consume queue; 0 in the other lines

Names defined here: ``FILE_NAME``, ``FILE_SIZE``, the ``POS_*`` offsets, ``LAYOUT_SIZE``,
``LAYOUT_SIZE_5_5``, ``Checkpoint`` (``to_bytes`` / ``from_bytes`` / ``to_dict``), and the rule of
``physicMsgTimestamp`` (``physic_msg_timestamp``), which ingest and repair both follow.

The timer wheel's checkpoint, ``config/timercheck`` (``TimerCheckpoint``: one 4096-byte page,
seven int64 at the start, rest zero), is ``TimerCheckpoint`` here too::

    0 lastReadTimeMs  8 lastTimerLogFlushPos  16 lastTimerQueueOffset  24 masterTimerQueueOffset
    32 dataVersion.stateVersion  40 dataVersion.timestamp  48 dataVersion.counter
"""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING
from dataclasses import dataclass, asdict, astuple

from .paths import BROKER_TIMER_CHECK, CHECKPOINT_FILE

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["FILE_NAME", "FILE_SIZE", "POS_PHYSIC_MSG_TIMESTAMP", "POS_LOGICS_MSG_TIMESTAMP", "POS_INDEX_MSG_TIMESTAMP",
           "POS_MASTER_FLUSHED_OFFSET", "POS_CONFIRM_PHY_OFFSET", "POS_LOGICS_PHYSICAL_OFFSET", "LAYOUT_SIZE",
           "LAYOUT_SIZE_5_5", "Checkpoint", "physic_msg_timestamp", "logics_msg_timestamp", "TimerCheckpoint",
           "TIMER_CHECK_FILE"]

FILE_NAME = CHECKPOINT_FILE
FILE_SIZE = 4096
POS_PHYSIC_MSG_TIMESTAMP = 0
POS_LOGICS_MSG_TIMESTAMP = 8
POS_INDEX_MSG_TIMESTAMP = 16
POS_MASTER_FLUSHED_OFFSET = 24
POS_CONFIRM_PHY_OFFSET = 32
POS_LOGICS_PHYSICAL_OFFSET = 40
LAYOUT_SIZE = 40
LAYOUT_SIZE_5_5 = 48
_LAYOUT = struct.Struct(">qqqqqq")
assert _LAYOUT.size == LAYOUT_SIZE_5_5


def _page(layout: struct.Struct, values: tuple[int, ...]) -> bytes:
    """A whole checkpoint file (both kinds): ``values`` packed by ``layout`` at the start of one
    FILE_SIZE page, the rest zero."""
    head = layout.pack(*values)
    return head + bytes(FILE_SIZE - len(head))


@dataclass(frozen=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    logics_physical_offset: int = 0       # 5.5 only (0: the file is the other lines')

    def to_bytes(self) -> bytes:
        return _page(_LAYOUT, astuple(self))

    @classmethod
    def from_bytes(cls, data: bytes) -> "Checkpoint":
        """The values at the start of ``data`` (the sixth 0 when ``data`` ends before it); all zero
        when ``data`` is shorter than LAYOUT_SIZE."""
        if len(data) < LAYOUT_SIZE:
            return cls()
        if len(data) < LAYOUT_SIZE_5_5:
            return cls(*struct.unpack_from(">qqqqq", data, 0))
        return cls(*_LAYOUT.unpack_from(data, 0))

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


TIMER_CHECK_FILE = BROKER_TIMER_CHECK
_TIMER_LAYOUT = struct.Struct(">qqqqqqq")


@dataclass(frozen=True)
class TimerCheckpoint:
    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0

    def to_bytes(self) -> bytes:
        return _page(_TIMER_LAYOUT, astuple(self))

    @classmethod
    def from_bytes(cls, data: bytes) -> "TimerCheckpoint":
        return cls(*_TIMER_LAYOUT.unpack_from(data, 0))


def physic_msg_timestamp(store_ts: npt.NDArray[np.int64], waits: npt.NDArray[np.bool_],
                         previous: int | None = 0) -> int | None:
    """physicMsgTimestamp after the puts ``store_ts`` (arrays in put order): only a put that waits
    for its flush (``WAIT`` absent or true, ``Message.isWaitStoreMsgOK``) hands its store time to
    the group commit that sets it, so it is the store time of the last put that waited, else
    ``previous`` (what it was before these puts). The group commit sets only a store time > 0
    (CommitLog's ``if (storeTimestamp > 0)``, 4.9 and 5.x): a put stored at time 0 or before
    leaves the value as it was."""
    waited = (waits & (store_ts > 0)).nonzero()[0]
    return int(store_ts[waited[-1]]) if len(waited) else previous


def logics_msg_timestamp(last_queued: int | None, previous: int, line_5_5: bool) -> int:
    """logicsMsgTimestamp after puts whose last message with a consume-queue unit was stored at
    ``last_queued`` (None: no such message; ``previous``: the value before them). The 4.9 and 5.3
    lines' dispatch sets it to every such store time. The 5.5 line's dispatch keeps the time
    aside (``tmpLogicsMsgTimestamp``) and its consume-queue flush takes it into the checkpoint only
    when it is > 0, so a last queued message stored at time 0 or before leaves the value as it was."""
    if last_queued is None or (line_5_5 and last_queued <= 0):
        return previous
    return last_queued
