"""Reads of bytes a reader was told exist (by the manifest or a broker's listing), checked.

A missing, unreadable or short file raises ``CorruptStore`` naming the file and offset, so a query
on a damaged store fails with the words ``verify`` reports.
"""
from __future__ import annotations

from typing import Any

from ..errors import CorruptStore

__all__ = ["read_stored", "open_stored", "read_stored_at"]


def read_stored(store: Any, rel: str, offset: int, length: int) -> bytes:
    """``store.read(rel, offset, length)`` of bytes a reader was told exist (by the manifest or a
    broker's listing): a missing, unreadable or short file raises ``CorruptStore``."""
    try:
        data = store.read(rel, offset, length)
    except FileNotFoundError:
        raise CorruptStore(rel, 0, "missing file") from None
    except OSError as e:
        raise CorruptStore(rel, offset, f"cannot be read ({type(e).__name__}: {e})") from None
    return _whole(data, rel, offset, length)


def open_stored(store: Any, rel: str) -> Any:
    """``store.open_reader(rel)`` of a file a reader was told exists: missing raises ``CorruptStore``."""
    try:
        return store.open_reader(rel)
    except FileNotFoundError:
        raise CorruptStore(rel, 0, "missing file") from None
    except OSError as e:
        raise CorruptStore(rel, 0, f"cannot be read ({type(e).__name__}: {e})") from None


def read_stored_at(fh: Any, rel: str, length: int, offset: int) -> bytes:
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
