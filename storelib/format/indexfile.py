"""Index files: the one definition of their layout (docs/FORMAT.md §3): lookup by message key and time.

Size ``HEADER_SIZE + maxHashSlotNum*SLOT_SIZE + maxIndexNum*ENTRY_SIZE`` (``file_size``)::

    header (HEADER_SIZE 40 bytes, HEADER_DTYPE / IndexHeader)
      @HEADER_BEGIN_TIMESTAMP   0  int64 beginTimestamp     @HEADER_END_TIMESTAMP    8  int64 endTimestamp
      @HEADER_BEGIN_PHY_OFFSET 16  int64 beginPhyOffset     @HEADER_END_PHY_OFFSET  24  int64 endPhyOffset
      @HEADER_HASH_SLOT_COUNT  32  int32 hashSlotCount      @HEADER_INDEX_COUNT     36  int32 indexCount
                                                            (starts at 1; entry 0 is never used)
    slot table   maxHashSlotNum x int32 (SLOT_SIZE 4, SLOT_DTYPE) at slot_offset(slot) = 40 + slot*4:
                 position of the newest entry, 0 = empty
    entries      maxIndexNum x ENTRY_SIZE 20 bytes (ENTRY_DTYPE) at entry_offset(pos, cfg)
                 = 40 + maxHashSlotNum*4 + pos*20:
      @ENTRY_KEY_HASH 0 int32 keyHash   @ENTRY_PHY_OFFSET 4 int64 phyOffset
      @ENTRY_TIME_DIFF 12 int32 timeDiff (s)   @ENTRY_PREV_POS 16 int32 prevPos

putKey (IndexFile.putKey), replayed by ``storelib.ingest.indexfile.IndexFileBuilder`` for a whole run of entries at once:
  keyHash = abs(javaHash(topic#key)) (MIN_VALUE -> 0); slot = keyHash % maxHashSlotNum;
  prevPos = slot value if 0 < value <= indexCount else 0;
  timeDiff = 0 if header.beginTimestamp <= 0 else clamp((ts - beginTimestamp) / 1000, 0, INT_MAX)
  (beginTimestamp is the inherited one for a file's first entry, then the first entry's time);
  the first entry sets begin*, every entry sets end*; hashSlotCount counts entries with prevPos 0.
A new file inherits begin = end = the previous file's end values (when > 0).
Names are creation times ``yyyyMMddHHmmssSSS``; see ``file_name`` and ``name_time``.

Names defined here: ``DIR``, ``INT_MAX``, ``HEADER_SIZE``, the
``HEADER_*`` field offsets, ``HEADER_DTYPE``, ``SLOT_SIZE``, ``SLOT_DTYPE``, ``ENTRY_SIZE``, the
``ENTRY_*`` field offsets, ``ENTRY_DTYPE`` (fields ``hash``, ``phys``, ``time_diff``, ``prev``),
``IndexHeader`` (NamedTuple: ``parse``/``from_bytes``, ``to_bytes``, ``to_dict``, ``inherited``),
``slot_offset``, ``entries_offset``, ``entry_offset``, ``file_size``, ``pack_entry`` /
``parse_entry``, ``parse_slot``, ``encode_slots`` / ``decode_slots``, ``decode_entries``,
``file_name``, ``name_millis``, ``NAME_LATEST``, ``name_time``.

This module is a leaf (numpy only at import time, no function-local imports either): ``config``
takes the sizes from here, and the ``kernels.index_put`` kernel takes the ``ENTRY_*`` offsets, so
the builder that calls that kernel is ``storelib.ingest.indexfile.IndexFileBuilder``.
"""
from __future__ import annotations

import datetime as _dt
import struct
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .commitlog import Buffer
from .paths import INDEX_DIR

if TYPE_CHECKING:
    from .config import StoreConfig

__all__ = ["DIR", "INT_MAX", "HEADER_SIZE", "HEADER_BEGIN_TIMESTAMP", "HEADER_END_TIMESTAMP",
           "HEADER_BEGIN_PHY_OFFSET", "HEADER_END_PHY_OFFSET", "HEADER_HASH_SLOT_COUNT", "HEADER_INDEX_COUNT",
           "HEADER_DTYPE", "SLOT_SIZE", "SLOT_DTYPE", "ENTRY_SIZE", "ENTRY_KEY_HASH", "ENTRY_PHY_OFFSET",
           "ENTRY_TIME_DIFF", "ENTRY_PREV_POS", "ENTRY_DTYPE", "IndexHeader", "slot_offset", "entries_offset",
           "entry_offset", "file_size", "pack_entry", "parse_entry", "parse_slot", "encode_slots", "decode_slots",
           "decode_entries", "file_name", "name_millis", "NAME_LATEST", "name_time"]

DIR = INDEX_DIR
INT_MAX = 2**31 - 1

# header
HEADER_SIZE = 40
HEADER_BEGIN_TIMESTAMP = 0
HEADER_END_TIMESTAMP = 8
HEADER_BEGIN_PHY_OFFSET = 16
HEADER_END_PHY_OFFSET = 24
HEADER_HASH_SLOT_COUNT = 32
HEADER_INDEX_COUNT = 36
HEADER_DTYPE = np.dtype({
    "names": ["begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
              "index_count"],
    "formats": [">i8", ">i8", ">i8", ">i8", ">i4", ">i4"],
    "offsets": [HEADER_BEGIN_TIMESTAMP, HEADER_END_TIMESTAMP, HEADER_BEGIN_PHY_OFFSET, HEADER_END_PHY_OFFSET,
                HEADER_HASH_SLOT_COUNT, HEADER_INDEX_COUNT],
    "itemsize": HEADER_SIZE})
_HEADER = struct.Struct(">qqqqii")

# slot table
SLOT_SIZE = 4
SLOT_DTYPE = np.dtype(">i4")
_SLOT = struct.Struct(">i")

# entries
ENTRY_SIZE = 20
ENTRY_KEY_HASH = 0
ENTRY_PHY_OFFSET = 4
ENTRY_TIME_DIFF = 12
ENTRY_PREV_POS = 16
ENTRY_DTYPE = np.dtype({"names": ["hash", "phys", "time_diff", "prev"], "formats": [">i4", ">i8", ">i4", ">i4"],
                        "offsets": [ENTRY_KEY_HASH, ENTRY_PHY_OFFSET, ENTRY_TIME_DIFF, ENTRY_PREV_POS],
                        "itemsize": ENTRY_SIZE})
_ENTRY = struct.Struct(">iqii")
assert HEADER_DTYPE.itemsize == _HEADER.size == HEADER_SIZE and SLOT_DTYPE.itemsize == _SLOT.size == SLOT_SIZE
assert ENTRY_DTYPE.itemsize == _ENTRY.size == ENTRY_SIZE


class IndexHeader(NamedTuple):
    """The 40-byte header. Immutable: ``_replace`` gives a changed copy."""
    begin_timestamp: int = 0
    end_timestamp: int = 0
    begin_phy_offset: int = 0
    end_phy_offset: int = 0
    hash_slot_count: int = 0
    index_count: int = 1

    def to_bytes(self, line_4_9: bool = False) -> bytes:
        """The header's bytes; RocketMQ 4.9 (``line_4_9``) leaves indexCount 0 in a file no
        key was put into (5.x writes its in-memory 1 at shutdown)."""
        if line_4_9 and self.index_count == 1:
            return _HEADER.pack(*self[:-1], 0)
        return _HEADER.pack(*self)

    @classmethod
    def parse(cls, data: bytes) -> "IndexHeader":
        """The header at the start of ``data`` (struct.error when shorter than HEADER_SIZE); an
        indexCount of 0 reads as 1, as IndexHeader.load does (a 4.9 file without entries)."""
        h = cls(*_HEADER.unpack_from(data, 0))
        return h._replace(index_count=1) if h.index_count == 0 else h

    @classmethod
    def from_bytes(cls, data: bytes) -> "IndexHeader":
        """``parse``'s other name."""
        return cls.parse(data)

    @classmethod
    def inherited(cls, end_phy_offset: int, end_timestamp: int) -> "IndexHeader":
        """Header of a file created after a full one (IndexFile constructor)."""
        h = cls()
        if end_phy_offset > 0:
            h = h._replace(begin_phy_offset=end_phy_offset, end_phy_offset=end_phy_offset)
        if end_timestamp > 0:
            h = h._replace(begin_timestamp=end_timestamp, end_timestamp=end_timestamp)
        return h

    def to_dict(self) -> dict[str, int]:
        return dict(self._asdict())


def slot_offset(slot: int) -> int:
    """Byte offset of hash slot ``slot``."""
    return HEADER_SIZE + slot * SLOT_SIZE


def entries_offset(config: "StoreConfig") -> int:
    """Byte offset of the entry table (entry position 0)."""
    return HEADER_SIZE + config.maxHashSlotNum * SLOT_SIZE


def entry_offset(pos: int, config: "StoreConfig") -> int:
    """Byte offset of the entry at position ``pos``."""
    return entries_offset(config) + pos * ENTRY_SIZE


def file_size(max_hash_slot_num: int, max_index_num: int) -> int:
    return HEADER_SIZE + max_hash_slot_num * SLOT_SIZE + max_index_num * ENTRY_SIZE


def pack_entry(key_hash: int, phy_offset: int, time_diff: int, prev_pos: int) -> bytes:
    return _ENTRY.pack(key_hash, phy_offset, time_diff, prev_pos)


def parse_entry(buf: Buffer, pos: int = 0) -> tuple[int, int, int, int]:
    """(keyHash, phyOffset, timeDiff, prevPos) of the entry at byte ``pos`` of ``buf``."""
    key_hash, phy, time_diff, prev = _ENTRY.unpack_from(buf, pos)  # type: ignore[arg-type]
    return key_hash, phy, time_diff, prev


def parse_slot(buf: Buffer, pos: int = 0) -> int:
    """The slot value (entry position) at byte ``pos`` of ``buf``."""
    value: int = _SLOT.unpack_from(buf, pos)[0]  # type: ignore[arg-type]
    return value


def encode_slots(slots: np.ndarray) -> bytes:
    return np.asarray(slots).astype(SLOT_DTYPE).tobytes()


def decode_slots(buf: Buffer, count: int | None = None, offset: int = 0) -> np.ndarray:
    """Slot values (native int32) of ``count`` slots at byte ``offset`` of ``buf``."""
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    n = (len(arr) - offset) // SLOT_SIZE if count is None else count
    return arr[offset:offset + n * SLOT_SIZE].view(SLOT_DTYPE).astype(np.int32)


def decode_entries(buf: Buffer, count: int | None = None, offset: int = 0) -> np.ndarray:
    """Structured view (hash, phys, time_diff, prev) of ``count`` entries at byte ``offset`` of ``buf``."""
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    n = (len(arr) - offset) // ENTRY_SIZE if count is None else count
    return arr[offset:offset + n * ENTRY_SIZE].view(ENTRY_DTYPE)


def file_name(millis: int) -> str:
    """UtilAll.timeMillisToHumanString (UTC here; RocketMQ uses the JVM's zone)."""
    t = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(seconds=millis // 1000)
    return t.strftime("%Y%m%d%H%M%S") + f"{millis % 1000:03d}"


# The latest time ``name_time`` names a file by (9999-01-01T00:00:00Z): a name spells a four-digit
# year, and the year after it leaves room for 3*10^10 names 1 ms apart.
NAME_LATEST = 253_370_764_800_000


def name_time(prev_ms: int, t: int) -> int:
    """The time (ms) to name a new index file by, after one named at ``prev_ms``: ``t`` (its begin
    time) when later and at most NAME_LATEST, else ``prev_ms + 1``. Names then increase strictly
    (RocketMQ loads the files sorted by name), whatever store times a broker wrote: RocketMQ takes
    any, a year 10000 too, and names its own files by the wall clock instead."""
    return t if prev_ms < t <= NAME_LATEST else prev_ms + 1


def name_millis(name: str) -> int | None:
    try:
        t = _dt.datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=_dt.timezone.utc)
        return int(t.timestamp()) * 1000 + int(name[14:17])
    except (ValueError, IndexError):
        return None
