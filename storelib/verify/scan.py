"""One compiled pass over a commitlog segment's records for ``verify`` (numba; the shell lookup
path never imports this).

A pass per concern over a segment's records (a field matrix of 24 int64 rows is 0.4 GB for two
million records; then the body CRCs, the topic hashes, the properties TAGS, DELAY, KEYS,
UNIQ_KEY, the index keys) would read the whole segment again each time. ``scan_records`` does all
of it record by record, while the record
is in the cache, over a range of the records (so a segment's records are scanned on several
threads), and keeps per record only what the checks compare, in one 64-byte row (``SCAN_DTYPE``):
the cross checks then gather one cache line per consume-queue unit or index entry.

Per record it decides whether the record is *sound* (every part inside TOTALSIZE, the fields add
up to TOTALSIZE, PROPERTIESLENGTH > 0, PHYSICALOFFSET its position, queue id and offset not negative, transaction rules) and, with
``deep``, whether the body's CRC matches BODYCRC. Records that are not sound are left to the
checks that name each problem (``verify.commitlog``).

``units_against`` and ``entries_against`` read consume-queue units and index entries in place,
find the record each points at (one sweep: both are in commitlog order) and compare them with its
row (``verify.cross``); an index entry's key hash is computed from the record's UNIQ_KEY / KEYS
where they lie, in the order the dispatch indexes them.

CRC-32 here is slicing-by-16 (zlib's polynomial); Java's String.hashCode over UTF-8 bytes decoded
to UTF-16 on the fly (as ``kernels`` does for the encoder).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from ..compute import kernelcache  # noqa: F401  (before the kernels: numba picks their cache location then)

from ..format.commitlog import (MIN_RECORD_SIZE, POS_BODYCRC, POS_BORNHOST, POS_PHYSICALOFFSET, POS_QUEUEID, POS_QUEUEOFFSET,
                        RECORD_OVERHEAD, REL_BODY, REL_STOREHOST, REL_STORETIMESTAMP, SIZE_PROPERTIESLENGTH,
                        TRANSACTION_MASK, TRANSACTION_PREPARED, TRANSACTION_ROLLBACK)
from ..format.consumequeue import UNIT_PHYSICALOFFSET, UNIT_SIZE, UNIT_TAGSCODE, UNIT_TOTALSIZE
from ..format.indexfile import ENTRY_KEY_HASH, ENTRY_PHY_OFFSET, ENTRY_SIZE, ENTRY_TIME_DIFF, INT_MAX
from ..compute.intrinsics import prefetch
from ..compute.crc32 import CRC_TABLES, crc32_one as _crc32
from ..compute.kernels import be32 as _be32, be64 as _be64, java_hash_continue, record_layout as _layout
from ..codec.properties import value_spans
from .kernels import seek_sorted

__all__ = ["SCAN_DTYPE", "SOUND", "CRC_BAD", "PROPERTY_NAMES", "new_scan",
           "scan_records", "units_against", "units_by_records", "entries_against"]

# One row per record (64 bytes: one cache line). ``keys``: how many index keys the record has
# (UNIQ_KEY, then each KEYS token, as the dispatch indexes them), ``key0..2`` the index hashes of
# the first three (a record with more is looked at again by ``entries_against``). ``tags`` is the
# tagsCode (Java hash of TAGS as int32; a delay message's deliver time is patched in later).
SCAN_DTYPE = np.dtype([("size", "<i4"), ("sysflag", "<i4"), ("queue_id", "<i4"), ("keys", "<i4"),
                       ("key0", "<i4"), ("key1", "<i4"), ("key2", "<i4"), ("pad", "<i4"),
                       ("queue_offset", "<i8"), ("store_ts", "<i8"), ("topic_key", "<i8"), ("tags", "<i8")])
assert SCAN_DTYPE.itemsize == 64
_ROW_KEYS = 3

SOUND = 1            # status bit: the record passed every field check
CRC_BAD = 2          # status bit (deep, sound records): BODYCRC differs from the body's CRC
PROPERTY_NAMES = ("TAGS", "DELAY", "KEYS", "UNIQ_KEY")     # the order scan_records expects
_CHUNK = 256          # units or entries matched, then compared, at a time
_NO_TS_MIN = np.iinfo(np.int64).max
_NO_TS_MAX = np.iinfo(np.int64).min


@njit(cache=True, nogil=True, inline="always")
def _jhash(h, data, i, end):
    """String.hashCode continued from ``h`` over the UTF-8 bytes data[i:end] (kernels')."""
    return java_hash_continue(h, data, i, end)[0]


@njit(cache=True, nogil=True, inline="always")
def _index_key_hash(h):
    """IndexFile.indexKeyHashMethod of a String.hashCode ``h`` (0 <= h < 2**32): abs of the int32,
    Integer.MIN_VALUE mapped to 0 (``codec.index_key_hash``)."""
    v = h - 4294967296 if h >= 2147483648 else h
    v = -v if v < 0 else v
    return 0 if v == 2147483648 else v


@njit(cache=True, nogil=True)
def _props(data, i, end, s, names, name_off, spans):
    """Value spans (relative to ``s``, -1 where absent) of the wanted names in the properties
    data[i:end] (``properties.value_spans``)."""
    value_spans(data, i, end, names, name_off, spans)
    for w in range(spans.shape[0]):
        if spans[w] >= 0:
            spans[w] -= s


@njit(cache=True, nogil=True)
def _scan(data, starts, lo, hi, base, deep, names, name_off, T, recs, status, delay):
    """``scan_records`` over records [lo, hi): (record bytes, sound, crc bad, min ts, max ts)."""
    n = data.shape[0]
    nbytes, nsound, ncrc = np.int64(0), np.int64(0), np.int64(0)
    min_ts, max_ts = _NO_TS_MIN, _NO_TS_MAX
    spans = np.empty(2 * (name_off.shape[0] - 1), np.int64)
    first = np.zeros(_ROW_KEYS, np.int64)
    for k in range(lo, hi):
        s = starts[k]
        size, ok, sys_flag, bh, sh, body_len, tl, tlen, plen = _layout(data, s, n)
        nbytes += size
        r = recs[k]
        r.size = size
        r.sysflag = sys_flag
        delay[2 * k] = -1
        delay[2 * k + 1] = -1
        st = 0
        if ok:
            qid = _be32(data, s + POS_QUEUEID)
            qoff = _be64(data, s + POS_QUEUEOFFSET)
            tran = sys_flag & TRANSACTION_MASK
            total = RECORD_OVERHEAD + bh + sh + body_len + tl + tlen + SIZE_PROPERTIESLENGTH + plen
            if (size >= MIN_RECORD_SIZE and total == size and plen > 0 and qid >= 0 and qoff >= 0
                    and _be64(data, s + POS_PHYSICALOFFSET) == base + s
                    and not ((tran == TRANSACTION_PREPARED or tran == TRANSACTION_ROLLBACK) and qoff != 0)):
                st = SOUND
                r.queue_id = qid
                r.queue_offset = qoff
                ts = _be64(data, s + POS_BORNHOST + bh + REL_STORETIMESTAMP)
                r.store_ts = ts
                min_ts = min(min_ts, ts)
                max_ts = max(max_ts, ts)
                nsound += 1
        status[k] = st
        if st == 0 or not deep:
            continue
        body = s + POS_BORNHOST + bh + REL_STOREHOST + sh + REL_BODY
        if (np.int64(_crc32(data, body, body + body_len, T)) & 0x7FFFFFFF) != _be32(data, s + POS_BODYCRC):
            status[k] = SOUND | CRC_BAD
            ncrc += 1
        tpos = body + body_len + tl
        r.topic_key = (_jhash(np.int64(0), data, tpos, tpos + tlen) << 32) | np.int64(_crc32(data, tpos, tpos + tlen, T))
        ppos = tpos + tlen + SIZE_PROPERTIESLENGTH
        _props(data, ppos, ppos + plen, s, names, name_off, spans)
        r.tags = np.int64(np.int32(np.uint32(_jhash(np.int64(0), data, s + spans[0], s + spans[1])))) \
            if spans[0] >= 0 else 0
        delay[2 * k] = spans[2]
        delay[2 * k + 1] = spans[3]
        _row_keys(data, s, r, spans, first)
    return nbytes, nsound, ncrc, min_ts, max_ts


def new_scan(n: int):
    """(rows, status, delay spans) for ``n`` records, to be filled by ``scan_records``."""
    return np.empty(n, SCAN_DTYPE), np.empty(n, np.uint8), np.empty(2 * n, np.int32)


_NAMES = np.frombuffer("".join(PROPERTY_NAMES).encode("ascii"), np.uint8)
_NAME_OFF = np.concatenate([[0], np.cumsum([len(x) for x in PROPERTY_NAMES])]).astype(np.int64)


def scan_records(buf: np.ndarray, starts: np.ndarray, base: int, deep: bool, lo: int, hi: int, scan) -> tuple:
    """Records ``starts[lo:hi]`` of the segment at commitlog offset ``base`` into ``scan``
    (``new_scan``): status bits (SOUND, CRC_BAD), and for sound records their row (queue id and
    offset, store time; with ``deep`` also topic key, tagsCode, KEYS / UNIQ_KEY / DELAY spans).
    Returns (record bytes, sound records, CRC mismatches, min store time, max store time of the
    sound ones or None). Ranges of one segment may run on different threads at once."""
    recs, status, delay = scan
    nbytes, nsound, ncrc, lo_ts, hi_ts = _scan(buf, starts, np.int64(lo), np.int64(hi), np.int64(base), bool(deep),
                                               _NAMES, _NAME_OFF, CRC_TABLES, recs, status, delay)
    return int(nbytes), int(nsound), int(ncrc), (int(lo_ts) if nsound else None), (int(hi_ts) if nsound else None)


@njit(cache=True, nogil=True)
def _match_chunk(src, at, stride, c, m, starts, base, recs, j, last, rows):
    """Items c..c+m-1 of ``src`` (big-endian commitlog offsets at ``at + i * stride``): the row of
    the record each starts (-1: none) into ``rows``, one sweep over the ascending record
    positions ``starts`` of the segment at ``base``, each
    row prefetched for the comparisons that follow (without the prefetch the units of one queue,
    a sixty-fourth of a segment's records, wait for memory at almost every row: 0.27 s against
    0.12 s per segment). Returns the sweep's (j, last)."""
    for k in range(m):
        q = _be64(src, at + (c + k) * stride) - base
        if q < last:                                         # out of order: the search starts over
            j = 0
        last = q
        j = seek_sorted(starts, j, q)
        if j >= starts.shape[0] or starts[j] != q:
            rows[k] = -1
        else:
            rows[k] = j
            prefetch(recs, j)
    return j, last


@njit(cache=True, nogil=True)
def _units_against(cq, a, b, starts, base, recs, first_q, topic_key, qid, missing, bad):
    nm = nb = 0
    j, last = np.int64(0), np.int64(-(2**62))
    rows = np.empty(_CHUNK, np.int64)
    for c in range(a, b, _CHUNK):
        m = min(b, c + _CHUNK) - c
        j, last = _match_chunk(cq, UNIT_PHYSICALOFFSET, UNIT_SIZE, c, m, starts, base, recs, j, last, rows)
        for k in range(m):
            i = c + k
            if rows[k] < 0:
                missing[nm] = i
                nm += 1
                continue
            u = i * UNIT_SIZE
            r = recs[rows[k]]
            tran = r.sysflag & TRANSACTION_MASK
            if (r.topic_key != topic_key or r.queue_id != qid or r.queue_offset != first_q + i
                    or r.size != _be32(cq, u + UNIT_TOTALSIZE) or r.tags != _be64(cq, u + UNIT_TAGSCODE)
                    or tran == TRANSACTION_PREPARED or tran == TRANSACTION_ROLLBACK):
                bad[nb] = i
                nb += 1
    return nm, nb


def units_against(cq: np.ndarray, a: int, b: int, starts: np.ndarray, base: int, recs: np.ndarray, first_q: int,
                  topic_key: int, qid: int) -> tuple[np.ndarray, np.ndarray]:
    """Units [a, b) of a consume-queue file's bytes ``cq`` (``consumequeue``'s layout, read in
    place) against the records of the segment at commitlog offset ``base`` (at the ascending
    positions ``starts``, their rows ``recs``): (units
    not at any of these records, units disagreeing with their record: topic, queue id, queue
    offset ``first_q + i``, size, tagsCode, or the record is PREPARED / ROLLBACK)."""
    missing, bad = np.empty(max(0, b - a), np.int64), np.empty(max(0, b - a), np.int64)   # (pages touched only
    nm, nb = (_units_against(cq, np.int64(a), np.int64(b), starts, np.int64(base), recs,     # when written)
                             np.int64(first_q), np.int64(topic_key), np.int64(qid), missing, bad) if b > a else (0, 0))
    return missing[:nm].copy(), bad[:nb].copy()


_MIX_TOPIC = np.uint64(0x9E3779B97F4A7C15)        # (odd multipliers: the queue table's hash)
_MIX_QUEUE = np.uint64(0xC2B2AE3D27D4EB4F)


@njit(cache=True, nogil=True, inline="always")
def _queue_slot(topic_key, qid, mask):
    """First slot of the queue (topic key, queue id) in a table of ``mask + 1`` slots."""
    h = (np.uint64(topic_key) * _MIX_TOPIC) ^ (np.uint64(qid) * _MIX_QUEUE)
    return np.int64((h >> np.uint64(32)) & np.uint64(mask))


@njit(cache=True, nogil=True)
def _units_by_records(recs, starts, base, units, f_topic, f_qid, f_lo, f_hi, f_at, f_next, table, matched, bad):
    """The sweep of ``units_by_records``: ``table`` slot -> first file of a queue (-1: empty)."""
    mask = table.shape[0] - 1
    for f in range(f_topic.shape[0] - 1, -1, -1):       # each queue's files chained, first file first
        h = _queue_slot(f_topic[f], f_qid[f], mask)
        while table[h] >= 0 and (f_topic[table[h]] != f_topic[f] or f_qid[table[h]] != f_qid[f]):
            h = (h + 1) & mask
        f_next[f] = table[h]
        table[h] = f
    for r in range(recs.shape[0]):
        row = recs[r]
        h = _queue_slot(row.topic_key, row.queue_id, mask)
        f = table[h]
        while f >= 0 and (f_topic[f] != row.topic_key or f_qid[f] != row.queue_id):
            h = (h + 1) & mask
            f = table[h]
        o = row.queue_offset
        while f >= 0 and not (f_lo[f] <= o < f_hi[f]):
            f = f_next[f]
        if f < 0:
            continue                                     # no unit of this queue in range at its offset
        g = f_at[f] + (o - f_lo[f])                      # the unit at the record's queue offset
        u = g * UNIT_SIZE
        if _be64(units, u + UNIT_PHYSICALOFFSET) - base != starts[r]:
            continue                                     # it points elsewhere: ``units_against`` finds where
        matched[g] = True
        tran = row.sysflag & TRANSACTION_MASK
        bad[g] = (row.size != _be32(units, u + UNIT_TOTALSIZE) or row.tags != _be64(units, u + UNIT_TAGSCODE)
                  or tran == TRANSACTION_PREPARED or tran == TRANSACTION_ROLLBACK)


def units_by_records(starts: np.ndarray, base: int, recs: np.ndarray, files: list) -> list:
    """The units of several consume-queue files against the records of the segment at ``base``
    (at the ascending positions ``starts``, their rows ``recs``), record by record: each record
    looks up its queue (topic key, queue id) in a small hash table and checks the unit at its
    queue offset, if that unit points back at it (topic, queue id and queue offset then agree;
    size, tagsCode and the transaction type are compared). One sequential pass over the rows and
    over each file's units, where ``units_against`` gathers a row per unit at random (0.12 s per
    segment against <the figure>).

    ``files``: (file bytes, first unit a, end unit b, queue offset of unit 0, topic key, queue
    id) per file. Returns per file None when a unit of [a, b) was not reached this way (it points
    at no record of its queue and offset: ``units_against`` must find what it points at), else
    the indexes of the units disagreeing with their record."""
    if not files:
        return []
    sizes = [b - a for _, a, b, _, _, _ in files]
    units = np.concatenate([buf[a * UNIT_SIZE:b * UNIT_SIZE] for buf, a, b, _, _, _ in files])
    f_at = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    f_lo = np.array([q0 + a for _, a, _, q0, _, _ in files], np.int64)
    f_hi = f_lo + np.array(sizes, np.int64)
    f_topic = np.array([k for *_, k, _ in files], np.int64)
    f_qid = np.array([q for *_, q in files], np.int64)
    table = np.full(1 << max(4, (4 * len(files)).bit_length()), -1, np.int64)
    matched = np.zeros(len(units) // UNIT_SIZE, np.bool_)
    bad = np.zeros(len(matched), np.bool_)
    _units_by_records(recs, np.asarray(starts, np.int64), np.int64(base), units, f_topic, f_qid, f_lo, f_hi, f_at,
                      np.empty(len(files), np.int64), table, matched, bad)
    out = []
    for k, (_, a, _b, _, _, _) in enumerate(files):
        lo, hi = f_at[k], f_at[k] + sizes[k]
        out.append(np.flatnonzero(bad[lo:hi]) + a if matched[lo:hi].all() else None)
    return out


@njit(cache=True, nogil=True)
def _keys(data, s, topic_key, spans, want, out):
    """The record's index keys (UNIQ_KEY, then each non-empty ' '-separated KEYS token; spans
    relative to ``s``: KEYS at 4..5, UNIQ_KEY at 6..7), each hashed as topic#key and mapped by
    IndexFile.indexKeyHashMethod: with ``want`` >= 0, whether one hashes to ``want``; else the first
    ones into ``out`` and how many there are."""
    h0 = ((((topic_key >> 32) & 0xFFFFFFFF) * 31) + 35) & 0xFFFFFFFF          # '#'
    m = 0
    if spans[6] >= 0:
        h = _index_key_hash(_jhash(h0, data, s + spans[6], s + spans[7]))
        if want >= 0 and h == want:
            return 1
        if m < out.shape[0]:
            out[m] = h
        m += 1
    if spans[4] >= 0:
        i = s + spans[4]
        end = s + spans[5]
        while i <= end:
            j = i
            while j < end and data[j] != 32:
                j += 1
            if j > i:
                h = _index_key_hash(_jhash(h0, data, i, j))
                if want >= 0 and h == want:
                    return 1
                if m < out.shape[0]:
                    out[m] = h
                m += 1
            i = j + 1
    return 0 if want >= 0 else m


@njit(cache=True, nogil=True)
def _row_keys(data, s, r, spans, first):
    r.keys = _keys(data, s, r.topic_key, spans, np.int64(-1), first)
    r.key0, r.key1, r.key2 = first[0], first[1], first[2]


@njit(cache=True, nogil=True)
def _has_key(data, s, r, want, names, name_off):
    """Whether one of the record's index keys has the index hash ``want``: from its row, or, for a
    record with more keys than the row holds, from its properties again."""
    if want < 0:                                             # no key hashes to a negative value
        return False
    if (r.keys > 0 and r.key0 == want) or (r.keys > 1 and r.key1 == want) or (r.keys > 2 and r.key2 == want):
        return True
    if r.keys <= _ROW_KEYS:
        return False
    _, _, _, bh, sh, body_len, tl, tlen, plen = _layout(data, s, data.shape[0])
    ppos = s + POS_BORNHOST + bh + REL_STOREHOST + sh + REL_BODY + body_len + tl + tlen + SIZE_PROPERTIESLENGTH
    spans = np.empty(2 * (name_off.shape[0] - 1), np.int64)
    _props(data, ppos, ppos + plen, s, names, name_off, spans)
    return _keys(data, s, r.topic_key, spans, want, np.zeros(0, np.int64)) == 1


@njit(cache=True, nogil=True)
def _entries_against(idx, ent_at, a, b, data, starts, base, recs, begin, names, name_off, missing, bad):
    nm = nb = 0
    j, last = np.int64(0), np.int64(-(2**62))
    rows = np.empty(_CHUNK, np.int64)
    for c in range(a, b, _CHUNK):
        m = min(b, c + _CHUNK) - c
        j, last = _match_chunk(idx, ent_at + ENTRY_PHY_OFFSET, ENTRY_SIZE, c, m, starts, base, recs, j, last, rows)
        for k in range(m):
            p = c + k
            if rows[k] < 0:
                missing[nm] = p
                nm += 1
                continue
            e = ent_at + p * ENTRY_SIZE
            r = recs[rows[k]]
            rollback = (r.sysflag & TRANSACTION_MASK) == TRANSACTION_ROLLBACK
            d = r.store_ts - begin
            want = (d // 1000) if d >= 0 else 0                  # negative differences clip to 0
            want = min(want, INT_MAX)
            td_bad = p > 1 and begin > 0 and want != _be32(idx, e + ENTRY_TIME_DIFF)
            if rollback or td_bad or not _has_key(data, starts[rows[k]], r, _be32(idx, e + ENTRY_KEY_HASH), names,
                                                  name_off):
                bad[nb] = p
                nb += 1
    return nm, nb


def entries_against(idx: np.ndarray, ent_at: int, a: int, b: int, data: np.ndarray, starts: np.ndarray,
                    base: int, recs: np.ndarray, begin: int) -> tuple[np.ndarray, np.ndarray]:
    """Entries [a, b) of an index file's bytes ``idx`` (entry 0 at ``ent_at``; ``indexfile``'s
    layout, read in place) against the records of the segment ``data`` at commitlog offset
    ``base`` (at the ascending positions ``starts``, their rows ``recs``): (entries not at any of these records, entries
    disagreeing with their record: a ROLLBACK record, no key of the record with the entry's hash,
    or, after the first entry and with a ``begin`` time, another timeDiff)."""
    missing, bad = np.empty(max(0, b - a), np.int64), np.empty(max(0, b - a), np.int64)
    nm, nb = (_entries_against(idx, np.int64(ent_at), np.int64(a), np.int64(b), data, starts, np.int64(base), recs,
                               np.int64(begin), _NAMES, _NAME_OFF, missing, bad) if b > a else (0, 0))
    return missing[:nm].copy(), bad[:nb].copy()
