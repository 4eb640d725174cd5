"""ConsumeQueue files: the one definition of their layout (docs/FORMAT.md §2, §6.4).

Path ``consumequeue/<topic>/<queueId>/<20-digit byte offset of the file's first unit>``; file size
``ceil(mappedFileSizeConsumeQueue / UNIT_SIZE) * UNIT_SIZE``. One 20-byte unit per NOT/COMMIT
message, in commitlog order, at logical byte ``queueOffset * UNIT_SIZE``::

    @UNIT_PHYSICALOFFSET  0   int64  commitlog PHYSICALOFFSET
    @UNIT_TOTALSIZE       8   int32  TOTALSIZE
    @UNIT_TAGSCODE        12  int64  tagsCode (sign-extended Java hash of TAGS, or deliver time for delay messages)

Files are created at the first unit that falls into them; the last file is zero-padded.

**End of the data** (RocketMQ's recovery, ``ConsumeQueue.recover``): a unit holds a message when
``phys >= 0 and size > 0`` (``unit_in_use``); a file's valid units are the ones before the first unit
that fails that test (``valid_units``). A reader after a normal restart takes every file but a
queue's last as full and applies ``valid_units`` to the last one.

Names defined here: ``DIR``, ``UNIT_SIZE``, ``UNIT_PHYSICALOFFSET``, ``UNIT_TOTALSIZE``,
``UNIT_TAGSCODE``, ``UNIT_DTYPE`` (big-endian structured dtype, fields ``phys``, ``size``,
``tags``), ``FILLER_SIZE`` (``Integer.MAX_VALUE``, size of ``fillPreBlank`` units),
``pack_unit`` / ``parse_unit`` (one unit), ``encode_units`` / ``decode_units`` (whole arrays),
``unit_in_use``, ``valid_units``, ``unit_position`` (file base and byte position of a queue offset),
``rel_path``.

This module is a leaf (numpy only at import time): ``config`` takes ``UNIT_SIZE`` from here.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from .commitlog import Buffer, IntOrArray

from ..errors import StorePathError
from .names import topic_problem
from .paths import CONSUMEQUEUE_DIR

__all__ = ["DIR", "UNIT_SIZE", "UNIT_PHYSICALOFFSET", "UNIT_TOTALSIZE", "UNIT_TAGSCODE", "UNIT_DTYPE",
           "FILLER_SIZE", "rel_path", "pack_unit", "parse_unit", "encode_units", "decode_units", "unit_in_use",
           "valid_units", "unit_position", "LMQ_PREFIX", "LMQ_QUEUE_ID", "PROPERTY_LMQ_NAMES",
           "PROPERTY_LMQ_OFFSETS", "LMQ_SEPARATOR", "is_lmq", "BATCH_CQ_DIR", "ROCKSDB_MARKER"]

DIR = CONSUMEQUEUE_DIR
UNIT_SIZE = 20

# Light message queues (enableLmq + enableMultiDispatch, ConsumeQueue.multiDispatchLmqQueue): a
# record of topic T that names queues "%LMQ%a,%LMQ%b" in INNER_MULTI_DISPATCH also gets a unit in
# consumequeue/%LMQ%a/0/..., at the queue offset the store wrote in the same place of
# INNER_MULTI_QUEUE_OFFSET ("3,7"); its own QUEUEOFFSET is T's. One record, several units.
LMQ_PREFIX = "%LMQ%"                               # MixAll.LMQ_PREFIX
LMQ_QUEUE_ID = 0                                   # MixAll.LMQ_QUEUE_ID
PROPERTY_LMQ_NAMES = "INNER_MULTI_DISPATCH"        # MessageConst.PROPERTY_INNER_MULTI_DISPATCH
PROPERTY_LMQ_OFFSETS = "INNER_MULTI_QUEUE_OFFSET"  # MessageConst.PROPERTY_INNER_MULTI_QUEUE_OFFSET
LMQ_SEPARATOR = ","                                # MixAll.LMQ_DISPATCH_SEPARATOR


# Consume queues rocketlake does not read (docs/FORMAT.md §2.2): a topic with the attribute
# queue.type=BatchCQ keeps its queue in batchconsumequeue/<topic>/<queueId>/ (BatchConsumeQueue:
# 46-byte units, one per inner-batch record that holds several messages); a store with
# storeType=defaultRocksDB keeps every queue in a RocksDB database in consumequeue/ itself, whose
# CURRENT file names its manifest.
BATCH_CQ_DIR = "batchconsumequeue"
ROCKSDB_MARKER = "CURRENT"


def is_lmq(topic: str) -> bool:
    """A light message queue's name (MixAll.isLmq)."""
    return topic.startswith(LMQ_PREFIX)
UNIT_PHYSICALOFFSET = 0
UNIT_TOTALSIZE = 8
UNIT_TAGSCODE = 12
UNIT_DTYPE = np.dtype({"names": ["phys", "size", "tags"], "formats": [">i8", ">i4", ">i8"],
                       "offsets": [UNIT_PHYSICALOFFSET, UNIT_TOTALSIZE, UNIT_TAGSCODE], "itemsize": UNIT_SIZE})
FILLER_SIZE = 2**31 - 1        # ConsumeQueue.fillPreBlank writes (0, Integer.MAX_VALUE, 0)
_UNIT = struct.Struct(">qiq")
assert UNIT_DTYPE.itemsize == _UNIT.size == UNIT_SIZE


def rel_path(topic: str, queue_id: int, file_start_unit: int) -> str:
    """The file's store-relative path; the (topic, queue id) key must name one directory each
    (input rows are checked long before: this is the last guard before a name becomes a path)."""
    problem = topic_problem(topic)
    if problem or int(queue_id) < 0:
        raise StorePathError(f"consume queue {topic!r}/{queue_id}: "
                             f"{problem or 'negative queue id'}; refusing to build its path")
    return f"{DIR}/{topic}/{queue_id}/{file_start_unit * UNIT_SIZE:020d}"


def unit_position(queue_offset: int, file_size: int) -> tuple[int, int]:
    """(file base = its name, byte position in it) of the unit of ``queue_offset``."""
    logical = queue_offset * UNIT_SIZE
    return logical - logical % file_size, logical % file_size


def pack_unit(phys: int, size: int, tags: int) -> bytes:
    return _UNIT.pack(phys, size, tags)


def parse_unit(buf: Buffer, pos: int = 0) -> tuple[int, int, int]:
    """(phys, size, tagsCode) of the unit at byte ``pos`` of ``buf`` (struct.error when short)."""
    phys, size, tags = _UNIT.unpack_from(buf, pos)  # type: ignore[arg-type]
    return phys, size, tags


def encode_units(phys: np.ndarray, size: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """The units' bytes (uint8 array of ``len(phys) * UNIT_SIZE``)."""
    units = np.empty(len(phys), dtype=UNIT_DTYPE)
    units["phys"] = phys
    units["size"] = size
    units["tags"] = tags
    return units.view(np.uint8)


def decode_units(buf: Buffer) -> np.ndarray:
    """Structured view (phys, size, tags) of the whole units in ``buf``."""
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    n = len(arr) // UNIT_SIZE
    return arr[: n * UNIT_SIZE].view(UNIT_DTYPE)


def unit_in_use(phys: IntOrArray, size: IntOrArray) -> Any:
    """The unit holds a message: ``phys >= 0 and size > 0`` (ints or arrays)."""
    return (phys >= 0) & (size > 0)


def valid_units(source: Buffer | Callable[[int], tuple[int, int, int] | None], n: int | None = None,
                exact: bool = True) -> int:
    """How many units at the start of a consume-queue file hold messages: the index of the first
    unit failing ``unit_in_use`` (RocketMQ's recovery walk), at most ``n``.

    ``source``: the file's bytes (bytes / uint8 array / ``decode_units`` array), or a function
    ``read(i) -> (phys, size, tags) | None`` for readers that fetch single units by range reads
    (None = unit not readable, i.e. not ok). With a function the boundary is found by binary search
    (O(log n) reads; ``n`` is required); ``exact=True`` then also reads every unit before the
    boundary to find an earlier failing unit as the broker's linear walk would, ``exact=False``
    trusts that units are written in order (a unit that fails before a later one that passes is
    then not noticed).
    """
    if not callable(source):
        u = source if isinstance(source, np.ndarray) and source.dtype == UNIT_DTYPE else decode_units(source)
        if n is not None:
            u = u[:n]
        bad = np.flatnonzero(~unit_in_use(u["phys"], u["size"]))
        return int(bad[0]) if len(bad) else len(u)

    def ok(i: int) -> bool:
        unit = source(i)
        return unit is not None and bool(unit_in_use(unit[0], unit[1]))

    if n is None:
        raise ValueError("valid_units with a read function needs n")
    if n <= 0 or not ok(0):
        return 0
    if ok(n - 1):
        lo = n - 1
    else:
        lo, hi = 0, n - 1                  # ok(lo), not ok(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
    if exact:
        for i in range(1, lo):
            if not ok(i):
                return i
    return lo + 1
