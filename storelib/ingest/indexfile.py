"""Index files, writer side: ``IndexFileBuilder``, one index file in memory (docs/FORMAT.md §3).

The layout (header, slot table, entries, ``IndexHeader``, pack/parse) is ``indexfile``'s; this
module replays IndexFile.putKey for a whole run of entries at once with the compiled
``kernels.index_put`` (which takes ``indexfile``'s ``ENTRY_*`` offsets as compile-time constants,
so the builder cannot live in ``indexfile`` itself without an import cycle).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..compute import kernels
from ..format.indexfile import (ENTRY_SIZE, INT_MAX, IndexHeader, decode_slots, encode_slots, entries_offset,
                        slot_offset)

if TYPE_CHECKING:
    from ..format.config import StoreConfig

__all__ = ["IndexFileBuilder"]


class IndexFileBuilder:
    """One index file in memory: header, slot table and the used part of the entry table."""

    def __init__(self, config: "StoreConfig", header: IndexHeader, slots: np.ndarray | None = None,
                 entries: np.ndarray | None = None):
        self.config = config
        self.header = header
        self.slots = slots if slots is not None else np.zeros(config.maxHashSlotNum, dtype=np.int32)
        # Entry table as big-endian byte blocks: position k at byte ENTRY_SIZE*k; position 0 unused.
        first = entries if entries is not None else np.zeros(ENTRY_SIZE, dtype=np.uint8)
        self.blocks = [first]
        self.kept = 0          # entries of a committed file not held here (``for_append``)
        # called with each run's key hashes before they are put (a paged head loads their slots' pages)
        self.before_put: Callable[[np.ndarray], None] | None = None
        self.committed_slots: np.ndarray | None = None     # a continued file's slot heads as committed
        self.paged: Any = None                             # a paged head's pages (ingest.paged_index)
        assert len(first) == header.index_count * ENTRY_SIZE and header.index_count <= config.maxIndexNum

    @classmethod
    def for_append(cls, config: "StoreConfig", header: IndexHeader, slots: np.ndarray) -> "IndexFileBuilder":
        """A committed file continued in place: its header and slot table only (the committed
        entries stay where they are; ``new_entries`` gives the ones put since)."""
        b = cls(config, IndexHeader(), slots)
        b.header, b.blocks, b.kept = header, [], header.index_count
        b.committed_slots = slots.copy()          # what the slot heads were (patches: the changed ones)
        return b

    def new_entries(self) -> bytes:
        """The entries put since ``for_append`` (big-endian, back to back)."""
        assert self.kept, "new_entries is for builders made by for_append"
        return b"".join(np.asarray(b).tobytes() for b in self.blocks)

    @classmethod
    def from_bytes(cls, config: "StoreConfig", data: bytes) -> "IndexFileBuilder":
        header = IndexHeader.from_bytes(data)
        slot_end = entries_offset(config)
        slots = decode_slots(data, config.maxHashSlotNum, slot_offset(0))
        n = header.index_count
        entries = np.frombuffer(data, dtype=np.uint8, count=n * ENTRY_SIZE, offset=slot_end).copy()
        return cls(config, header, slots, entries)

    def room(self) -> int:
        return self.config.maxIndexNum - self.header.index_count

    def put_keys(self, key_hash: np.ndarray, phys: np.ndarray, store_ts: np.ndarray) -> None:
        """Append entries in order (caller guarantees they fit): putKey per entry, in one
        compiled pass (kernels.index_put)."""
        m = len(key_hash)
        if m == 0:
            return
        if m > self.room():
            raise ValueError("index file overflow")
        if self.before_put is not None:
            self.before_put(key_hash)
        h = self.header
        ic0 = h.index_count
        store_ts = np.asarray(store_ts, np.int64)
        # timeDiff against the begin timestamp in force when each entry is put: the file's first
        # entry sets beginTimestamp after its own timeDiff is taken.
        begin_before = np.full(m, h.begin_timestamp, dtype=np.int64)
        if ic0 <= 1:
            begin_before[1:] = store_ts[0]
        td = _java_div(store_ts - begin_before, 1000)
        td = np.where(begin_before <= 0, 0, np.clip(td, 0, INT_MAX))
        block, empty = kernels.index_put(self.slots, key_hash, phys, td, ic0)
        self.blocks.append(block)
        if ic0 <= 1:
            h = h._replace(begin_phy_offset=int(phys[0]), begin_timestamp=int(store_ts[0]))
        self.header = h._replace(hash_slot_count=h.hash_slot_count + empty, index_count=ic0 + m,
                                 end_phy_offset=int(phys[-1]), end_timestamp=int(store_ts[-1]))

    def chunks(self) -> list:
        """Header, slot table and used entries; the caller zero-fills to the file size."""
        return [self.header.to_bytes(self.config.line_4_9), encode_slots(self.slots), *self.blocks]

    def valid_bytes(self) -> int:
        return entries_offset(self.config) + self.header.index_count * ENTRY_SIZE


def _java_div(a: np.ndarray, b: int) -> np.ndarray:
    """Long division truncating toward zero (Java), not floor (numpy)."""
    q = np.abs(a) // b
    return np.where(a < 0, -q, q)
