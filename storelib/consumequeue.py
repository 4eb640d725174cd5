"""ConsumeQueue files (docs/FORMAT.md §2).

Path ``consumequeue/<topic>/<queueId>/<20-digit byte offset of the file's first unit>``; file size
``ceil(mappedFileSizeConsumeQueue / 20) * 20``. One 20-byte unit per NOT/COMMIT message, in
commitlog order, at logical byte ``queueOffset * 20``:

    @0   int64  commitlog PHYSICALOFFSET
    @8   int32  TOTALSIZE
    @12  int64  tagsCode (sign-extended Java hash of TAGS, or deliver time for delay messages)

Files are created at the first unit that falls into them; the last file is zero-padded.
"""
from __future__ import annotations

import numpy as np

from .config import CQ_UNIT_SIZE
from .names import topic_problem
from .storage import StorePathError

DIR = "consumequeue"
UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])
assert UNIT_DTYPE.itemsize == CQ_UNIT_SIZE


def rel_path(topic: str, queue_id: int, file_start_unit: int) -> str:
    """The file's store-relative path; the (topic, queue id) key must name one directory each
    (input rows are checked long before: this is the last guard before a name becomes a path)."""
    problem = topic_problem(topic)
    if problem or int(queue_id) < 0:
        raise StorePathError(f"consume queue {topic!r}/{queue_id}: "
                             f"{problem or 'negative queue id'}; refusing to build its path")
    return f"{DIR}/{topic}/{queue_id}/{file_start_unit * CQ_UNIT_SIZE:020d}"


def file_index(queue_offset, units_per_file: int):
    return queue_offset // units_per_file


def encode_units(phys: np.ndarray, size: np.ndarray, tags: np.ndarray) -> np.ndarray:
    units = np.empty(len(phys), dtype=UNIT_DTYPE)
    units["phys"] = phys
    units["size"] = size
    units["tags"] = tags
    return units.view(np.uint8)


def decode_units(buf) -> np.ndarray:
    """Structured view (phys, size, tags) of whole units in ``buf``."""
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    n = len(arr) // CQ_UNIT_SIZE
    return arr[: n * CQ_UNIT_SIZE].view(UNIT_DTYPE)


def valid_units(buf) -> int:
    """Units before the first all-zero unit (how a broker finds the end of the last file)."""
    u = decode_units(buf)
    empty = (u["phys"] == 0) & (u["size"] == 0) & (u["tags"] == 0)
    # The very first unit of queue 0 may legitimately point at commitlog offset 0 with a size.
    idx = np.flatnonzero(empty)
    return int(idx[0]) if len(idx) else len(u)
