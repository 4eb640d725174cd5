"""Index files (docs/FORMAT.md §3): lookup by message key and time.

Size ``40 + maxHashSlotNum*4 + maxIndexNum*20``:

    header (40 bytes)
      @0   int64 beginTimestamp     @8   int64 endTimestamp
      @16  int64 beginPhyOffset     @24  int64 endPhyOffset
      @32  int32 hashSlotCount      @36  int32 indexCount (starts at 1; entry 0 is never used)
    slot table   maxHashSlotNum x int32 at 40 + slot*4: position of the newest entry, 0 = empty
    entries      maxIndexNum x 20 bytes at 40 + maxHashSlotNum*4 + pos*20:
      @0 int32 keyHash   @4 int64 phyOffset   @12 int32 timeDiff (s)   @16 int32 prevPos

putKey (IndexFile.putKey), replayed here for a whole run of entries at once:
  keyHash = abs(javaHash(topic#key)) (MIN_VALUE -> 0); slot = keyHash % maxHashSlotNum;
  prevPos = slot value if 0 < value <= indexCount else 0;
  timeDiff = 0 if header.beginTimestamp <= 0 else clamp((ts - beginTimestamp) / 1000, 0, INT_MAX)
  (beginTimestamp is the inherited one for a file's first entry, then the first entry's time);
  the first entry sets begin*, every entry sets end*; hashSlotCount counts entries with prevPos 0.
A new file inherits begin = end = the previous file's end values (when > 0).
Names are creation times ``yyyyMMddHHmmssSSS``; see ``file_name``.
"""
from __future__ import annotations

import datetime as _dt
import struct
from dataclasses import dataclass, asdict

import numpy as np

from . import kernels
from .config import INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE, INDEX_SLOT_SIZE, StoreConfig

DIR = "index"
INT_MAX = 2**31 - 1
_HEADER = struct.Struct(">qqqqii")
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")])
assert ENTRY_DTYPE.itemsize == INDEX_ENTRY_SIZE


@dataclass
class IndexHeader:
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def to_bytes(self) -> bytes:
        return _HEADER.pack(self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                            self.end_phy_offset, self.hash_slot_count, self.index_count)

    @classmethod
    def from_bytes(cls, data: bytes) -> "IndexHeader":
        return cls(*_HEADER.unpack_from(data, 0))

    @classmethod
    def inherited(cls, end_phy_offset: int, end_timestamp: int) -> "IndexHeader":
        """Header of a file created after a full one (IndexFile constructor)."""
        h = cls()
        if end_phy_offset > 0:
            h.begin_phy_offset = h.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            h.begin_timestamp = h.end_timestamp = end_timestamp
        return h

    def to_dict(self) -> dict:
        return asdict(self)


def is_full(header: IndexHeader, config: StoreConfig) -> bool:
    return header.index_count >= config.maxIndexNum


def slots_offset() -> int:
    return INDEX_HEADER_SIZE


def entries_offset(config: StoreConfig) -> int:
    return INDEX_HEADER_SIZE + config.maxHashSlotNum * INDEX_SLOT_SIZE


def file_name(millis: int) -> str:
    """UtilAll.timeMillisToHumanString (UTC here; RocketMQ uses the JVM's zone)."""
    t = _dt.datetime.fromtimestamp(millis / 1000.0, tz=_dt.timezone.utc)
    return t.strftime("%Y%m%d%H%M%S") + f"{millis % 1000:03d}"


def name_millis(name: str) -> int | None:
    try:
        t = _dt.datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
        return int(t.timestamp()) * 1000 + int(name[14:17])
    except (ValueError, IndexError):
        return None


class IndexFileBuilder:
    """One index file in memory: header, slot table and the used part of the entry table."""

    def __init__(self, config: StoreConfig, header: IndexHeader, slots: np.ndarray | None = None,
                 entries: np.ndarray | None = None):
        self.config = config
        self.header = header
        self.slots = slots if slots is not None else np.zeros(config.maxHashSlotNum, dtype=np.int32)
        # Entry table as big-endian byte blocks: position k at byte 20*k; position 0 unused.
        first = entries if entries is not None else np.zeros(INDEX_ENTRY_SIZE, dtype=np.uint8)
        self.blocks = [first]
        assert len(first) == header.index_count * INDEX_ENTRY_SIZE and header.index_count <= config.maxIndexNum

    @classmethod
    def from_bytes(cls, config: StoreConfig, data: bytes) -> "IndexFileBuilder":
        header = IndexHeader.from_bytes(data)
        slot_end = entries_offset(config)
        slots = np.frombuffer(data, dtype=">i4", count=config.maxHashSlotNum, offset=INDEX_HEADER_SIZE).astype(np.int32)
        n = header.index_count
        entries = np.frombuffer(data, dtype=np.uint8, count=n * INDEX_ENTRY_SIZE, offset=slot_end).copy()
        return cls(config, header, slots, entries)

    def room(self) -> int:
        return self.config.maxIndexNum - self.header.index_count

    def put_keys(self, key_hash: np.ndarray, phys: np.ndarray, store_ts: np.ndarray) -> None:
        """Append entries in order (caller guarantees they fit): putKey per entry, in one
        compiled pass (kernels.index_put)."""
        m = len(key_hash)
        if m == 0:
            return
        if m > self.room():
            raise ValueError("index file overflow")
        h = self.header
        ic0 = h.index_count
        store_ts = np.asarray(store_ts, np.int64)
        # timeDiff against the begin timestamp in force when each entry is put: the file's first
        # entry sets beginTimestamp after its own timeDiff is taken.
        begin_before = np.full(m, h.begin_timestamp, dtype=np.int64)
        if ic0 <= 1:
            begin_before[1:] = store_ts[0]
        td = _java_div(store_ts - begin_before, 1000)
        td = np.where(begin_before <= 0, 0, np.clip(td, 0, INT_MAX))
        block, empty = kernels.index_put(self.slots, key_hash, phys, td, ic0)
        self.blocks.append(block)
        if ic0 <= 1:
            h.begin_phy_offset = int(phys[0])
            h.begin_timestamp = int(store_ts[0])
        h.hash_slot_count += empty
        h.index_count = ic0 + m
        h.end_phy_offset = int(phys[-1])
        h.end_timestamp = int(store_ts[-1])

    def chunks(self) -> list:
        """Header, slot table and used entries; the caller zero-fills to the file size."""
        return [self.header.to_bytes(), self.slots.astype(">i4").tobytes(), *self.blocks]

    def valid_bytes(self) -> int:
        return entries_offset(self.config) + self.header.index_count * INDEX_ENTRY_SIZE


def _java_div(a: np.ndarray, b: int) -> np.ndarray:
    """Long division truncating toward zero (Java), not floor (numpy)."""
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)
