"""A digest of a file's bytes that reads only what the file system holds as data.

A store's files are preallocated (a default-size commit-log segment is 1 GiB, nearly all holes):
sha256 of every byte reads and hashes gigabytes of zeros per store (seconds each). ``digest``
hashes the file's size and every fixed-size block that is not all zeros, with its offset: two
files have the same digest exactly when they have the same bytes (whether a run of zeros is a hole
or written zeros does not count), and the holes are skipped (SEEK_DATA/SEEK_HOLE), never read.
It is not the sha256 of the file: compare digests only with digests. ``digest_of`` gives the
digest of bytes held in memory followed by zeros (a golden file's stored head and its zero tail)
without making the file.
"""
from __future__ import annotations

import hashlib
import os

from support.crashfs.sparsecopy import data_segments

__all__ = ["digest", "digest_of"]

BLOCK = 1 << 16
_ZEROS = bytes(BLOCK)


def _update(h, off: int, block: bytes) -> None:
    if block != _ZEROS[:len(block)]:
        h.update(off.to_bytes(8, "little"))
        h.update(block)


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
                _update(h, off, os.pread(fd, min(BLOCK, hi - off), off))
            done = max(done, hi)
    finally:
        os.close(fd)
    return h.hexdigest()


def digest_of(head: bytes, size: int) -> str:
    """``digest`` of a file of ``size`` bytes: ``head``, then zeros (``head`` no longer than ``size``)."""
    if len(head) > size:
        raise ValueError(f"{len(head)} bytes of head for a file of {size}")
    h = hashlib.sha256()
    h.update(size.to_bytes(8, "little"))
    view = memoryview(head)
    for off in range(0, len(head), BLOCK):
        block = bytes(view[off:off + BLOCK])
        # a block the head ends in goes on with zeros, as far as the file does
        _update(h, off, block + bytes(min(BLOCK, size - off) - len(block)))
    return h.hexdigest()
