"""RocketMQ-compatible queries over a store directory, in process, without a broker (docs/FORMAT.md §6, §10).

``StoreReader`` answers the ``DefaultMessageStore`` query methods exactly as RocketMQ 5.3.3 does
(quirks included: 64-offset cap, second-granularity index time, no re-check of key/topic, one
consume-queue file per pull, ``lookMessageByOffset(0)`` returning the first surviving record,
...), plus "exact" variants (``find_by_key`` & co.) that fix those quirks for humans.
``open_store`` opens one committed batch of a store (or a broker's directory).

What a reader may see, and how much of each file, is a ``storelib.table.storefiles.StoreFiles`` (a
manifest snapshot, or ``StoreFiles.scan``: a broker's view after a normal restart). The reader is
three parts over it, one per kind of file: ``read.commitlog.CommitLogReader``,
``read.consumequeue.QueueReader`` (consume queues), ``read.indexfile.IndexReader`` (keys); records are
decoded by ``storelib.format.records``.

A reader of a batch that an expiry deleted files of after it says so where it meets one
(``table.expired``; every public query of ``StoreReader``).

Every read is a range read through ``Store.read``: a header, one slot, chain entries, one record.
Nothing reads whole index / commitlog files, except ``scan``'s walk over the tail of the last
commitlog file (a broker's recovery does the same; it starts from the newest consume-queue /
index position it can verify, so usually only the last few records are read).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, ParamSpec, TypeVar, cast

from .commitlog import CommitLogReader, Message
from ..format.config import StoreConfig
from .indexfile import IndexReader, KeyPage
from .consumequeue import QueueReader
from ..format.records import answer_message, decode_msg_id, earliest_probe_size, is_queued
from ..table.expired import explained
from ..table.storefiles import SnapshotInfo, StoreFiles, as_store, open_files
from ..format.textforms import format_host

if TYPE_CHECKING:                # storage loads pyarrow: a local store is read without it (localstore)
    from ..io.storage import Store
    from ..table.snapshots import StoreSnapshot

__all__ = ["open_store", "StoreReader"]

P = ParamSpec("P")
R = TypeVar("R")


def _explained(method: Callable[P, R]) -> Callable[P, R]:
    """A ``StoreReader`` query whose reads of a file an expiry after the reader's batch deleted
    say so (``table.expired``: the batch its ``files`` are of), on whatever ``Store`` it reads."""
    @functools.wraps(method)
    def query(*args: P.args, **kwargs: P.kwargs) -> R:
        reader = cast(StoreReader, args[0])
        with explained(reader.store, reader.files.expired):
            return method(*args, **kwargs)
    return query


class StoreReader:
    """``DefaultMessageStore``'s query API over a store directory (read only, no broker).

    ``files`` defaults to ``StoreFiles.scan(store, config)`` (a broker's view after a normal
    restart). All reads respect the valid sizes in ``files``. ``commitlog``, ``queues`` and
    ``index`` are the parts that answer, one per kind of file.
    """

    def __init__(self, store: Store | str, config: StoreConfig | None = None, files: StoreFiles | None = None,
                 snapshot: SnapshotInfo | None = None):
        self.store = as_store(store)
        self.snapshot = snapshot              # which batch the files are (``open_store``)
        if config is None:
            config = files.config if files is not None else StoreConfig()
        self.config = config
        self.files = files if files is not None else StoreFiles.scan(self.store, config)
        self.commitlog = CommitLogReader(self.store, self.files.commitlog, config.mappedFileSizeCommitLog)
        self.queues = QueueReader(self.store, self.files.consume_queues, config, self.commitlog)
        self.index = IndexReader(self.store, self.files.index, config, self.commitlog)
        self.broker_ip_is_v6 = ":" in config.brokerIP1

    # ================================================================= commitlog
    @_explained
    def get_min_phy_offset(self) -> int:
        """CommitLog.getMinOffset: start of the first remaining file (-1 without files)."""
        return self.commitlog.min_offset()

    @_explained
    def get_max_phy_offset(self) -> int:
        """CommitLog.getMaxOffset: end of the readable data of the last file (0 without files)."""
        return self.commitlog.max_offset()

    @_explained
    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """CommitLog.pickupStoreTimestamp: -1 unless [offset, offset+size) is readable."""
        return self.commitlog.pickup_store_timestamp(offset, size)

    @_explained
    def look_message_by_offset(self, offset: int) -> Message | None:
        """DefaultMessageStore.lookMessageByOffset (offset 0 falls back to the first file)."""
        return self.commitlog.look_message_by_offset(offset)

    @_explained
    def view_message_by_id(self, msg_id: str) -> tuple[str, int, Message | None]:
        """decodeMessageId + lookMessageByOffset: (decoded address, decoded offset, message)."""
        host, offset = decode_msg_id(msg_id)
        return format_host(host), offset, self.look_message_by_offset(offset)

    @_explained
    def get_earliest_message_time(self, topic: str | None = None, queue_id: int | None = None) -> int:
        """Store-wide (no topic): store time of the record at getMinPhyOffset. Per queue: of its min unit."""
        if topic is None:
            if self.config.line_4_9:
                return self._earliest_message_time_4_9()
            return self.pickup_store_timestamp(self.get_min_phy_offset(), earliest_probe_size(self.broker_ip_is_v6))
        if queue_id is None:
            raise ValueError(f"get_earliest_message_time of topic {topic!r}: a queue id is needed")
        return self.queues.get_earliest_message_time(topic, queue_id)

    def _earliest_message_time_4_9(self) -> int:
        """RocketMQ 4.9 reads 2 * maxMessageSize bytes at the min offset (-1 unless its file holds
        them: a whole file but the last, whose readable end is the commit log's end) and picks
        the first record's store time from them."""
        log = self.commitlog
        offset, size = log.min_offset(), 2 * self.config.maxMessageSize
        seg = log.find(offset) if offset >= 0 else None
        if seg is None:
            return -1
        readable = seg.valid if seg is log.segments[-1] else self.config.mappedFileSizeCommitLog
        if offset - seg.base + size > readable:
            return -1
        return log.pickup_store_timestamp(offset, min(size, log.max_offset() - offset))

    # ================================================================= consume queues
    @_explained
    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.get_min_offset_in_queue(topic, queue_id)

    @_explained
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.queues.get_max_offset_in_queue(topic, queue_id)

    @_explained
    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return self.queues.get_commit_log_offset_in_queue(topic, queue_id, cq_offset)

    @_explained
    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return self.queues.get_message_store_timestamp(topic, queue_id, cq_offset)

    @_explained
    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int) -> dict[str, Any]:
        """DefaultMessageStore.getMessage without a filter, on a master, all data "in memory".

        Returns {status, next_begin_offset, min_offset, max_offset, queue_offsets, phy_offsets,
        messages (decoded dicts)}.
        """
        return self.queues.get_message(group, topic, queue_id, offset, max_msg_nums)

    @_explained
    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: str = "LOWER") -> int:
        """ConsumeQueueStore.getOffsetInQueueByTime: file by time, binary search, clamp to [min, max]."""
        return self.queues.get_offset_in_queue_by_time(topic, queue_id, timestamp, boundary)

    # ================================================================= index
    @_explained
    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> tuple[list[int], int, int]:
        """IndexService.queryOffset: (offsets in index order, indexLastUpdateTimestamp, ...Phyoffset)."""
        return self.index.query_offset(topic, key, max_num, begin, end)

    @_explained
    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> dict[str, Any]:
        """DefaultMessageStore.queryMessage.

        Returns {phy_offsets, messages (decoded dicts), index_last_update_timestamp,
        index_last_update_phyoffset}; messages ascending by offset, duplicates kept.
        """
        return self.index.query_message(topic, key, max_num, begin, end)

    # ================================================================= exact variants
    @_explained
    def find_by_key(self, topic: str, key: str, begin: int | None = None, end: int | None = None,
                    limit: int | None = None, after: tuple[int, int] | None = None) -> KeyPage:
        """Every stored message of ``topic`` whose UNIQ_KEY or one of whose KEYS tokens is ``key``,
        re-checked, deduplicated, sorted by (store_timestamp, offset); see ``IndexReader.find_by_key``.
        A message below its queue's minimum offset (its queue file was removed) is not returned."""
        return self.index.find_by_key(topic, key, begin, end, limit, after, live=self.in_queue)

    @_explained
    def find_by_unique_key(self, topic: str, uniq_key: str) -> list[Message]:
        """Messages of ``topic`` whose UNIQ_KEY property equals ``uniq_key`` (by store time)."""
        return self.index.find_by_unique_key(topic, uniq_key, live=self.in_queue)

    @_explained
    def in_queue(self, msg: Message) -> bool:
        """A NOT/COMMIT message at or above its queue's minimum offset (PREPARED ones have no queue)."""
        if not is_queued(msg["sys_flag"]):
            return True
        live: bool = msg["queue_offset"] >= self.get_min_offset_in_queue(msg["topic"], msg["queue_id"])
        return live

    @_explained
    def get_by_offset(self, offset: int) -> Message | None:
        """The record starting exactly at commitlog ``offset`` (None if absent / not a record start)."""
        return self.commitlog.get_by_offset(offset)

    @_explained
    def get_by_msg_id(self, msg_id: str) -> Message | None:
        """The message an offset msgId names, if it still exists, the id's store host matches and it
        is not below its queue's minimum offset (as ``find_by_key``; ``view_message_by_id`` is the
        broker's lookup, which does not ask)."""
        try:
            host, offset = decode_msg_id(msg_id)
        except ValueError:
            return None
        msg = self.get_by_offset(offset)
        if msg is None or msg["msg_id"] != msg_id.upper() or not self.in_queue(msg):
            return None
        return msg

    @_explained
    def get_by_queue_offset(self, topic: str, queue_id: int, offset: int, count: int = 1) -> list[Message]:
        """Messages at queue offsets [offset, offset+count) that still exist (crosses CQ files).

        Each message dict is the stored record (its ``queue_offset`` field is the queue offset).
        """
        return self.queues.get_by_queue_offset(topic, queue_id, offset, count)

    # ================================================================= golden query lines
    @_explained
    def answer(self, q: dict[str, Any]) -> dict[str, Any]:
        """Run one queries.jsonl line; the answers.jsonl line RocketMQ gives (docs/FORMAT.md §7.2)."""
        t = q["type"]
        out = {"qid": q.get("qid"), "type": t}
        if t == "queryMessage":
            r = self.query_message(q["topic"], q["key"], q["max_num"], q["begin"], q["end"])
            out.update(phy_offsets=r["phy_offsets"],
                       messages=[answer_message(m, True) for m in r["messages"]],
                       index_last_update_timestamp=r["index_last_update_timestamp"],
                       index_last_update_phyoffset=r["index_last_update_phyoffset"])
        elif t == "getMessage":
            r = self.get_message(q.get("group", ""), q["topic"], q["queue_id"], q["offset"], q["max_msg_nums"])
            out.update(status=r["status"], next_begin_offset=r["next_begin_offset"],
                       min_offset=r["min_offset"], max_offset=r["max_offset"],
                       queue_offsets=r["queue_offsets"], phy_offsets=r["phy_offsets"],
                       messages=[answer_message(m, True) for m in r["messages"] if m is not None])
        elif t == "lookMessageByOffset":
            m = self.look_message_by_offset(q["offset"])
            out["message"] = None if m is None else answer_message(m, False)
        elif t == "viewMessageById":
            addr, off, m = self.view_message_by_id(q["msg_id"])
            out.update(decoded_address=addr, decoded_offset=off,
                       message=None if m is None else answer_message(m, False))
        elif t in _RESULT_QUERIES:
            out["result"] = _RESULT_QUERIES[t](self, q)
        else:
            raise ValueError(f"unknown query type {t!r}")
        return out


# Golden query types whose answer is one number: type -> the call.
_RESULT_QUERIES: dict[str, Callable[[StoreReader, dict[str, Any]], int]] = {
    "getOffsetInQueueByTime": lambda r, q: r.get_offset_in_queue_by_time(q["topic"], q["queue_id"], q["timestamp"],
                                                                         q.get("boundary", "LOWER")),
    "getMinOffsetInQueue": lambda r, q: r.get_min_offset_in_queue(q["topic"], q["queue_id"]),
    "getMaxOffsetInQueue": lambda r, q: r.get_max_offset_in_queue(q["topic"], q["queue_id"]),
    "getCommitLogOffsetInQueue": lambda r, q: r.get_commit_log_offset_in_queue(q["topic"], q["queue_id"],
                                                                               q["cq_offset"]),
    "getMessageStoreTimeStamp": lambda r, q: r.get_message_store_timestamp(q["topic"], q["queue_id"], q["cq_offset"]),
    "getEarliestMessageTime": lambda r, q: r.get_earliest_message_time(q.get("topic"), q.get("queue_id")),
    "getMinPhyOffset": lambda r, q: r.get_min_phy_offset(),
    "getMaxPhyOffset": lambda r, q: r.get_max_phy_offset(),
}


def open_store(store: "str | Store", as_of_batch: str | int | None = None, config: StoreConfig | None = None,
               snapshot: StoreSnapshot | None = None) -> StoreReader:
    """A ``StoreReader`` over one committed batch of a store (local path or pyarrow.fs URI).

    rocketlake stores: the latest committed batch, or ``as_of_batch`` (batch id or sequence
    number); the file-shaping configuration comes from the store's own checkpoint row.
    Stores without a manifest (a broker's directory): the broker's view after a restart, with
    ``config`` (default: RocketMQ defaults) fitted to the file sizes found. ``reader.snapshot``
    tells which (``storefiles.SnapshotInfo``). ``snapshot``: the one the command opened
    (``table.snapshots.open_snapshot``), else opened here.
    """
    store = as_store(store)
    files, info = open_files(store, as_of_batch, config, snapshot)
    return StoreReader(store, files.config, files, info)
