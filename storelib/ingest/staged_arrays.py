"""A staged file of named arrays: a JSON header, then each array's raw bytes, read back without copying.

The encode task stages two such files per split (storelib.ingest.encode: its ``.facts``, read whole
by the write tasks; storelib.ingest.split_facts: its ``.plan``, read by the driver a chunk at a
time). Both live only under an attempt's staging directory and are read by the same job that wrote
them, never by another version (docs/FORMAT.md §11.2): this is not a store format.

Layout: ``MAGIC`` (8 bytes), the header's length (8 bytes, little-endian), the JSON header
(``{"kind", "arrays": {name: [dtype, shape, offset]}, "values"}``), zero padding to ``ALIGN``,
then every array's bytes at an ``ALIGN``-byte boundary (``offset`` counts from there).

``file_chunks`` writes one; ``read_arrays`` reads a whole one as read-only views of its bytes;
``RangedArrays`` reads a header, then rows of one array at a time. A file that is not one, of
another kind, truncated or with a damaged header is refused with IngestError, naming the path.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..errors import IngestError

__all__ = ["MAGIC", "ALIGN", "file_chunks", "read_arrays", "RangedArrays"]

MAGIC = b"RLARRAY1"
ALIGN = 64                       # every array starts at a multiple: aligned views for any dtype
_PREFIX = len(MAGIC) + 8


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def file_chunks(kind: str, arrays: dict, **values: Any) -> list:
    """The file holding ``arrays`` (name -> numpy array) and the JSON ``values``, as byte chunks to
    write back to back (the arrays' own buffers, not copies)."""
    layout, parts, pos = {}, [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        layout[name] = [a.dtype.str, list(a.shape), pos]
        parts.append(a)
        pos += _padded(a.nbytes)
    header = json.dumps({"kind": kind, "arrays": layout, "values": values}).encode()
    head = MAGIC + len(header).to_bytes(8, "little") + header
    chunks: list = [head + b"\0" * (_padded(len(head)) - len(head))]
    for a in parts:
        chunks.append(memoryview(a.reshape(-1)).cast("B"))
        if a.nbytes % ALIGN:
            chunks.append(b"\0" * (ALIGN - a.nbytes % ALIGN))
    return chunks


class _Header:
    """A file's parsed header: where each array is, and the values."""

    def __init__(self, path: str, kind: str, prefix: bytes, read_header):
        if len(prefix) < _PREFIX or prefix[:len(MAGIC)] != MAGIC:
            raise IngestError(f"{path}: not a staged {kind} file")
        hlen = int.from_bytes(prefix[len(MAGIC):_PREFIX], "little")
        text = read_header(hlen)
        try:
            if len(text) != hlen:
                raise ValueError("truncated")
            h = json.loads(text)
            found = h["kind"]
            self.values: dict = dict(h["values"])
            self.arrays = {name: (np.dtype(dt), tuple(int(s) for s in shape), int(off))
                           for name, (dt, shape, off) in h["arrays"].items()}
        except (ValueError, KeyError, TypeError) as e:
            raise IngestError(f"{path}: damaged staged {kind} file (its header: {e})") from None
        if found != kind:
            raise IngestError(f"{path}: a staged {found} file, not a staged {kind} file")
        self.path, self.kind = path, kind
        self.base = _padded(_PREFIX + hlen)
        self.end = self.base + max((off + _nbytes(dt, shape) for dt, shape, off in self.arrays.values()), default=0)

    def truncated(self, ends_at: int) -> IngestError:
        return IngestError(f"{self.path}: damaged staged {self.kind} file: it ends at byte {ends_at}, its "
                           f"header places its arrays up to byte {self.end} (truncated)")


def _nbytes(dt: np.dtype, shape: tuple) -> int:
    return dt.itemsize * int(np.prod(shape, dtype=np.int64))


def read_arrays(store, path: str, kind: str) -> dict:
    """The file ``file_chunks`` staged at ``path``: name -> read-only array (a view of the file's
    bytes), and its values by name."""
    data = store.read(path)
    h = _Header(path, kind, data[:_PREFIX], lambda n: data[_PREFIX:_PREFIX + n])
    if len(data) < h.end:
        raise h.truncated(len(data))
    out = dict(h.values)
    for name, (dt, shape, off) in h.arrays.items():
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(data, dt, count, h.base + off).reshape(shape)
    return out


class RangedArrays:
    """A staged arrays file read in pieces: the header at open, then ``rows`` of one array at a
    time (ranged reads; for a file too large to hold, or of which little is needed)."""

    def __init__(self, store, path: str, kind: str):
        self.store, self.path = store, path
        self._h = _Header(path, kind, store.read(path, 0, _PREFIX), lambda n: store.read(path, _PREFIX, n))
        self.values = self._h.values

    def shape(self, name: str) -> tuple:
        return self._h.arrays[name][1]

    def rows(self, name: str, first: int, count: int) -> np.ndarray:
        """Rows ``first .. first+count-1`` of array ``name`` (along its first axis), read-only."""
        dt, shape, off = self._h.arrays[name]
        row = _nbytes(dt, shape[1:])
        if first < 0 or count < 0 or first + count > (shape[0] if shape else 1):
            raise IndexError(f"{self.path}: rows {first}..{first + count} of {name!r} {shape}")
        want = count * row
        data = self.store.read(self.path, self._h.base + off + first * row, want)
        if len(data) != want:
            raise self._h.truncated(self._h.base + off + first * row + len(data))
        return np.frombuffer(data, dt).reshape((count, *shape[1:]))
