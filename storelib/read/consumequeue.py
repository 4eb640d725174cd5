"""Consume-queue access for the readers: ``ConsumeQueue``'s lookups and queries, RocketMQ 5.3.3's
answers quirks included (docs/FORMAT.md §2, §6).

``QueueReader`` serves every (topic, queue id) of a ``StoreFiles``: min/max offset (the min
corrected against the commitlog's min offset as ``correctMinOffset`` does at load), the units of
one file from a queue offset (``getIndexBuffer``: one file per call), ``getMessage``,
``getOffsetInQueueByTime`` (file by time, then ``binarySearchInQueueByTime``) and the exact
``get_by_queue_offset``. Unit bytes are decoded by ``storelib.format.consumequeue``.

A ``rocketmqVersion=4.9`` store is answered as RocketMQ 4.9 does where the lines differ: its
``correctMinOffset`` scans only the first file (a queue whose first file lies wholly below the
commitlog's min offset keeps min offset 0), and its ``getOffsetInQueueByTime`` has no boundary,
picks the file by the files' modification times and does not clamp to [min, max].
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..format import consumequeue, records
from .commitlog import CommitLogReader, Message
from ..format.config import StoreConfig
from ..format.consumequeue import UNIT_SIZE
from ..io.checked import read_stored
from ..format.javahash import java_div

if TYPE_CHECKING:                       # (storage loads pyarrow: not on the shell lookup path)
    from ..io.storage import Store
    from ..table.storefiles import ConsumeQueueFile

__all__ = ["MAX_PULL_MSG_SIZE", "MAX_FILTER_MESSAGE_SIZE", "QueueState", "QueueReader"]

MAX_PULL_MSG_SIZE = 128 * 1024 * 1024          # DefaultMessageStore.MAX_PULL_MSG_SIZE
MAX_FILTER_MESSAGE_SIZE = 16000                # MessageStoreConfig.maxFilterMessageSize default


def _bisect_by_time(low: int, high: int, min_phy: int, unit: Callable[[int], tuple[int, int]],
                    pickup: Callable[[int, int], int], timestamp: int) -> tuple[int, int, int, int, int] | None:
    """The binary search over unit positions [low, high] of one file that both lines'
    getOffsetInQueueByTime run: ``unit(pos)`` is (phy, size) of the unit at byte ``pos``, ``pickup``
    the store time of a record (< 0: unreadable). A unit below ``min_phy`` counts as earlier.
    Returns (target, left, right, left_ts, right_ts), -1 where unset (``target``: a unit whose store
    time is ``timestamp``; ``left`` / ``right``: the last unit searched on each side, ``*_ts`` the
    store time read there); None when a store time cannot be read (Java answers 0)."""
    target = left = right = -1
    left_ts = right_ts = -1
    while high >= low:
        mid = (low + high) // (2 * UNIT_SIZE) * UNIT_SIZE
        phy, size = unit(mid)
        if phy < min_phy:
            low, left = mid + UNIT_SIZE, mid
            continue
        t = pickup(phy, size)
        if t < 0:
            return None
        if t == timestamp:
            target = mid
            break
        if t > timestamp:
            high, right, right_ts = mid - UNIT_SIZE, mid, t
        else:
            low, left, left_ts = mid + UNIT_SIZE, mid, t
    return target, left, right, left_ts, right_ts


class QueueState:
    """One consume queue: its files and what a broker computes at load / caches."""
    __slots__ = ("topic", "queue_id", "files", "min_logic", "start_ts", "stop_ts")

    def __init__(self, topic: str, queue_id: int, files: list[ConsumeQueueFile]):
        self.topic, self.queue_id, self.files = topic, queue_id, files
        self.min_logic: int | None = None        # bytes; computed lazily (correctMinOffset at load)
        self.start_ts: dict[int, int] = {}       # file index -> cached store time of first unit (> 0 only)
        self.stop_ts: dict[int, int] = {}


class QueueReader:
    """The consume queues of one ``StoreFiles`` over its commitlog (``CommitLogReader``)."""

    def __init__(self, store: Store, consume_queues: Mapping[tuple[str, int], list[ConsumeQueueFile]], config: StoreConfig,
                 commitlog: CommitLogReader):
        self.store = store
        self.consume_queues = consume_queues
        self.config = config
        self.commitlog = commitlog
        self.file_size = config.cq_file_size
        self._queues: dict[tuple[str, int], QueueState] = {}

    # ================================================================= primitives
    def queue(self, topic: str, queue_id: int) -> QueueState:
        """The queue's state; a queue without files exists (empty)."""
        key = (topic, int(queue_id))
        st = self._queues.get(key)
        if st is None:
            st = QueueState(topic, int(queue_id), list(self.consume_queues.get(key) or []))
            self._queues[key] = st
        return st

    def existing(self, topic: str, queue_id: int) -> QueueState | None:
        """The queue's state; None for a queue that has no files."""
        if (topic, int(queue_id)) not in self._queues and self.consume_queues.get((topic, int(queue_id))) is None:
            return None
        return self.queue(topic, queue_id)

    def max_bytes(self, cq: QueueState) -> int:
        """MappedFileQueue.getMaxOffset of the queue (0 without files)."""
        if not cq.files:
            return 0
        f = cq.files[-1]
        return f.base + f.units * UNIT_SIZE

    def find(self, cq: QueueState, offset: int) -> int | None:
        """findMappedFileByOffset over the queue's files -> file index."""
        if not cq.files:
            return None
        fs = self.file_size
        first, last = cq.files[0], cq.files[-1]
        if first.base <= offset < last.base + fs:
            i = offset // fs - first.base // fs
            if 0 <= i < len(cq.files) and cq.files[i].base <= offset < cq.files[i].base + fs:
                return i
            for k, f in enumerate(cq.files):
                if f.base <= offset < f.base + fs:
                    return k
        return None

    def units(self, cq: QueueState, index: int, max_units: int | None = None) -> list[tuple[int, int, int, int]] | None:
        """ConsumeQueue.getIndexBuffer(index) as a list of (queue_offset, phy, size, tags).

        Only the file that holds ``index`` is served (up to its readable end); None when
        ``index`` is below the min offset, outside the files or past the readable end.
        """
        offset = index * UNIT_SIZE
        if offset < self.min_logic(cq):
            return None
        k = self.find(cq, offset)
        if k is None:
            return None
        f = cq.files[k]
        pos = offset % self.file_size
        read_pos = f.units * UNIT_SIZE
        if not 0 <= pos < read_pos:
            return None
        n = (read_pos - pos) // UNIT_SIZE
        if max_units is not None:
            n = min(n, max_units)
        raw = read_stored(self.store, f.rel, pos, n * UNIT_SIZE)
        q0 = (f.base + pos) // UNIT_SIZE
        return [(q0 + i, *u) for i, u in enumerate(consumequeue.decode_units(raw).tolist())]

    def get(self, cq: QueueState, index: int) -> tuple[int, int, int] | None:
        """ConsumeQueue.get(index) -> (phy, size, tags) or None."""
        units = self.units(cq, index, 1)
        return units[0][1:] if units else None

    def unit_at(self, f: ConsumeQueueFile, pos: int) -> tuple[int, int, int]:
        """(phy, size, tags) of the unit at byte ``pos`` of file ``f``."""
        return consumequeue.parse_unit(read_stored(self.store, f.rel, pos, UNIT_SIZE))

    def min_logic(self, cq: QueueState) -> int:
        if cq.min_logic is None:
            if self.config.line_4_9:
                cq.min_logic = self._correct_min_offset_4_9(cq, self.commitlog.min_offset())
            else:
                cq.min_logic = self._correct_min_offset(cq, 0, self.commitlog.min_offset())
        return cq.min_logic

    def _readable(self, cq: QueueState, k: int) -> int:
        """Bytes ``selectMappedBuffer(0)`` serves of file k after a load: a whole file but the last."""
        return cq.files[k].units * UNIT_SIZE if k == len(cq.files) - 1 else self.file_size

    def _phys_sizes(self, cq: QueueState, k: int) -> np.ndarray:
        n = self._readable(cq, k)
        raw = read_stored(self.store, cq.files[k].rel, 0, n) if n else b""
        return consumequeue.decode_units(raw)

    def _correct_min_offset_4_9(self, cq: QueueState, min_phy: int) -> int:
        """RocketMQ 4.9's ConsumeQueue.correctMinOffset: the first unit of the first file at or
        above the commitlog's min offset; none there leaves the min offset at 0."""
        if not cq.files:
            return 0
        at = np.flatnonzero(self._phys_sizes(cq, 0)["phys"] >= min_phy)
        return cq.files[0].base + int(at[0]) * UNIT_SIZE if len(at) else 0

    def _correct_min_offset(self, cq: QueueState, min_logic: int, min_phy: int) -> int:
        """ConsumeQueue.correctMinOffset (run by recoverOffsetTable at load, from 0)."""
        max_bytes = self.max_bytes(cq)
        if min_logic >= max_bytes or not cq.files:
            return min_logic
        last = cq.files[-1]
        read_pos = last.units * UNIT_SIZE
        if read_pos >= UNIT_SIZE:
            phy = self.unit_at(last, read_pos - UNIT_SIZE)[0]
            if phy < min_phy:
                return last.base + read_pos          # whole queue expired: min = max
        first = cq.files[0]
        intact = True
        start = min_logic - first.base
        if start < 0:
            intact = False
            start = 0
        first_read = first.units * UNIT_SIZE
        if start > first_read or not start < first_read:
            return min_logic                         # [Bug] states / selectMappedBuffer null
        size = first_read - start
        phy = self.unit_at(first, start)[0]
        if intact and phy >= min_phy:
            return min_logic
        low, high = 0, size - UNIT_SIZE
        while high - low > UNIT_SIZE:
            mid = (low + high) // 2 // UNIT_SIZE * UNIT_SIZE
            phy = self.unit_at(first, start + mid)[0]
            if phy > min_phy:
                high = mid
            elif phy == min_phy:
                low = high = mid
                break
            else:
                low = mid
        for i in range(low, high + 1, UNIT_SIZE):
            if self.unit_at(first, start + i)[0] >= min_phy:
                return first.base + start + i
        return min_logic

    # ================================================================= queries
    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.min_logic(self.queue(topic, queue_id)) // UNIT_SIZE

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.existing(topic, queue_id)
        return 0 if cq is None else self.max_bytes(cq) // UNIT_SIZE

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.existing(topic, queue_id)
        unit = None if cq is None else self.get(cq, cq_offset)
        return 0 if unit is None else unit[0]

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self.existing(topic, queue_id)
        unit = None if cq is None else self.get(cq, cq_offset)
        return -1 if unit is None else self.commitlog.pickup_store_timestamp(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's min unit (-1 without one)."""
        cq = self.existing(topic, queue_id)
        if cq is None:
            return -1
        unit = self.get(cq, self.min_logic(cq) // UNIT_SIZE)
        return -1 if unit is None else self.commitlog.pickup_store_timestamp(unit[0], unit[1])

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int) -> dict[str, Any]:
        """DefaultMessageStore.getMessage without a filter, on a master, all data "in memory".

        Returns {status, next_begin_offset, min_offset, max_offset, queue_offsets, phy_offsets,
        messages (decoded dicts)}.
        """
        cq = self.queue(topic, queue_id)
        min_off = self.min_logic(cq) // UNIT_SIZE
        max_off = self.max_bytes(cq) // UNIT_SIZE
        out: dict[str, Any] = {"status": None, "next_begin_offset": offset, "min_offset": min_off, "max_offset": max_off,
               "queue_offsets": [], "phy_offsets": [], "messages": []}
        if max_off == 0:
            out.update(status="NO_MESSAGE_IN_QUEUE", next_begin_offset=0)
        elif offset < min_off:
            out.update(status="OFFSET_TOO_SMALL", next_begin_offset=min_off)
        elif offset == max_off:
            out.update(status="OFFSET_OVERFLOW_ONE", next_begin_offset=offset)
        elif offset > max_off:
            out.update(status="OFFSET_OVERFLOW_BADLY", next_begin_offset=max_off)
        else:
            self._pull(cq, offset, max_msg_nums, max_off, out)
        return out

    def _pull(self, cq: QueueState, offset: int, max_msg_nums: int, max_off: int, out: dict[str, Any]) -> None:
        """getMessage's loop over the units of one consume-queue file (fills ``out``)."""
        max_filter = max(MAX_FILTER_MESSAGE_SIZE, max_msg_nums * UNIT_SIZE)
        max_pull = min(max(MAX_PULL_MSG_SIZE, 100), MAX_PULL_MSG_SIZE)
        status = "NO_MATCHED_MESSAGE"
        next_begin = offset
        total_bytes = 0
        msgs = out["messages"]
        units = self.units(cq, next_begin, -(-max_filter // UNIT_SIZE))
        if units is None:
            status = "OFFSET_FOUND_NULL"
            per = self.file_size // UNIT_SIZE
            next_begin = next_begin + per - next_begin % per
            units = []
        cl_size = self.commitlog.file_size
        next_phy_file_start = None
        for q, phy, size, _tags in units:
            if next_begin >= max_off:
                break
            if (q - offset) * UNIT_SIZE >= max_filter:
                break
            if self._batch_full(size, max_msg_nums, max_pull, total_bytes, len(msgs)):
                break
            if total_bytes >= max_pull:
                break
            next_begin = q + 1
            if next_phy_file_start is not None and phy < next_phy_file_start:
                continue
            raw = self.commitlog.select(phy, size)
            if raw is None:
                if total_bytes == 0:
                    status = "MESSAGE_WAS_REMOVING"
                next_phy_file_start = phy + cl_size - phy % cl_size
                continue
            total_bytes += size
            msgs.append(records.decode_message(raw))
            # the record's QUEUEOFFSET, as the answers give it (docs/FORMAT.md §7.2): q but for a
            # light message queue's unit, whose record holds its own topic's offset
            out["queue_offsets"].append(msgs[-1]["queue_offset"] if msgs[-1] else q)
            out["phy_offsets"].append(phy)
            status = "FOUND"
            next_phy_file_start = None
        out.update(status=status, next_begin_offset=next_begin)

    def _batch_full(self, size: int, max_msg_nums: int, max_pull: int, total: int, count: int) -> bool:
        """DefaultMessageStore.isTheBatchFull, unit batch 1, in memory."""
        if total == 0 or count == 0:
            return False
        if count + 1 > max_msg_nums:
            return True
        if total + size > max_pull:
            return True
        if total + size > self.config.maxTransferBytesOnMessageInMemory:
            return True
        return count > self.config.maxTransferCountOnMessageInMemory - 1

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: str = "LOWER") -> int:
        """ConsumeQueueStore.getOffsetInQueueByTime: file by time, binary search, clamp to [min, max]."""
        boundary = boundary.upper()
        cq = self.queue(topic, queue_id)
        if self.config.line_4_9:
            return self._offset_by_time_4_9(cq, timestamp)
        k = self._file_by_time(cq, timestamp, boundary)
        result = 0 if k is None else self._binary_search_by_time(cq, k, timestamp, boundary)
        result = max(result, self.min_logic(cq) // UNIT_SIZE)
        return min(result, self.max_bytes(cq) // UNIT_SIZE)

    def _file_mtime_ms(self, rel: str) -> int:
        """File.lastModified of a store file (milliseconds)."""
        if self.store.local:
            return os.stat(self.store.path(rel)).st_mtime_ns // 1_000_000
        from ..io.storage import filesystem
        fs, root = filesystem(self.store.uri_of(rel))
        return int(fs.get_file_info(root).mtime_ns // 1_000_000)

    def _offset_by_time_4_9(self, cq: QueueState, timestamp: int) -> int:
        """RocketMQ 4.9's ConsumeQueue.getOffsetInQueueByTime: the first file modified at or after
        ``timestamp`` (else the last), then its binary search from the min offset, the nearer
        neighbour when no store time matches; no boundary and no clamp."""
        if not cq.files:
            return 0
        n = len(cq.files)
        k = next((i for i in range(n) if self._file_mtime_ms(cq.files[i].rel) >= timestamp), n - 1)
        f = cq.files[k]
        units = self._phys_sizes(cq, k)
        if not len(units):
            return 0                                   # selectMappedBuffer(0) -> null
        min_logic = self.min_logic(cq)
        low = min_logic - f.base if min_logic > f.base else 0
        high = len(units) * UNIT_SIZE - UNIT_SIZE

        def unit(pos: int) -> tuple[int, int]:
            return int(units["phys"][pos // UNIT_SIZE]), int(units["size"][pos // UNIT_SIZE])

        found = _bisect_by_time(low, high, self.commitlog.min_offset(), unit, self.commitlog.pickup_store_timestamp,
                                timestamp)
        if found is None:
            return 0
        target, left, right, left_ts, right_ts = found
        if target != -1:
            off = target
        elif left_ts == -1:
            off = right
        elif right_ts == -1:
            off = left
        else:
            off = right if abs(timestamp - left_ts) > abs(timestamp - right_ts) else left
        return java_div(f.base + off, UNIT_SIZE)

    def _file_by_time(self, cq: QueueState, timestamp: int, boundary: str) -> int | None:
        """MappedFileQueue.getConsumeQueueMappedFileByTime -> file index."""
        n = len(cq.files)
        if n == 0:
            return None
        self._cache_file_times(cq)
        if boundary == "LOWER":
            for i in range(n):
                if i < n - 1 and cq.stop_ts.get(i, -1) >= timestamp:
                    return i
                if i == n - 1:
                    return i
        elif boundary == "UPPER":
            for i in range(n - 1, -1, -1):
                if cq.start_ts.get(i, -1) <= timestamp:
                    return i
            return None
        else:
            raise ValueError(f"boundary must be LOWER or UPPER, got {boundary!r}")
        return None

    def _cache_file_times(self, cq: QueueState) -> None:
        """Store times of each file's first unit and (full files but the last) its last unit."""
        n = len(cq.files)
        pickup = self.commitlog.pickup_store_timestamp
        for i in range(n - 1, -1, -1):
            f = cq.files[i]
            read_pos = f.units * UNIT_SIZE
            if i not in cq.start_ts and read_pos >= UNIT_SIZE:
                phy, size, _ = self.unit_at(f, 0)
                t = pickup(phy, size)
                if t > 0:
                    cq.start_ts[i] = t
            if i < n - 1 and i not in cq.stop_ts and read_pos >= self.file_size:
                phy, size, _ = self.unit_at(f, self.file_size - UNIT_SIZE)
                t = pickup(phy, size)
                if t > 0:
                    cq.stop_ts[i] = t

    def _binary_search_by_time(self, cq: QueueState, k: int, timestamp: int, boundary: str) -> int:
        """ConsumeQueue.binarySearchInQueueByTime (faithful, including its corner cases)."""
        f = cq.files[k]
        fs = self.file_size
        min_logic = self.min_logic(cq)
        low = min_logic - f.base if min_logic > f.base else 0
        min_phy = self.commitlog.min_offset()
        wrote = f.units * UNIT_SIZE
        rng = fs
        if wrote != 0 and wrote != fs:
            rng = wrote
        if rng > wrote:
            return 0                                   # selectMappedBuffer(0, range) -> null
        ceiling = rng - UNIT_SIZE
        floor = low
        high = ceiling
        pickup = self.commitlog.pickup_store_timestamp

        def ts_at(pos: int) -> int:
            phy, size, _ = self.unit_at(f, pos)
            return pickup(phy, size)

        if ts_at(ceiling) < timestamp:
            if boundary == "LOWER":
                return java_div(f.base + ceiling + UNIT_SIZE, UNIT_SIZE)
            return java_div(f.base + ceiling, UNIT_SIZE)
        if floor + UNIT_SIZE > rng:
            # Java: ByteBuffer.position(floor) / getLong throws (min offset lies past this file).
            return 0
        if ts_at(floor) > timestamp:
            return java_div(f.base, UNIT_SIZE) if boundary == "LOWER" else 0

        found = _bisect_by_time(low, high, min_phy, lambda pos: self.unit_at(f, pos)[:2], pickup, timestamp)
        if found is None:
            return 0
        target, left, right, _, _ = found
        if target != -1:
            prev = target
            if boundary == "LOWER":
                while prev - UNIT_SIZE >= floor and ts_at(prev - UNIT_SIZE) == timestamp:
                    prev -= UNIT_SIZE
            else:
                while prev + UNIT_SIZE <= ceiling and ts_at(prev + UNIT_SIZE) == timestamp:
                    prev += UNIT_SIZE
            off = prev
        else:
            off = right if boundary == "LOWER" else left
        return java_div(f.base + off, UNIT_SIZE)

    # ================================================================= exact variant
    def get_by_queue_offset(self, topic: str, queue_id: int, offset: int, count: int = 1) -> list[Message]:
        """Messages at queue offsets [offset, offset+count) that still exist (crosses CQ files).

        Each message dict is the stored record (its ``queue_offset`` field is the queue offset).
        """
        cq = self.existing(topic, queue_id)
        if cq is None or count <= 0:
            return []
        lo = max(offset, self.min_logic(cq) // UNIT_SIZE)
        hi = min(offset + count, self.max_bytes(cq) // UNIT_SIZE)
        out = []
        q = lo
        while q < hi:
            units = self.units(cq, q, hi - q)
            if not units:
                per = self.file_size // UNIT_SIZE
                q = q + per - q % per
                continue
            for _uq, phy, _size, _ in units:
                msg = self.commitlog.get_by_offset(phy)
                if msg is not None:
                    out.append(msg)
            q = units[-1][0] + 1
        return out
