"""Compiled loops of ``verify`` (numba; verify may compile, the shell lookup path never imports this).

* ``walk_chains``: every slot's chain of index entries, marking which slot reaches each entry
  (``verify_index``'s chain check; a Python loop per entry took 30 s for 20M entries);
* ``resolve_heads``: slot heads of an index file appended in place after the snapshot, followed
  through the newer entries' ``prevPos`` back to the snapshot's entries;
* for ``verify_cross`` (units and entries against the records of a segment): ``bisect_range``
  (which units / entries point into a segment, two binary searches over the file's bytes),
  ``match_sorted`` (offset -> record, one sweep), ``has_key``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["walk_chains", "chains_in_order", "resolve_heads", "bisect_range", "match_sorted",
           "has_key"]


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
def _chains_in_order(slots, hashes, prev, nslots, last):
    for p in range(1, prev.shape[0]):
        h = hashes[p]
        if h < 0:
            return False
        s = h % nslots
        if prev[p] != last[s]:
            return False
        last[s] = p
    for s in range(nslots):
        if slots[s] != last[s]:
            return False
    return True


def chains_in_order(slots: np.ndarray, hashes: np.ndarray, prev: np.ndarray, nslots: int) -> bool:
    """Whether the hash chains are exactly what appending the entries in order makes: each entry's
    prevPos is the previous entry of its slot (``keyHash % nslots``, 0 for the first), and each
    slot holds its last entry. Then every entry is reached once, from its own slot, and
    ``walk_chains`` (random reads along every chain: 1.2 s for 10M entries) has nothing to find;
    this is one sequential pass, its only random reads in a slot-sized table."""
    if len(slots) != nslots or nslots <= 0 or len(prev) < 1:
        return False
    last = np.zeros(nslots, np.int32 if len(prev) < 2**31 else np.int64)   # (fits the cache better)
    return bool(_chains_in_order(np.asarray(slots, np.int64), np.asarray(hashes, np.int64),
                                 np.asarray(prev, np.int64), np.int64(nslots), last))


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
def _be64(data, p):
    v = np.int64(0)
    for t in range(8):
        v = (v << 8) | np.int64(data[p + t])
    return v


@njit(cache=True, nogil=True)
def _lower_bound(data, first, stride, count, value):
    a, b = np.int64(0), count
    while a < b:
        mid = (a + b) >> 1
        if _be64(data, first + mid * stride) < value:
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


@njit(cache=True, nogil=True)
def _match_sorted(offsets, phys, row, found):
    n = offsets.shape[0]
    j = np.int64(0)
    last = np.int64(-(2**62))
    for k in range(phys.shape[0]):
        q = phys[k]
        if q < last:                     # out of order: start the search over
            j = 0
        last = q
        if j < n and offsets[j] < q:     # gallop, then binary search from j
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
        row[k] = min(j, n - 1) if n else 0
        found[k] = j < n and offsets[j] == q


def match_sorted(offsets: np.ndarray, phys: np.ndarray):
    """(row, found): for each of ``phys`` the index in ``offsets`` (ascending) holding it, in one
    sweep when ``phys`` ascends too (units and entries are in commitlog order)."""
    row = np.zeros(len(phys), np.int64)
    found = np.zeros(len(phys), np.bool_)
    if len(phys):
        _match_sorted(np.asarray(offsets, np.int64), np.asarray(phys, np.int64), row, found)
    return row, found


@njit(cache=True, nogil=True)
def _has_key(kfirst, khash, rows, hashes, out):
    for k in range(rows.shape[0]):
        r = rows[k]
        ok = False
        for i in range(kfirst[r], kfirst[r + 1]):
            if khash[i] == hashes[k]:
                ok = True
                break
        out[k] = ok


def has_key(kfirst: np.ndarray, khash: np.ndarray, rows: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Whether record ``rows[k]``'s keys ``khash[kfirst[r]:kfirst[r + 1]]`` include ``hashes[k]``."""
    out = np.zeros(len(rows), np.bool_)
    if len(rows):
        _has_key(kfirst.astype(np.int64), khash.astype(np.int64), rows.astype(np.int64), hashes.astype(np.int64), out)
    return out
