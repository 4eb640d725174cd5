"""File I/O that bypasses the page cache (``O_DIRECT``), on local file systems: durable
whole-file writes of a batch's files, and the staged split records (written once by an encode
task, read once by a segment writer).

A batch's files are fsync'd before the commit (SYNC_FLUSH), so their bytes must reach the disk
before the job ends anyway. Written through the page cache, every byte is first copied into a
newly allocated cache page, and on a host whose memory is full of cache (the normal state of a
busy machine) each new page must first be reclaimed from other files: measured on the 2-core
VMs this project runs on, a buffered 2 GiB write + fdatasync ran at 0.38 GB/s with 5.2 CPU-s
in the kernel, the same write with ``O_DIRECT`` at 1.4 GB/s with almost none. The segments of
a batch are also rarely read right after they are written, and a cache full of them would
evict what readers use. (Databases write their data files this way for the same reasons.)
A staged split's records are written by one task and read once by another: through the page
cache they cost the same copy and reclaim (measured: 1.0-1.4 CPU-s in the kernel for the 350 MB
of one split, 0.2 s direct), and above a few GB of dirty pages the kernel writes them back to
the disk anyway.

``write_direct(path, chunks, total_size)`` copies the chunks into two page-aligned buffers and
writes each full buffer on a writer thread while the caller fills the other (a file smaller
than one buffer is one write, direct from ``MIN_DIRECT_FILL`` bytes on, through the page cache
below: a direct write of a few KB only waits).
A producer that knows where its chunk falls in the file can spare that copy: ``placed(n, pos)``
gives a ``Placed`` chunk of n bytes in an aligned allocation with ``pos % ALIGN`` free bytes
before it; the writer puts the unaligned tail of what came before into them and writes the
chunk from where it is (a staged split's records: 4.2 GB not copied at 10M messages).
The last buffer is padded with zeros to the alignment and the file is then cut to its length
(or extended, sparsely, to ``total_size``). ``O_DIRECT`` leaves the file's metadata and the device's
write cache to fsync: durable writes pass ``fsync``. ``read_direct(path, offset, length)``
reads the aligned blocks around a range into an aligned array and returns the range's view.

Where ``O_DIRECT`` is missing (not Linux) or refused (tmpfs, some FUSE file systems) the
writes fall back to the page cache; ``write_direct`` never fails for that reason alone.
"""
from __future__ import annotations

import errno
import mmap
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable

import numpy as np

try:
    import fcntl
except ImportError:          # not POSIX: no O_DIRECT either
    fcntl = None  # type: ignore[assignment]

__all__ = ["ALIGN", "BUFFER_SIZE", "MIN_DIRECT_SIZE", "direct_supported", "write_direct", "read_direct",
           "read_exact", "Placed", "placed"]

ALIGN = 4096                 # memory, file offsets and lengths of direct writes (any block size up to 4 KiB)
BUFFER_SIZE = 8 << 20        # per buffer: large writes keep the device busy, two keep the caller busy
MIN_DIRECT_SIZE = 4 << 20    # smaller lists of chunks (checkpoints, leases, patches) are not worth it
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def direct_supported() -> bool:
    return bool(_O_DIRECT) and fcntl is not None and hasattr(os, "preadv")


class Placed(np.ndarray):
    """A chunk of bytes (a uint8 array, usable wherever a chunk is) whose ``pre`` bytes before it,
    in the same ALIGN-aligned allocation (``owner``), belong to no one: ``placed`` makes them."""
    owner: np.ndarray
    pre: int


def placed(n: int, pos: int) -> Placed:
    """An uninitialised chunk of ``n`` bytes for file position ``pos``: in an allocation starting
    at an ALIGN boundary, ``pos % ALIGN`` bytes into it."""
    pre = pos % ALIGN
    raw = np.empty(pre + n + ALIGN, np.uint8)
    skip = -raw.ctypes.data % ALIGN
    owner = raw[skip:skip + pre + n]
    out = owner[pre:].view(Placed)
    out.owner, out.pre = owner, pre
    return out


# A placed chunk smaller than this is copied like any other (its in-place write would be a few blocks).
MIN_PLACED = 64 << 10
# A whole file of less than this goes through the page cache (a direct write of a few KB only
# waits on the device); from it on, one direct write on the caller's thread (a consume-queue
# file of a few MB: buffered, each of its pages is first allocated in the cache, then written
# back by the fsync).
MIN_DIRECT_FILL = 1 << 20


class _Writer:
    """Fills aligned buffers from chunks; full buffers are written at their file position on one
    thread, in order, while the next one fills."""

    def __init__(self, fd: int):
        self.fd = fd
        self.bufs: list[Any] = [mmap.mmap(-1, BUFFER_SIZE), None]     # page aligned; the second when needed
        self.pending: list[Future[None] | None] = [None, None]
        self.cur, self.fill, self.pos = 0, 0, 0
        self.direct = True
        self.pool: ThreadPoolExecutor | None = None
        self.placed: Future[None] | None = None     # the write of the last placed chunk

    def _buffered(self) -> None:
        """Go on through the page cache (a file system that refuses O_DIRECT writes, or a file
        smaller than one buffer: a direct write would wait on the device for a few KB)."""
        self.direct = False
        fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~_O_DIRECT)

    def _pwrite_all(self, buf: Any, n: int, pos: int) -> None:
        mv = memoryview(buf)[:n]
        try:
            while len(mv):
                try:
                    k = os.pwrite(self.fd, mv, pos)
                except OSError as e:
                    if e.errno != errno.EINVAL or not self.direct:
                        raise
                    self._buffered()   # opened with O_DIRECT but refused at the first write
                    continue
                mv, pos = mv[k:], pos + k
        finally:
            mv.release()

    def _start_pool(self) -> ThreadPoolExecutor:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1)
            self.bufs[1] = mmap.mmap(-1, BUFFER_SIZE)
        return self.pool

    def _submit(self, n: int) -> None:
        self.pending[self.cur] = self._start_pool().submit(self._pwrite_all, self.bufs[self.cur], n, self.pos)
        self.pos += n
        self.cur ^= 1
        self.fill = 0
        other = self.pending[self.cur]
        if other is not None:                      # the other buffer's write must be done first
            other.result()
            self.pending[self.cur] = None

    def write(self, data: Any) -> None:
        if isinstance(data, Placed) and self.direct and self.fill % ALIGN == data.pre and len(data) >= MIN_PLACED:
            self._write_placed(data)
            return
        mv = memoryview(data).cast("B")
        try:
            while len(mv):
                k = min(len(mv), BUFFER_SIZE - self.fill)
                self.bufs[self.cur][self.fill:self.fill + k] = mv[:k]
                self.fill += k
                mv = mv[k:]
                if self.fill == BUFFER_SIZE:
                    self._submit(BUFFER_SIZE)
        finally:
            mv.release()

    def _write_placed(self, data: Placed) -> None:
        """Write ``data`` from where it is: the unaligned tail of the fill buffer goes into the
        free bytes before it, the fill buffer's whole blocks are written as they are, then the
        chunk's whole blocks; its own unaligned tail starts the next fill. One placed chunk's
        write is in flight at a time (the caller's memory stays bounded)."""
        owner, pre = data.owner, data.pre
        head = self.fill - pre                       # whole blocks before the chunk's first one
        owner[:pre] = np.frombuffer(self.bufs[self.cur], np.uint8, pre, head)
        if head:
            self._submit(head)                       # (fill is 0 after it)
        end = pre + len(data)
        whole = end - end % ALIGN
        if self.placed is not None:
            self.placed.result()
        self.placed = self._start_pool().submit(self._pwrite_all, owner, whole, self.pos)
        self.pos += whole
        rest = end - whole
        self.bufs[self.cur][:rest] = owner[whole:end].data
        self.fill = rest

    def finish(self) -> int:
        """Write what is left (padded to ALIGN with zeros), wait; returns the bytes the caller gave."""
        if self.placed is not None:
            self.placed.result()
        length = self.pos + self.fill
        if self.pool is None:                  # the whole file fits one buffer
            if self.fill >= MIN_DIRECT_FILL:
                padded = -(-self.fill // ALIGN) * ALIGN
                self.bufs[0][self.fill:padded] = bytes(padded - self.fill)
                self._pwrite_all(self.bufs[0], padded, 0)
            elif self.fill:
                self._buffered()
                self._pwrite_all(self.bufs[0], self.fill, 0)
            return length
        if self.fill:
            padded = -(-self.fill // ALIGN) * ALIGN
            self.bufs[self.cur][self.fill:padded] = bytes(padded - self.fill)
            self._submit(padded)
        for f in self.pending:
            if f is not None:
                f.result()
        return length

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        for b in self.bufs:
            if b is not None:
                b.close()


def write_direct(path: str, chunks: Iterable[Any], total_size: int | None = None,
                 fsync: Callable[[int], object] | None = None) -> int | None:
    """Write ``chunks`` as the whole file ``path`` with O_DIRECT, then cut it to the bytes given
    and extend it sparsely to ``total_size``, then call ``fsync(fd)`` (if given); returns the
    bytes given, or None (nothing written) when this file system does not open files with
    O_DIRECT."""
    if not direct_supported():
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_DIRECT, 0o644)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return None
        raise
    w = None
    try:
        w = _Writer(fd)
        for c in chunks:
            w.write(c)
        written = w.finish()
        # cuts the zero padding of the last block, or keeps it and extends the tail sparsely
        os.ftruncate(fd, max(written, total_size or 0))
        if fsync is not None:
            fsync(fd)
        return written
    finally:
        if w is not None:
            w.close()
        os.close(fd)


def read_direct(path: str, offset: int, length: int) -> np.ndarray | None:
    """``length`` bytes at ``offset`` of ``path`` read with O_DIRECT, as a writable uint8 array
    (a view into an aligned buffer: at most 2 * ALIGN bytes more); fewer bytes where the file
    ends first. None when this file system does not read with O_DIRECT."""
    if not direct_supported():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _O_DIRECT)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return None
        raise
    try:
        a = offset - offset % ALIGN
        span = -(-(offset + length - a) // ALIGN) * ALIGN
        raw = np.empty(span + ALIGN, np.uint8)
        skip = -raw.ctypes.data % ALIGN
        buf = raw[skip:skip + span]
        got = 0
        while got < span:
            try:
                k = os.preadv(fd, [buf[got:]], a + got)  # type: ignore[list-item]
            except OSError as e:
                if e.errno == errno.EINVAL and got == 0:
                    return None       # opened, but refused at the read (some file systems)
                raise
            if k == 0:
                break
            got += k
        start = offset - a
        return buf[start:start + max(0, min(length, got - start))]
    finally:
        os.close(fd)


def read_exact(path: str, offset: int, length: int, name: str) -> np.ndarray | None:
    """``read_direct``, where fewer than ``length`` bytes is an error (OSError naming ``name``)."""
    out = read_direct(path, offset, length)
    if out is not None and len(out) != length:
        raise OSError(f"{name}: expected {length} bytes at {offset}, read {len(out)}")
    return out
