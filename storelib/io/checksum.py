"""The manifest's checksum of a file: sha256 over fixed 16 MiB blocks of its valid bytes.

A manifest row's ``checksum`` is ``sha256(d0 || d1 || ... || dk)``, where ``di`` is the raw
sha256 digest of block ``i`` of the file's bytes ``[0, valid_bytes)`` (blocks of ``BLOCK_SIZE``
bytes; the last one may be short; an empty file has no blocks). The row's ``detail`` keeps the
block digests (``blocks``, hex), so a batch that appends to a file, or changes a few bytes in
place (an index file's slot heads and header), hashes again only the blocks it touched: a small
batch into a 1 GiB segment reads back at most one block, not the gigabyte before it; on object
stores a row also keeps the running state of its unfinished last block (``tail``,
storelib.io.shastate), so an append there reads back nothing of it. A reader
checks a file by hashing its blocks (in parallel: hashlib releases the GIL) and combining them.
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from . import shastate

__all__ = ["BLOCK_SIZE", "block_digest", "block_digests", "combine", "checksum_of_bytes", "BlockHasher", "rehash_blocks", "hash_blocks",
           "file_checksum", "digests_from_detail", "digests_to_detail"]

BLOCK_SIZE = 16 << 20
# read_at(pos, n): n bytes of a file at pos (any buffer)
_ReadAt = Callable[[int, int], Any]


def block_digest(data: Any) -> bytes:
    """The raw sha256 digest of one block's bytes."""
    return hashlib.sha256(data).digest()


def block_digests(blocks: list[Any]) -> list[bytes]:
    """The raw sha256 digests of several blocks' bytes, two at a time (``sha256.digest_pair``: two
    SHA-NI streams interleaved run at nearly twice one stream's speed, 3.5 against 1.8 GB/s on
    one core here; hashlib where the CPU has no SHA extensions). Releases the GIL as hashlib does."""
    from ..compute.sha256 import digest_pair          # (numba: only the readers that hash many blocks load it)
    out: list[bytes] = []
    for k in range(0, len(blocks) - 1, 2):
        out += digest_pair(blocks[k], blocks[k + 1])
    if len(blocks) % 2:
        out.append(block_digest(blocks[-1]))
    return out


def combine(digests: list[bytes]) -> str:
    """The row's checksum from the raw block digests, in block order."""
    return hashlib.sha256(b"".join(digests)).hexdigest()


def checksum_of_bytes(data: Any) -> str:
    """Checksum of a whole file's valid bytes held in memory."""
    mv = memoryview(data).cast("B")
    return combine([hashlib.sha256(mv[i:i + BLOCK_SIZE]).digest() for i in range(0, len(mv), BLOCK_SIZE)])


def digests_from_detail(blocks: list[str] | None) -> list[bytes]:
    return [bytes.fromhex(h) for h in (blocks or [])]


def digests_to_detail(digests: list[bytes]) -> list[str]:
    return [d.hex() for d in digests]


class BlockHasher:
    """Streaming checksum of bytes written in order from ``start``.

    ``known``: digests of the blocks before ``start``'s block (from the previous row); when
    ``start`` is not on a block boundary, ``head`` holds the file's bytes from that block's start
    up to ``start`` (read back once: at most one block), or ``state`` the running state of that
    block after them (``shastate``: what the previous row's ``tail`` kept; nothing is read)."""

    def __init__(self, start: int = 0, known: list[bytes] | None = None, head: bytes = b"",
                 state: shastate.State | None = None):
        first = start // BLOCK_SIZE
        fill = state[1] + len(state[2]) if state is not None else len(head)
        if fill != start - first * BLOCK_SIZE:
            raise ValueError(f"head of {fill} bytes for start {start}")
        if first and (known is None or len(known) < first):
            raise ValueError(f"{len(known or [])} known block digests, {first} needed before offset {start}")
        self.digests = list((known or [])[:first])
        self._block: Any = shastate.Sha256(state) if state is not None else self._new()
        if head:
            self._block.update(head)
        self._fill = fill

    @staticmethod
    def _new() -> Any:
        # a state that can be written down (``tail``) where libcrypto is there; hashlib otherwise
        return shastate.Sha256() if shastate.AVAILABLE else hashlib.sha256()

    def tail(self) -> dict[str, object] | None:
        """The running state of the unfinished last block (``shastate.state_to_detail``), from
        which a later ``BlockHasher(start, known, state=...)`` continues without its bytes; None
        when the bytes end on a block boundary or the state cannot be had."""
        if not self._fill or not hasattr(self._block, "state"):
            return None
        return shastate.state_to_detail(self._block.state())

    def update(self, data: Any) -> None:
        mv = memoryview(data).cast("B")
        while len(mv):
            take = min(len(mv), BLOCK_SIZE - self._fill)
            self._block.update(mv[:take])
            self._fill += take
            mv = mv[take:]
            if self._fill == BLOCK_SIZE:
                self.digests.append(self._block.digest())
                self._block, self._fill = self._new(), 0

    def finish(self) -> tuple[str, list[bytes]]:
        """(checksum, raw block digests) of everything hashed so far."""
        digests = self.digests + ([self._block.digest()] if self._fill else [])
        return combine(digests), digests


def hash_blocks(read_at: _ReadAt, first: int, last: int, threads: int = 1) -> list[bytes]:
    """Digests of blocks ``[first, last)``, two at a time (``block_digests``); ``read_at(pos, n)``
    reads the file's bytes (the last block may be short: ``read_at`` returns what the caller
    considers valid)."""
    def pair(i: int) -> list[bytes]:
        return block_digests([read_at(k * BLOCK_SIZE, BLOCK_SIZE) for k in range(i, min(i + 2, last))])
    pairs = range(first, last, 2)
    if threads <= 1 or len(pairs) <= 1:
        return [d for i in pairs for d in pair(i)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return [d for ds in pool.map(pair, pairs) for d in ds]


def rehash_blocks(read_at: _ReadAt, valid: int, known: list[bytes], dirty: list[tuple[int, int]],
                  state: shastate.State | None = None,
                  tail: list[dict[str, object] | None] | None = None) -> list[bytes]:
    """Block digests of a file changed in place: ``known`` are the digests before the change
    (of the previous valid length), ``dirty`` the byte ranges ``(lo, hi)`` written since. Only
    blocks that overlap a dirty range, or that the previous digests did not cover whole, are read
    back and hashed again. ``state``: the running state (``shastate``) of the previous version's
    unfinished last block; a block it covers is hashed on from it (only its bytes past the
    state read) when no dirty range reaches into what the state covers. ``tail``: a list that
    receives the new version's ``BlockHasher.tail`` (or None)."""
    n = -(-valid // BLOCK_SIZE)
    out = list(known[:n])
    stale = {i for lo, hi in dirty if hi > lo for i in range(lo // BLOCK_SIZE, -(-hi // BLOCK_SIZE))}
    stale.update(range(len(out), n))
    out += [b""] * (n - len(out))
    resume: tuple[int, int] | None = None
    if state is not None:
        i = len(known) - 1                             # the block the state is of: the last known, partial one
        covered = i * BLOCK_SIZE + state[1] + len(state[2])
        if i >= 0 and not any(lo < covered and hi > i * BLOCK_SIZE for lo, hi in dirty if hi > lo):
            resume = (i, covered)
    last = n - 1 if valid % BLOCK_SIZE else None      # the new version's unfinished block
    if tail is not None:
        tail.append(None)

    def clip(pos: int, k: int) -> Any:
        return read_at(pos, min(k, valid - pos))
    for i in sorted(s for s in stale if s < n):
        resumed = resume is not None and resume[0] == i
        if not resumed and (tail is None or i != last or not shastate.AVAILABLE):
            out[i] = hash_blocks(clip, i, i + 1)[0]
            continue
        pos = resume[1] if resume is not None and resumed else i * BLOCK_SIZE
        h = BlockHasher(pos, out[:i], state=state if resumed else None)
        end = min(valid, (i + 1) * BLOCK_SIZE)
        for p in range(pos, end, 8 << 20):
            h.update(read_at(p, min(8 << 20, end - p)))
        out[i] = h.finish()[1][i]
        if tail is not None and i == last:
            tail[0] = h.tail()
    return out


def file_checksum(read_at: _ReadAt, valid: int, threads: int = 1) -> tuple[str, list[bytes]]:
    """(checksum, raw block digests) of a file's bytes ``[0, valid)``, blocks hashed on
    ``threads`` threads."""
    def clip(pos: int, k: int) -> Any:
        return read_at(pos, min(k, valid - pos))
    digests = hash_blocks(clip, 0, -(-valid // BLOCK_SIZE), threads)
    return combine(digests), digests
