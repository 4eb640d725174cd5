"""Store files on object stores: each file version is a list of extents in immutable objects.

Objects cannot be appended to or renamed (a rename is a full copy), so on object stores a batch
never rewrites a file and never moves one. It uploads only the bytes it adds, once, to objects
whose keys are unique to its attempt (``_rocketlake/objects/<batch>/<attempt>/...``), and the
file's manifest row lists where every byte of the file version lives (``detail.extents``):

    [[file_pos, length, object_rel, object_pos], ...]   sorted, not overlapping

Bytes of ``[0, file_size)`` that no extent covers are zeros (a RocketMQ file's unwritten tail).
A commitlog segment or consume queue continued by a batch keeps its earlier extents and gains
one; an index file gains one extent for its new entries, and its head (header and slot table,
which the batch changes in place in a broker's file) is kept by pages (storelib.io.headpages:
the batch uploads the pages it changed).

Why fragments rather than rewriting (or sealing) whole files: every record byte is uploaded
exactly once, and a batch of 1,000 messages uploads about what it adds (plus the index head
pages it changed). Readers assemble a file from its extents with range reads, which
they need anyway; ``jobs/export.py`` materializes a broker-ready directory, byte-identical to
RocketMQ's, for whoever needs the files themselves. Keys unique to an attempt mean that a
writer that loses a race, or dies, never touches a committed object: its objects are simply
not listed by any committed manifest row, and the next writer deletes them.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple
from ..format.paths import OBJECTS_DIR

__all__ = [ "MAX_EXTENTS", "MERGE_SHARE", "Extent", "object_prefix", "object_rel", "overlay",
           "merge_run", "plan_merges", "extents_to_detail", "extents_from_detail", "AssembledFile"]

# A file continued by many small batches gains an extent per batch. Past MAX_EXTENTS a version
# merges one run of adjacent extents into one object, but never more than its merge budget: the
# driver hands each batch's budget (MERGE_SHARE of the batch's record bytes) to the continued
# files with the most extents (``plan_merges``), so no batch uploads more than its own records
# plus that share, whatever the files' history: the cost is spread over batches, never a
# periodic rewrite of a file's tail. The longest run that fits is taken, so the smallest
# extents (a consume queue's few hundred bytes a batch) are merged first, level by level. An
# object is written in one batch, so one no larger than that batch's budget: a file filled only
# by small batches keeps about one extent per batch (a larger batch, with a larger budget,
# merges them); see docs/PERFORMANCE.md.
MAX_EXTENTS = 16
MERGE_SHARE = 0.1


class Extent(NamedTuple):
    file_pos: int
    length: int
    object_rel: str          # store-relative key of the object holding the bytes
    object_pos: int


def object_prefix(batch_id: str, attempt: str) -> str:
    """Where one ingest attempt's objects live (everything under it is the attempt's)."""
    return f"{OBJECTS_DIR}/{batch_id}/{attempt}"


def object_rel(batch_id: str, attempt: str, tag: str, rel: str, part: str) -> str:
    """The object holding the bytes ``part`` (e.g. "records", "head", "entries") that task
    attempt ``tag`` wrote for file ``rel``."""
    return f"{object_prefix(batch_id, attempt)}/{tag}/{rel}.{part}"


# An extent as a row's detail holds it ([file_pos, length, object_rel, object_pos]) or an ``Extent``.
ExtentLike = Sequence[Any]


def overlay(prior: Sequence[ExtentLike], new: Sequence[ExtentLike]) -> list[Extent]:
    """The extents of a file version: ``new`` extents over the ``prior`` version's (bytes that
    ``new`` covers are taken from it; the rest of ``prior`` is kept, clipped)."""
    out: list[Extent] = []
    for raw in prior:
        e = Extent(*raw)
        pieces = [(e.file_pos, e.file_pos + e.length)]
        for new_raw in new:
            n = Extent(*new_raw)
            lo, hi = n.file_pos, n.file_pos + n.length
            nxt = []
            for a, b in pieces:
                if hi <= a or lo >= b:
                    nxt.append((a, b))
                    continue
                if a < lo:
                    nxt.append((a, lo))
                if hi < b:
                    nxt.append((hi, b))
            pieces = nxt
        out += [Extent(a, b - a, e.object_rel, e.object_pos + a - e.file_pos) for a, b in pieces]
    out += [Extent(*n) for n in new if Extent(*n).length > 0]
    return sorted(out)


def merge_run(extents: Sequence[ExtentLike], budget: int, keep: str | None = None) -> tuple[int, int] | None:
    """The run ``extents[i:j]`` to rewrite as one object (None: none): only past ``MAX_EXTENTS``;
    at least two extents whose span (gaps included) is at most ``budget`` bytes, none in an
    object whose key starts with ``keep`` (the version's own new objects: rewriting them would
    upload them twice and leave the first unnamed); the longest such run, then the shortest
    span, then the oldest."""
    n = len(extents)
    if n <= MAX_EXTENTS or budget <= 0:
        return None
    pos = [int(e[0]) for e in extents]
    end = [int(e[0]) + int(e[1]) for e in extents]
    movable = [keep is None or not str(e[2]).startswith(keep) for e in extents]
    best: tuple[tuple[int, int, int], tuple[int, int]] | None = None
    j = 0
    for i in range(n - 1):
        if not movable[i]:
            continue
        j = max(j, i + 1)
        while j < n and movable[j] and end[j] - pos[i] <= budget:
            j += 1
        if j - i >= 2:
            key = (-(j - i), end[j - 1] - pos[i], i)
            if best is None or key < best[0]:
                best = (key, (i, j))
    return best[1] if best else None


def run_bytes(extents: Sequence[ExtentLike], run: tuple[int, int]) -> int:
    i, j = run
    return int(extents[j - 1][0]) + int(extents[j - 1][1]) - int(extents[i][0])


def plan_merges(files: Mapping[str, Sequence[ExtentLike]], budget: int) -> dict[str, int]:
    """``{rel: bytes}``: how much each continued file (``files``: rel -> its committed extents)
    may rewrite this batch, out of ``budget`` in all: files with the most extents first, each
    given what its best run costs when that fits in what is left."""
    out: dict[str, int] = {}
    for rel in sorted(files, key=lambda r: (-len(files[r]), r)):
        run = merge_run(files[rel], budget)
        if run is not None:
            out[rel] = run_bytes(files[rel], run)
            budget -= out[rel]
    return out


def extents_to_detail(extents: Sequence[ExtentLike]) -> list[list[int | str]]:
    return [[int(e[0]), int(e[1]), str(e[2]), int(e[3])] for e in extents]


def extents_from_detail(value: object) -> list[Extent]:
    """Extents from a manifest row's detail, checked for shape (a damaged row must not steer a
    read anywhere: the object paths are checked by ``Store.path`` when read)."""
    if not isinstance(value, list):
        raise ValueError(f"extents {value!r} is not a list")
    out: list[Extent] = []
    end = 0
    for e in value:
        if (not isinstance(e, list) or len(e) != 4 or not all(isinstance(x, int) and x >= 0 for x in (e[0], e[1], e[3]))
                or not isinstance(e[2], str) or not e[2].startswith(OBJECTS_DIR + "/")):
            raise ValueError(f"extent {e!r} is not [file_pos, length, objects/ path, object_pos]")
        if e[0] < end:
            raise ValueError(f"extent {e!r} overlaps the one before it")
        end = e[0] + e[1]
        out.append(Extent(*e))
    return out


class AssembledFile:
    """A file version read through its extents: ``read_object(rel, pos, n)`` reads one object's
    bytes; gaps below ``file_size`` read as zeros; reads stop at ``file_size``. Has the methods
    readers use on a ``pyarrow`` input file (``read_at``, ``size``, ``close``)."""

    def __init__(self, file_size: int, extents: Sequence[ExtentLike], read_object: Callable[[str, int, int], bytes]):
        self.file_size = file_size
        self.extents = sorted(Extent(*e) for e in extents)
        self._starts = [e.file_pos for e in self.extents]
        self._read_object = read_object

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        end = self.file_size if length is None else min(self.file_size, offset + length)
        if end <= offset:
            return b""
        out = bytearray(end - offset)
        # a paged index head has thousands of extents: start at the last one beginning at or before offset
        k = max(0, bisect.bisect_right(self._starts, offset) - 1)
        groups: dict[str, list[tuple[int, int, int]]] = {}
        for e in self.extents[k:]:
            if e.file_pos >= end:
                break
            a, b = max(offset, e.file_pos), min(end, e.file_pos + e.length)
            if a < b:
                groups.setdefault(e.object_rel, []).append((a, b, e.object_pos + a - e.file_pos))
        for rel, pieces in groups.items():
            lo = min(p for _, _, p in pieces)
            hi = max(p + b - a for a, b, p in pieces)
            need = sum(b - a for a, b, _ in pieces)
            # many pieces of one object (head pages): one range read of their span, when it is not
            # much more than they are; else a read each
            if len(pieces) > 1 and hi - lo <= 2 * need + (1 << 20):
                span = self._read_object(rel, lo, hi - lo)
                self._check(rel, lo, hi - lo, span)
                for a, b, p in pieces:
                    out[a - offset:b - offset] = span[p - lo:p - lo + b - a]
                continue
            for a, b, p in pieces:
                data = self._read_object(rel, p, b - a)
                self._check(rel, p, b - a, data)
                out[a - offset:b - offset] = data
        return bytes(out)

    @staticmethod
    def _check(rel: str, pos: int, n: int, data: bytes) -> None:
        if len(data) != n:
            raise OSError(f"object {rel}: expected {n} bytes at {pos}, read {len(data)}")

    def read_at(self, nbytes: int, offset: int) -> bytes:
        return self.read(offset, nbytes)

    def size(self) -> int:
        return self.file_size

    def close(self) -> None:
        pass

    def __enter__(self) -> AssembledFile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None
