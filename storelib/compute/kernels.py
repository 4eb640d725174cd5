"""Compiled inner loops (numba) for the few steps numpy cannot express as whole-array operations.

Each kernel takes flat numpy arrays (an Arrow buffer and its offsets) and runs one tight
loop in machine code, so the codec never loops over messages in Python:

* ``walk_records``: follows the TOTALSIZE chain of a commitlog segment (each record says where
  the next one starts, so record starts cannot be found by a vectorized scan).
* ``gather_slices``: copies slices of a buffer into one contiguous buffer (Arrow binary values).

``cache=True`` keeps the machine code in ``__pycache__``, so Spark's Python workers compile
each kernel once per machine, not once per task.

Record and index-entry layouts are ``commitlog``'s and ``indexfile``'s: the kernels use their
module-level constants (numba freezes global ints as compile-time constants).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from . import kernelcache  # noqa: F401  (before the kernels: numba picks their cache location then)

from ..format.commitlog import (BLANK_MAGIC, BLANK_SIZE, FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, HOST_V4_SIZE, HOST_V6_SIZE,
                        MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE, MSG_ID_V4_HEX_LENGTH, POS_BODYCRC, POS_BORNHOST,
                        POS_BORNTIMESTAMP, POS_FLAG, POS_MAGIC, POS_PHYSICALOFFSET, POS_QUEUEID, POS_QUEUEOFFSET,
                        POS_SYSFLAG, POS_TOTALSIZE, REL_BODY, REL_BODYLENGTH, REL_PREPARED_TX_OFFSET,
                        REL_RECONSUMETIMES, REL_STOREHOST, REL_STORETIMESTAMP, SIZE_PHYSICALOFFSET,
                        SIZE_PROPERTIESLENGTH, TOPIC_LENGTH_SIZE_V1, TOPIC_LENGTH_SIZE_V2)
from ..format.indexfile import ENTRY_KEY_HASH, ENTRY_PHY_OFFSET, ENTRY_PREV_POS, ENTRY_SIZE, ENTRY_TIME_DIFF
from .intrinsics import prefetch

__all__ = ["walk_records", "walk_capacity", "gather_many", "gather_slices", "java_hash_utf8",
           "java_hash_continue", "index_keys", "java_hash_slices", "assemble_records", "patch_placement", "index_put",
           "read_be", "be32", "be64", "record_layout", "record_fields", "N_FIELDS", "F_SIZE", "F_MAGIC", "F_BODYCRC", "F_QUEUEID", "F_FLAG",
           "F_QUEUEOFFSET", "F_PHYS", "F_SYSFLAG", "F_BORNTS", "F_BORNHOST_LEN", "F_STORETS", "F_STOREHOST_POS",
           "F_STOREHOST_LEN", "F_RECONSUME", "F_PREPTX", "F_BODY_POS", "F_BODY_LEN", "F_TOPIC_POS", "F_TOPIC_LEN",
           "F_PROPS_POS", "F_PROPS_LEN", "F_BORNHOST_KEY", "F_STOREHOST_KEY", "F_OK", "hex_ids_v4", "hex_ids"]


@njit(cache=True, nogil=True, inline="always")
def be32(data, p):
    """Big-endian signed int32 at data[p:p+4] (as int64)."""
    v = (np.int64(data[p]) << 24) | (np.int64(data[p + 1]) << 16) | (np.int64(data[p + 2]) << 8) \
        | np.int64(data[p + 3])
    return v - 4294967296 if v >= 2147483648 else v


@njit(cache=True, nogil=True, inline="always")
def be64(data, p):
    """Big-endian int64 at data[p:p+8]."""
    v = np.int64(0)
    for t in range(8):
        v = (v << 8) | np.int64(data[p + t])
    return v


# Bytes the walk asks the CPU to fetch ahead of the record it reads: each step's address comes
# from the record before (a chain of loads the hardware prefetcher does not run ahead of), but
# the records lie one after another, so the bytes 8 KiB on are the ones wanted soon
# (0.10 s instead of 0.19 s for a 1 GiB segment; 32 KiB ahead is as slow as none).
_WALK_AHEAD = 8192


@njit(cache=True, nogil=True)
def _walk_records(data, start, end, out_starts):
    """Record starts in data[start:end] (the rule of ``commitlog.is_record_start``, compiled); stops at
    a BLANK, a zero size or an unknown magic.

    Returns (count, stop_position, stop_reason): 0 = reached end, 1 = BLANK record,
    2 = TOTALSIZE 0 / unknown magic / record past end (end of data).
    """
    n = 0
    pos = start
    while pos + BLANK_SIZE <= end:
        if pos + _WALK_AHEAD < end:
            prefetch(data, pos + _WALK_AHEAD)
        size = be32(data, pos + POS_TOTALSIZE)
        magic = be32(data, pos + POS_MAGIC)
        if magic == BLANK_MAGIC:
            return n, pos, 1
        if size <= 0 or (magic != MAGIC_V1 and magic != MAGIC_V2) or pos + size > end \
                or n >= out_starts.shape[0]:
            return n, pos, 2
        out_starts[n] = pos
        n += 1
        pos += size
    return n, pos, 0


def walk_capacity(start: int, end: int) -> int:
    """How many record starts data[start:end] can hold (a well-formed record is at least
    MIN_RECORD_SIZE bytes): the size ``walk_records`` needs for ``out``."""
    return max(1, (end - start) // MIN_RECORD_SIZE + 1)


def walk_records(data: np.ndarray, start: int, end: int, out: np.ndarray | None = None):
    """(record starts, stop position, stop reason) of data[start:end] (``codec.record_starts``);
    the starts in ``out`` (int64, at least ``walk_capacity`` long) when given."""
    cap = walk_capacity(start, end)
    if out is None:
        out = np.empty(cap, dtype=np.int64)
    elif out.dtype != np.int64 or len(out) < cap:          # (the kernel stops when ``out`` is full)
        raise ValueError(f"walk_records: out holds {len(out)} int64, {cap} needed")
    n, stop, reason = _walk_records(data, np.int64(start), np.int64(end), out)
    return out[:n], int(stop), int(reason)


@njit(cache=True, nogil=True)
def _gather(data, starts, lengths, out, out_offsets):
    pos = 0
    for k in range(starts.shape[0]):
        out_offsets[k] = pos
        s = starts[k]
        ln = lengths[k]
        if ln <= 64:            # a byte loop beats a slice copy's set-up cost for short values
            for t in range(ln):
                out[pos + t] = data[s + t]
        else:
            out[pos:pos + ln] = data[s:s + ln]
        pos += ln
    out_offsets[starts.shape[0]] = pos


@njit(cache=True, nogil=True)
def _gather_many(data, fields, pos_rows, len_rows, outs, out_offsets):
    """_gather for several slices per record at once: slice j of record k is
    data[fields[pos_rows[j], k]:][:fields[len_rows[j], k]]. A record's parts are read together, so
    it is fetched from memory once for all of them."""
    m = pos_rows.shape[0]
    pos = np.zeros(m, np.int64)
    n = fields.shape[1]
    for k in range(n):
        for j in range(m):
            out_offsets[j, k] = pos[j]
            s = fields[pos_rows[j], k]
            ln = fields[len_rows[j], k]
            o = outs[j]
            p = pos[j]
            if ln <= 64:
                for t in range(ln):
                    o[p + t] = data[s + t]
            else:
                o[p:p + ln] = data[s:s + ln]
            pos[j] = p + ln
    for j in range(m):
        out_offsets[j, n] = pos[j]


def gather_many(data: np.ndarray, fields: np.ndarray, pos_rows: list, len_rows: list):
    """[(values, offsets)] of gather_slices(data, fields[pos_rows[j]], fields[len_rows[j]]) for
    each j, in one pass over the records (``fields``: the record_fields matrix)."""
    outs = tuple(np.empty(int(fields[r].sum()), dtype=np.uint8) for r in len_rows)
    offsets = np.empty((len(pos_rows), fields.shape[1] + 1), dtype=np.int64)
    if fields.shape[1]:
        _gather_many(data, fields, np.asarray(pos_rows, np.int64), np.asarray(len_rows, np.int64), outs, offsets)
    return [(outs[j], offsets[j]) for j in range(len(pos_rows))]


def gather_slices(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
    """Concatenate data[starts[k]:starts[k]+lengths[k]]; returns (values uint8, offsets int64)."""
    starts = starts.astype(np.int64)
    lengths = lengths.astype(np.int64)
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    _gather(data, starts, lengths, out, offsets)
    return out, offsets


@njit(cache=True, nogil=True)
def _java_hash_continue(h, data, i, end):
    """Continue String.hashCode over the UTF-8 bytes data[i:end] from state h (0 <= h < 2**32).

    Returns (hash, UTF-16 units seen). h is kept in [0, 2**32) with int64 arithmetic: numba
    widens uint32 products, so every step masks explicitly.
    """
    units = 0
    while i < end:
        c = np.int64(data[i])
        if c < 0x80:
            cp = c
            i += 1
        elif c < 0xE0:
            cp = ((c & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
            i += 2
        elif c < 0xF0:
            cp = ((c & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (np.int64(data[i + 2]) & 0x3F)
            i += 3
        else:
            cp = ((c & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) \
                | ((np.int64(data[i + 2]) & 0x3F) << 6) | (np.int64(data[i + 3]) & 0x3F)
            i += 4
        if cp >= 0x10000:
            v = cp - 0x10000
            h = (h * 31 + 0xD800 + (v >> 10)) & 0xFFFFFFFF
            h = (h * 31 + 0xDC00 + (v & 0x3FF)) & 0xFFFFFFFF
            units += 2
        else:
            h = (h * 31 + cp) & 0xFFFFFFFF
            units += 1
    return h, units


java_hash_continue = _java_hash_continue      # for other modules' kernels (verify's scan)


@njit(cache=True, nogil=True)
def _java_hash_utf8(data, offsets, out, lengths16):
    """String.hashCode and String.length of each UTF-8 string, decoded to UTF-16 on the fly."""
    for k in range(offsets.shape[0] - 1):
        h, units = _java_hash_continue(np.int64(0), data, offsets[k], offsets[k + 1])
        out[k] = h
        lengths16[k] = units


def java_hash_utf8(data: np.ndarray, offsets: np.ndarray):
    """(hashes uint32, UTF-16 lengths) of the UTF-8 strings data[offsets[k]:offsets[k+1]]."""
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.uint32)
    lens = np.empty(n, dtype=np.int64)
    if n > 0:
        _java_hash_utf8(data, offsets.astype(np.int64), out, lens)
    return out, lens


@njit(cache=True, nogil=True)
def _index_keys(data, uniq_s, uniq_e, keys_s, keys_e, indexed, topic_hash, count_only, with_hash, out_msg,
                out_hash):
    """Index entries in dispatch order: UNIQ_KEY, then each non-empty ' '-separated KEYS token.

    The hash is String.hashCode of topic + "#" + key, continued from the topic's hash.
    Returns the number of entries.
    """
    n = 0
    for k in range(uniq_s.shape[0]):
        if not indexed[k]:
            continue
        base = (np.int64(topic_hash[k]) * 31 + 35) & 0xFFFFFFFF     # '#'
        if uniq_s[k] >= 0:
            if not count_only:
                out_msg[n] = k
                if with_hash:
                    out_hash[n] = _java_hash_continue(base, data, uniq_s[k], uniq_e[k])[0]
            n += 1
        if keys_s[k] >= 0:
            i = keys_s[k]
            end = keys_e[k]
            while i <= end:
                j = i
                while j < end and data[j] != 32:
                    j += 1
                if j > i:
                    if not count_only:
                        out_msg[n] = k
                        if with_hash:
                            out_hash[n] = _java_hash_continue(base, data, i, j)[0]
                    n += 1
                i = j + 1
    return n


def index_keys(data, uniq_s, uniq_e, keys_s, keys_e, indexed, topic_hash, with_hash=True):
    """(message index, java hash uint32) of every index entry (hashes 0 when not with_hash)."""
    args = (data, uniq_s, uniq_e, keys_s, keys_e, indexed.astype(np.bool_), topic_hash.astype(np.int64))
    empty_i = np.zeros(0, np.int64)
    n = _index_keys(*args, True, False, empty_i, empty_i)
    out_msg = np.empty(n, dtype=np.int64)
    out_hash = np.zeros(n if with_hash else 0, dtype=np.int64)
    _index_keys(*args, False, with_hash, out_msg, out_hash if with_hash else empty_i)
    if not with_hash:
        return out_msg, np.zeros(n, np.uint32)
    return out_msg, out_hash.astype(np.uint32)


@njit(cache=True, nogil=True)
def _hash_slices(data, starts, ends, out):
    for k in range(starts.shape[0]):
        if starts[k] >= 0:
            out[k] = _java_hash_continue(np.int64(0), data, starts[k], ends[k])[0]
        else:
            out[k] = 0


def java_hash_slices(data, starts, ends):
    """String.hashCode of data[starts[k]:ends[k]] (0 where starts[k] < 0), as uint32."""
    out = np.empty(len(starts), dtype=np.int64)
    if len(starts):
        _hash_slices(data, starts.astype(np.int64), ends.astype(np.int64), out)
    return out.astype(np.uint32)


@njit(cache=True, nogil=True, inline="always")
def _put32(out, p, v):
    out[p] = (v >> 24) & 0xFF
    out[p + 1] = (v >> 16) & 0xFF
    out[p + 2] = (v >> 8) & 0xFF
    out[p + 3] = v & 0xFF


@njit(cache=True, nogil=True, inline="always")
def _put64(out, p, v):
    for t in range(8):
        out[p + t] = (v >> (56 - 8 * t)) & 0xFF


@njit(cache=True, nogil=True, inline="always")
def _put_host(out, p, hosts, lens, h):
    """The packed host of row ``h`` of ``hosts`` (``lens[h]`` bytes) at ``out[p]``: the position after it."""
    for t in range(lens[h]):
        out[p + t] = hosts[h, t]
    return p + lens[h]


@njit(cache=True, nogil=True)
def assemble_records(out, size, magic, body_crc, queue_id, flag, qoff, phys, sys_flag, born_ts, born_host,
                     born_len, born_idx, store_ts, store_host, store_len, store_idx, reconsume, prep_tx, body,
                     body_off, topic_part, topic_off, stored_prop_len, props, props_off, need_sep):
    """Write every message record back to back into ``out`` (the layout in commitlog.py).

    Hosts come as distinct values (``*_host`` rows, ``*_len``) and a per-message index."""
    p = 0
    for k in range(size.shape[0]):
        start = p
        _put32(out, p + POS_TOTALSIZE, np.int64(size[k]))
        _put32(out, p + POS_MAGIC, np.int64(magic[k]))
        _put32(out, p + POS_BODYCRC, np.int64(body_crc[k]))
        _put32(out, p + POS_QUEUEID, np.int64(queue_id[k]))
        _put32(out, p + POS_FLAG, np.int64(flag[k]))
        _put64(out, p + POS_QUEUEOFFSET, np.int64(qoff[k]))
        _put64(out, p + POS_PHYSICALOFFSET, np.int64(phys[k]))
        _put32(out, p + POS_SYSFLAG, np.int64(sys_flag[k]))
        _put64(out, p + POS_BORNTIMESTAMP, np.int64(born_ts[k]))
        p = _put_host(out, p + POS_BORNHOST, born_host, born_len, born_idx[k])
        _put64(out, p + REL_STORETIMESTAMP, np.int64(store_ts[k]))
        p = _put_host(out, p + REL_STOREHOST, store_host, store_len, store_idx[k])
        _put32(out, p + REL_RECONSUMETIMES, np.int64(reconsume[k]))
        _put64(out, p + REL_PREPARED_TX_OFFSET, np.int64(prep_tx[k]))
        blen = body_off[k + 1] - body_off[k]
        _put32(out, p + REL_BODYLENGTH, np.int64(blen))
        p += REL_BODY
        out[p:p + blen] = body[body_off[k]:body_off[k + 1]]
        p += blen
        tlen = topic_off[k + 1] - topic_off[k]
        out[p:p + tlen] = topic_part[topic_off[k]:topic_off[k + 1]]
        p += tlen
        v = np.int64(stored_prop_len[k])
        out[p] = (v >> 8) & 0xFF
        out[p + 1] = v & 0xFF
        p += SIZE_PROPERTIESLENGTH
        plen = props_off[k + 1] - props_off[k]
        out[p:p + plen] = props[props_off[k]:props_off[k + 1]]
        p += plen
        if need_sep[k]:
            out[p] = 2
            p += 1
        # enabledAppendPropCRC: the reserved 20 bytes are filled in afterwards (zero here).
        p = start + size[k]
    return p


@njit(cache=True, nogil=True)
def _patch_placement(out, starts, queue_id, qoff, phys):
    for k in range(starts.shape[0]):
        p = starts[k]
        _put32(out, p + POS_QUEUEID, np.int64(queue_id[k]))
        _put64(out, p + POS_QUEUEOFFSET, np.int64(qoff[k]))
        _put64(out, p + POS_PHYSICALOFFSET, np.int64(phys[k]))


def patch_placement(out: np.ndarray, starts: np.ndarray, queue_id: np.ndarray, qoff: np.ndarray,
                    phys: np.ndarray) -> None:
    """Write QUEUEID, QUEUEOFFSET and PHYSICALOFFSET (commitlog.POS_*) of the records starting at
    ``starts``: the only fields that depend on where the sequencer placed a message (ingest
    encodes records before placing them)."""
    if len(starts):
        _patch_placement(out, np.asarray(starts, np.int64), np.asarray(queue_id, np.int32),
                         np.asarray(qoff, np.int64), np.asarray(phys, np.int64))


@njit(cache=True, nogil=True)
def _index_put(slots, out, key_hash, phys, time_diff, first_pos):
    empty = 0
    n_slots = slots.shape[0]
    for k in range(key_hash.shape[0]):
        pos = first_pos + k
        slot = key_hash[k] % n_slots
        prev = np.int64(slots[slot])
        if prev <= 0 or prev > pos:        # a slot value is trusted only in (0, indexCount]
            prev = 0
            empty += 1
        p = k * ENTRY_SIZE
        _put32(out, p + ENTRY_KEY_HASH, np.int64(key_hash[k]))
        _put64(out, p + ENTRY_PHY_OFFSET, np.int64(phys[k]))
        _put32(out, p + ENTRY_TIME_DIFF, np.int64(time_diff[k]))
        _put32(out, p + ENTRY_PREV_POS, prev)
        slots[slot] = pos
    return empty


def index_put(slots: np.ndarray, key_hash: np.ndarray, phys: np.ndarray, time_diff: np.ndarray,
              first_pos: int) -> tuple[np.ndarray, int]:
    """IndexFile.putKey for a run of entries at positions first_pos..: chains each entry to its
    slot's newest entry and makes it the slot's head (``slots`` updated in place). Returns the
    entries as big-endian rows (indexfile.ENTRY_DTYPE bytes), and how many found their slot empty
    (hashSlotCount)."""
    out = np.empty(len(key_hash) * ENTRY_SIZE, np.uint8)
    empty = _index_put(slots, out, np.asarray(key_hash, np.int64), np.asarray(phys, np.int64),
                       np.asarray(time_diff, np.int64), first_pos) if len(key_hash) else 0
    return out, int(empty)


# ---------------------------------------------------------------------------- decoding
@njit(cache=True, nogil=True)
def _read_be(data, pos, width, out):
    """Big-endian signed integers of ``width`` (2, 4 or 8) bytes at every position (0 where the
    bytes lie outside ``data``: positions computed from damaged records never read past it)."""
    n = data.shape[0]
    for k in range(pos.shape[0]):
        p = pos[k]
        if p < 0 or p + width > n:
            out[k] = 0
            continue
        v = np.int64(0)
        for t in range(width):
            v = (v << 8) | np.int64(data[p + t])
        if width < 8:
            top = np.int64(1) << (8 * width - 1)
            if v >= top:
                v -= top << 1
        out[k] = v


def read_be(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """int64 values of the big-endian signed ints of ``width`` bytes at ``data[pos[k]:]``."""
    out = np.empty(len(pos), dtype=np.int64)
    if len(pos):
        _read_be(data, np.asarray(pos, np.int64), width, out)
    return out


# Rows of the matrix ``record_fields`` fills, one column per record (codec.decode_records).
F_SIZE, F_MAGIC, F_BODYCRC, F_QUEUEID, F_FLAG, F_QUEUEOFFSET, F_PHYS, F_SYSFLAG, F_BORNTS, \
    F_BORNHOST_LEN, F_STORETS, F_STOREHOST_POS, F_STOREHOST_LEN, F_RECONSUME, F_PREPTX, \
    F_BODY_POS, F_BODY_LEN, F_TOPIC_POS, F_TOPIC_LEN, F_PROPS_POS, F_PROPS_LEN, \
    F_BORNHOST_KEY, F_STOREHOST_KEY, F_OK = range(24)
N_FIELDS = 24


@njit(cache=True, nogil=True)
def record_layout(data, s, n):
    """(size, sound parts?, sysflag, born host size, store host size, body length, TOPICLENGTH
    size, topic length, properties length) of the record at ``s``; the parts lie inside TOTALSIZE
    (and the record inside ``data``) when the second value is True. Java reads both lengths as
    signed shorts (a V1 topic length: a signed byte): a negative topic length fails the decode, a
    negative properties length (>= 32768 unsigned) means no properties. The one walk over a
    record's variable parts: ``record_fields`` and verify's scan use it."""
    if s < 0 or s + POS_BORNHOST > n:
        return 0, False, 0, 0, 0, 0, 0, 0, 0
    size = be32(data, s + POS_TOTALSIZE)
    end = s + size
    if size < POS_BORNHOST or end > n:
        return size, False, 0, 0, 0, 0, 0, 0, 0
    sys_flag = be32(data, s + POS_SYSFLAG)
    bh = HOST_V6_SIZE if (sys_flag & FLAG_BORNHOST_V6) != 0 else HOST_V4_SIZE
    sh = HOST_V6_SIZE if (sys_flag & FLAG_STOREHOST_V6) != 0 else HOST_V4_SIZE
    tl = TOPIC_LENGTH_SIZE_V2 if be32(data, s + POS_MAGIC) == MAGIC_V2 else TOPIC_LENGTH_SIZE_V1
    p = s + POS_BORNHOST + bh + REL_STOREHOST + sh
    if p + REL_BODY > end:
        return size, False, sys_flag, bh, sh, 0, tl, 0, 0
    body_len = be32(data, p + REL_BODYLENGTH)
    if body_len < 0 or p + REL_BODY + body_len + tl > end:
        return size, False, sys_flag, bh, sh, 0, tl, 0, 0
    q = p + REL_BODY + body_len
    if tl == TOPIC_LENGTH_SIZE_V2:
        tlen = (np.int64(data[q]) << 8) | np.int64(data[q + 1])
        if tlen >= 32768:
            tlen -= 65536
    else:
        tlen = np.int64(data[q])
        if tlen >= 128:
            tlen -= 256
    if tlen < 0 or q + tl + tlen + SIZE_PROPERTIESLENGTH > end:
        return size, False, sys_flag, bh, sh, body_len, tl, 0, 0
    q += tl + tlen
    plen = (np.int64(data[q]) << 8) | np.int64(data[q + 1])
    if plen >= 32768:
        plen = np.int64(0)
    ok = q + SIZE_PROPERTIESLENGTH + plen <= end
    return size, ok, sys_flag, bh, sh, body_len, tl, tlen, plen


@njit(cache=True, nogil=True)
def _record_fields(data, starts, out):
    """Every fixed field and every variable part's position of the records at ``starts``.

    Host keys: the 8 bytes of an IPv4 host (address + port) as one int64 (0 for IPv6 hosts).
    Row F_OK is 1 when every part lies inside the record's TOTALSIZE (and the record inside
    ``data``); a damaged record gets 0 there, zero lengths and in-bounds positions, and nothing
    outside ``data`` is read for it.
    """
    n = data.shape[0]
    for k in range(starts.shape[0]):
        s = starts[k]
        for r in range(out.shape[0]):
            out[r, k] = 0
        out[F_BORNHOST_LEN, k] = HOST_V4_SIZE
        out[F_STOREHOST_LEN, k] = HOST_V4_SIZE
        size, ok, sys_flag, bh, sh, body_len, tl, tlen, plen = record_layout(data, s, n)
        out[F_SIZE, k] = size
        if not ok:
            continue
        magic = be32(data, s + POS_MAGIC)
        out[F_MAGIC, k] = magic
        out[F_BODYCRC, k] = be32(data, s + POS_BODYCRC)
        out[F_QUEUEID, k] = be32(data, s + POS_QUEUEID)
        out[F_FLAG, k] = be32(data, s + POS_FLAG)
        out[F_QUEUEOFFSET, k] = be64(data, s + POS_QUEUEOFFSET)
        out[F_PHYS, k] = be64(data, s + POS_PHYSICALOFFSET)
        out[F_SYSFLAG, k] = sys_flag
        out[F_BORNTS, k] = be64(data, s + POS_BORNTIMESTAMP)
        out[F_BORNHOST_LEN, k] = bh
        out[F_BORNHOST_KEY, k] = be64(data, s + POS_BORNHOST) if bh == HOST_V4_SIZE else 0
        p = s + POS_BORNHOST + bh                               # end of BORNHOST
        out[F_STORETS, k] = be64(data, p + REL_STORETIMESTAMP)
        out[F_STOREHOST_POS, k] = p + REL_STOREHOST
        out[F_STOREHOST_LEN, k] = sh
        out[F_STOREHOST_KEY, k] = be64(data, p + REL_STOREHOST) if sh == HOST_V4_SIZE else 0
        p += REL_STOREHOST + sh                                 # end of STOREHOST
        out[F_RECONSUME, k] = be32(data, p + REL_RECONSUMETIMES)
        out[F_PREPTX, k] = be64(data, p + REL_PREPARED_TX_OFFSET)
        p += REL_BODY
        out[F_BODY_POS, k] = p
        out[F_BODY_LEN, k] = body_len
        p += body_len + tl
        out[F_TOPIC_POS, k] = p
        out[F_TOPIC_LEN, k] = tlen
        p += tlen
        out[F_PROPS_POS, k] = p + SIZE_PROPERTIESLENGTH
        out[F_PROPS_LEN, k] = plen
        out[F_OK, k] = 1


def record_fields(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(N_FIELDS, n) int64 matrix of the records' fields (rows F_*)."""
    out = np.empty((N_FIELDS, len(starts)), dtype=np.int64)
    if len(starts):
        _record_fields(data, np.asarray(starts, np.int64), out)
    return out


# Two upper-case hex digits per byte value.
_HEX_PAIRS = np.array([[ord("0123456789ABCDEF"[b >> 4]), ord("0123456789ABCDEF"[b & 15])] for b in range(256)],
                      dtype=np.uint8)


@njit(cache=True, nogil=True)
def _hex_ids(data, host_pos, host_len, phys, pairs, out, out_offsets):
    """Upper-case hex of (store host bytes ++ big-endian physical offset): the offset msgId."""
    pos = 0
    for k in range(host_pos.shape[0]):
        out_offsets[k] = pos
        hp = host_pos[k]
        for t in range(host_len[k]):
            b = data[hp + t]
            out[pos] = pairs[b, 0]
            out[pos + 1] = pairs[b, 1]
            pos += 2
        v = phys[k]
        for t in range(SIZE_PHYSICALOFFSET):
            b = (v >> (56 - 8 * t)) & 0xFF
            out[pos] = pairs[b, 0]
            out[pos + 1] = pairs[b, 1]
            pos += 2
    out_offsets[host_pos.shape[0]] = pos


@njit(cache=True, nogil=True)
def _hex_ids_v4(host_key, phys, pairs, out):
    """The IPv4 case from the 8 host bytes as an int64 (record_fields' F_STOREHOST_KEY): 32 digits
    per id, without touching the records again."""
    for k in range(host_key.shape[0]):
        a = host_key[k]
        v = phys[k]
        for t in range(HOST_V4_SIZE):
            b = (a >> (56 - 8 * t)) & 0xFF
            out[k, 2 * t] = pairs[b, 0]
            out[k, 2 * t + 1] = pairs[b, 1]
        for t in range(SIZE_PHYSICALOFFSET):
            b = (v >> (56 - 8 * t)) & 0xFF
            out[k, 2 * HOST_V4_SIZE + 2 * t] = pairs[b, 0]
            out[k, 2 * HOST_V4_SIZE + 2 * t + 1] = pairs[b, 1]


def hex_ids_v4(host_key: np.ndarray, phys: np.ndarray) -> np.ndarray:
    """(n, 32) uint8 matrix of the offset msgIds of records with IPv4 store hosts."""
    out = np.empty((len(host_key), MSG_ID_V4_HEX_LENGTH), dtype=np.uint8)
    if len(host_key):
        _hex_ids_v4(np.asarray(host_key, np.int64), np.asarray(phys, np.int64), _HEX_PAIRS, out)
    return out


def hex_ids(data, host_pos, host_len, phys):
    """(values uint8, offsets int64) of the offset msgIds."""
    n = len(host_pos)
    out = np.empty(int(2 * (np.sum(host_len) + SIZE_PHYSICALOFFSET * n)), dtype=np.uint8)
    offsets = np.empty(n + 1, dtype=np.int64)
    _hex_ids(data, np.asarray(host_pos, np.int64), np.asarray(host_len, np.int64),
             np.asarray(phys, np.int64), _HEX_PAIRS, out, offsets)
    return out, offsets
