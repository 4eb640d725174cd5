"""Index files on object stores with paged heads (storelib.io.headpages), writer side.

A new index file is written whole, as before; its row pages the head over the object that holds
it (one layer), sums the head by pages, and hashes the entries in 16 MiB blocks of their own
(with the running state of the last one: ``detail.tail``). A batch that continues such a file
(``PagedHead``) reads only the head pages its keys' slots lie in (page 0, the header's, always),
before ``kernels.index_put`` touches them (``IndexFileBuilder.before_put``); at the end it
uploads the pages it changed and the row's window of pages (``headpages.HeadMap.window``, which
bounds the layers without any batch rewriting the whole head) as one object (a new layer), its
entries as another, and updates the head sum from the old and new bytes of the changed pages.
Of the committed head it reads only those pages and the window (and single pages between two of
them, read in the same request; a batch touching so many runs of pages that the requests would
cost more reads their whole span), of the committed entries nothing. Rows whose head is not paged (stores
written before) are continued whole (storelib.ingest.write).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import IngestError
from ..format import indexfile
from ..io import checksum, fragments, headpages, shastate
from .file_versions import OBJECT_PART_SIZE, FileVersion
from .indexfile import IndexFileBuilder

__all__ = ["is_paged", "write_new", "PagedHead"]

_READERS = 16           # concurrent range GETs for the touched pages (each a round trip)
_GAP = 2                # pages: runs with one page between them are read as one
_MAX_RUNS = 2048        # more runs than this (a large batch): one read of their whole span


def is_paged(prior: dict | None) -> bool:
    return prior is not None and "head" in (prior.get("detail") or {})


def write_new(version: FileVersion, builder: IndexFileBuilder, cfg, wrap=iter) -> dict:
    """A new index file written whole as objects; the commit's facts with a paged head (``wrap``:
    around the chunks written, e.g. for fault points)."""
    H = indexfile.entries_offset(cfg)
    chunks = builder.chunks()
    head = b"".join(bytes(c) for c in chunks[:2])
    if len(head) != H:
        raise IngestError(f"{version.rel}: a head of {len(head)} bytes, {H} expected")
    hasher = checksum.BlockHasher()
    for c in chunks[2:]:
        hasher.update(c)
    version.write_stream(wrap(chunks))
    objects = version.written_objects(sum(memoryview(c).nbytes for c in chunks))
    first_rel, first_len = objects[0]
    if first_len < H:
        raise IngestError(f"{version.rel}: its first object holds {first_len} bytes, less than the head")
    extents, pos = [], 0
    for rel, n in objects:
        lo = max(pos, H)
        if pos + n > lo:
            extents.append([lo, pos + n - lo, rel, lo - pos])
        pos += n
    _, digests = hasher.finish()
    hm = headpages.HeadMap.whole(H, first_rel, headpages.head_sum(head))
    return {"staged_path": None, "patch": None, "extents": fragments.extents_to_detail(extents),
            "blocks": checksum.digests_to_detail(digests), "checksum": headpages.file_checksum(hm.total, digests),
            "tail": hasher.tail(), "head": hm.to_detail()}


class PagedHead:
    """The committed head of a paged index file, read page by page as the batch's keys need it."""

    def __init__(self, version: FileVersion, cfg):
        self.version, self.cfg = version, cfg
        self.map = headpages.HeadMap.from_detail(version.prior["detail"]["head"])
        self.H = indexfile.entries_offset(cfg)
        if self.map.head_len != self.H:
            raise IngestError(f"{version.rel}: a paged head of {self.map.head_len} bytes, the config's is {self.H}")
        self.loaded = np.zeros(self.map.pages, bool)
        self.old: dict = {}                     # page -> its committed bytes
        self.slots = np.zeros(cfg.maxHashSlotNum, np.int32)
        self.bytes_read = 0
        self._load(np.array([0], np.int64))

    def before_put(self, key_hash: np.ndarray) -> None:
        """Load the pages of the slots ``key_hash`` falls into (``IndexFileBuilder.before_put``)."""
        slot = np.mod(np.asarray(key_hash, np.int64), self.cfg.maxHashSlotNum)
        pages = headpages.pages_of_slots(np.unique(slot), lambda i: indexfile.slot_offset(0) + i * indexfile.SLOT_SIZE)
        self._load(pages[~self.loaded[pages]])

    def _load(self, pages: np.ndarray) -> None:
        """Read ``pages`` (not loaded yet) into the slot table, in runs of pages; runs less than
        ``_GAP`` pages apart are read as one, and past ``_MAX_RUNS`` runs (a large batch) the
        whole span is one read: each read is a round trip, which costs more than a few KB."""
        if not len(pages):
            return
        P = headpages.PAGE
        pages = np.sort(pages)
        brk = np.flatnonzero(np.diff(pages) > _GAP) + 1
        runs = [(int(r[0]), int(r[-1]) + 1) for r in np.split(pages, brk)]
        if len(runs) > _MAX_RUNS:
            runs = [(runs[0][0], runs[-1][1])]

        def read(run):
            lo, hi = run[0] * P, min(self.H, run[1] * P)
            data = self.version.read_committed(lo, hi - lo)
            if len(data) != hi - lo:
                raise IngestError(f"{self.version.rel}: {len(data)} bytes of its head at {lo}, {hi - lo} expected")
            return lo, data
        with ThreadPoolExecutor(max_workers=min(_READERS, len(runs))) as pool:
            got = list(pool.map(read, runs))
        want = np.zeros(self.map.pages, bool)
        want[pages] = True
        want &= ~self.loaded                     # never overwrite a loaded page: the kernel may have changed it
        for lo, data in got:
            self.bytes_read += len(data)
            for j in np.flatnonzero(want[lo // P:lo // P + -(-len(data) // P)]) + lo // P:
                a, b = int(j) * P, min(self.H, (int(j) + 1) * P)
                self.old[int(j)] = data[a - lo:b - lo]
                s0 = max(0, (a - indexfile.HEADER_SIZE) // indexfile.SLOT_SIZE)
                s1 = min(self.cfg.maxHashSlotNum, (b - indexfile.HEADER_SIZE) // indexfile.SLOT_SIZE)
                if s1 > s0:
                    self.slots[s0:s1] = indexfile.decode_slots(data, s1 - s0, indexfile.slot_offset(s0) - lo)
        self.loaded |= want

    def builder(self, header: indexfile.IndexHeader) -> IndexFileBuilder:
        b = IndexFileBuilder.for_append(self.cfg, header, self.slots)
        b.before_put = self.before_put
        return b

    def finish(self, builder: IndexFileBuilder) -> dict:
        """Upload the changed pages and the row's window of pages (``HeadMap.window``: read back
        as they are) as one new layer, and the new entries; the commit's facts."""
        v, P = self.version, headpages.PAGE
        window = self.map.window()
        self._load(window[~self.loaded[window]])
        head = builder.header.to_bytes(self.cfg.line_4_9) + indexfile.encode_slots(builder.slots)
        loaded = np.flatnonzero(self.loaded)
        new = {int(j): head[j * P:min(self.H, (j + 1) * P)] for j in loaded}
        changed = np.array([j for j in loaded if new[int(j)] != self.old[int(j)]], np.int64)
        total = headpages.update_sum(self.map.total, changed.tolist(), [self.old[int(j)] for j in changed],
                                     [new[int(j)] for j in changed])
        moved = np.union1d(changed, window)
        layer_rel = f"{v.write_rel}.pages"
        v.store.write_objects(lambda k: layer_rel, [b"".join(new[int(j)] for j in moved)], OBJECT_PART_SIZE)
        hm = self.map.with_layer(layer_rel, moved, total)
        entries = builder.new_entries()
        hasher = self._entry_hasher()
        hasher.update(entries)
        _, digests = hasher.finish()
        v.write_stream([entries])
        facts = v.facts(len(entries), digests, hasher.tail())
        facts.update(checksum=headpages.file_checksum(hm.total, digests), head=hm.to_detail())
        return facts

    def _entry_hasher(self) -> checksum.BlockHasher:
        """The entries' block hasher, from the committed entries' digests and the state of their
        unfinished block (read back only when the row has no state)."""
        v, B = self.version, checksum.BLOCK_SIZE
        rel_start = v.start - self.H
        known = checksum.digests_from_detail(v.prior.get("blocks"))
        tail = v.prior["detail"].get("tail")
        if rel_start % B and tail is not None and shastate.AVAILABLE:
            state = shastate.state_from_detail(tail)
            if state[1] + len(state[2]) != rel_start % B:
                raise IngestError(f"{v.rel}: its manifest row's digest state covers {state[1] + len(state[2])} "
                                  f"bytes of its last block, {rel_start % B} expected")
            return checksum.BlockHasher(rel_start, known, state=state)
        b0 = rel_start - rel_start % B
        return checksum.BlockHasher(rel_start, known, v.read_committed(self.H + b0, rel_start - b0))
