"""Errors the readers raise about a store's content (queries, inspection, the manifest, decoding).

``CorruptStore`` names the damaged file relative to the store root and the byte offset in it,
formatted like a ``verify`` problem line (``<path>@<offset>: <what>``), so a query on a damaged
store fails with the same words ``inspect.py verify`` reports.
"""
from __future__ import annotations

__all__ = ["StoreError", "CorruptStore", "read_exact", "open_reader", "read_at"]


class StoreError(Exception):
    """A store cannot be read as asked."""


class CorruptStore(StoreError):
    """A store file or one of the ``_rocketlake`` Delta tables is damaged (truncated, missing,
    garbage) or the manifest names something a store cannot hold."""

    def __init__(self, path: str, offset: int | None, what: str):
        self.path = path
        self.offset = int(offset or 0)
        self.what = what
        super().__init__(f"{path}@{self.offset}: {what}")


def read_exact(store, rel: str, offset: int, length: int) -> bytes:
    """``store.read(rel, offset, length)`` of bytes a reader was told exist (by the manifest or a
    broker's listing): a missing, unreadable or short file raises ``CorruptStore``."""
    try:
        data = store.read(rel, offset, length)
    except FileNotFoundError:
        raise CorruptStore(rel, 0, "missing file") from None
    except OSError as e:
        raise CorruptStore(rel, offset, f"cannot be read ({type(e).__name__}: {e})") from None
    return _whole(data, rel, offset, length)


def open_reader(store, rel: str):
    """``store.open_reader(rel)`` of a file a reader was told exists: missing raises ``CorruptStore``."""
    try:
        return store.open_reader(rel)
    except FileNotFoundError:
        raise CorruptStore(rel, 0, "missing file") from None
    except OSError as e:
        raise CorruptStore(rel, 0, f"cannot be read ({type(e).__name__}: {e})") from None


def read_at(fh, rel: str, length: int, offset: int) -> bytes:
    """``fh.read_at(length, offset)`` of an ``open_reader`` handle, exactly (else ``CorruptStore``)."""
    try:
        data = fh.read_at(length, offset)
    except OSError as e:
        raise CorruptStore(rel, offset, f"cannot be read ({type(e).__name__}: {e})") from None
    return _whole(data, rel, offset, length)


def _whole(data: bytes, rel: str, offset: int, length: int) -> bytes:
    """``data`` if it holds all ``length`` bytes asked for at ``offset``, else ``CorruptStore``."""
    if len(data) < length:
        raise CorruptStore(rel, offset + len(data), f"file ends at {offset + len(data)}, {length} bytes were to be "
                                                     f"read at {offset} (truncated)")
    return data
