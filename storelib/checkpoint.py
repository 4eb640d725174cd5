"""The ``checkpoint`` file (docs/FORMAT.md §4): 4096 bytes, five int64 at the start, rest zero.

    @0   physicMsgTimestamp   store time of the last message put
    @8   logicsMsgTimestamp   store time of the last message written to a consume queue
    @16  indexMsgTimestamp    endTimestamp of the most recently filled (rolled) index file, else 0
    @24  masterFlushedOffset  0 (HA/controller only)
    @32  confirmPhyOffset     0 after a write run (a broker's recovery sets it on re-open)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, asdict

FILE_NAME = "checkpoint"
FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqqqq")


@dataclass(frozen=True)
class Checkpoint:
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    def to_bytes(self) -> bytes:
        head = _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
                            self.master_flushed_offset, self.confirm_phy_offset)
        return head + bytes(FILE_SIZE - len(head))

    @classmethod
    def from_bytes(cls, data: bytes) -> "Checkpoint":
        if len(data) < _LAYOUT.size:
            return cls()
        return cls(*_LAYOUT.unpack_from(data, 0))

    def to_dict(self) -> dict:
        return asdict(self)
