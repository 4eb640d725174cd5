"""Verify a store's files against their format (docs/FORMAT.md §1-§4) and against the manifest.

Work is split into independent tasks, run as Spark tasks (or in process without Spark):
one per commitlog segment, one per group of consume queues (a queue's files stay together),
one per index file. The driver adds what needs the whole listing: missing / extra files, gaps
between segments and queue files, the checkpoint file, and the checkpoint row's totals.

Levels:

* default (structural): file sizes; sha256 of the valid bytes against the manifest; every
  commitlog record parses (magic, TOTALSIZE equals the length its fields give, PHYSICALOFFSET
  equals its position, transaction rules), the chain of records reaches the BLANK record whose
  length runs to the file end (or the valid end in the last segment), nothing but zeros after the
  data; consume-queue units well formed (positive sizes, commitlog offsets ascending and below
  the end of the commitlog, full non-last files, zero tail), counts and offsets as the manifest
  says; index headers agree with their entries (indexCount, hashSlotCount = chain heads,
  begin/endPhyOffset = first/last entry), slots and chains stay inside the file and point
  backwards, every entry in a slot's chain hashes to that slot; the checkpoint file against the
  checkpoint table.
* ``deep`` adds the cross-file checks: body CRCs (``crc32 & 0x7fffffff``); every consume-queue
  unit at or above the min physical offset points at a record of that topic / queue id / queue
  offset, with the stored size and tagsCode; every index entry at or above the min offset points
  at a record (not a ROLLBACK) one of whose keys ``topic#UNIQ_KEY`` / ``topic#KEYS token``
  hashes to the stored hash, with the stored timeDiff; the index headers' begin/end timestamps
  equal the store times of the records at begin/endPhyOffset.

Each problem is one line ``<path>@<byte offset>: <what>``.
A store without a manifest (a broker's) gets the structural and deep checks, with the valid
lengths a broker's recovery would find (``query.StoreFiles.scan``).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import checkpoint as ckpt
from . import codec, commitlog, consumequeue, deltalog, indexfile, kernels, manifest, storage
from . import commitlog as cl
from .errors import CorruptStore, StoreError
from .config import StoreConfig
from .consumequeue import UNIT_SIZE as CQ_UNIT_SIZE
from .indexfile import ENTRY_SIZE as INDEX_ENTRY_SIZE, HEADER_SIZE as INDEX_HEADER_SIZE

NAME20 = re.compile(r"^\d{20}$")
INDEX_NAME = re.compile(r"^\d{17}$")
CQ_DTYPE = consumequeue.UNIT_DTYPE          # old names: the layouts are consumequeue's and indexfile's
ENTRY_DTYPE = indexfile.ENTRY_DTYPE
INT_MAX = indexfile.INT_MAX
MAX_PROBLEMS_PER_FILE = 50


def walk(data: np.ndarray, start: int, end: int):
    """(record starts, stop position, reason 0 end / 1 BLANK / 2 end of data)."""
    return commitlog.record_starts(data, start, end)


def _store(ctx: dict) -> storage.Store:
    """The task's Store: the driver's own when the tasks run in its process, else one from the URI."""
    return ctx.get("_store") or storage.Store(ctx["store"])


def problem(path: str, offset, text: str) -> str:
    return f"{path}@{offset if offset is not None else 0}: {text}"


# ---------------------------------------------------------------------------- file access
class FileData:
    """A whole file as a uint8 array: a read-only memory map locally (holes cost nothing)."""

    def __init__(self, store: storage.Store, rel: str):
        self.rel = rel
        self.size = store.size(rel)
        self.exists = self.size is not None
        self.local = store.local
        self.path = store.path(rel)
        self.bytes_read = 0
        if not self.exists or self.size == 0:
            self.buf = np.zeros(0, np.uint8)
        elif store.local:
            self.buf = np.asarray(np.memmap(self.path, dtype=np.uint8, mode="r"))
        else:
            self.buf = np.frombuffer(store.read(rel), dtype=np.uint8)
            self.bytes_read = self.size

    def sha256(self, end: int) -> str:
        h = hashlib.sha256()
        end = min(end, self.size or 0)
        step = 16 << 20
        for a in range(0, end, step):
            h.update(self.buf[a:min(end, a + step)])
        self.bytes_read += end if self.local else 0
        return h.hexdigest()

    def first_nonzero(self, start: int, end: int | None = None) -> int | None:
        """Offset of the first non-zero byte in [start, end), reading only data regions locally."""
        end = self.size if end is None else min(end, self.size)
        if start >= end:
            return None
        for a, b in self._data_regions(start, end):
            step = 16 << 20
            for x in range(a, b, step):
                chunk = self.buf[x:min(b, x + step)]
                if self.local:
                    self.bytes_read += len(chunk)
                nz = np.flatnonzero(chunk)
                if len(nz):
                    return x + int(nz[0])
        return None

    def _data_regions(self, start: int, end: int):
        if not self.local or not hasattr(os, "SEEK_DATA"):
            yield start, end
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            yield start, end
            return
        try:
            pos = start
            while pos < end:
                try:
                    d = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:          # ENXIO: no data after pos
                    return
                if d >= end:
                    return
                h = os.lseek(fd, d, os.SEEK_HOLE)
                yield d, min(h, end)
                pos = h
        finally:
            os.close(fd)


class SegmentLookup:
    """Record reads by commitlog offset for the cross-file checks (one mapping per segment)."""

    def __init__(self, store: storage.Store, segments: list, file_size: int):
        self.store = store
        self.by_base = {int(b): (rel, int(v)) for rel, b, v in segments}
        self.F = file_size
        self.cache: dict = {}

    def records(self, phys: np.ndarray):
        """Decode the records at ``phys``: (ok mask, reason per entry, decoded table of the ok ones)."""
        phys = np.asarray(phys, dtype=np.int64)
        n = len(phys)
        ok = np.zeros(n, dtype=bool)
        reason = np.array([""] * n, dtype=object)
        tables, order = [], []
        bases = phys // self.F * self.F
        for base in np.unique(bases):
            sel = np.flatnonzero(bases == base)
            seg = self.by_base.get(int(base))
            if seg is None:
                reason[sel] = f"no commitlog segment holds offset (segment {int(base):020d} missing)"
                continue
            rel, valid = seg
            if rel not in self.cache:
                self.cache[rel] = FileData(self.store, rel)
            fd = self.cache[rel]
            pos = phys[sel] - base
            good = pos + cl.BLANK_SIZE <= min(valid, fd.size or 0)
            size = np.zeros(len(sel), np.int64)
            magic = np.zeros(len(sel), np.int64)
            gp = pos[good]
            if len(gp):
                size[good] = codec.gather_int(fd.buf, gp + cl.POS_TOTALSIZE, cl.SIZE_TOTALSIZE)
                magic[good] = codec.gather_int(fd.buf, gp + cl.POS_MAGIC, cl.SIZE_MAGIC)
            rec_ok = good & ((magic == cl.MAGIC_V1) | (magic == cl.MAGIC_V2)) & (size >= cl.MIN_RECORD_SIZE) \
                & (pos + size <= valid)
            reason[sel[~good]] = "offset beyond the segment's data"
            reason[sel[good & ~rec_ok]] = "no record starts there"
            idx = sel[rec_ok]
            if len(idx):
                t, fits = codec.decode_valid_records(fd.buf, int(base), pos[rec_ok], body=False)
                reason[idx[~fits]] = "damaged record there (its fields do not fit its TOTALSIZE)"
                idx = idx[fits]
                tables.append(t)
                order.append(idx)
                ok[idx] = True
        if tables:
            table = pa.concat_tables(tables)
            idx = np.concatenate(order)
            inv = np.empty(n, dtype=np.int64)
            inv[idx] = np.arange(len(idx))
        else:
            table, inv = None, None
        return ok, reason, table, inv


def expected_tags_code(table: pa.Table, config: StoreConfig) -> np.ndarray:
    """tagsCode of decoded records (docs/FORMAT.md §2): Java hash of TAGS, or the delay deliver time."""
    n = table.num_rows
    props = codec._as_large_string(table["properties_string"])
    pdata, poff = codec._string_buffers(props)
    vs, ve = kernels.parse_properties(pdata, poff, ["TAGS", "DELAY"])
    code = np.where(vs[0] >= 0, kernels.java_hash_slices(pdata, vs[0], ve[0]).view(np.int32).astype(np.int64), 0)
    is_sched = pc.equal(table["topic"], codec.SCHEDULE_TOPIC).to_numpy(zero_copy_only=False)
    ts = table["store_timestamp"].to_numpy()
    delays = config.delay_level_millis
    for i in np.flatnonzero(is_sched & (vs[1] >= 0)):       # delay messages only (few)
        d = pdata[vs[1][i]:ve[1][i]].tobytes().decode("utf-8", "replace")
        try:
            level = int(d)
        except ValueError:
            continue
        level = min(level, len(delays))
        if level > 0:
            code[i] = int(ts[i]) + delays[level - 1]
    return code.astype(np.int64) if n else np.zeros(0, np.int64)


# ---------------------------------------------------------------------------- commitlog
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
    store = _store(ctx)
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


# ---------------------------------------------------------------------------- consume queues
def verify_queues(ctx: dict, t: dict) -> dict:
    store = _store(ctx)
    cfg = StoreConfig.from_json(ctx["config"])
    cq_size = cfg.cq_file_size
    per = cq_size // CQ_UNIT_SIZE
    look = SegmentLookup(store, ctx["segments"], cfg.mappedFileSizeCommitLog) if ctx["deep"] else None
    out: list = []
    facts = []
    read = logical = 0
    for q in t["queues"]:
        topic, qid = q["topic"], q["queue_id"]
        prev_phys = -1
        files = q["files"]
        for k, f in enumerate(files):
            rel, base = f["path"], f["base"]
            m = f.get("manifest")
            last = k == len(files) - 1
            if k and base != files[k - 1]["base"] + cq_size:
                out.append(problem(rel, 0, f"gap in the queue: previous file starts at {files[k - 1]['base']}, "
                                           f"expected this one at {files[k - 1]['base'] + cq_size}"))
            fd = FileData(store, rel)
            if not fd.exists:
                out.append(problem(rel, 0, "missing file"))
                continue
            logical += fd.size
            if fd.size != cq_size:
                out.append(problem(rel, min(fd.size, cq_size), f"file size {fd.size}, expected {cq_size}"))
            n_all = min(fd.size, cq_size) // CQ_UNIT_SIZE
            if last:
                # a broker's view: units until the first not (offset >= 0 && size > 0)
                n = _leading_units(fd, n_all)
            else:
                n = n_all
            u = consumequeue.decode_units(fd.buf[: n * CQ_UNIT_SIZE])
            phys = u["phys"].astype(np.int64)
            size = u["size"].astype(np.int64)
            badu = ~consumequeue.unit_in_use(phys, size)
            for i in np.flatnonzero(badu)[:MAX_PROBLEMS_PER_FILE]:
                out.append(problem(rel, int(i) * CQ_UNIT_SIZE, f"unit ({phys[i]}, {size[i]}) is not a message "
                                                     "(a non-last queue file must be full)"))
            seq = np.concatenate([[prev_phys], phys])
            desc = np.flatnonzero(np.diff(seq) <= 0)
            for i in desc[:MAX_PROBLEMS_PER_FILE]:
                out.append(problem(rel, int(i) * CQ_UNIT_SIZE, f"commitlog offset {phys[i]} does not ascend "
                                                     f"(previous unit {seq[i]})"))
            over = np.flatnonzero(phys + size > ctx["max_phy"])
            for i in over[:MAX_PROBLEMS_PER_FILE]:
                out.append(problem(rel, int(i) * CQ_UNIT_SIZE, f"unit ({phys[i]}, {size[i]}) reaches past the commitlog "
                                                     f"end {ctx['max_phy']}"))
            if n:
                prev_phys = int(phys[-1])
            nz = fd.first_nonzero(n * CQ_UNIT_SIZE, fd.size)
            if nz is not None:
                out.append(problem(rel, nz, f"non-zero byte after the last unit ({n * CQ_UNIT_SIZE})"))
            sha = fd.sha256(n * CQ_UNIT_SIZE)
            first_q = base // CQ_UNIT_SIZE
            if m is not None:
                if m["valid_bytes"] != n * CQ_UNIT_SIZE:
                    out.append(problem(rel, min(m["valid_bytes"], n * CQ_UNIT_SIZE),
                                       f"{n} units on disk, manifest says {m['valid_bytes'] // CQ_UNIT_SIZE}"))
                elif m["checksum"] and m["checksum"] != sha:
                    out.append(problem(rel, 0, f"sha256 of bytes [0, {n * CQ_UNIT_SIZE}) differs from the manifest "
                                               f"(batch {m['batch_id']})"))
                if m["base_offset"] != base:
                    out.append(problem(rel, 0, f"manifest base_offset {m['base_offset']} but the name says {base}"))
                if m.get("count") is not None and m["count"] != n:
                    out.append(problem(rel, 0, f"{n} units, manifest count says {m['count']}"))
                if m.get("file_size") is not None and m["file_size"] != fd.size:
                    out.append(problem(rel, 0, f"file size {fd.size}, manifest says {m['file_size']}"))
            if look is not None and n:
                _deep_units(look, cfg, rel, topic, qid, first_q, phys, size, u["tags"].astype(np.int64),
                            ctx["min_phy"], out)
            facts.append({"kind": "consumequeue", "path": rel, "topic": topic, "queue_id": qid,
                          "base_offset": base, "file_size": fd.size, "valid_bytes": n * CQ_UNIT_SIZE,
                          "count": n, "min_offset": first_q, "max_offset": first_q + n - 1,
                          "min_phys": int(phys.min()) if n else None, "max_phys": int(phys.max()) if n else None,
                          "checksum": sha, "per_file": per})
            read += fd.bytes_read
    return {"problems": out, "facts": facts, "bytes_read": read, "logical_bytes": logical}


def _leading_units(fd: FileData, n_all: int) -> int:
    """A broker's view of the last file of a queue: units before the first one not in use
    (``consumequeue.valid_units``, RocketMQ's linear recovery walk)."""
    if n_all == 0:
        return 0
    return consumequeue.valid_units(fd.buf[: n_all * CQ_UNIT_SIZE])


def _deep_units(look, cfg, rel, topic, qid, first_q, phys, size, tags, min_phy, out):
    live = np.flatnonzero(phys >= min_phy)
    if not len(live):
        return
    ok, reason, table, inv = look.records(phys[live])
    shown = 0
    for j in np.flatnonzero(~ok):
        if shown < MAX_PROBLEMS_PER_FILE:
            i = int(live[j])
            out.append(problem(rel, i * CQ_UNIT_SIZE, f"unit -> commitlog {phys[i]}: {reason[j]}"))
            shown += 1
    if table is None:
        return
    okj = np.flatnonzero(ok)
    rows = inv[okj]
    topic_ok = np.asarray(pc.equal(table["topic"], topic).fill_null(False))[rows]
    t_qid = table["queue_id"].to_numpy()[rows]
    t_qoff = table["queue_offset"].to_numpy()[rows]
    t_size = table["store_size"].to_numpy()[rows]
    t_tags = expected_tags_code(table, cfg)[rows]
    t_sys = table["sys_flag"].to_numpy()[rows]
    units = live[okj]
    where_bad = ~topic_ok | (t_qid != qid)
    qoff_bad = t_qoff != first_q + units
    size_bad = t_size != size[units]
    tags_bad = t_tags != tags[units]
    tran_bad = np.isin(t_sys & 0xC, (0x4, 0xC))
    for k in np.flatnonzero(where_bad | qoff_bad | size_bad | tags_bad | tran_bad):
        if shown >= MAX_PROBLEMS_PER_FILE:
            break
        i = int(units[k])
        q = first_q + i
        errs = []
        if where_bad[k]:
            errs.append(f"record is {table['topic'][int(rows[k])].as_py()}/{t_qid[k]}, not {topic}/{qid}")
        if qoff_bad[k]:
            errs.append(f"record QUEUEOFFSET {t_qoff[k]}, unit is queue offset {q}")
        if size_bad[k]:
            errs.append(f"record size {t_size[k]}, unit says {size[i]}")
        if tags_bad[k]:
            errs.append(f"tagsCode {tags[i]}, record gives {t_tags[k]}")
        if tran_bad[k]:
            errs.append("record is PREPARED/ROLLBACK (never in a consume queue)")
        if errs:
            out.append(problem(rel, i * CQ_UNIT_SIZE, f"unit -> commitlog {phys[i]}: " + "; ".join(errs)))
            shown += 1


# ---------------------------------------------------------------------------- index files
def verify_index(ctx: dict, t: dict) -> dict:
    store = _store(ctx)
    cfg = StoreConfig.from_json(ctx["config"])
    rel = t["path"]
    m = t.get("manifest")
    out: list = []
    fd = FileData(store, rel)
    facts = {"kind": "index", "path": rel}
    if not fd.exists:
        return {"problems": [problem(rel, 0, "missing file")], "facts": facts, "bytes_read": 0, "logical_bytes": 0}
    full = cfg.index_file_size
    if fd.size != full:
        out.append(problem(rel, min(fd.size, full), f"file size {fd.size}, expected {full}"))
    if fd.size < INDEX_HEADER_SIZE:
        out.append(problem(rel, 0, "no index header"))
        return {"problems": out, "facts": facts, "bytes_read": fd.bytes_read, "logical_bytes": fd.size}
    hdr = indexfile.IndexHeader.parse(bytes(fd.buf[:INDEX_HEADER_SIZE]))
    bt, et, bp, ep, hsc, ic = hdr
    header = hdr.to_dict()
    slots_at = indexfile.slot_offset(0)
    ent_at = indexfile.entries_offset(cfg)

    def e_at(p) -> int:                           # byte offset of entry position p
        return ent_at + int(p) * INDEX_ENTRY_SIZE
    if not 1 <= ic <= cfg.maxIndexNum:
        out.append(problem(rel, indexfile.HEADER_INDEX_COUNT, f"indexCount {ic} outside [1, {cfg.maxIndexNum}]"))
        ic = max(1, min(ic, cfg.maxIndexNum))
    valid = ent_at + ic * INDEX_ENTRY_SIZE
    avail = max(0, min(fd.size, full))
    if valid > avail:
        out.append(problem(rel, avail, f"file ends before entry {ic - 1} (needs {valid} bytes)"))
        ic = max(1, (avail - ent_at) // INDEX_ENTRY_SIZE) if avail > ent_at else 1
        valid = min(valid, avail)
    nslots = cfg.maxHashSlotNum
    slots = indexfile.decode_slots(fd.buf, nslots, slots_at).astype(np.int64) if avail >= ent_at \
        else np.zeros(0, np.int64)
    ents = fd.buf[ent_at:ent_at + ic * INDEX_ENTRY_SIZE].view(ENTRY_DTYPE) if ic else np.zeros(0, ENTRY_DTYPE)
    n = len(ents)
    hashes = ents["hash"].astype(np.int64)
    ephys = ents["phys"].astype(np.int64)
    tdiff = ents["time_diff"].astype(np.int64)
    prev = ents["prev"].astype(np.int64)
    pos = np.arange(n)
    if n > 1:
        bad = np.flatnonzero((prev[1:] < 0) | (prev[1:] >= pos[1:])) + 1
        for i in bad[:MAX_PROBLEMS_PER_FILE]:
            out.append(problem(rel, e_at(i) + indexfile.ENTRY_PREV_POS,
                               f"entry {i}: prevPos {prev[i]} does not point to an earlier entry"))
        neg = np.flatnonzero(hashes[1:] < 0) + 1
        for i in neg[:MAX_PROBLEMS_PER_FILE]:
            out.append(problem(rel, e_at(i), f"entry {i}: keyHash {hashes[i]} is negative"))
        heads = int((prev[1:] == 0).sum())
        if heads != hsc:
            out.append(problem(rel, indexfile.HEADER_HASH_SLOT_COUNT,
                               f"hashSlotCount {hsc}, but {heads} entries start a chain"))
        if bp != ephys[1] or ep != ephys[n - 1]:
            out.append(problem(rel, indexfile.HEADER_BEGIN_PHY_OFFSET,
                               f"begin/endPhyOffset {bp}/{ep}, entries give {ephys[1]}/{ephys[n - 1]}"))
        # Every entry must be reachable from exactly one slot head, and hash to that slot.
        slot_of = np.full(n, -1, dtype=np.int64)
        heads_pos = np.flatnonzero((slots > 0))
        badslot = heads_pos[slots[heads_pos] >= n]
        for sidx in badslot[:MAX_PROBLEMS_PER_FILE]:
            out.append(problem(rel, indexfile.slot_offset(int(sidx)),
                               f"slot {sidx} points to entry {slots[sidx]}, beyond indexCount {ic}"))
        for sidx in heads_pos[slots[heads_pos] < n]:
            p = int(slots[sidx])
            while p > 0:
                if slot_of[p] >= 0:
                    out.append(problem(rel, e_at(p), f"entry {p} is in two chains (slots {slot_of[p]} and {sidx})"))
                    break
                slot_of[p] = sidx
                if prev[p] >= p or prev[p] < 0:
                    break
                p = int(prev[p])
        reach = slot_of[1:]
        unreached = np.flatnonzero(reach < 0) + 1
        for i in unreached[:MAX_PROBLEMS_PER_FILE]:
            out.append(problem(rel, e_at(i), f"entry {i} is not reachable from any slot"))
        wrong = np.flatnonzero((reach >= 0) & (hashes[1:] % nslots != reach)) + 1
        for i in wrong[:MAX_PROBLEMS_PER_FILE]:
            out.append(problem(rel, e_at(i), f"entry {i}: keyHash {hashes[i]} belongs to slot "
                                                          f"{hashes[i] % nslots}, found in the chain of slot "
                                                          f"{slot_of[i]}"))
    elif hsc != 0:
        out.append(problem(rel, indexfile.HEADER_HASH_SLOT_COUNT, f"hashSlotCount {hsc} in a file without entries"))
    if n <= 1 and len(slots) and np.any(slots != 0):
        i = int(np.flatnonzero(slots)[0])
        out.append(problem(rel, indexfile.slot_offset(i), "slot set in a file without entries"))
    nz = fd.first_nonzero(valid, fd.size)
    if nz is not None:
        out.append(problem(rel, nz, f"non-zero byte after the last entry ({valid})"))
    sha = fd.sha256(valid)
    if m is not None:
        if m["valid_bytes"] != valid:
            out.append(problem(rel, min(valid, m["valid_bytes"]), f"valid bytes {valid}, manifest says {m['valid_bytes']}"))
        elif m["checksum"] and m["checksum"] != sha:
            out.append(problem(rel, 0, f"sha256 of bytes [0, {valid}) differs from the manifest (batch {m['batch_id']})"))
        mh = json.loads(m["detail"] or "{}").get("header")
        if mh and mh != header:
            out.append(problem(rel, 0, f"header {header} differs from the manifest's {mh}"))
        if m.get("count") is not None and m["count"] != ic - 1:
            out.append(problem(rel, 0, f"{ic - 1} entries, manifest count says {m['count']}"))
        if m.get("file_size") is not None and m["file_size"] != fd.size:
            out.append(problem(rel, 0, f"file size {fd.size}, manifest says {m['file_size']}"))
    if ctx["deep"] and n > 1:
        _deep_index(ctx, cfg, rel, ent_at, header, hashes, ephys, tdiff, out)
    facts.update(file_size=fd.size, valid_bytes=valid, count=ic - 1, header=header, checksum=sha)
    return {"problems": out, "facts": facts, "bytes_read": fd.bytes_read, "logical_bytes": fd.size}


def _deep_index(ctx, cfg, rel, ent_at, header, hashes, ephys, tdiff, out):
    look = SegmentLookup(_store(ctx), ctx["segments"], cfg.mappedFileSizeCommitLog)
    pos = np.arange(1, len(ephys))
    live = pos[ephys[1:] >= ctx["min_phy"]]
    shown = 0
    if len(live):
        ok, reason, table, inv = look.records(ephys[live])
        for j in np.flatnonzero(~ok)[:MAX_PROBLEMS_PER_FILE]:
            p = int(live[j])
            out.append(problem(rel, e_at(p), f"entry {p} -> commitlog {ephys[p]}: {reason[j]}"))
            shown += 1
        if table is not None:
            okj = np.flatnonzero(ok)
            rows = inv[okj]
            p_ok = live[okj]
            # Every (record, key hash) the dispatch would index: UNIQ_KEY, then each KEYS token,
            # hashed as topic#key (the encoder's kernels, run over the decoded records).
            props = codec._as_large_string(table["properties_string"])
            pdata, poff = codec._string_buffers(props)
            vs, ve = kernels.parse_properties(pdata, poff, ["KEYS", "UNIQ_KEY"])
            topic_hash = codec.java_hash(table["topic"]).view(np.uint32).astype(np.int64)
            key_row, key_hash = kernels.index_keys(pdata, vs[1], ve[1], vs[0], ve[0],
                                                   np.ones(len(topic_hash), bool), topic_hash)
            allowed = np.sort(key_row.astype(np.int64) * 2**32
                              + codec.index_key_hash(key_hash.view(np.int32)).astype(np.int64))
            want_pair = rows.astype(np.int64) * 2**32 + hashes[p_ok].astype(np.int64)
            k = np.searchsorted(allowed, want_pair)
            hash_ok = (k < len(allowed)) & (allowed[np.minimum(k, max(0, len(allowed) - 1))] == want_pair) \
                if len(allowed) else np.zeros(len(rows), bool)
            sysf = table["sys_flag"].to_numpy()[rows]
            rollback = (sysf & 0xC) == 0xC
            begin = header["begin_timestamp"]
            d = table["store_timestamp"].to_numpy()[rows].astype(np.int64) - begin
            want = np.clip(np.abs(d) // 1000 * np.where(d >= 0, 1, -1), 0, INT_MAX)
            td_bad = (p_ok > 1) & (begin > 0) & (want != tdiff[p_ok])
            for k in np.flatnonzero(rollback | ~hash_ok | td_bad):
                if shown >= MAX_PROBLEMS_PER_FILE:
                    break
                p = int(p_ok[k])
                errs = []
                if rollback[k]:
                    errs.append("record is a ROLLBACK (never indexed)")
                if not hash_ok[k]:
                    mine = key_hash[key_row == rows[k]].view(np.int32)
                    errs.append(f"keyHash {hashes[p]} matches none of the record's keys "
                                f"({sorted(set(codec.index_key_hash(mine).tolist()))})")
                if td_bad[k]:
                    errs.append(f"timeDiff {tdiff[p]}, record time gives {int(want[k])}")
                out.append(problem(rel, e_at(p), f"entry {p} -> commitlog {ephys[p]}: " + "; ".join(errs)))
                shown += 1
    # header times against the records at begin/endPhyOffset
    for off_name, ts_name, at in (("begin_phy_offset", "begin_timestamp", indexfile.HEADER_BEGIN_TIMESTAMP),
                                  ("end_phy_offset", "end_timestamp", indexfile.HEADER_END_TIMESTAMP)):
        phy = header[off_name]
        if phy < ctx["min_phy"]:
            continue
        ok, reason, table, inv = look.records(np.array([phy]))
        if ok[0]:
            ts = int(table["store_timestamp"].to_numpy()[inv[0]])
            if ts != header[ts_name]:
                out.append(problem(rel, at, f"{ts_name} {header[ts_name]}, record at {off_name} {phy} "
                                                 f"was stored at {ts}"))


# ---------------------------------------------------------------------------- driver
def run_task(ctx: dict, t: dict) -> dict:
    t0 = time.time()
    kind = t["kind"]
    try:
        if kind == "commitlog":
            r = verify_segment(ctx, t)
        elif kind == "queues":
            r = verify_queues(ctx, t)
        else:
            r = verify_index(ctx, t)
    except Exception as e:  # noqa: BLE001 - a broken file must become a problem line, not a crash
        path = t.get("path") or (t["queues"][0]["files"][0]["path"] if t.get("queues") else "?")
        r = {"problems": [problem(path, 0, f"cannot be checked: {type(e).__name__}: {e}")], "facts": None,
             "bytes_read": 0, "logical_bytes": 0}
    r["seconds"] = time.time() - t0
    r["task"] = kind
    return r


def _weight(t: dict, cfg: StoreConfig) -> int:
    if t["kind"] == "commitlog":
        return cfg.mappedFileSizeCommitLog
    if t["kind"] == "index":
        return cfg.index_file_size
    return sum(len(q["files"]) for q in t["queues"]) * cfg.cq_file_size


def pack_tasks(tasks: list, cfg: StoreConfig, max_parts: int) -> list:
    """Spark tasks: one work unit each (segment / index file / queue group) when there are few;
    otherwise the units are packed, biggest first, into ``max_parts`` tasks of similar weight
    (sixty 64 KiB segments are not worth sixty Python task launches)."""
    units = sorted(tasks, key=lambda t: -_weight(t, cfg))
    if len(units) <= max_parts:
        return [[t] for t in units]
    bins = [[0, i, []] for i in range(max_parts)]
    for t in units:
        b = min(bins, key=lambda x: (x[0], x[1]))
        b[0] += _weight(t, cfg)
        b[2].append(t)
    return [b[2] for b in bins if b[2]]


@dataclass
class Report:
    problems: list
    facts: list = field(default_factory=list)
    files: int = 0
    bytes_read: int = 0
    logical_bytes: int = 0
    seconds: float = 0.0
    deep: bool = False
    manifest: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> dict:
        return {"status": "ok" if self.ok else "FAILED", "problems": len(self.problems), "files": self.files,
                "deep": self.deep, "manifest": self.manifest, "logical_bytes": self.logical_bytes,
                "bytes_read": self.bytes_read, "seconds": round(self.seconds, 3),
                "logical_gb_per_s": round(self.logical_bytes / 1e9 / self.seconds, 2) if self.seconds else None}


def _sort_key(p: str):
    path, _, rest = p.partition("@")
    off = rest.split(":", 1)[0]
    return (path, int(off) if off.lstrip("-").isdigit() else 0, p)


def plan(store: storage.Store, config: StoreConfig, snap: manifest.Snapshot | None, deep: bool,
         queues_per_task: int = 16):
    """(ctx, tasks, driver problems)."""
    from .storefiles import StoreFiles
    problems: list = []
    F = config.mappedFileSizeCommitLog
    has_manifest = snap is not None and snap.batch is not None
    disk_cl = [r for r in store.list_files("commitlog", recursive=False)]
    disk_cq = store.list_files("consumequeue")
    disk_idx = store.list_files("index", recursive=False)
    for rel in store.list_files("commitlog"):
        if rel not in disk_cl:
            problems.append(problem(rel, 0, "unexpected file in a commitlog subdirectory"))
    for rel in store.list_files("index"):
        if rel not in disk_idx:
            problems.append(problem(rel, 0, "unexpected file in an index subdirectory"))
    if has_manifest:
        # rows readers cannot use (garbage values) are reported and left out of the checks below
        from .storefiles import row_problem
        rows = {}
        for path, r in sorted(snap.files.items()):
            p = row_problem(r, config)
            if p:
                problems.append(problem(path, 0, f"{p} (batch {r.get('batch_id')})"))
            else:
                rows[path] = r

        def of_kind(kind):
            return sorted((r for r in rows.values() if r["kind"] == kind), key=lambda r: r["path"])

        segs = sorted(of_kind("commitlog"), key=lambda r: r["base_offset"])
        cl = [(r["path"], r["base_offset"], r["valid_bytes"], r) for r in segs]
        cqs: dict = {}
        for r in of_kind("consumequeue"):
            cqs.setdefault((r["topic"], r["queue_id"]), []).append((r["path"], r["base_offset"], r))
        idx = [(r["path"], r) for r in sorted(of_kind("index"), key=lambda r: r["path"].rsplit("/", 1)[-1])]
        known = set(snap.files)
        for rel in disk_cl + disk_cq + disk_idx:
            if rel not in known:
                problems.append(problem(rel, 0, f"extra file: not in the manifest (as of batch "
                                                f"{snap.batch['batch_id']})"))
        for r in rows.values():
            kind, path = r["kind"], r["path"]
            prefix = {"commitlog": "commitlog/", "consumequeue": "consumequeue/", "index": "index/",
                      "checkpoint": "checkpoint"}.get(kind)
            if prefix is None or not path.startswith(prefix):
                problems.append(problem(path, 0, f"manifest row of kind {kind!r} names a path outside its directory"))
            if kind == "commitlog" and path.rsplit("/", 1)[-1] != f"{r['base_offset']:020d}":
                problems.append(problem(path, 0, f"manifest base_offset {r['base_offset']} does not match the name"))
        segments = [(p, b, F if i < len(cl) - 1 else v) for i, (p, b, v, _) in enumerate(cl)]
        max_phy = cl[-1][1] + cl[-1][2] if cl else 0
        min_phy = cl[0][1] if cl else 0
        b = snap.batch
        if b["max_phy_offset"] != max_phy:
            problems.append(problem(cl[-1][0] if cl else "commitlog", max_phy - (cl[-1][1] if cl else 0),
                                    f"checkpoint table max_phy_offset {b['max_phy_offset']}, "
                                    f"last segment ends at {max_phy}"))
        if (b["min_phy_offset"] or 0) != min_phy:
            problems.append(problem(cl[0][0] if cl else "commitlog", 0,
                                    f"checkpoint table min_phy_offset {b['min_phy_offset']}, first segment "
                                    f"starts at {min_phy}"))
        qmax = {(q["topic"], q["queue_id"]): q["max_offset"] for q in (b["queue_offsets"] or [])}
        for key, fs in cqs.items():
            last = max(fs, key=lambda x: x[1])
            end = last[1] // CQ_UNIT_SIZE + last[2]["valid_bytes"] // CQ_UNIT_SIZE
            if qmax.get(key) != end:
                problems.append(problem(last[0], last[2]["valid_bytes"],
                                        f"queue {key[0]}/{key[1]} ends at offset {end}, checkpoint table says "
                                        f"{qmax.get(key)}"))
        for key in set(qmax) - set(cqs):
            problems.append(problem(f"consumequeue/{key[0]}/{key[1]}", 0,
                                    f"checkpoint table lists queue max offset {qmax[key]} but the manifest has "
                                    "no file of it"))
    else:
        view = StoreFiles.scan(store, config)
        cl = [(s.rel, s.base, s.valid, None) for s in view.commitlog]
        # names that scan skipped
        for rel in disk_cl:
            if not NAME20.match(rel.rsplit("/", 1)[-1]):
                problems.append(problem(rel, 0, "commitlog file name is not a 20-digit offset"))
        cqs = {}
        for rel in disk_cq:
            parts = rel.split("/")
            if len(parts) != 4 or not NAME20.match(parts[3]) or not parts[2].lstrip("-").isdigit():
                problems.append(problem(rel, 0, "not a consume queue file (consumequeue/<topic>/<queueId>/<20 digits>)"))
                continue
            cqs.setdefault((parts[1], int(parts[2])), []).append((rel, int(parts[3]), None))
        idx = [(rel, None) for rel in sorted(disk_idx, key=lambda r: r.rsplit("/", 1)[-1])]
        segments = [(s.rel, s.base, s.valid) for s in view.commitlog]
        max_phy = view.commitlog[-1].base + view.commitlog[-1].valid if view.commitlog else 0
        min_phy = view.commitlog[0].base if view.commitlog else 0
    for rel, _ in idx:
        if not INDEX_NAME.match(rel.rsplit("/", 1)[-1]):
            problems.append(problem(rel, 0, "index file name is not yyyyMMddHHmmssSSS"))
    for i in range(1, len(cl)):
        if cl[i][1] != cl[i - 1][1] + F:
            problems.append(problem(cl[i][0], 0, f"gap: the previous segment starts at {cl[i - 1][1]}, this one "
                                                 f"should start at {cl[i - 1][1] + F} (segment missing)"))
    for p, b, _, _ in cl:
        if b % F:
            problems.append(problem(p, 0, f"segment start {b} is not a multiple of the file size {F}"))
    ctx = {"store": store.uri, "config": config.to_json(), "deep": deep, "cl_size": F, "segments": segments,
           "min_phy": min_phy, "max_phy": max_phy}
    tasks = []
    for i, (p, b, v, r) in enumerate(cl):
        tasks.append({"kind": "commitlog", "path": p, "base": b, "last": i == len(cl) - 1, "manifest": r})
    for p, r in idx:
        tasks.append({"kind": "index", "path": p, "manifest": r})
    qlist = []
    for (topic, qid), fs in sorted(cqs.items()):
        fs = sorted(fs, key=lambda x: x[1])
        qlist.append({"topic": topic, "queue_id": qid,
                      "files": [{"path": p, "base": b, "manifest": r} for p, b, r in fs]})
    for i in range(0, len(qlist), queues_per_task):
        tasks.append({"kind": "queues", "queues": qlist[i:i + queues_per_task]})
    problems += check_checkpoint(store, snap)
    return ctx, tasks, problems


def check_checkpoint(store: storage.Store, snap) -> list:
    out = []
    rel = ckpt.FILE_NAME
    size = store.size(rel)
    has_manifest = snap is not None and snap.batch is not None
    if size is None:
        if has_manifest or store.list_files("commitlog"):
            out.append(problem(rel, 0, "missing file"))
        return out
    data = store.read(rel)
    if size != ckpt.FILE_SIZE:
        out.append(problem(rel, min(size, ckpt.FILE_SIZE), f"file size {size}, expected {ckpt.FILE_SIZE}"))
    nz = np.flatnonzero(np.frombuffer(data[ckpt.LAYOUT_SIZE:], dtype=np.uint8))
    if len(nz):
        out.append(problem(rel, ckpt.LAYOUT_SIZE + int(nz[0]), "non-zero byte after the five checkpoint values"))
    if has_manifest:
        c = ckpt.Checkpoint.from_bytes(data)
        b = snap.batch
        for name, at in (("physic_msg_timestamp", ckpt.POS_PHYSIC_MSG_TIMESTAMP),
                         ("logics_msg_timestamp", ckpt.POS_LOGICS_MSG_TIMESTAMP),
                         ("index_msg_timestamp", ckpt.POS_INDEX_MSG_TIMESTAMP)):
            if getattr(c, name) != b[name]:
                out.append(problem(rel, at, f"{name} {getattr(c, name)}, checkpoint table (batch {b['batch_id']}) "
                                            f"says {b[name]}"))
        row = snap.files.get(rel)
        if row is None:
            out.append(problem(rel, 0, "the manifest has no row for the checkpoint file"))
        elif row["checksum"] and hashlib.sha256(data).hexdigest() != row["checksum"]:
            out.append(problem(rel, 0, "sha256 differs from the manifest"))
        if row is not None and (row.get("file_size"), row.get("valid_bytes")) != (size, size):
            out.append(problem(rel, 0, f"file size {size}, manifest says file_size {row.get('file_size')}, "
                                       f"valid_bytes {row.get('valid_bytes')}"))
    return out


def verify_store(store_uri: str, config: StoreConfig | None = None, deep: bool = False, spark=None,
                 as_of_batch=None, version: int | None = None, snap=None, use_manifest: bool = True) -> Report:
    """Run every check; ``spark`` None runs the tasks in this process."""
    from .inspection import resolve_snapshot, snapshot_config
    t0 = time.time()
    store = storage.Store(store_uri)
    meta: list = []                          # the Delta tables' own damage
    unreadable = False
    if use_manifest:
        for table in (manifest.MANIFEST_DIR, manifest.CHECKPOINTS_DIR):
            try:
                meta += [problem(*p) for p in deltalog.log_problems(store, table)]
            except (StoreError, OSError) as e:
                meta.append(problem(f"{table}/_delta_log", 0, f"cannot be read: {e}"))
        if snap is None:
            try:
                snap = resolve_snapshot(store, as_of_batch, version)
            except StoreError as e:          # a damaged manifest: report it, check the files as a broker would
                line = str(e) if isinstance(e, CorruptStore) else problem(manifest.MANIFEST_DIR, 0, str(e))
                if line not in meta:
                    meta.append(line)
                snap, unreadable = None, True
    has_manifest = snap is not None and snap.batch is not None
    if has_manifest:
        cfg = snapshot_config(snap, config)
    elif unreadable:
        from .storefiles import infer_config
        try:
            cfg = infer_config(store, config)
        except ValueError:
            cfg = config or StoreConfig()
    else:
        cfg = config or StoreConfig()
    ctx, tasks, problems = plan(store, cfg, snap if has_manifest else None, deep)
    problems = meta + list(problems)
    if spark is not None and tasks:
        sc = spark.sparkContext
        bctx = sc.broadcast(ctx)
        parts = pack_tasks(tasks, cfg, 4 * sc.defaultParallelism)
        results = sc.parallelize(parts, len(parts)).flatMap(
            lambda units: [run_task(bctx.value, t) for t in units]).collect()
    else:
        local = dict(ctx, _store=store)      # in process: one Store (and its checked paths) for all tasks
        results = [run_task(local, t) for t in tasks]
    facts = []
    rep = Report(problems=list(problems), deep=deep, manifest=has_manifest)
    for r in results:
        rep.problems.extend(r["problems"])
        rep.bytes_read += r["bytes_read"]
        rep.logical_bytes += r["logical_bytes"]
        f = r["facts"]
        if isinstance(f, list):
            facts.extend(f)
        elif f:
            facts.append(f)
    rep.facts = facts
    rep.files = sum(1 for t in tasks if t["kind"] != "queues") + sum(
        len(q["files"]) for t in tasks if t["kind"] == "queues" for q in t["queues"])
    rep.problems.sort(key=_sort_key)
    rep.seconds = time.time() - t0
    return rep
