"""Compiled inner loops (numba) for the few steps numpy cannot express as whole-array operations.

Each kernel takes flat numpy arrays (an Arrow buffer and its offsets) and runs one tight
loop in machine code, so the codec never loops over messages in Python:

* ``crc32_slices``: CRC-32 (zlib polynomial) of many byte slices in one call; RocketMQ masks
  the result to 31 bits itself (BODYCRC), the kernel returns the plain CRC.
* ``walk_records``: follows the TOTALSIZE chain of a commitlog segment (each record says where
  the next one starts, so record starts cannot be found by a vectorized scan).
* ``gather_slices``: copies slices of a buffer into one contiguous buffer (Arrow binary values).

``cache=True`` keeps the machine code in ``__pycache__``, so Spark's Python workers compile
each kernel once per machine, not once per task.
"""
from __future__ import annotations

import numpy as np
from numba import njit


def _make_crc_tables() -> np.ndarray:
    """Slicing-by-8 tables for the reflected CRC-32 polynomial 0xEDB88320 (zlib's CRC)."""
    tables = np.zeros((8, 256), dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        tables[0, i] = c
    for i in range(256):
        c = int(tables[0, i])
        for t in range(1, 8):
            c = int(tables[0, c & 0xFF]) ^ (c >> 8)
            tables[t, i] = c
    return tables


CRC_TABLES = _make_crc_tables()


@njit(cache=True, nogil=True)
def _crc32_one(data, start, end, tables):
    crc = np.uint32(0xFFFFFFFF)
    i = start
    # 8 bytes per step (slicing-by-8).
    while i + 8 <= end:
        lo = crc ^ (np.uint32(data[i]) | (np.uint32(data[i + 1]) << 8)
                    | (np.uint32(data[i + 2]) << 16) | (np.uint32(data[i + 3]) << 24))
        hi = (np.uint32(data[i + 4]) | (np.uint32(data[i + 5]) << 8)
              | (np.uint32(data[i + 6]) << 16) | (np.uint32(data[i + 7]) << 24))
        crc = (tables[7, lo & 0xFF] ^ tables[6, (lo >> 8) & 0xFF]
               ^ tables[5, (lo >> 16) & 0xFF] ^ tables[4, lo >> 24]
               ^ tables[3, hi & 0xFF] ^ tables[2, (hi >> 8) & 0xFF]
               ^ tables[1, (hi >> 16) & 0xFF] ^ tables[0, hi >> 24])
        i += 8
    while i < end:
        crc = tables[0, (crc ^ np.uint32(data[i])) & 0xFF] ^ (crc >> 8)
        i += 1
    return crc ^ np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def _crc32_slices(data, starts, ends, tables, out):
    for k in range(starts.shape[0]):
        out[k] = _crc32_one(data, starts[k], ends[k], tables)


def crc32_slices(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """zlib.crc32 of ``data[starts[k]:ends[k]]`` for every k, as uint32."""
    out = np.empty(len(starts), dtype=np.uint32)
    if len(starts):
        _crc32_slices(data, starts.astype(np.int64), ends.astype(np.int64), CRC_TABLES, out)
    return out


@njit(cache=True, nogil=True)
def _walk_records(data, start, end, blank_magic, v1_magic, v2_magic, out_starts):
    """Record starts in data[start:end]; stops at a BLANK, a zero size or an unknown magic.

    Returns (count, stop_position, stop_reason): 0 = reached end, 1 = BLANK record,
    2 = TOTALSIZE 0 / unknown magic / record past end (end of data).
    """
    n = 0
    pos = start
    while pos + 8 <= end:
        size = (np.int32(data[pos]) << 24) | (np.int32(data[pos + 1]) << 16) \
            | (np.int32(data[pos + 2]) << 8) | np.int32(data[pos + 3])
        magic = (np.int32(data[pos + 4]) << 24) | (np.int32(data[pos + 5]) << 16) \
            | (np.int32(data[pos + 6]) << 8) | np.int32(data[pos + 7])
        if magic == blank_magic:
            return n, pos, 1
        if size <= 0 or (magic != v1_magic and magic != v2_magic) or pos + size > end:
            return n, pos, 2
        out_starts[n] = pos
        n += 1
        pos += size
    return n, pos, 0


def walk_records(data: np.ndarray, start: int, end: int, blank_magic: int, v1_magic: int, v2_magic: int):
    # A record is at least 8 + 84 bytes, so end-start // 92 + 1 bounds the count.
    cap = max(1, (end - start) // 92 + 1)
    out = np.empty(cap, dtype=np.int64)
    n, stop, reason = _walk_records(data, start, end, np.int32(blank_magic), np.int32(v1_magic),
                                    np.int32(v2_magic), out)
    return out[:n], int(stop), int(reason)


@njit(cache=True, nogil=True)
def _gather(data, starts, lengths, out, out_offsets):
    pos = 0
    for k in range(starts.shape[0]):
        out_offsets[k] = pos
        s = starts[k]
        ln = lengths[k]
        out[pos:pos + ln] = data[s:s + ln]
        pos += ln
    out_offsets[starts.shape[0]] = pos


def gather_slices(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
    """Concatenate data[starts[k]:starts[k]+lengths[k]]; returns (values uint8, offsets int64)."""
    starts = starts.astype(np.int64)
    lengths = lengths.astype(np.int64)
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    _gather(data, starts, lengths, out, offsets)
    return out, offsets
