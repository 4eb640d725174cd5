"""CommitLog segments (docs/FORMAT.md §1.1, §1.7).

Directory ``commitlog/``; each file is exactly ``mappedFileSizeCommitLog`` bytes and is named by
the absolute offset of its first byte, 20 decimal digits. Records follow each other with no gap.
A message of TOTALSIZE L goes into the current file only if ``L + 8 <= fileSize - pos``;
otherwise an 8-byte BLANK record closes the file:

    @pos      int32  maxBlank = fileSize - pos   (the whole remaining length)
    @pos+4    int32  BLANK_MAGIC 0xCBD43194

and the message starts the next file at position 0. The rest of a closed file, and the tail of
the last file, stay zero.
"""
from __future__ import annotations

import struct

import numpy as np

from .codec import BLANK_MAGIC, MAGIC_V1, MAGIC_V2
from . import kernels

DIR = "commitlog"
END_FILE_MIN_BLANK_LENGTH = 8


def file_name(offset: int) -> str:
    """UtilAll.offset2FileName: the offset in 20 decimal digits."""
    return f"{offset:020d}"


def rel_path(base_offset: int) -> str:
    return f"{DIR}/{file_name(base_offset)}"


def blank_record(pos: int, file_size: int) -> bytes:
    return struct.pack(">ii", file_size - pos, BLANK_MAGIC)


def fits(pos_in_file: int, size: int, file_size: int) -> bool:
    return size + END_FILE_MIN_BLANK_LENGTH <= file_size - pos_in_file


def record_starts(buf: np.ndarray, start: int = 0, end: int | None = None):
    """Positions of the records in a segment buffer; (starts, stop position, reason).

    reason: 0 = reached ``end``, 1 = BLANK record at stop, 2 = zero size / bad magic at stop.
    """
    end = len(buf) if end is None else end
    return kernels.walk_records(buf, start, end, BLANK_MAGIC, MAGIC_V1, MAGIC_V2)
