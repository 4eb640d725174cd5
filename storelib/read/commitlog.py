"""Commitlog access for the readers: ``CommitLog``'s lookups over the valid part of each segment
(docs/FORMAT.md §1, §6).

``CommitLogReader`` answers what a broker's ``CommitLog`` / ``MappedFileQueue`` answer over the
segments a ``StoreFiles`` lists: min/max offset, the file holding an offset, a selected byte
range, a record's store timestamp, the record at an offset. Every read is one range read of
bytes the listing says exist (``io.checked.read_stored``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..format import commitlog as cl, records
from ..io.checked import StoredRanges, read_stored

if TYPE_CHECKING:                       # (storage loads pyarrow: not on the shell lookup path)
    from ..io.storage import Store
    from ..table.storefiles import CommitLogSegment

__all__ = ["CommitLogReader", "Message", "RECORDS_AT_ONCE"]

Message = dict[str, Any]                # a decoded record (``format.records.decode_message``)
_PAGE = 4096                            # a record read first to the end of its page costs no more I/O
RECORDS_AT_ONCE = 256                   # records_at's batch: a hot key's records are not all held at once


class CommitLogReader:
    """The commitlog of one ``StoreFiles``: ``segments`` sorted by base, each ``file_size`` long."""

    def __init__(self, store: Store, segments: list[CommitLogSegment], file_size: int):
        self.store = store
        self.segments = segments
        self.file_size = file_size

    def read(self, rel: str, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes the files listing says exist (else ``CorruptStore``)."""
        return read_stored(self.store, rel, offset, length)

    # ------------------------------------------------------------------ offsets and files
    def min_offset(self) -> int:
        """CommitLog.getMinOffset: start of the first remaining file (-1 without files)."""
        return self.segments[0].base if self.segments else -1

    def max_offset(self) -> int:
        """CommitLog.getMaxOffset: end of the readable data of the last file (0 without files)."""
        return self.segments[-1].base + self.segments[-1].valid if self.segments else 0

    def find(self, offset: int, return_first: bool = False) -> CommitLogSegment | None:
        """MappedFileQueue.findMappedFileByOffset."""
        segs = self.segments
        if not segs:
            return None
        first, last = segs[0], segs[-1]
        fs = self.file_size
        if first.base <= offset < last.base + fs:
            i = offset // fs - first.base // fs
            if 0 <= i < len(segs) and segs[i].base <= offset < segs[i].base + fs:
                return segs[i]
            for s in segs:
                if s.base <= offset < s.base + fs:
                    return s
        return first if return_first else None

    def select(self, offset: int, size: int) -> bytes | None:
        """CommitLog.getMessage(offset, size): ``returnFirstOnNotFound = offset == 0``."""
        seg = self.find(offset, offset == 0)
        if seg is None:
            return None
        pos = offset % self.file_size
        if size < 0 or pos + size > seg.valid:
            return None
        return self.read(seg.rel, pos, size)

    def data_size(self, offset: int) -> int | None:
        """CommitLog.getData(offset, false) then getInt(0): the size of what queryMessage adds."""
        seg = self.find(offset, False)
        if seg is None:
            return None
        pos = offset % self.file_size
        if not 0 <= pos < seg.valid:
            return None
        avail = seg.valid - pos
        if avail < cl.SIZE_TOTALSIZE:
            return None
        size = records.total_size_at(self.read(seg.rel, pos, cl.SIZE_TOTALSIZE))
        if size is None or size < 0 or size > avail:
            return None          # ByteBuffer.limit throws; caught per offset
        return size

    def read_at(self, offset: int, size: int) -> bytes:
        """``size`` bytes at commitlog ``offset`` (the file must hold them: ``data_size`` says so)."""
        seg = self.find(offset)
        if seg is None:
            raise ValueError(f"commitlog offset {offset} is in no segment of this snapshot")
        return self.read(seg.rel, offset % self.file_size, size)

    # ------------------------------------------------------------------ records
    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """CommitLog.pickupStoreTimestamp: -1 unless [offset, offset+size) is readable."""
        if not (offset >= self.min_offset() and offset + size <= self.max_offset()):
            return -1
        raw = self.select(offset, size)
        if raw is None:
            return -1
        ts = records.pickup_store_timestamp(raw)
        return -1 if ts is None else ts          # Java would throw: size too small for the header

    def look_message_by_offset(self, offset: int) -> Message | None:
        """DefaultMessageStore.lookMessageByOffset (offset 0 falls back to the first file)."""
        head = self.select(offset, cl.SIZE_TOTALSIZE)
        size = None if head is None else records.total_size_at(head)
        if size is None:
            return None
        raw = self.select(offset, size)
        if raw is None:
            return None
        return records.decode_message(raw)

    def get_by_offset(self, offset: int) -> Message | None:
        """The record starting exactly at commitlog ``offset`` (None if absent / not a record start)."""
        with StoredRanges(self.store) as files:
            return self.records_at([offset], files)[0]

    def _head(self, offset: int) -> tuple[CommitLogSegment, tuple[str, int, int]] | None:
        """(segment, the range ``records_at`` reads first) of a record at ``offset``: from its start to
        the end of its page (size, magic and most records whole); None if no record fits there."""
        seg = self.find(offset, False)
        pos = offset % self.file_size
        if seg is None or pos + cl.BLANK_SIZE > seg.valid:
            return None
        return seg, (seg.rel, pos, min(seg.valid - pos, max(cl.BLANK_SIZE, _PAGE - pos % _PAGE)))

    def record_heads(self, offsets: Sequence[int]) -> list[tuple[str, int, int]]:
        """The ranges ``records_at(offsets)`` reads first (for a ``StoredRanges.hint``)."""
        return [w[1] for w in map(self._head, offsets) if w is not None]

    def records_at(self, offsets: Sequence[int], files: StoredRanges) -> list[Message | None]:
        """``get_by_offset`` of each offset, read together through ``files`` (``RECORDS_AT_ONCE``
        at a time: a hot key's many records are not all held, or all hinted, at once)."""
        out: list[Message | None] = []
        for at in range(0, len(offsets), RECORDS_AT_ONCE):
            out.extend(self._records_at(offsets[at:at + RECORDS_AT_ONCE], files))
        return out

    def _records_at(self, offsets: Sequence[int], files: StoredRanges) -> list[Message | None]:
        """First the rest of the page each record starts in (its size and magic, and most records
        whole), then, at once, the records that run past it."""
        where = [self._head(offset) for offset in offsets]
        heads = iter(files.read([w[1] for w in where if w is not None]))
        raw: list[bytes | None] = []
        rest: list[tuple[int, str, int, int]] = []       # (index, rel, pos, size) of records past their page
        for i, w in enumerate(where):
            if w is None:
                raw.append(None)
                continue
            seg, (_, pos, _) = w
            head = next(heads)
            size, magic = cl.parse_size_magic(head)
            if not cl.is_record_start(size, magic, pos, seg.valid):
                raw.append(None)
            elif size <= len(head):
                raw.append(head[:size])
            else:
                raw.append(None)
                rest.append((i, seg.rel, pos, size))
        for (i, *_), whole in zip(rest, files.read([r[1:] for r in rest])):
            raw[i] = whole
        out: list[Message | None] = []
        for offset, record in zip(offsets, raw):
            msg = records.decode_message(record) if record is not None else None
            out.append(msg if msg is not None and msg["commitlog_offset"] == offset else None)
        return out
