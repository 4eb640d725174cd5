"""Verify commitlog segments (docs/FORMAT.md §1): the chain of records, every record's fields,
the BLANK record, the zero tail, and the segment against its manifest row (``storelib.verify``)."""
from __future__ import annotations

import numpy as np

from . import codec, kernels
from . import commitlog as cl
from .verify_access import MAX_PROBLEMS_PER_FILE, FileData, problem, task_store

__all__ = ["walk", "check_records", "verify_segment"]


def walk(data: np.ndarray, start: int, end: int):
    """(record starts, stop position, reason 0 end / 1 BLANK / 2 end of data)."""
    return codec.record_starts(data, start, end)


def check_records(buf: np.ndarray, starts: np.ndarray, base: int, rel: str, deep: bool, out: list) -> dict:
    """Field-level checks of the records at ``starts`` (all satisfy start+size <= len, size > 0)."""
    s = np.asarray(starts, dtype=np.int64)
    facts = {"min_ts": None, "max_ts": None, "bytes": 0}
    if len(s) == 0:
        return facts
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
    tran = sysflag & codec.TRANSACTION_MASK
    flag(((tran == codec.TRANSACTION_PREPARED) | (tran == codec.TRANSACTION_ROLLBACK)) & (qoff != 0),
         lambda i: f"PREPARED/ROLLBACK record with QUEUEOFFSET {qoff[i]} (must be 0)")
    flag(qoff < 0, lambda i: f"QUEUEOFFSET {qoff[i]} is negative")
    good = ~bad
    ts = codec.gather_int(buf, ss + cl.storetimestamp_offset(np.where(bad, 0, sysflag)), cl.SIZE_STORETIMESTAMP)
    if good.any():
        facts["min_ts"], facts["max_ts"] = int(ts[good].min()), int(ts[good].max())
    if deep and good.any():
        p_body = (s + cl.body_offset(sysflag))[good]
        crc = kernels.crc32_slices(buf, p_body, p_body + body_len[good]).astype(np.int64) & 0x7FFFFFFF
        stored = codec.gather_int(buf, s[good] + cl.POS_BODYCRC, cl.SIZE_BODYCRC).astype(np.int64)
        gi = np.flatnonzero(good)
        for k in np.flatnonzero(crc != stored)[:MAX_PROBLEMS_PER_FILE]:
            i = int(gi[k])
            msgs[i] = f"BODYCRC {stored[k]} but the body's crc32 & 0x7fffffff is {crc[k]}"
    for i in sorted(msgs)[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, int(s[i]), msgs[i]))
    return facts


def verify_segment(ctx: dict, t: dict) -> dict:
    store = task_store(ctx)
    F = ctx["cl_size"]
    rel, base, last = t["path"], t["base"], t["last"]
    m = t.get("manifest")
    out: list = []
    fd = FileData(store, rel)
    facts = {"kind": "commitlog", "path": rel, "base_offset": base}
    if not fd.exists:
        out.append(problem(rel, 0, "missing file"))
        return {"problems": out, "facts": facts, "bytes_read": 0, "logical_bytes": 0}
    if fd.size != F:
        out.append(problem(rel, min(fd.size, F), f"file size {fd.size}, expected {F} (truncated or grown)"))
    n = min(fd.size, F)
    starts, stop, reason = walk(fd.buf, 0, n)
    rec = check_records(fd.buf, starts, base, rel, ctx["deep"], out)
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
    valid = data_end
    sha = fd.sha256(valid)
    facts.update(file_size=fd.size, valid_bytes=valid, count=len(starts), end=base + stop,
                 min_offset=base + int(starts[0]) if len(starts) else None, max_offset=base + stop,
                 min_store_ts=rec["min_ts"], max_store_ts=rec["max_ts"], record_bytes=rec["bytes"],
                 checksum=sha, closed=reason == 1)
    if m is not None:
        if m["valid_bytes"] != valid:
            out.append(problem(rel, min(valid, m["valid_bytes"]),
                               f"valid bytes {valid} on disk, manifest says {m['valid_bytes']}"))
        elif m["checksum"] and m["checksum"] != sha:
            out.append(problem(rel, 0, f"sha256 of bytes [0, {valid}) differs from the manifest (batch {m['batch_id']})"))
        if m["count"] is not None and m["count"] != len(starts):
            out.append(problem(rel, stop, f"{len(starts)} records, manifest says {m['count']}"))
        if m.get("file_size") is not None and m["file_size"] != fd.size:
            out.append(problem(rel, 0, f"file size {fd.size}, manifest says {m['file_size']}"))
        for k, v in (("min_store_ts", rec["min_ts"]), ("max_store_ts", rec["max_ts"])):
            if m.get(k) is not None and v is not None and m[k] != v:
                out.append(problem(rel, 0, f"{k} {v}, manifest says {m[k]}"))
    return {"problems": out, "facts": facts, "bytes_read": fd.bytes_read, "logical_bytes": fd.size}
