"""A digest of a file's bytes that reads only what the file system holds as data.

A store's files are preallocated (a default-size commit-log segment is 1 GiB, nearly all holes):
sha256 of every byte reads and hashes gigabytes of zeros per store (seconds each). ``digest``
hashes the file's size and every fixed-size block that is not all zeros, with its offset: two
files have the same digest exactly when they have the same bytes (whether a run of zeros is a hole
or written zeros does not count), and the holes are skipped (SEEK_DATA/SEEK_HOLE), never read.
It is not the sha256 of the file: compare digests only with digests.
"""
from __future__ import annotations

import hashlib
import os

from support.crashfs.sparsecopy import data_segments

__all__ = ["digest"]

BLOCK = 1 << 16
_ZEROS = bytes(BLOCK)


def digest(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        h.update(size.to_bytes(8, "little"))
        done = 0                                    # blocks below this offset are hashed
        for start, length in data_segments(fd, size):
            lo = max(done, start // BLOCK * BLOCK)
            hi = min(size, -(-(start + length) // BLOCK) * BLOCK)
            for off in range(lo, hi, BLOCK):
                block = os.pread(fd, min(BLOCK, hi - off), off)
                if block != _ZEROS[:len(block)]:
                    h.update(off.to_bytes(8, "little"))
                    h.update(block)
            done = max(done, hi)
    finally:
        os.close(fd)
    return h.hexdigest()
