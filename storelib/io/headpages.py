"""Index heads on object stores by pages: a batch reads and uploads only the slot pages it touches.

An index file's head (header and slot table: 40 + 4 * maxHashSlotNum bytes, 20 MB at default
sizes) is changed in place by every batch that continues the file, at ~2 slots per message spread
uniformly over the table. Rewriting it whole costs a 20 MB upload per batch, and reading it whole
a 20 MB download. Here the head is cut into ``PAGE``-byte pages (the last one short); a manifest
row lists, per page, which of the row's head objects (``layers``) holds it and where
(``detail.head``: ``map`` is the two arrays, positions as steps from the previous page's, zlib'd
and base64'd). A batch reads the pages its
keys' slots fall into, uploads the pages it changed as one new layer, and the row's map points
those pages there; ``extents`` expands the map into the file's extents for readers
(storelib.io.fragments), so readers read the layout as any other file version.

The head's share of the checksum is a sum that pages can be taken out of and put into: ``sum``
= sum over pages j of sha256(j as 8 bytes || page j) mod 2**256 (``head_sum``). A batch updates
it from the old and new bytes of the pages it changed (``update_sum``), so it never reads the
pages it did not touch. The file's checksum is then sha256(sum as 32 bytes || d0 || d1 ...), the
di the digests of 16 MiB blocks of the entries, counted from the head's end (``file_checksum``);
verify and export compute the same from the bytes. Any one wrong byte changes the sum.

Layers stay bounded with no batch paying for it all at once: every batch also rewrites a window
of ``ceil(pages / SWEEP)`` consecutive pages from the row's cursor (``next``, wrapping at the
head's end) into its layer, read back and uploaded as they are. So every page is rewritten at
least once every ``SWEEP`` batches, a layer no page points into any more leaves the map, and a
row holds at most ``SWEEP + 1`` layers; each batch uploads its changed pages plus ``H / SWEEP``
bytes (156 KB of a 20 MB head), and the window lands in its layer as one run, which also joins
the pages of a head cut up by many small batches back into long extents for readers.
"""
from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..format.commitlog import Buffer
from ..format.paths import OBJECTS_DIR
from . import checksum, extentlists
from .fragments import Extent

__all__ = ["PAGE", "SWEEP", "HeadMap", "version_extents", "head_sum", "page_sums", "update_sum", "file_checksum",
           "pages_of_slots", "checksum_of"]

PAGE = 512
SWEEP = 128             # batches in which the window passes over the whole head once
_MOD = 1 << 256


def _page_digest(j: int, page: Buffer) -> int:
    return int.from_bytes(hashlib.sha256(int(j).to_bytes(8, "big") + bytes(page)).digest(), "big")


def page_sums(head: Buffer, first: int = 0) -> list[int]:
    """The page digests (as integers) of ``head``'s bytes, which start at page ``first``."""
    mv = (head.data if isinstance(head, np.ndarray) else memoryview(head)).cast("B")
    return [_page_digest(first + k, mv[o:o + PAGE]) for k, o in enumerate(range(0, len(mv), PAGE))]


def head_sum(head: Buffer) -> int:
    """The head's sum (see the module docstring) of its whole bytes."""
    return sum(page_sums(head)) % _MOD


def update_sum(total: int, pages: Sequence[int], old: Sequence[Buffer], new: Sequence[Buffer]) -> int:
    """``total`` with pages ``pages`` (numbers) changed from the bytes ``old`` to ``new``."""
    for j, a, b in zip(pages, old, new):
        total = (total - _page_digest(j, a) + _page_digest(j, b)) % _MOD
    return total


def file_checksum(total: int, entry_digests: Sequence[bytes]) -> str:
    """The checksum of a paged index file version: its head sum, then its entries' block digests."""
    return checksum.combine([total.to_bytes(32, "big")] + list(entry_digests))


def pages_of_slots(slot_index: np.ndarray, slot_at: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The pages the slots ``slot_index`` lie in (``slot_at(i)``: a slot's byte offset)."""
    lo = slot_at(np.asarray(slot_index, np.int64))
    return np.unique(np.concatenate([lo // PAGE, (lo + 3) // PAGE]))


class HeadMap:
    """Where every page of a head lives: ``layers`` (object keys), ``layer[j]`` and ``pos[j]``
    (the page is at byte ``pos[j] * PAGE`` of object ``layers[layer[j]]``); ``total``: the sum;
    ``next``: the first page of the next batch's window."""

    def __init__(self, head_len: int, layers: Sequence[str], layer: np.ndarray, pos: np.ndarray, total: int,
                 next: int = 0):
        self.head_len, self.layers, self.layer, self.pos, self.total = head_len, list(layers), layer, pos, total
        self.next = next

    @property
    def pages(self) -> int:
        return -(-self.head_len // PAGE)

    @classmethod
    def whole(cls, head_len: int, obj: str, total: int) -> "HeadMap":
        """A head held whole by one object from its byte 0."""
        n = -(-head_len // PAGE)
        return cls(head_len, [obj], np.zeros(n, np.uint16), np.arange(n, dtype=np.uint32), total)

    def window(self) -> np.ndarray:
        """The pages the next batch rewrites as they are (``ceil(pages / SWEEP)`` from ``next``, wrapping)."""
        n = self.pages
        return np.unique((self.next + np.arange(-(-n // SWEEP), dtype=np.int64)) % n)

    def with_layer(self, obj: str, pages: np.ndarray, total: int) -> "HeadMap":
        """This map with ``pages`` (ascending: the batch's changed pages and its window) now in
        ``obj``, back to back from its byte 0, and the window moved on."""
        layer, pos = self.layer.copy(), self.pos.copy()
        layer[pages] = len(self.layers)
        pos[pages] = np.arange(len(pages), dtype=np.uint32)
        layers = self.layers + [obj]
        used = np.unique(layer)                      # layers no page points into any more are dropped
        if len(used) < len(layers):
            renum = np.zeros(len(layers), np.uint16)
            renum[used] = np.arange(len(used), dtype=np.uint16)
            layer, layers = renum[layer], [layers[k] for k in used]
        if len(layers) > np.iinfo(np.uint16).max:
            raise ValueError(f"an index head in {len(layers)} layers")
        return HeadMap(self.head_len, layers, layer, pos, total, (self.next + -(-self.pages // SWEEP)) % self.pages)

    def page_len(self, j: int) -> int:
        return min(PAGE, self.head_len - j * PAGE)

    def extents(self) -> list[Extent]:
        """The head's extents: runs of pages in one layer at consecutive positions."""
        n = self.pages
        if n == 0:
            return []
        brk = np.flatnonzero((self.layer[1:] != self.layer[:-1]) | (self.pos[1:] != self.pos[:-1] + 1)) + 1
        starts = np.concatenate([[0], brk])
        ends = np.concatenate([brk, [n]])
        out: list[Extent] = []
        for a, b in zip(starts.tolist(), ends.tolist()):
            lo, hi = a * PAGE, min(self.head_len, b * PAGE)
            out.append(Extent(lo, hi - lo, self.layers[int(self.layer[a])], int(self.pos[a]) * PAGE))
        return out

    def to_detail(self) -> dict[str, Any]:
        # positions as differences from the previous page's: runs of consecutive pages compress to nothing
        steps = np.diff(self.pos.astype(np.int64), prepend=0).astype("<i4")
        raw = self.layer.astype("<u2").tobytes() + steps.tobytes()
        return {"page": PAGE, "len": self.head_len, "layers": self.layers,
                "map": base64.b64encode(zlib.compress(raw, 6)).decode("ascii"), "sum": f"{self.total:064x}",
                "next": self.next}

    @classmethod
    def from_detail(cls, value: Any) -> "HeadMap":      # (a row's JSON: any shape, checked here)
        """A map from a manifest row's ``detail.head``, checked for shape (ValueError otherwise:
        a damaged row must not steer a read anywhere)."""
        try:
            if value["page"] != PAGE or not isinstance(value["len"], int) or value["len"] <= 0:
                raise ValueError(f"page {value['page']}, length {value['len']}")
            layers = value["layers"]
            if not layers or not all(isinstance(o, str) and o.startswith(OBJECTS_DIR + "/") for o in layers):
                raise ValueError(f"layers {layers!r}")
            n = -(-value["len"] // PAGE)
            raw = zlib.decompress(base64.b64decode(value["map"], validate=True))
            if len(raw) != 6 * n:
                raise ValueError(f"a map of {len(raw)} bytes for {n} pages")
            layer = np.frombuffer(raw, "<u2", n).astype(np.uint16)
            pos = np.cumsum(np.frombuffer(raw, "<i4", n, 2 * n).astype(np.int64))
            if n and (pos.min() < 0 or pos.max() >= 1 << 32):
                raise ValueError("page positions out of range")
            pos = pos.astype(np.uint32)
            if n and int(layer.max()) >= len(layers):
                raise ValueError(f"a page in layer {int(layer.max())} of {len(layers)}")
            total = int(value["sum"], 16)
            if total >= _MOD:
                raise ValueError("sum out of range")
            nxt = value.get("next", 0)               # rows written before the window: from page 0
            if not isinstance(nxt, int) or not 0 <= nxt < n:
                raise ValueError(f"window at page {nxt!r} of {n}")
        except (KeyError, TypeError, zlib.error, ValueError, AttributeError) as e:
            raise ValueError(f"index head map: {e}") from None
        return cls(value["len"], layers, layer, pos, total, nxt)


def version_extents(detail: Mapping[str, Any], rel: str = "", fetch: Callable[[str], bytes] | None = None
                    ) -> list[Extent]:
    """Every extent of file ``rel``'s version from its row's ``detail``: its ``extents`` (with those
    of the extent-list objects it names, read through ``fetch``: storelib.io.extentlists), and
    those of its paged head (``head``) when it has one. ValueError when any is damaged or missing,
    and when the row names extent lists and no ``fetch`` is given."""
    extents = extentlists.resolve(rel, detail, fetch)
    if "head" not in detail:
        return extents
    hm = HeadMap.from_detail(detail["head"])
    if extents and extents[0].file_pos < hm.head_len:
        raise ValueError(f"extent {list(extents[0])} inside the paged head of {hm.head_len} bytes")
    return hm.extents() + extents


def checksum_of(read_at: Callable[[int, int], Buffer], head_len: int, valid: int,
                threads: int = 1) -> tuple[str, list[bytes]]:
    """(checksum, entry block digests) of a paged index file's bytes [0, valid) (``read_at(pos, n)``)."""
    head = read_at(0, min(head_len, valid))
    ent = max(0, valid - head_len)
    _, digests = checksum.file_checksum(lambda pos, n: read_at(head_len + pos, n), ent, threads)
    return file_checksum(head_sum(head), digests), digests
