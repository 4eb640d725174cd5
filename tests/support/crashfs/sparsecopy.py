"""Copying a file's bytes the way the store's files need: holes stay holes.

RocketMQ-style files are preallocated (a commit-log segment is its full size from the start,
mostly zeros at first). A plain copy would write every zero, at every fsync's copy and every
crash state; copying only the data segments (SEEK_DATA/SEEK_HOLE) and setting the size keeps
copies as small as the data, in-kernel (copy_file_range), without Python buffers.
"""
from __future__ import annotations

import errno
import os


def data_segments(fd: int, size: int):
    """(offset, length) of the data segments of an open file; the whole file where holes can't be found."""
    off = 0
    while off < size:
        try:
            start = os.lseek(fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:          # only a hole from off to the end
                return
            yield off, size - off               # no SEEK_DATA on this file system: all of it
            return
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        yield start, end - start
        off = end


def copy_fd(src: int, dst: int) -> int:
    """Copy src's bytes into dst (both open fds; dst empty). Returns the size."""
    size = os.fstat(src).st_size
    for start, length in data_segments(src, size):
        done = 0
        while done < length:
            n = os.copy_file_range(src, dst, length - done, start + done, start + done)
            if n == 0:
                break
            done += n
    os.ftruncate(dst, size)
    return size


def copy_path(src: str, dst: str) -> int:
    """Copy the file at src to a new file dst (replaced if it exists)."""
    fd_in = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            return copy_fd(fd_in, fd_out)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)
