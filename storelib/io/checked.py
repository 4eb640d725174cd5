"""Reads of bytes a reader was told exist (by the manifest or a broker's listing), checked.

A missing, unreadable or short file raises ``CorruptStore`` naming the file and offset, so a query
on a damaged store fails with the words ``verify`` reports; a missing one ``MissingFile``, which a
reader that knows its batch turns into what an expiry's deletion of it means (``table.expired``).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, cast

from ..errors import CorruptStore, MissingFile

__all__ = ["read_stored", "open_stored", "read_stored_at", "StoredRanges"]

# Where the kernel takes read hints (Linux): several pages a reader will need are fetched together.
# (A hint for pages already cached costs a system call and no I/O: no cheaper than a first probe
# with RWF_NOWAIT, whose miss starts a readahead of its own; measured in docs/PERFORMANCE.md.)
_ADVISE = hasattr(os, "posix_fadvise")
_REQUESTS = 8                                # ranged reads of one call in flight at once elsewhere


def read_stored(store: Any, rel: str, offset: int, length: int) -> bytes:
    """``store.read(rel, offset, length)`` of bytes a reader was told exist (by the manifest or a
    broker's listing): a missing, unreadable or short file raises ``CorruptStore`` (missing:
    ``MissingFile``)."""
    try:
        data = store.read(rel, offset, length)
    except FileNotFoundError:
        raise _missing(rel) from None
    except OSError as e:
        raise CorruptStore(rel, offset, f"cannot be read ({type(e).__name__}: {e})") from None
    return _whole(data, rel, offset, length)


def open_stored(store: Any, rel: str) -> Any:
    """``store.open_reader(rel)`` of a file a reader was told exists: missing raises ``MissingFile``."""
    try:
        return store.open_reader(rel)
    except FileNotFoundError:
        raise _missing(rel) from None
    except OSError as e:
        raise CorruptStore(rel, 0, f"cannot be read ({type(e).__name__}: {e})") from None


def _missing(rel: str) -> MissingFile:
    return MissingFile(rel, 0, "missing file")


def read_stored_at(fh: Any, rel: str, length: int, offset: int) -> bytes:
    """``fh.read_at(length, offset)`` of an ``open_reader`` handle, exactly (else ``CorruptStore``)."""
    try:
        data = fh.read_at(length, offset)
    except OSError as e:
        raise CorruptStore(rel, offset, f"cannot be read ({type(e).__name__}: {e})") from None
    return _whole(data, rel, offset, length)


class StoredRanges:
    """``read_stored`` of several ranges at a time, for a reader that chases pointers through a
    few files (a key lookup: one hash slot per index file, the chains' entries, the records).

    A file the store reads in place stays open until ``close`` (a ``with`` block around one
    lookup, so nothing is held open past it), and the ranges of one ``read`` call are announced
    to the kernel together (``posix_fadvise(WILLNEED)``) before any is read: the pages not in the
    page cache are fetched in parallel rather than one after another (each a random read of
    about 0.08 ms on these machines). Other files (object stores, files read through a mapping)
    and a file that cannot be opened here go through ``read_stored``, with its errors, the
    ranges of one call as concurrent requests (up to ``_REQUESTS``)."""

    def __init__(self, store: Any):
        self.store = store
        self._fds: dict[str, int | None] = {}
        self._threads: ThreadPoolExecutor | None = None

    def _fd(self, rel: str) -> int | None:
        if rel in self._fds:
            return self._fds[rel]
        fd = None
        if self.store.os_paths and self.store.reads_in_place(rel):
            try:
                fd = os.open(self.store.path(rel), os.O_RDONLY)
            except OSError:
                fd = None                    # missing, or moved by a publish: read_stored says or follows
        self._fds[rel] = fd
        return fd

    def read(self, ranges: Sequence[tuple[str, int, int]]) -> list[bytes]:
        """The bytes of each (rel, offset, length), exactly (else ``CorruptStore``): all hinted,
        then read."""
        fds = [self._fd(rel) for rel, _, _ in ranges]
        out: list[bytes | None] = [None] * len(ranges)
        if _ADVISE and len(ranges) > 1:
            for fd, (_, offset, length) in zip(fds, ranges):
                if fd is not None:
                    _will_need(fd, offset, length)
        elsewhere = [k for k, fd in enumerate(fds) if fd is None]
        if len(elsewhere) > 1:                   # ranged requests to an object store: sent together
            for k, data in zip(elsewhere, self._pool().map(lambda k: read_stored(self.store, *ranges[k]), elsewhere)):
                out[k] = data
        for k, (fd, (rel, offset, length)) in enumerate(zip(fds, ranges)):
            if out[k] is not None:
                continue
            data = b""
            if fd is not None:
                try:
                    data = os.pread(fd, length, offset)
                except OSError as e:
                    raise CorruptStore(rel, offset, f"cannot be read ({type(e).__name__}: {e})") from None
            # pread stops short only at the end of the file: read_stored says so in its words
            out[k] = data if len(data) == length else read_stored(self.store, rel, offset, length)
        return cast("list[bytes]", out)           # every range read above

    def hint(self, ranges: Sequence[tuple[str, int, int]]) -> None:
        """Ranges a later ``read`` will ask for: their pages are fetched meanwhile (local files)."""
        if _ADVISE:
            for rel, offset, length in ranges:
                fd = self._fd(rel)
                if fd is not None:
                    _will_need(fd, offset, length)

    def _pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(_REQUESTS, thread_name_prefix="stored-ranges")
        return self._threads

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            if fd is not None:
                os.close(fd)

    def __enter__(self) -> StoredRanges:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _will_need(fd: int, offset: int, length: int) -> None:
    try:
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass                                 # only a hint


def _whole(data: bytes, rel: str, offset: int, length: int) -> bytes:
    """``data`` if it holds all ``length`` bytes asked for at ``offset``, else ``CorruptStore``."""
    if len(data) < length:
        raise CorruptStore(rel, offset + len(data), f"file ends at {offset + len(data)}, {length} bytes were to be "
                                                     f"read at {offset} (truncated)")
    return data
