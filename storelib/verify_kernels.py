"""Compiled loops of ``verify`` (numba; verify may compile, the shell lookup path never imports this).

* ``walk_chains``: every slot's chain of index entries, marking which slot reaches each entry
  (``verify_index``'s chain check; a Python loop per entry took 30 s for 20M entries);
* ``resolve_heads``: slot heads of an index file appended in place after the snapshot, followed
  through the newer entries' ``prevPos`` back to the snapshot's entries;
* for ``verify_cross`` (units and entries against the records of a segment): ``bisect_range``
  (which units / entries point into a segment, two binary searches over the file's bytes),
  ``property_spans_slices`` (``kernels.property_spans`` over the properties where they lie in the
  segment, no gather), ``match_sorted`` (offset -> record, one sweep), ``has_key``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["walk_chains", "resolve_heads", "property_spans_slices", "bisect_range", "match_sorted",
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
        nd = _walk_chains(heads_slot.astype(np.int64), heads_pos.astype(np.int64), prev.astype(np.int64),
                          slot_of, dup_pos, dup_a, dup_b)
    k = min(nd, max_dups)
    return slot_of, list(zip(dup_pos[:k].tolist(), dup_a[:k].tolist(), dup_b[:k].tolist()))


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
        _resolve(heads, np.int64(count), prev_all.astype(np.int64), out, broken)
    return out, broken


@njit(cache=True, nogil=True)
def _be64(data, p):
    v = np.int64(0)
    for t in range(8):
        v = (v << 8) | np.int64(data[p + t])
    return v


@njit(cache=True, nogil=True)
def _spans_slices(data, starts, ends, names, name_offsets, out_s, out_e):
    # kernels._property_spans over data[starts[k]:ends[k]] in place (MessageDecoder.string2messageProperties:
    # segments end at U+0002; name and value around the first U+0001 both non-empty; the later duplicate wins)
    nw = name_offsets.shape[0] - 1
    for k in range(starts.shape[0]):
        i = starts[k]
        end = ends[k]
        while i < end:
            j = i
            while j < end and data[j] != 2:
                j += 1
            sep = i
            while sep < j and data[sep] != 1:
                sep += 1
            if i < sep and sep < j - 1:
                for w in range(nw):
                    a = name_offsets[w]
                    b = name_offsets[w + 1]
                    if b - a == sep - i:
                        same = True
                        for t in range(b - a):
                            if data[i + t] != names[a + t]:
                                same = False
                                break
                        if same:
                            out_s[w, k] = sep + 1
                            out_e[w, k] = j
            i = j + 1


def property_spans_slices(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, names: list):
    """``kernels.property_spans`` of the properties strings ``data[starts[k]:ends[k]]`` where they
    lie (a segment's records), without gathering them first: (starts, ends) of shape
    (len(names), n), positions in ``data``, -1 where absent."""
    n = len(starts)
    enc = [nm.encode("utf-8") for nm in names]
    name_buf = np.frombuffer(b"".join(enc), dtype=np.uint8) if enc else np.zeros(0, np.uint8)
    name_off = np.concatenate([[0], np.cumsum([len(e) for e in enc])]).astype(np.int64)
    out_s = np.full((len(names), n), -1, dtype=np.int64)
    out_e = np.full((len(names), n), -1, dtype=np.int64)
    if n:
        _spans_slices(data, starts.astype(np.int64), ends.astype(np.int64), name_buf, name_off, out_s, out_e)
    return out_s, out_e


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
        _match_sorted(offsets.astype(np.int64), phys.astype(np.int64), row, found)
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
