"""Compiled loops of ``verify`` (numba; verify may compile, the shell lookup path never imports this).

* ``index_summary``: one pass over an index file's entries, read in place: the counts the
  structural checks compare and whether the hash chains are in order (then nothing else runs);
* ``queue_summary``: the same for a consume-queue file's units;
* ``walk_chains``: every slot's chain of index entries, marking which slot reaches each entry
  (``verify_index``'s chain check; a Python loop per entry took 30 s for 20M entries);
* ``resolve_heads``: slot heads of an index file appended in place after the snapshot, followed
  through the newer entries' ``prevPos`` back to the snapshot's entries;
* for ``verify.cross`` (units and entries against the records of a segment): ``bisect_range``
  (which units / entries point into a segment, two binary searches over the file's bytes),
  ``seek_sorted`` (offset -> record, in one sweep).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from ..compute import kernelcache  # noqa: F401  (before the kernels: numba picks their cache location then)

from ..format.consumequeue import UNIT_PHYSICALOFFSET, UNIT_SIZE, UNIT_TOTALSIZE
from ..format.indexfile import ENTRY_KEY_HASH, ENTRY_PHY_OFFSET, ENTRY_PREV_POS, ENTRY_SIZE
from ..compute.intrinsics import prefetch
from ..compute.kernels import be32, be64

__all__ = ["walk_chains", "IndexSummary", "index_summary", "QueueSummary", "queue_summary", "resolve_heads", "bisect_range", "seek_sorted"]


@njit(cache=True, nogil=True)
def _walk_chains(heads_slot, heads_pos, prev, slot_of, dup_pos, dup_first, dup_second):
    nd = 0
    for h in range(heads_slot.shape[0]):
        sidx = heads_slot[h]
        p = heads_pos[h]
        while p > 0:
            if slot_of[p] >= 0:
                if nd < dup_pos.shape[0]:
                    dup_pos[nd] = p
                    dup_first[nd] = slot_of[p]
                    dup_second[nd] = sidx
                nd += 1
                break
            slot_of[p] = sidx
            q = prev[p]
            if q >= p or q < 0:
                break
            p = q
    return nd


def walk_chains(heads_slot: np.ndarray, heads_pos: np.ndarray, prev: np.ndarray, n: int, max_dups: int):
    """(slot of each entry position or -1, [(entry, first slot, second slot)] of entries reached
    from two slots, at most ``max_dups``). Chains stop at a prevPos that does not point backwards."""
    slot_of = np.full(n, -1, dtype=np.int64)
    dup_pos = np.empty(max_dups, np.int64)
    dup_a = np.empty(max_dups, np.int64)
    dup_b = np.empty(max_dups, np.int64)
    nd = 0
    if len(heads_slot):
        nd = _walk_chains(np.asarray(heads_slot, np.int64), np.asarray(heads_pos, np.int64), np.asarray(prev, np.int64),
                          slot_of, dup_pos, dup_a, dup_b)
    k = min(nd, max_dups)
    return slot_of, list(zip(dup_pos[:k].tolist(), dup_a[:k].tolist(), dup_b[:k].tolist()))


@njit(cache=True, nogil=True)
def _in_segments(base, seg_bases):
    """Whether ``base`` is one of the ascending ``seg_bases``."""
    a = seek_sorted(seg_bases, np.int64(0), base)
    return a < seg_bases.shape[0] and seg_bases[a] == base


_AHEAD = 32            # entries between a slot's prefetch and its use (0.2 s for 20M entries; 8: 0.29 s)


@njit(cache=True, nogil=True)
def _index_summary(data, ent_at, n, slots, nslots, last, min_phy, seg_size, seg_bases, out):
    bad_prev = neg = heads = descending = lost = 0
    in_order = nslots > 0 and slots.shape[0] == nslots
    first = prev_phys = np.int64(0)
    known_base, known_in = np.int64(-1), False
    for p in range(1, n):
        e = ent_at + p * ENTRY_SIZE
        if in_order and p + _AHEAD < n:             # the slot of an entry ahead (random reads)
            ahead = be32(data, e + _AHEAD * ENTRY_SIZE + ENTRY_KEY_HASH)
            if ahead >= 0:
                prefetch(last, ahead % nslots)
        h = be32(data, e + ENTRY_KEY_HASH)
        phys = be64(data, e + ENTRY_PHY_OFFSET)
        q = be32(data, e + ENTRY_PREV_POS)
        if q < 0 or q >= p:
            bad_prev += 1
        if q == 0:
            heads += 1
        if h < 0:
            neg += 1
            in_order = False
        elif in_order:
            s = h % nslots
            if q != last[s]:
                in_order = False
            else:
                last[s] = p
        if p == 1:
            first = phys
        elif phys < prev_phys:
            descending += 1
        prev_phys = phys
        if phys >= min_phy:
            b = phys // seg_size * seg_size
            if b != known_base:                     # (entries ascend: one search per segment)
                known_base, known_in = b, _in_segments(b, seg_bases)
            if not known_in:
                lost += 1
    if in_order:
        for s in range(nslots):
            if slots[s] != last[s]:
                in_order = False
                break
    out[0], out[1], out[2], out[3], out[4] = bad_prev, neg, heads, first, prev_phys
    out[5], out[6], out[7] = in_order, descending, lost


class IndexSummary(NamedTuple):
    """What one pass over an index file's entries 1..n-1 found (``index_summary``)."""
    bad_prev: int           # entries whose prevPos does not point to an earlier entry
    negative_hash: int      # entries with a negative keyHash
    heads: int              # entries that start a chain (prevPos 0)
    first_phys: int         # phyOffset of entry 1
    last_phys: int          # phyOffset of entry n-1
    in_order: bool          # the chains are exactly what appending the entries in order makes
    descending: int         # entries whose phyOffset is below the previous entry's
    lost: int               # entries at or above ``min_phy`` whose segment is not in ``seg_bases``


def index_summary(data: np.ndarray, ent_at: int, n: int, slots: np.ndarray, nslots: int, min_phy: int,
                  seg_size: int, seg_bases: np.ndarray) -> IndexSummary:
    """One sequential pass over entries 1..``n``-1 of an index file's bytes ``data`` (entry 0 at
    ``ent_at``; ``indexfile``'s entry layout), read in place: the counts the structural checks
    compare (a sound file needs no converted copy of its entries), and whether the hash chains are
    in order: each entry's prevPos is the previous entry of its slot (``keyHash % nslots``, 0 for
    the first) and each slot holds its last entry. Then every entry is reached once, from its own
    slot, and ``walk_chains`` (random reads along every chain: 1.2 s for 10M entries) has nothing
    to find; its only random reads are in a slot-sized table."""
    out = np.zeros(8, np.int64)
    last = np.zeros(max(nslots, 0), np.int32 if n < 2**31 else np.int64)    # (fits the cache better)
    if n > 1:
        _index_summary(data, np.int64(ent_at), np.int64(n), np.asarray(slots, np.int64), np.int64(nslots), last,
                       np.int64(min_phy), np.int64(seg_size), np.asarray(seg_bases, np.int64), out)
    v = out.tolist()
    return IndexSummary(v[0], v[1], v[2], v[3], v[4], bool(v[5]), v[6], v[7])


@njit(cache=True, nogil=True)
def _queue_summary(cq, n, prev_phys, max_phy, min_phy, seg_size, seg_bases, out):
    not_in_use = not_ascending = past_end = lost = 0
    lo, hi = np.int64(2**62), np.int64(-(2**62))
    known_base, known_in = np.int64(-1), False
    for i in range(n):
        u = i * UNIT_SIZE
        phys = be64(cq, u + UNIT_PHYSICALOFFSET)
        size = be32(cq, u + UNIT_TOTALSIZE)
        if not (phys >= 0 and size > 0):                 # (consumequeue.unit_in_use)
            not_in_use += 1
        if phys <= prev_phys:
            not_ascending += 1
        prev_phys = phys
        if phys + size > max_phy:
            past_end += 1
        lo, hi = min(lo, phys), max(hi, phys)
        if phys >= min_phy:
            b = phys // seg_size * seg_size
            if b != known_base:
                known_base, known_in = b, _in_segments(b, seg_bases)
            if not known_in:
                lost += 1
    out[0], out[1], out[2], out[3], out[4], out[5] = not_in_use, not_ascending, past_end, lost, lo, hi


class QueueSummary(NamedTuple):
    """What one pass over a consume-queue file's units found (``queue_summary``)."""
    not_in_use: int         # units failing ``consumequeue.unit_in_use``
    not_ascending: int      # units whose commitlog offset is not above the previous unit's
    past_end: int           # units reaching past ``max_phy``
    lost: int               # units at or above ``min_phy`` whose segment is not in ``seg_bases``
    min_phys: int
    max_phys: int


def queue_summary(cq: np.ndarray, n: int, prev_phys: int, max_phy: int, min_phy: int, seg_size: int,
                  seg_bases: np.ndarray) -> QueueSummary:
    """One pass over units 0..``n``-1 of a consume-queue file's bytes ``cq`` (``consumequeue``'s
    layout), read in place: the counts the queue checks compare (``prev_phys``: the last unit of
    the queue's previous file, -1 for none), so that a sound file needs no converted copy of its
    units."""
    out = np.zeros(6, np.int64)
    if n > 0:
        _queue_summary(cq, np.int64(n), np.int64(prev_phys), np.int64(max_phy), np.int64(min_phy),
                       np.int64(seg_size), np.asarray(seg_bases, np.int64), out)
    return QueueSummary(*out.tolist())


@njit(cache=True, nogil=True)
def _resolve(heads, count, prev, out, broken_at):
    for k in range(heads.shape[0]):
        p = heads[k]
        while p >= count:
            if p >= prev.shape[0]:
                broken_at[k] = p
                p = 0
                break
            q = prev[p]
            if q >= p or q < 0:
                broken_at[k] = p
                p = 0
                break
            p = q
        out[k] = p


def resolve_heads(heads: np.ndarray, count: int, prev_all: np.ndarray):
    """Each slot head at a position >= ``count`` (an entry written after the snapshot) followed
    through ``prev_all`` (prevPos of the file's entries as far as they go) to the first position
    < ``count``: (resolved heads, position where a chain broke or -1)."""
    heads = heads.astype(np.int64)
    out = heads.copy()
    broken = np.full(len(heads), -1, np.int64)
    if len(heads):
        _resolve(heads, np.int64(count), np.asarray(prev_all, np.int64), out, broken)
    return out, broken


@njit(cache=True, nogil=True)
def _lower_bound(data, first, stride, count, value):
    a, b = np.int64(0), count
    while a < b:
        mid = (a + b) >> 1
        if be64(data, first + mid * stride) < value:
            a = mid + 1
        else:
            b = mid
    return a


def bisect_range(data: np.ndarray, first: int, stride: int, count: int, lo: int, hi: int) -> tuple[int, int]:
    """[a, b): the items i < ``count`` whose big-endian int64 at ``first + i*stride`` lies in [lo, hi),
    for items sorted by that value (consume-queue units, index entries: written in commitlog
    order). Two binary searches; the structural checks tell when the order does not hold."""
    if count <= 0:
        return 0, 0
    args = (data, np.int64(first), np.int64(stride), np.int64(count))
    return int(_lower_bound(*args, np.int64(lo))), int(_lower_bound(*args, np.int64(hi)))


@njit(cache=True, nogil=True, inline="always")
def seek_sorted(offsets, j, q):
    """The first index >= ``j`` of ascending ``offsets`` whose value is not below ``q``: a gallop
    from ``j``, then a binary search (a sweep over ascending ``q`` moves a few places each time)."""
    n = offsets.shape[0]
    if j < n and offsets[j] < q:
        step = np.int64(1)
        while j + step < n and offsets[j + step] < q:
            j += step
            step *= 2
        a, b = j, min(n, j + step + 1)
        while a < b:
            mid = (a + b) >> 1
            if offsets[mid] < q:
                a = mid + 1
            else:
                b = mid
        j = a
    return j
