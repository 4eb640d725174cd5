"""Where a stage-3 write task puts one file version, by store kind and by whether the batch
creates the file or continues a committed one (storelib.write_stage uses it for every file):

==============  ===============================  ==========================================
                new file                         continued file (committed bytes kept)
==============  ===============================  ==========================================
local / POSIX   whole file in the attempt's      a patch in the attempt's staging directory
                staging directory, renamed to    (storelib.patches), applied in place after
                its name after the switch        the manifest commit, before the switch
object store    one object, key unique to the    one object with the new bytes (and, for an
                attempt (storelib.fragments)     index file, a new head); the row's extents
==============  ===============================  ==========================================

It also computes the new version's checksum (storelib.checksum) from the committed row's block
digests, reading back at most the blocks the batch touches, and returns the facts the commit
needs (``staged_path`` / ``patch`` / ``extents``, ``blocks``).
"""
from __future__ import annotations

from . import checksum, fragments, patches
from .ingest_errors import IngestError

__all__ = ["FileVersion", "committed_facts", "OBJECT_PART_SIZE"]

# Largest object one file version is written as (object stores): a segment of 1 GiB becomes
# eight objects, each uploaded and completed on its own.
OBJECT_PART_SIZE = 128 << 20


def committed_facts(row: dict) -> dict:
    """What a write task needs of a continued file's live manifest row (driver side)."""
    import json
    detail = json.loads(row["detail"] or "{}")
    return {"valid_bytes": row["valid_bytes"], "file_size": row["file_size"], "blocks": detail.get("blocks"),
            "extents": detail.get("extents"), "detail": detail}


class FileVersion:
    """One file version a task writes: ``rel`` (its store path), ``start`` (committed bytes it
    keeps: 0 for a new file), ``part`` (names the staged file or object)."""

    def __init__(self, ctx: dict, store, rel: str, start: int, file_size: int, tag: str, part: str):
        self.store, self.rel, self.start, self.file_size = store, rel, start, file_size
        self.prior = ctx["committed"].get(rel) if start else None
        if start and self.prior is None:
            raise IngestError(f"{rel}: the plan continues it from byte {start}, but no committed row lists it")
        if self.prior is not None and start > self.prior["valid_bytes"]:
            raise IngestError(f"{rel}: the plan continues it from byte {start}, past its committed "
                              f"{self.prior['valid_bytes']} bytes")
        self.durable = ctx["durable"]
        if ctx["objects"]:
            self.mode = "object"
            self.write_rel = fragments.object_rel(ctx["batch_id"], ctx["attempt"], tag, rel, part)
            if self.prior is not None:
                store.map_file(rel, self.prior["file_size"], fragments.extents_from_detail(self.prior["extents"]))
        elif start:
            self.mode = "patch"
            self.write_rel = f"{ctx['staging']}/files/{tag}/{rel}.{part}.patch"
        else:
            self.mode = "whole"
            self.write_rel = f"{ctx['staging']}/files/{tag}/{rel}"

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
    def hasher(self) -> checksum.BlockHasher:
        b0 = self.start - self.start % checksum.BLOCK_SIZE
        return checksum.BlockHasher(self.start, self.known_blocks(self.start), self.read_committed(b0, self.start - b0))

    def write_stream(self, chunks) -> None:
        """Write the new bytes (from ``start`` on) as this version's staged file, or as objects of
        at most ``OBJECT_PART_SIZE`` bytes (``_objects``: what ``facts`` lists as extents)."""
        if self.mode == "object":
            self._objects = self.store.write_objects(lambda k: self.write_rel if k == 0 else f"{self.write_rel}.{k}",
                                                     chunks, OBJECT_PART_SIZE)
            return
        total = self.file_size if self.mode == "whole" else None
        self.store.write_file(self.write_rel, chunks, total, durable=self.durable)

    def facts(self, new_bytes: int, digests: list) -> dict:
        """The commit's facts of a version written by ``write_stream`` (``new_bytes`` from
        ``start``; ``digests``: its block digests)."""
        out = {"staged_path": None, "patch": None, "extents": None, "blocks": checksum.digests_to_detail(digests),
               "checksum": checksum.combine(digests)}
        if self.mode == "whole":
            out["staged_path"] = self.write_rel
        elif self.mode == "patch":
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
            out["extents"] = self._bounded(fragments.overlay(prior, new))
        return out

    def _bounded(self, extents: list) -> list:
        """``extents``, with the trailing ones rewritten as one object when the list grew past
        ``fragments.MAX_EXTENTS`` (storelib.fragments); as manifest detail."""
        k = fragments.merge_from(extents)
        if k is not None:
            lo = extents[k][0]
            hi = extents[-1][0] + extents[-1][1]
            self.store.map_file(self.rel, self.file_size, extents)
            data = (self.store.read(self.rel, p, min(64 << 20, hi - p)) for p in range(lo, hi, 64 << 20))
            objects = self.store.write_objects(lambda j: f"{self.write_rel}.merged{j}", data, OBJECT_PART_SIZE)
            merged, pos = [], lo
            for rel, n in objects:
                merged.append(fragments.Extent(pos, n, rel, 0))
                pos += n
            extents = list(extents[:k]) + merged
        return fragments.extents_to_detail(extents)

    # -- files changed at several places (index files continued: entries, slot heads, header)
    def write_parts(self, parts: list, valid: int) -> dict:
        """Write a continued file's changes ``[(file_pos, bytes, phase)]`` (patch or objects);
        the commit's facts, with the checksum of the whole new version (``valid`` bytes)."""
        read_new = patches.overlay_reader(self.read_committed, parts)
        known = checksum.digests_from_detail(self.prior.get("blocks")) if self.prior else []
        if len(known) < -(-self.prior["valid_bytes"] // checksum.BLOCK_SIZE):
            known = []                                   # a row without block digests: hash all
        digests = checksum.rehash_blocks(read_new, valid, known,
                                         [(p, p + memoryview(d).nbytes) for p, d, _ in parts])
        out = {"staged_path": None, "patch": None, "extents": None, "blocks": checksum.digests_to_detail(digests),
               "checksum": checksum.combine(digests)}
        if self.mode == "patch":
            out["patch"] = {"path": self.rel, "staged": self.write_rel,
                            "extents": patches.stage_patch(self.store, self.write_rel, parts, self.durable)}
            return out
        self.write_stream(d for _, d, _ in parts)
        out["extents"] = self._bounded(fragments.overlay(
            self.prior["extents"], _stream_extents([(p, memoryview(d).nbytes) for p, d, _ in parts], self._objects)))
        return out

    def write_whole(self, chunks) -> dict:
        """A new file from its chunks (index files: header, slots, entries); the commit's facts."""
        h = checksum.BlockHasher()
        written = 0

        def hashed():
            nonlocal written
            for c in chunks:
                h.update(c)
                written += memoryview(c).nbytes
                yield c
        self.write_stream(hashed())
        _, digests = h.finish()
        return self.facts(written, digests)


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
