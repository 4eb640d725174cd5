"""Verify consume-queue files (docs/FORMAT.md §2): units well formed and ascending, full non-last
files, zero tails, the manifest rows, and (``deep``) each unit against its commitlog record
(``storelib.verify.driver``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..io import checksum
from ..format import consumequeue
from ..format.config import StoreConfig
from ..codec.properties import lmq_queue_offsets
from .access import (MAX_PROBLEMS_PER_FILE, FileData, Problem, SegmentLookup, expected_tags_code, problem,
                     task_store, VerifyContext)
from .kernels import queue_summary
from ..table.rows import FileKind

__all__ = ["verify_queues", "leading_units", "QueueUnits", "deep_units"]


def verify_queues(ctx: VerifyContext, t: dict) -> dict:
    store = task_store(ctx)
    cfg = ctx.config
    cq_size = cfg.cq_file_size
    per = cq_size // consumequeue.UNIT_SIZE
    look = SegmentLookup(store, ctx.segments, cfg.mappedFileSizeCommitLog) if ctx.deep else None
    seg_bases = np.array([b for _, b, _ in ctx.segments], np.int64)
    F = cfg.mappedFileSizeCommitLog
    out: list[Problem] = []
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
            n_all = min(fd.size, cq_size) // consumequeue.UNIT_SIZE
            if last:
                # a broker's view: units until the first not (offset >= 0 && size > 0)
                n = leading_units(fd, n_all)
            else:
                n = n_all
            u = consumequeue.decode_units(fd.buf[: n * consumequeue.UNIT_SIZE])
            # One pass over the units in place; the checks that name each problem (numpy over
            # converted copies) run only where it found one.
            sm = queue_summary(fd.buf, n, prev_phys, ctx.max_phy, ctx.min_phy, F, seg_bases)
            desc_found = bool(sm.not_ascending)
            if sm.not_in_use or sm.not_ascending or sm.past_end:
                phys, size = u["phys"].astype(np.int64), u["size"].astype(np.int64)
                badu = ~consumequeue.unit_in_use(phys, size)
                for i in np.flatnonzero(badu)[:MAX_PROBLEMS_PER_FILE]:
                    out.append(problem(rel, int(i) * consumequeue.UNIT_SIZE, f"unit ({phys[i]}, {size[i]}) is not a message "
                                                         "(a non-last queue file must be full)"))
                seq = np.concatenate([[prev_phys], phys])
                desc = np.flatnonzero(np.diff(seq) <= 0)
                for i in desc[:MAX_PROBLEMS_PER_FILE]:
                    out.append(problem(rel, int(i) * consumequeue.UNIT_SIZE, f"commitlog offset {phys[i]} does not ascend "
                                                         f"(previous unit {seq[i]})"))
                over = np.flatnonzero(phys + size > ctx.max_phy)
                for i in over[:MAX_PROBLEMS_PER_FILE]:
                    out.append(problem(rel, int(i) * consumequeue.UNIT_SIZE, f"unit ({phys[i]}, {size[i]}) reaches past the "
                                                         f"commitlog end {ctx.max_phy}"))
            if n:
                prev_phys = int(u["phys"][n - 1])
            nz = fd.first_nonzero(n * consumequeue.UNIT_SIZE, fd.size)
            if nz is not None:
                out.append(problem(rel, nz, f"non-zero byte after the last unit ({n * consumequeue.UNIT_SIZE})"))
            sha, digests = fd.checksum(n * consumequeue.UNIT_SIZE)
            first_q = base // consumequeue.UNIT_SIZE
            if m is not None:
                _against_manifest(rel, m, fd, base, n, sha, out)
            if look is not None and n and (sm.lost or desc_found):
                # Units pointing into a segment are checked by that segment's task (verify.cross);
                # here only those whose segment is missing, or all when out of order (the segment
                # tasks' binary search may miss some).
                phys = u["phys"].astype(np.int64)
                lost = np.flatnonzero((phys >= ctx.min_phy) & (~np.isin(phys // F * F, seg_bases) | desc_found))
                if len(lost):
                    deep_units(look, cfg, QueueUnits(rel, topic, qid, first_q, phys, u["size"], u["tags"]),
                               ctx.min_phy, out, subset=lost)
            facts.append({"kind": FileKind.CONSUMEQUEUE, "path": rel, "topic": topic, "queue_id": qid,
                          "base_offset": base, "file_size": fd.size, "valid_bytes": n * consumequeue.UNIT_SIZE,
                          "count": n, "min_offset": first_q, "max_offset": first_q + n - 1,
                          "min_phys": sm.min_phys if n else None, "max_phys": sm.max_phys if n else None,
                          "checksum": sha, "blocks": checksum.digests_to_detail(digests), "per_file": per})
            read += fd.bytes_read
    return {"problems": out, "facts": facts, "bytes_read": read, "logical_bytes": logical}


def _against_manifest(rel: str, m: dict, fd: FileData, base: int, n: int, sha: str, out: list) -> None:
    if m["valid_bytes"] != n * consumequeue.UNIT_SIZE:
        out.append(problem(rel, min(m["valid_bytes"], n * consumequeue.UNIT_SIZE),
                           f"{n} units on disk, manifest says {m['valid_bytes'] // consumequeue.UNIT_SIZE}"))
    elif m["checksum"] and m["checksum"] != sha:
        out.append(problem(rel, 0, f"sha256 of bytes [0, {n * consumequeue.UNIT_SIZE}) differs from the manifest "
                                   f"(batch {m['batch_id']})"))
    if m["base_offset"] != base:
        out.append(problem(rel, 0, f"manifest base_offset {m['base_offset']} but the name says {base}"))
    if m.get("count") is not None and m["count"] != n:
        out.append(problem(rel, 0, f"{n} units, manifest count says {m['count']}"))
    if m.get("file_size") is not None and m["file_size"] != fd.size:
        out.append(problem(rel, 0, f"file size {fd.size}, manifest says {m['file_size']}"))


def leading_units(fd: FileData, n_all: int) -> int:
    """A broker's view of the last file of a queue: units before the first one not in use
    (``consumequeue.valid_units``, RocketMQ's linear recovery walk)."""
    if n_all == 0:
        return 0
    return consumequeue.valid_units(fd.buf[: n_all * consumequeue.UNIT_SIZE])


@dataclass(frozen=True)
class QueueUnits:
    """The units of one consume-queue file as the per-offset checks read them: the file, its
    queue, the queue offset of its first unit, and the units' columns."""
    rel: str
    topic: str
    queue_id: int
    first_q: int
    phys: np.ndarray         # int64
    size: np.ndarray
    tags: np.ndarray


def deep_units(look: SegmentLookup, cfg: StoreConfig, qu: QueueUnits, min_phy: int, out: list[Problem],
               subset: np.ndarray | None = None) -> None:
    """Units (all at or above ``min_phy``, or the unit indexes ``subset``) against their records,
    each record decoded by offset (``SegmentLookup``)."""
    rel, topic, qid, first_q = qu.rel, qu.topic, qu.queue_id, qu.first_q
    phys, size, tags = qu.phys, qu.size, qu.tags
    live = np.flatnonzero(phys >= min_phy) if subset is None else np.asarray(subset, np.int64)
    if not len(live):
        return
    ok, reason, table, inv = look.records(phys[live])
    shown = 0
    for j in np.flatnonzero(~ok):
        if shown < MAX_PROBLEMS_PER_FILE:
            i = int(live[j])
            out.append(problem(rel, i * consumequeue.UNIT_SIZE, f"unit -> commitlog {phys[i]}: {reason[j]}"))
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
    if consumequeue.is_lmq(topic) and qid == consumequeue.LMQ_QUEUE_ID and where_bad.any():
        # a light message queue's unit: the record (of another topic) names the queue in
        # INNER_MULTI_DISPATCH, its queue offset at the same place of INNER_MULTI_QUEUE_OFFSET
        lmq_off = lmq_queue_offsets(table["properties_string"].take(pa.array(rows)), topic)
        listed = where_bad & (lmq_off >= 0)
        qoff_bad = np.where(listed, lmq_off != first_q + units, qoff_bad)
        where_bad = where_bad & ~listed
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
            errs.append(f"record is {table['topic'][int(rows[k])].as_py()}/{t_qid[k]}, not {topic}/{qid}"
                        + (" (nor dispatched to it)" if consumequeue.is_lmq(topic) else ""))
        if qoff_bad[k]:
            errs.append(f"record QUEUEOFFSET {t_qoff[k]}, unit is queue offset {q}" if where_bad[k] or t_qoff[k] != q
                        or not consumequeue.is_lmq(topic)
                        else f"record's {topic} offset in INNER_MULTI_QUEUE_OFFSET differs from the unit's {q}")
        if size_bad[k]:
            errs.append(f"record size {t_size[k]}, unit says {size[i]}")
        if tags_bad[k]:
            errs.append(f"tagsCode {tags[i]}, record gives {t_tags[k]}")
        if tran_bad[k]:
            errs.append("record is PREPARED/ROLLBACK (never in a consume queue)")
        if errs:
            out.append(problem(rel, i * consumequeue.UNIT_SIZE, f"unit -> commitlog {phys[i]}: " + "; ".join(errs)))
            shown += 1
