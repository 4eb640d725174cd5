"""Where a stage-3 write task puts one file version, by store kind and by whether the batch
creates the file or continues a committed one (storelib.ingest.write uses it for every file):

==============  ===============================  ==========================================
                new file                         continued file (committed bytes kept)
==============  ===============================  ==========================================
local / POSIX   whole file in the attempt's      a patch in the attempt's staging directory
                staging directory, renamed to    (storelib.io.patches), applied in place at
                its name after the switch        publish, after the switch
object store    one object, key unique to the    one object with the new bytes (and, for an
                attempt (storelib.io.fragments)     index file, a new head); the row's extents
==============  ===============================  ==========================================

It also computes the new version's checksum (storelib.io.checksum) from the committed row's block
digests, reading back at most the blocks the batch touches, and returns the facts the commit
needs (``staged_path`` / ``patch`` / ``extents``, ``blocks``).

A batch builds on the committed bytes of a file it continues, so it first checks them
(``ContinuedFileDamaged``): the committed bytes it reads back must match the manifest's block
digests, and on a local store the file must have its full size and nothing but zeros past its
committed end. Otherwise the append would launder the damage: the new checksum would cover it.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import ContinuedFileDamaged, CorruptStore, IngestError
from ..io import checksum, extentlists, fragments, headpages, patches, shastate
from ..runtime.faults import fault
from .context import WriteContext
from ..table.rows import ManifestRow

__all__ = ["FileVersion", "committed_facts", "OBJECT_PART_SIZE", "PairedBlockHasher"]


class PairedBlockHasher(checksum.BlockHasher):
    """``checksum.BlockHasher`` whose whole blocks within one ``update`` are hashed two at a time
    (``checksum.block_digests``: two SHA-NI streams interleaved, nearly twice one stream's rate).
    The same digests: a block is still the sha256 of its bytes; only a block that an update
    starts or leaves unfinished goes through the running state."""

    def update(self, data: Any) -> None:
        B = checksum.BLOCK_SIZE
        mv = memoryview(data).cast("B")
        if self._fill:                       # finish the block an earlier update left open
            take = min(len(mv), B - self._fill)
            super().update(mv[:take])
            mv = mv[take:]
        whole = len(mv) // B
        if whole >= 2 and not self._fill:
            arr = np.frombuffer(mv, np.uint8, whole * B)
            self.digests += checksum.block_digests([arr[i * B:(i + 1) * B] for i in range(whole)])
            mv = mv[whole * B:]
        if len(mv):
            super().update(mv)


# Largest object one file version is written as (object stores): a segment of 1 GiB becomes
# eight objects, each uploaded and completed on its own.
OBJECT_PART_SIZE = 128 << 20


def committed_facts(row: ManifestRow, store=None) -> dict:
    """What a write task needs of a continued file's live manifest row (driver side): its
    ``extents`` whole, those of the extent-list objects it names (storelib.io.extentlists) read
    from ``store`` here, once, so no task reads them again."""
    row = ManifestRow.of(row)
    detail = dict(row.detail)         # (a copy: the row's own stays as committed)
    extents = detail.get("extents")
    if extents is not None and detail.get("extent_lists"):
        try:
            extents = fragments.extents_to_detail(extentlists.resolve(
                row.path, detail, extentlists.fetcher(store) if store is not None else None))
        except ValueError as e:
            raise CorruptStore(row.path, 0, f"manifest extents of batch {row.get('batch_id')!r}: {e}") from None
    return {"valid_bytes": row.valid_bytes, "file_size": row.file_size, "blocks": detail.get("blocks"),
            "extents": extents, "detail": detail}


def _whole_detail(prior: dict) -> dict:
    """A continued file's committed detail with its whole extents inline (``committed_facts``)."""
    detail = {k: v for k, v in (prior.get("detail") or {}).items() if k != "extent_lists"}
    return dict(detail, extents=prior["extents"])


class FileVersion:
    """One file version a task writes: ``rel`` (its store path), ``start`` (committed bytes it
    keeps: 0 for a new file), ``part`` (names the staged file or object)."""

    def __init__(self, ctx: WriteContext, store, rel: str, start: int, file_size: int, tag: str, part: str):
        self.store, self.rel, self.start, self.file_size = store, rel, start, file_size
        # the committed facts (``committed_facts``) of a continued file: present whenever ``start``
        self.prior: Any = ctx.committed.get(rel) if start else None
        if start and self.prior is None:
            raise IngestError(f"{rel}: the plan continues it from byte {start}, but no committed row lists it")
        if self.prior is not None and start > self.prior["valid_bytes"]:
            raise IngestError(f"{rel}: the plan continues it from byte {start}, past its committed "
                              f"{self.prior['valid_bytes']} bytes")
        self.durable = ctx.durable
        if ctx.objects:
            self.mode = "object"
            self.write_rel = fragments.object_rel(ctx.batch_id, ctx.attempt, tag, rel, part)
            if self.prior is not None:
                store.map_file(rel, self.prior["file_size"], headpages.version_extents(_whole_detail(self.prior)))
        elif start:
            self.mode = "patch"
            self.write_rel = f"{ctx.staging}/files/{tag}/{rel}.{part}.patch"
            self._check_size()
        else:
            self.mode = "whole"
            self.write_rel = f"{ctx.staging}/files/{tag}/{rel}"

    # -- committed bytes
    def read_committed(self, pos: int, n: int) -> bytes:
        return self.store.read(self.rel, pos, n) if n > 0 else b""

    def known_blocks(self, upto: int) -> list:
        """Digests of the committed blocks wholly before byte ``upto`` (read and hashed when the
        committed row does not carry them)."""
        known = checksum.digests_from_detail(self.prior.get("blocks")) if self.prior else []
        need = upto // checksum.BLOCK_SIZE
        if len(known) < need:
            known = checksum.hash_blocks(self.read_committed, 0, need)
        return known[:need]

    # -- files written in order from ``start`` (commitlog segments, consume queues)
    def hasher(self) -> PairedBlockHasher:
        state = self.resume_state()
        if state is not None:
            return PairedBlockHasher(self.start, self.known_blocks(self.start), state=state)
        b0 = self.start - self.start % checksum.BLOCK_SIZE
        head = self.read_committed(b0, self.start - b0)
        self._check_block(b0 // checksum.BLOCK_SIZE, head)
        return PairedBlockHasher(self.start, self.known_blocks(self.start), head)

    def resume_state(self) -> tuple | None:
        """Object stores: the running digest state of the committed last block (its row's
        ``tail``), when this version continues right at the committed end; then nothing of that
        block is read back. Its committed bytes are not checked here, but neither does the new
        checksum cover them as they are now: it is computed from the state of the bytes that
        were committed, so damage to them stays for verify to find. Local stores read the block
        back (cheap there) and check it (``ContinuedFileDamaged``)."""
        if self.mode != "object" or self.prior is None or self.start != self.prior["valid_bytes"] \
                or not self.start % checksum.BLOCK_SIZE:
            return None
        tail = (self.prior.get("detail") or {}).get("tail")
        if tail is None or not shastate.AVAILABLE:
            return None
        try:
            state = shastate.state_from_detail(tail)
        except ValueError as e:
            raise IngestError(f"{self.rel}: its manifest row's digest state: {e}") from None
        if state[1] + len(state[2]) != self.start % checksum.BLOCK_SIZE:
            raise IngestError(f"{self.rel}: its manifest row's digest state covers {state[1] + len(state[2])} bytes "
                              f"of its last block, the row's valid bytes {self.start % checksum.BLOCK_SIZE}")
        return state

    # -- the committed bytes a continued version builds on
    def _check_size(self) -> None:
        size = self.store.size(self.rel)
        if size is None:
            raise ContinuedFileDamaged(self.rel, 0, "missing file")
        if size != self.prior["file_size"]:
            raise ContinuedFileDamaged(self.rel, min(size, self.prior["file_size"]),
                                       f"the file has {size} bytes, its manifest row {self.prior['file_size']}")

    def _check_block(self, i: int, data: bytes) -> None:
        """Committed block ``i`` (``data``: its committed bytes, as far as the committed version
        reaches into it) against the digest the manifest holds for it."""
        known = checksum.digests_from_detail(self.prior.get("blocks")) if self.prior else []
        whole = min(checksum.BLOCK_SIZE, self.prior["valid_bytes"] - i * checksum.BLOCK_SIZE) if self.prior else 0
        if i >= len(known) or len(data) != whole:
            return                         # not all of the block's committed bytes: nothing to compare
        if len(data) and checksum.block_digest(data) != known[i]:
            raise ContinuedFileDamaged(self.rel, i * checksum.BLOCK_SIZE,
                                       f"committed bytes [{i * checksum.BLOCK_SIZE}, "
                                       f"{i * checksum.BLOCK_SIZE + len(data)}) differ from the manifest's block digest")

    def check_zero_tail(self, end: int) -> None:
        """Local continued files: nothing but zeros from ``end`` (where this version's bytes stop)
        to the end of the file. Only what the file system holds as data is read (SEEK_DATA): a
        tail never written is a hole and costs nothing."""
        if self.mode != "patch":
            return
        size = self.prior["file_size"]
        fd = os.open(self.store.path(self.rel), os.O_RDONLY)
        try:
            pos = end
            while pos < size:
                try:
                    lo = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:            # ENXIO: only a hole past pos
                    return
                hi = min(size, os.lseek(fd, lo, os.SEEK_HOLE))
                for a in range(lo, hi, 8 << 20):
                    buf = np.frombuffer(os.pread(fd, min(8 << 20, hi - a), a), np.uint8)
                    nz = np.flatnonzero(buf)
                    if len(nz):
                        raise ContinuedFileDamaged(self.rel, a + int(nz[0]),
                                                   f"a non-zero byte past the committed end ({self.start})")
                pos = hi
        finally:
            os.close(fd)

    def write_stream(self, chunks) -> None:
        """Write the new bytes (from ``start`` on) as this version's staged file, or as objects of
        at most ``OBJECT_PART_SIZE`` bytes (``_objects``: what ``facts`` lists as extents)."""
        if self.mode == "object":
            self._objects = self.store.write_objects(lambda k: self.write_rel if k == 0 else f"{self.write_rel}.{k}",
                                                     chunks, OBJECT_PART_SIZE)
            return
        total = self.file_size if self.mode == "whole" else None
        self.store.write_file(self.write_rel, chunks, total, durable=self.durable)

    def written_objects(self, new_bytes: int) -> list:
        """``[(object, length)]`` that ``write_stream`` wrote (object stores)."""
        return getattr(self, "_objects", [(self.write_rel, new_bytes)])

    def facts(self, new_bytes: int, digests: list, tail: dict | None = None) -> dict:
        """The commit's facts of a version written by ``write_stream`` (``new_bytes`` from
        ``start``; ``digests``: its block digests; ``tail``: the running state of its unfinished
        last block, ``BlockHasher.tail``)."""
        out = {"staged_path": None, "patch": None, "extents": None, "extent_lists": None,
               "blocks": checksum.digests_to_detail(digests), "checksum": checksum.combine(digests),
               "tail": tail if self.mode == "object" else None}
        if self.mode == "whole":
            out["staged_path"] = self.write_rel
        elif self.mode == "patch":
            self.check_zero_tail(self.start + new_bytes)
            out["patch"] = {"path": self.rel, "staged": self.write_rel,
                            "extents": [[self.start, new_bytes, 0, patches.PHASE_APPEND]]}
        else:
            prior = self.prior["extents"] if self.prior else []
            new, pos = [], self.start
            for rel, n in getattr(self, "_objects", [(self.write_rel, new_bytes)]):
                if n:
                    new.append([pos, n, rel, 0])
                pos += n
            if pos != self.start + new_bytes:
                raise IngestError(f"{self.rel}: {pos - self.start} bytes written as objects, {new_bytes} expected")
            out["extents"], out["extent_lists"] = self._bounded(fragments.overlay(prior, new), new_bytes)
        return out

    def _bounded(self, extents: list, new_bytes: int) -> tuple[list, list | None]:
        """``extents``, with one run of them rewritten as one object when the list grew past
        ``fragments.MAX_EXTENTS``, within this version's merge budget (storelib.io.fragments:
        the driver's ``plan_merges`` share, else what the version itself adds); as manifest detail:
        (inline extents, extent lists: ``_split``)."""
        budget = (self.prior or {}).get("merge", new_bytes)
        run = fragments.merge_run(extents, budget, keep=self.write_rel)
        if run is not None:
            i, j = run
            lo = extents[i][0]
            hi = extents[j - 1][0] + extents[j - 1][1]
            self.store.map_file(self.rel, self.file_size, extents)
            data = (self.store.read(self.rel, p, min(64 << 20, hi - p)) for p in range(lo, hi, 64 << 20))
            objects = self.store.write_objects(lambda k: f"{self.write_rel}.merged{k}", data, OBJECT_PART_SIZE)
            merged, pos = [], lo
            for rel, n in objects:
                merged.append(fragments.Extent(pos, n, rel, 0))
                pos += n
            extents = list(extents[:i]) + merged + list(extents[j:])
            fault("after-extent-merge")
        return self._split(extents)

    def _split(self, extents: list) -> tuple[list, list | None]:
        """(inline extents, extent lists) of the version's ``extents`` (storelib.io.extentlists):
        the prior version's lists it keeps, and past ``INLINE_EXTENTS`` inline ones a new list
        object (and merged ones) of this attempt."""
        detail = (self.prior or {}).get("detail") or {}
        try:
            prior_lists = extentlists.lists_from_detail(detail.get("extent_lists"))
        except ValueError as e:
            raise CorruptStore(self.rel, 0, f"manifest extent lists: {e}") from None
        wrote = []

        def write(data: bytes) -> str:
            obj = self.write_rel + extentlists.SUFFIX
            self.store.write_file(obj, [data])
            wrote.append(obj)
            return obj
        lists, inline = extentlists.split(self.rel, extents, prior_lists, (self.prior or {}).get("extents") or [], write)
        if wrote:
            fault("after-extent-list")
        return fragments.extents_to_detail(inline), (extentlists.lists_to_detail(lists) if lists else None)

    # -- files changed at several places (index files continued: entries, slot heads, header)
    def write_parts(self, parts: list, valid: int) -> dict:
        """Write a continued file's changes ``[(file_pos, bytes, phase)]`` (patch or objects);
        the commit's facts, with the checksum of the whole new version (``valid`` bytes)."""
        read_new = patches.overlay_reader(self.read_committed, parts)
        known = checksum.digests_from_detail(self.prior.get("blocks")) if self.prior else []
        if len(known) < -(-self.prior["valid_bytes"] // checksum.BLOCK_SIZE):
            known = []                                   # a row without block digests: hash all
        dirty = [(p, p + memoryview(d).nbytes) for p, d, _ in parts]
        if self.mode == "patch":
            self._check_blocks(known, dirty)
            self.check_zero_tail(max(p + memoryview(d).nbytes for p, d, phase in parts
                                     if phase == patches.PHASE_APPEND))
        tail: list = []
        state = self.resume_state() if known else None
        digests = checksum.rehash_blocks(read_new, valid, known, dirty, state, tail if self.mode == "object" else None)
        out = {"staged_path": None, "patch": None, "extents": None, "extent_lists": None,
               "blocks": checksum.digests_to_detail(digests), "checksum": checksum.combine(digests),
               "tail": tail[0] if tail else None}
        if self.mode == "patch":
            out["patch"] = {"path": self.rel, "staged": self.write_rel,
                            "extents": patches.stage_patch(self.store, self.write_rel, parts, self.durable)}
            return out
        self.write_stream(d for _, d, _ in parts)
        sizes = [(p, memoryview(d).nbytes) for p, d, _ in parts]
        out["extents"], out["extent_lists"] = self._bounded(
            fragments.overlay(self.prior["extents"], _stream_extents(sizes, self._objects)), sum(n for _, n in sizes))
        return out

    def _check_blocks(self, known: list, dirty: list) -> None:
        """Every committed block the ``dirty`` ranges touch against its manifest digest (the new
        digests are computed over them)."""
        valid = self.prior["valid_bytes"]
        B = checksum.BLOCK_SIZE
        touched = sorted({i for lo, hi in dirty for i in range(lo // B, -(-hi // B)) if i * B < valid})
        for i in touched:
            if i < len(known):
                self._check_block(i, self.read_committed(i * B, min(B, valid - i * B)))

    def write_whole(self, chunks) -> dict:
        """A new file from its chunks (index files: header, slots, entries); the commit's facts."""
        h = PairedBlockHasher()
        written = 0

        def hashed():
            nonlocal written
            for c in chunks:
                h.update(c)
                written += memoryview(c).nbytes
                yield c
        self.write_stream(hashed())
        _, digests = h.finish()
        return self.facts(written, digests, h.tail())


def _stream_extents(parts: list, objects: list) -> list:
    """Extents of ``parts`` ``[(file_pos, length)]`` written back to back into the consecutive
    ``objects`` ``[(rel, length)]``."""
    out, k, used = [], 0, 0
    for file_pos, n in parts:
        while n:
            rel, size = objects[k]
            take = min(n, size - used)
            if take:
                out.append([file_pos, take, rel, used])
            file_pos, n, used = file_pos + take, n - take, used + take
            if used == size:
                k, used = k + 1, 0
    return out
