"""Verify commitlog segments (docs/FORMAT.md §1): the chain of records, every record's fields,
the BLANK record, the zero tail, and the segment against its manifest row (``storelib.verify.driver``).

Speed (``verify --deep``): after the walk of the TOTALSIZE chain, the records are read in one
compiled pass (``verify.scan.scan_records``: fields, soundness, body CRC, topic key, tagsCode,
index-key spans, record by record while each is in the cache), as ranges of records on the
segment's threads; only records that fail that pass go through ``check_records``, which names each
problem (a sound segment has none). The pieces are pairs of the block checksum's 16 MiB blocks: a
pair is hashed (two SHA-256 streams at once) and its records scanned in one go, on the segment's
threads (the hashing and the numba kernels release the GIL), so its bytes come from memory once.
With ``deep``, the consume-queue units and index entries that point into this segment are checked
here, against the rows just read (``verify.cross``), instead of decoding each target record again
by offset. The former multi-pass
check lives on in tests/verify/test_verify_scan.py, as the reference the scan is held to."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..io import checksum
from ..codec import messages as codec
from ..compute import crc32, kernels
from ..format import commitlog as cl
from ..table import zonemap
from .access import FileData, Found, MAX_PROBLEMS_PER_FILE, Problem, problem, task_store, VerifyContext
from .scan import CRC_BAD, new_scan, scan_records, SOUND
from ..table.rows import FileKind

__all__ = ["ScanBuffers", "check_records", "scan_check", "verify_segment", "RECORDS_PER_PIECE"]

RECORDS_PER_PIECE = 1 << 17          # records scanned as one piece (about 50 MB of 400-byte records)


class ScanBuffers:
    """The arrays a segment's walk and scan fill (about 90 bytes a record: 250 MB for a 1 GiB
    segment of 400-byte records), handed on from segment to segment within one run: written into
    fresh memory they cost the kernel's zeroing of every page first (14% of ``verify --deep``'s
    CPU). Thread-safe; a run keeps one set per segment checked at once."""

    def __init__(self) -> None:
        self._free: list = []
        self._lock = threading.Lock()

    def take(self, capacity: int) -> tuple:
        """(walk out, scan rows, status, delay spans) for up to ``capacity`` records."""
        with self._lock:
            for k, b in enumerate(self._free):
                if len(b[0]) >= capacity:
                    return self._free.pop(k)
        return (np.empty(capacity, np.int64),) + new_scan(capacity)

    def give(self, bufs: tuple) -> None:
        with self._lock:
            self._free.append(bufs)


def check_records(buf: np.ndarray, starts: np.ndarray, base: int, rel: str, deep: bool, out: list) -> dict:
    """Field-level checks of the records at ``starts`` (all satisfy start+size <= len, size > 0):
    problem lines into ``out``; returns the facts (store time range, record bytes)."""
    msgs, facts = _record_problems(buf, starts, base, deep)
    for pos in sorted(msgs)[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, pos, msgs[pos]))
    return facts


def _record_problems(buf: np.ndarray, starts: np.ndarray, base: int, deep: bool) -> tuple[dict, dict]:
    """({record position: what is wrong}, facts) of the records at ``starts``: every check, named."""
    s = np.asarray(starts, dtype=np.int64)
    facts = {"min_ts": None, "max_ts": None, "bytes": 0}
    if len(s) == 0:
        return {}, facts
    end_of = len(buf)
    size = codec.gather_int(buf, s + cl.POS_TOTALSIZE, cl.SIZE_TOTALSIZE).astype(np.int64)
    facts["bytes"] = int(size.sum())
    bad = np.zeros(len(s), dtype=bool)
    msgs: dict = {}

    def flag(mask, text):
        nonlocal bad
        new = mask & ~bad
        for i in np.flatnonzero(new)[:MAX_PROBLEMS_PER_FILE]:
            msgs[int(i)] = text(int(i)) if callable(text) else text
        bad |= mask

    flag(size < cl.MIN_RECORD_SIZE,
         lambda i: f"record size {size[i]} is below the minimum of {cl.MIN_RECORD_SIZE} bytes")
    ss = np.where(bad, 0, s)                      # safe positions for the gathers below
    sysflag = codec.gather_int(buf, ss + cl.POS_SYSFLAG, cl.SIZE_SYSFLAG).astype(np.int64)
    B = cl.born_host_size(sysflag)
    S = cl.store_host_size(sysflag)
    flag(cl.RECORD_OVERHEAD + B + S + cl.TOPIC_LENGTH_SIZE_V1 + cl.SIZE_PROPERTIESLENGTH > size,
         lambda i: f"record size {size[i]} too small for its host fields (sysflag {sysflag[i]:#x})")
    ss = np.where(bad, 0, s)
    sf = np.where(bad, 0, sysflag)                # IPv4 layout for the records already flagged
    body_len = codec.gather_int(buf, ss + cl.bodylength_offset(sf), cl.SIZE_BODYLENGTH).astype(np.int64)
    magic = codec.gather_int(buf, ss + cl.POS_MAGIC, cl.SIZE_MAGIC)
    T = cl.topic_length_size(magic)
    flag((body_len < 0) | (cl.RECORD_OVERHEAD + B + S + body_len + T + cl.SIZE_PROPERTIESLENGTH > size),
         lambda i: f"BODYLENGTH {body_len[i]} does not fit the record of {size[i]} bytes")
    ss = np.where(bad, 0, s)
    sf = np.where(bad, 0, sysflag)
    bl = np.where(bad, 0, body_len)
    p_tl = ss + cl.body_offset(sf) + bl
    p_tl = np.minimum(p_tl, end_of - cl.TOPIC_LENGTH_SIZE_V2)
    tl2 = codec.gather_int(buf, p_tl, cl.TOPIC_LENGTH_SIZE_V2).astype(np.int64) & 0xFFFF
    tl1 = codec.gather_int(buf, p_tl, cl.TOPIC_LENGTH_SIZE_V1).astype(np.int64)
    topic_len = np.where(magic == cl.MAGIC_V2, tl2, tl1)
    flag(topic_len < 0, lambda i: f"V1 TOPICLENGTH {topic_len[i]} is negative")
    p_pl = p_tl + T + np.maximum(topic_len, 0)
    flag(p_pl + cl.SIZE_PROPERTIESLENGTH > s + size, lambda i: f"TOPICLENGTH {topic_len[i]} runs past the record end")
    p_pl = np.where(bad, ss, p_pl)
    prop_len = codec.gather_int(buf, np.minimum(p_pl, end_of - cl.SIZE_PROPERTIESLENGTH),
                                cl.SIZE_PROPERTIESLENGTH).astype(np.int64) & 0xFFFF
    total = cl.record_size(body_len, topic_len, prop_len, B == cl.HOST_V6_SIZE, S == cl.HOST_V6_SIZE,
                           magic == cl.MAGIC_V2)
    flag(total != size, lambda i: f"TOTALSIZE {size[i]} but the fields add up to {total[i]}")
    phys = codec.gather_int(buf, ss + cl.POS_PHYSICALOFFSET, cl.SIZE_PHYSICALOFFSET)
    flag(phys != base + s, lambda i: f"PHYSICALOFFSET {phys[i]} but the record is at {base + s[i]}")
    qid = codec.gather_int(buf, ss + cl.POS_QUEUEID, cl.SIZE_QUEUEID)
    flag(qid < 0, lambda i: f"QUEUEID {qid[i]} is negative")
    qoff = codec.gather_int(buf, ss + cl.POS_QUEUEOFFSET, cl.SIZE_QUEUEOFFSET)
    tran = sysflag & cl.TRANSACTION_MASK
    flag(((tran == cl.TRANSACTION_PREPARED) | (tran == cl.TRANSACTION_ROLLBACK)) & (qoff != 0),
         lambda i: f"PREPARED/ROLLBACK record with QUEUEOFFSET {qoff[i]} (must be 0)")
    flag(qoff < 0, lambda i: f"QUEUEOFFSET {qoff[i]} is negative")
    good = ~bad
    ts = codec.gather_int(buf, ss + cl.storetimestamp_offset(np.where(bad, 0, sysflag)), cl.SIZE_STORETIMESTAMP)
    if good.any():
        facts["min_ts"], facts["max_ts"] = int(ts[good].min()), int(ts[good].max())
    if deep and good.any():
        p_body = (s + cl.body_offset(sysflag))[good]
        crc = crc32.crc32_slices(buf, p_body, p_body + body_len[good]).astype(np.int64) & 0x7FFFFFFF
        stored = codec.gather_int(buf, s[good] + cl.POS_BODYCRC, cl.SIZE_BODYCRC).astype(np.int64)
        gi = np.flatnonzero(good)
        for k in np.flatnonzero(crc != stored)[:MAX_PROBLEMS_PER_FILE]:
            i = int(gi[k])
            msgs[i] = f"BODYCRC {stored[k]} but the body's crc32 & 0x7fffffff is {crc[k]}"
    return {int(s[i]): msgs[i] for i in sorted(msgs)[:MAX_PROBLEMS_PER_FILE]}, facts


def scan_check(buf: np.ndarray, starts: np.ndarray, base: int, deep: bool, pool=None, threads: int = 1,
               digest_end: int | None = None, scan: tuple | None = None):
    """The answer of ``check_records`` from one ``scan_records`` pass, as pieces on ``pool``: (problems
    {position: what}, facts, scan rows, good, block digests). With ``digest_end``, each piece is two
    checksum blocks of the bytes [0, digest_end) with the records starting in them: the blocks are
    hashed (two at once: ``checksum.block_digests``), then their records scanned while their bytes
    are in the cache; the digests are the blocks' in order (``checksum``), else []. ``scan``: the
    arrays to fill (``new_scan``'s, for at least as many records; ``ScanBuffers``), else new ones."""
    s = np.asarray(starts, dtype=np.int64)
    scan = new_scan(len(s)) if scan is None else (scan[0][:len(s)], scan[1][:len(s)], scan[2][:2 * len(s)])
    pieces: list[tuple[int, int, list[tuple[int, int]] | None]]
    if digest_end is None:
        step = max(1, min(RECORDS_PER_PIECE, -(-len(s) // max(1, threads))))
        pieces = [(a, min(len(s), a + step), None) for a in range(0, len(s), step)]
    else:
        B = checksum.BLOCK_SIZE
        bounds = list(range(0, digest_end, B)) + [digest_end]          # the blocks, two a piece
        firsts = bounds[:-1:2] + [digest_end]
        cuts = np.searchsorted(s, np.array(firsts, np.int64))
        cuts[0], cuts[-1] = 0, len(s)             # (every record ends before digest_end)
        pieces = [(int(cuts[k]), int(cuts[k + 1]), [(bounds[i], bounds[i + 1]) for i in range(2 * k, min(2 * k + 2,
                                                                                                    len(bounds) - 1))])
                  for k in range(len(firsts) - 1)]

    def one(p):
        digests = checksum.block_digests([buf[a:b] for a, b in p[2]]) if p[2] is not None else []
        return scan_records(buf, s, base, deep, p[0], p[1], scan) + (digests,)
    parts = list(pool.map(one, pieces)) if pool is not None and len(pieces) > 1 else [one(p) for p in pieces]
    status = scan[1]
    good = (status & SOUND) != 0
    facts = {"min_ts": None, "max_ts": None, "bytes": sum(p[0] for p in parts)}
    every = sum(p[1] for p in parts) == len(s)
    msgs, slow = _record_problems(buf, s[~good], base, deep) if not every else ({}, facts)
    lo = [v for v in [slow["min_ts"]] + [p[3] for p in parts] if v is not None]
    hi = [v for v in [slow["max_ts"]] + [p[4] for p in parts] if v is not None]
    facts.update(min_ts=min(lo) if lo else None, max_ts=max(hi) if hi else None)
    if deep and sum(p[2] for p in parts):
        at = s[np.flatnonzero(status == SOUND | CRC_BAD)[:MAX_PROBLEMS_PER_FILE]]
        f = kernels.record_fields(buf, at)                    # the few mismatches, for their words
        p_body = f[kernels.F_BODY_POS]
        crc = crc32.crc32_slices(buf, p_body, p_body + f[kernels.F_BODY_LEN]).astype(np.int64) & 0x7FFFFFFF
        for k in range(len(at)):
            msgs[int(at[k])] = f"BODYCRC {f[kernels.F_BODYCRC][k]} but the body's crc32 & 0x7fffffff is {crc[k]}"
    msgs = {p: msgs[p] for p in sorted(msgs)[:MAX_PROBLEMS_PER_FILE]}
    return msgs, facts, scan, good, [d for p in parts for d in p[5]]


def verify_segment(ctx: VerifyContext, t: dict) -> dict:
    store = task_store(ctx)
    F = ctx.cl_size
    rel, base, last = t["path"], t["base"], t["last"]
    out: list = []
    fd = FileData(store, rel)
    facts = {"kind": FileKind.COMMITLOG, "path": rel, "base_offset": base}
    if not fd.exists:
        out.append(problem(rel, 0, "missing file"))
        return {"problems": out, "facts": facts, "bytes_read": 0, "logical_bytes": 0}
    if fd.size != F:
        out.append(problem(rel, min(fd.size, F), f"file size {fd.size}, expected {F} (truncated or grown)"))
    n = min(fd.size, F)
    threads = max(1, int(ctx.threads or 2))
    m = t.get("manifest")
    buffers = ctx.scan_buffers or ScanBuffers()
    bufs = buffers.take(kernels.walk_capacity(0, n))
    with ThreadPoolExecutor(max_workers=threads) as pool:    # the blocks and their records
        fd.populate(0, n)
        starts, stop, reason = kernels.walk_records(fd.buf, 0, n, bufs[0])
        valid = _data_end(fd, stop, reason, n, F, last, out)
        msgs, rec, scan, good, digests = scan_check(fd.buf, starts, base, ctx.deep or ctx.body_crcs, pool, threads,
                                                    valid, bufs[1:])
        out.extend(problem(rel, pos, what) for pos, what in msgs.items())
        if ctx.deep and (ctx.queues or ctx.index_files):    # (planned by verify.plan)
            from .cross import RecordFacts, check_targets
            check_targets(ctx, store, RecordFacts(fd.buf, base, starts, scan, good, ctx.config), out, pool, threads,
                          fd)
    # a segment without a manifest row (an adopt's scan): the zone map its new row gets
    zones = _zone_map(fd.buf, starts, scan, good, F) if m is None and len(starts) and not msgs else None
    buffers.give(bufs)
    sha = checksum.combine(digests)
    if fd.os_paths:
        fd.bytes_read += valid
    facts.update(file_size=fd.size, valid_bytes=valid, count=len(starts), end=base + stop,
                 min_offset=base + int(starts[0]) if len(starts) else None, max_offset=base + stop,
                 min_store_ts=rec["min_ts"], max_store_ts=rec["max_ts"], record_bytes=rec["bytes"],
                 checksum=sha, blocks=checksum.digests_to_detail(digests), closed=reason == 1, zones=zones)
    if m is not None:
        _against_manifest(fd, m, Found(valid, sha, len(starts), stop, rec["min_ts"], rec["max_ts"]), out)
    return {"problems": out, "facts": facts, "bytes_read": fd.bytes_read, "logical_bytes": fd.size,
            "record_bytes": rec["bytes"]}


def _zone_map(buf, starts, scan, good, F: int) -> dict:
    """The zone map (``table.zonemap``) an adopt writes into the segment's row. The fast scan keeps
    the store times of its sound records; the others (checked by the slow path, found sound) are
    read where their flags put them."""
    s = np.asarray(starts, np.int64)
    ts = np.array(scan[0]["store_ts"][:len(s)], np.int64)
    other = np.flatnonzero(~good[:len(s)])
    if len(other):
        flags = codec.gather_int(buf, s[other] + cl.POS_SYSFLAG, cl.SIZE_SYSFLAG)
        ts[other] = codec.gather_int(buf, s[other] + cl.storetimestamp_offset(flags), cl.SIZE_STORETIMESTAMP)
    return zonemap.to_detail(zonemap.build(zonemap.zone_bytes(F), s, ts))


def _data_end(fd: FileData, stop: int, reason: int, n: int, F: int, last: bool, out: list[Problem]) -> int:
    """End of the segment's data (after its BLANK record, if any); problems of how the chain ends
    and of non-zero bytes after the data."""
    rel = fd.rel
    data_end = stop
    reported_at_stop = False
    if reason == 1:
        blank_len = cl.parse_blank(fd.buf, stop)
        data_end = stop + cl.BLANK_SIZE
        if last:
            out.append(problem(rel, stop, "BLANK record in the last segment: the next segment is missing"))
        if blank_len != F - stop:
            out.append(problem(rel, stop, f"BLANK length {blank_len} does not reach the file end ({F - stop})"))
    else:
        garbage = stop + cl.BLANK_SIZE <= n and fd.first_nonzero(stop, stop + cl.BLANK_SIZE) is not None
        if not last:
            what = "the end of the file" if stop + cl.BLANK_SIZE > n else ("bytes that are no record" if garbage else "zero bytes")
            out.append(problem(rel, stop, f"chain of records ends at {what} before the BLANK record of a "
                                          "non-last segment"))
            reported_at_stop = True
        elif garbage:
            size, magic = cl.parse_size_magic(fd.buf, stop)
            out.append(problem(rel, stop, f"unparseable record (TOTALSIZE {size}, MAGIC {magic & 0xFFFFFFFF:#x}) "
                                          "where the data should end or continue"))
            reported_at_stop = True
    if not reported_at_stop:
        nz = fd.first_nonzero(data_end, n)
        if nz is not None:
            out.append(problem(rel, nz, f"non-zero byte after the end of data ({data_end})"))
    return data_end


def _against_manifest(fd: FileData, m: dict, found: Found, out: list[Problem]) -> None:
    """The segment as this check found it against its manifest row ``m``."""
    rel, valid, sha, count, stop = fd.rel, found.valid, found.checksum, found.count, found.stop
    if m["valid_bytes"] != valid:
        out.append(problem(rel, min(valid, m["valid_bytes"]),
                           f"valid bytes {valid} on disk, manifest says {m['valid_bytes']}"))
    elif m["checksum"] and m["checksum"] != sha:
        out.append(problem(rel, 0, f"sha256 of bytes [0, {valid}) differs from the manifest (batch {m['batch_id']})"))
    if m["count"] is not None and m["count"] != count:
        out.append(problem(rel, stop, f"{count} records, manifest says {m['count']}"))
    if m.get("file_size") is not None and m["file_size"] != fd.size:
        out.append(problem(rel, 0, f"file size {fd.size}, manifest says {m['file_size']}"))
    for k, v in (("min_store_ts", found.min_ts), ("max_store_ts", found.max_ts)):
        if m.get(k) is not None and v is not None and m[k] != v:
            out.append(problem(rel, 0, f"{k} {v}, manifest says {m[k]}"))
