"""Verify index files (docs/FORMAT.md §3): header against entries, slots and hash chains, the zero
tail, the manifest row, and (``deep``) each entry against the keys and time of its commitlog
record (``storelib.verify.driver``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compute import arrays, kernels, tag_index
from ..io import checksum
from ..codec import messages as codec, properties
from ..format import indexfile
from ..format.config import StoreConfig
from .access import FileData, Found, MAX_PROBLEMS_PER_FILE, Problem, problem, SegmentLookup, task_store, VerifyContext
from .kernels import index_summary, resolve_heads, walk_chains
from ..table.rows import FileKind, ManifestRow

__all__ = ["verify_index", "IndexEntries", "deep_index", "paged_head_len"]

ENTRY_DTYPE = indexfile.ENTRY_DTYPE
INT_MAX = indexfile.INT_MAX


def verify_index(ctx: VerifyContext, t: dict) -> dict:
    store = task_store(ctx)
    cfg = ctx.config
    rel = t["path"]
    m = t.get("manifest")
    out: list[Problem] = []
    fd = FileData(store, rel)
    facts = {"kind": FileKind.INDEX, "path": rel}
    if not fd.exists:
        return {"problems": [problem(rel, 0, "missing file")], "facts": facts, "bytes_read": 0, "logical_bytes": 0}
    full = cfg.index_file_size
    if fd.size != full:
        out.append(problem(rel, min(fd.size, full), f"file size {fd.size}, expected {full}"))
    if fd.size < indexfile.HEADER_SIZE:
        out.append(problem(rel, 0, "no index header"))
        return {"problems": out, "facts": facts, "bytes_read": fd.bytes_read, "logical_bytes": fd.size}
    disk = indexfile.IndexHeader.parse(bytes(fd.buf[:indexfile.HEADER_SIZE])).to_dict()
    snap = _snapshot_header(m)
    appended = snap is not None and _appended(cfg, fd, disk, snap)
    header = snap if snap is not None else disk     # the snapshot's view: later entries are a newer batch's
    ent_at = indexfile.entries_offset(cfg)
    ic, valid, avail = _entry_extent(rel, cfg, fd, header["index_count"], ent_at, out)
    fd.populate(0, valid)
    nslots = cfg.maxHashSlotNum
    slots = indexfile.decode_slots(fd.buf, nslots, indexfile.slot_offset(0)).astype(np.int64) if avail >= ent_at \
        else np.zeros(0, np.int64)
    if appended and len(slots):
        slots = _resolve_slots(rel, cfg, fd, ent_at, ic, slots, out)
    ents = fd.buf[ent_at:ent_at + ic * indexfile.ENTRY_SIZE].view(ENTRY_DTYPE) if ic else np.zeros(0, ENTRY_DTYPE)
    n = len(ents)
    entries = IndexEntries(rel, ent_at, ents)
    hsc = header["hash_slot_count"]
    seg_bases = np.array([b for _, b, _ in ctx.segments], np.int64)
    F = cfg.mappedFileSizeCommitLog
    # One pass over the entries in place; a sound file (the usual case) needs no converted copy
    # of its 20M entries: the checks that name each problem run only where the pass found one.
    sm = index_summary(fd.buf, ent_at, n, slots, nslots, ctx.min_phy, F, seg_bases) if n > 1 else None
    if sm is not None:
        if sm.bad_prev or sm.negative_hash or sm.heads != hsc or header["begin_phy_offset"] != sm.first_phys \
                or header["end_phy_offset"] != sm.last_phys:
            _check_entries(entries, header, out)
        if not sm.in_order:
            _check_chains(entries, nslots, ic, slots, out)
    elif hsc != 0:
        out.append(problem(rel, indexfile.HEADER_HASH_SLOT_COUNT, f"hashSlotCount {hsc} in a file without entries"))
    if n <= 1 and len(slots) and np.any(slots != 0):
        i = int(np.flatnonzero(slots)[0])
        out.append(problem(rel, indexfile.slot_offset(i), "slot set in a file without entries"))
    tail = ent_at + disk["index_count"] * indexfile.ENTRY_SIZE if appended else valid
    nz = fd.first_nonzero(tail, fd.size)
    if nz is not None:
        out.append(problem(rel, nz, f"non-zero byte after the last entry ({tail})"))
    sha, digests = fd.checksum(valid, head_len=paged_head_len(m))
    if m is not None:
        _check_against_manifest(fd, m, Found(valid, sha, ic - 1), disk, appended, out)
    if ctx.deep and sm is not None:
        # entries pointing into a segment are checked by that segment's task (verify.cross); here
        # those whose segment is missing, or all when out of commitlog order (the segment tasks'
        # binary search may miss some)
        lost = np.zeros(0, np.int64)
        if sm.descending or sm.lost:
            ephys = ents["phys"].astype(np.int64)
            pos = np.arange(n)
            keep = (pos >= 1) & (ephys >= ctx.min_phy)
            lost = pos[keep if sm.descending else keep & ~np.isin(ephys // F * F, seg_bases)]
        deep_index(ctx, entries, header, out, subset=lost)
    facts.update(file_size=fd.size, valid_bytes=valid, count=ic - 1, header=header, checksum=sha,
                 blocks=checksum.digests_to_detail(digests))
    return {"problems": out, "facts": facts, "bytes_read": fd.bytes_read, "logical_bytes": fd.size}


def paged_head_len(m: dict | None) -> int | None:
    """The head length of a row whose checksum takes its head by pages (storelib.io.headpages)."""
    if m is None:
        return None
    try:
        head = ManifestRow.of(m).detail.get("head")
        return int(head["len"]) if head else None
    except (ValueError, TypeError, KeyError):
        return None


@dataclass(frozen=True)
class IndexEntries:
    """The entries of one index file as the checks that name each problem read them: the file,
    the byte offset of entry 0 and the entries in place (``indexfile.ENTRY_DTYPE``)."""
    rel: str
    at: int
    ents: np.ndarray

    def column(self, name: str) -> np.ndarray:
        """One field of every entry as int64 (a converted copy)."""
        return self.ents[name].astype(np.int64)

    def offset(self, p: int | np.integer) -> int:
        """Byte offset of entry position ``p``."""
        return self.at + int(p) * indexfile.ENTRY_SIZE


def _snapshot_header(m: dict | None) -> dict | None:
    """The header the manifest row committed (its indexCount bounds the snapshot's entries)."""
    if m is None:
        return None
    try:
        h = ManifestRow.of(m).detail.get("header")
    except ValueError:
        return None
    return h if isinstance(h, dict) and all(isinstance(h.get(k), int) for k in _HEADER_KEYS) else None


_HEADER_KEYS = ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
                "index_count")


def _appended(cfg: StoreConfig, fd: FileData, disk: dict, snap: dict) -> bool:
    """The file holds entries of a later (or unfinished) batch after the snapshot's (index files
    are appended in place; the snapshot's slot heads may then lead through the newer
    entries): its header has a larger indexCount the file can hold, the same begin values, end
    values not below the snapshot's and hashSlotCount not below it, and the entries after the
    snapshot's are well formed later entries (prevPos backwards, phyOffsets ascending from the
    snapshot's end to the header's). Anything else is damage, checked as such."""
    room = (min(fd.size, cfg.index_file_size) - indexfile.entries_offset(cfg)) // indexfile.ENTRY_SIZE
    lo, hi = snap["index_count"], disk["index_count"]
    if not (lo < hi <= min(cfg.maxIndexNum, room) and all(disk[k] == snap[k] for k in ("begin_timestamp",
                                                                                       "begin_phy_offset"))
            and all(disk[k] >= snap[k] for k in ("end_timestamp", "end_phy_offset", "hash_slot_count"))):
        return False
    ent_at = indexfile.entries_offset(cfg)
    newer = fd.buf[ent_at + lo * indexfile.ENTRY_SIZE:ent_at + hi * indexfile.ENTRY_SIZE].view(ENTRY_DTYPE)
    phys, prev = newer["phys"].astype(np.int64), newer["prev"].astype(np.int64)
    pos = np.arange(lo, hi)
    return bool((prev >= 0).all() and (prev < pos).all() and phys[0] >= snap["end_phy_offset"]
                and (np.diff(phys) >= 0).all() and phys[-1] == disk["end_phy_offset"])


def _resolve_slots(rel, cfg, fd, ent_at, count, slots, out):
    """Slot heads of the snapshot: heads at newer entries followed back through their prevPos."""
    room = (min(fd.size, cfg.index_file_size) - ent_at) // indexfile.ENTRY_SIZE
    prev_all = fd.buf[ent_at:ent_at + room * indexfile.ENTRY_SIZE].view(ENTRY_DTYPE)["prev"]
    newer = np.flatnonzero(slots >= count)
    if not len(newer):
        return slots
    heads, broken = resolve_heads(slots[newer], count, prev_all)
    slots = slots.copy()
    slots[newer] = heads
    for k in np.flatnonzero(broken >= 0)[:MAX_PROBLEMS_PER_FILE]:
        p = int(broken[k])
        out.append(problem(rel, indexfile.slot_offset(int(newer[k])),
                           f"slot {newer[k]}: its chain through entry {p}, written after the snapshot, does not lead "
                           f"back to the snapshot's entries"))
    return slots


def _entry_extent(rel, cfg, fd, ic, ent_at, out):
    """(indexCount clamped to what the configuration and the file allow, valid bytes, available bytes)."""
    full = cfg.index_file_size
    if not 1 <= ic <= cfg.maxIndexNum:
        out.append(problem(rel, indexfile.HEADER_INDEX_COUNT, f"indexCount {ic} outside [1, {cfg.maxIndexNum}]"))
        ic = max(1, min(ic, cfg.maxIndexNum))
    valid = ent_at + ic * indexfile.ENTRY_SIZE
    avail = max(0, min(fd.size, full))
    if valid > avail:
        out.append(problem(rel, avail, f"file ends before entry {ic - 1} (needs {valid} bytes)"))
        ic = max(1, (avail - ent_at) // indexfile.ENTRY_SIZE) if avail > ent_at else 1
        valid = min(valid, avail)
    return ic, valid, avail


def _check_entries(e: IndexEntries, header: dict, out: list[Problem]) -> None:
    """Entries (more than the unused entry 0): prevPos points backwards, keyHash not negative, and
    the header's hashSlotCount and begin/endPhyOffset agree with them."""
    rel, hashes, ephys, prev = e.rel, e.column("hash"), e.column("phys"), e.column("prev")
    hsc, bp, ep = header["hash_slot_count"], header["begin_phy_offset"], header["end_phy_offset"]
    n = len(prev)
    pos = np.arange(n)
    bad = np.flatnonzero((prev[1:] < 0) | (prev[1:] >= pos[1:])) + 1
    for i in bad[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, e.offset(i) + indexfile.ENTRY_PREV_POS,
                           f"entry {i}: prevPos {prev[i]} does not point to an earlier entry"))
    neg = np.flatnonzero(hashes[1:] < 0) + 1
    for i in neg[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, e.offset(i), f"entry {i}: keyHash {hashes[i]} is negative"))
    heads = int((prev[1:] == 0).sum())
    if heads != hsc:
        out.append(problem(rel, indexfile.HEADER_HASH_SLOT_COUNT,
                           f"hashSlotCount {hsc}, but {heads} entries start a chain"))
    if bp != ephys[1] or ep != ephys[n - 1]:
        out.append(problem(rel, indexfile.HEADER_BEGIN_PHY_OFFSET,
                           f"begin/endPhyOffset {bp}/{ep}, entries give {ephys[1]}/{ephys[n - 1]}"))


def _check_chains(e: IndexEntries, nslots: int, ic: int, slots: np.ndarray, out: list[Problem]) -> None:
    """Every entry must be reachable from exactly one slot head, and hash to that slot (run when
    ``index_summary`` found the chains out of order)."""
    rel, hashes, prev = e.rel, e.column("hash"), e.column("prev")
    n = len(prev)
    heads_pos = np.flatnonzero((slots > 0))
    badslot = heads_pos[slots[heads_pos] >= n]
    for sidx in badslot[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, indexfile.slot_offset(int(sidx)),
                           f"slot {sidx} points to entry {slots[sidx]}, beyond indexCount {ic}"))
    heads = heads_pos[slots[heads_pos] < n]
    slot_of, dups = walk_chains(heads, slots[heads], prev, n, MAX_PROBLEMS_PER_FILE)
    for p, first, second in dups:
        out.append(problem(rel, e.offset(p), f"entry {p} is in two chains (slots {first} and {second})"))
    reach = slot_of[1:]
    unreached = np.flatnonzero(reach < 0) + 1
    for i in unreached[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, e.offset(i), f"entry {i} is not reachable from any slot"))
    wrong = np.flatnonzero((reach >= 0) & (hashes[1:] % nslots != reach)) + 1
    for i in wrong[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, e.offset(i), f"entry {i}: keyHash {hashes[i]} belongs to slot "
                                                      f"{hashes[i] % nslots}, found in the chain of slot "
                                                      f"{slot_of[i]}"))


def _check_against_manifest(fd: FileData, m: dict, found: Found, disk: dict, appended: bool, out: list[Problem]) -> None:
    """The index file as this check found it against its manifest row ``m``.
    ``appended``: the file was appended in place after the snapshot (its header, slot heads and so
    the checksum of [0, valid) are a newer batch's)."""
    rel, valid, sha, ic = fd.rel, found.valid, found.checksum, found.count + 1
    if m["valid_bytes"] != valid:
        out.append(problem(rel, min(valid, m["valid_bytes"]), f"valid bytes {valid}, manifest says {m['valid_bytes']}"))
    elif m["checksum"] and m["checksum"] != sha and not appended:
        out.append(problem(rel, 0, f"sha256 of bytes [0, {valid}) differs from the manifest (batch {m['batch_id']})"))
    mh = ManifestRow.of(m).detail.get("header")
    if mh and mh != disk and not appended:
        out.append(problem(rel, 0, f"header {disk} differs from the manifest's {mh}"))
    if m.get("count") is not None and m["count"] != ic - 1:
        out.append(problem(rel, 0, f"{ic - 1} entries, manifest count says {m['count']}"))
    if m.get("file_size") is not None and m["file_size"] != fd.size:
        out.append(problem(rel, 0, f"file size {fd.size}, manifest says {m['file_size']}"))


def deep_index(ctx: VerifyContext, e: IndexEntries, header: dict, out: list[Problem],
               subset: np.ndarray | None = None, header_checks: bool = True) -> None:
    """Entries (all at or above the min offset, or the positions ``subset``) against their records,
    each decoded by offset (``SegmentLookup``); ``header_checks``: also the header's begin/end times
    against the records at begin/endPhyOffset."""
    cfg, rel, ent_at = ctx.config, e.rel, e.at
    hashes, ephys, tdiff = e.ents["hash"], e.ents["phys"], e.ents["time_diff"]
    look = SegmentLookup(task_store(ctx), ctx.segments, cfg.mappedFileSizeCommitLog)
    if subset is None:
        live = np.flatnonzero(np.asarray(ephys[1:]) >= ctx.min_phy) + 1
    else:
        live = np.asarray(subset, np.int64)
    shown = 0
    if len(live):
        ok, reason, table, inv = look.records(ephys[live])
        for j in np.flatnonzero(~ok)[:MAX_PROBLEMS_PER_FILE]:
            p = int(live[j])
            out.append(problem(rel, ent_at + p * indexfile.ENTRY_SIZE, f"entry {p} -> commitlog {ephys[p]}: {reason[j]}"))
            shown += 1
        if table is not None:
            okj = np.flatnonzero(ok)
            rows = inv[okj]
            p_ok = live[okj]
            # Every (record, key hash) the dispatch would index: UNIQ_KEY, then each KEYS token,
            # hashed as topic#key (the encoder's kernels, run over the decoded records); the
            # newest 5.x line also topic#T#tags.
            props = arrays.as_large_string(table["properties_string"])
            pdata, poff = arrays.string_buffers(props)
            vs, ve = properties.property_spans(pdata, poff, ["KEYS", "UNIQ_KEY", "TAGS"])
            topic_hash = codec.java_hash(table["topic"]).view(np.uint32).astype(np.int64)
            every = np.ones(len(topic_hash), bool)
            key_row, key_hash = kernels.index_keys(pdata, vs[1], ve[1], vs[0], ve[0], every, topic_hash)
            if cfg.line_5_5:
                key_row, key_hash = tag_index.with_tag_entries(key_row, key_hash, pdata, vs[2], ve[2], every,
                                                               topic_hash)
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
                out.append(problem(rel, ent_at + p * indexfile.ENTRY_SIZE, f"entry {p} -> commitlog {ephys[p]}: " + "; ".join(errs)))
                shown += 1
    if not header_checks:
        return
    # header times against the records at begin/endPhyOffset
    for off_name, ts_name, at in (("begin_phy_offset", "begin_timestamp", indexfile.HEADER_BEGIN_TIMESTAMP),
                                  ("end_phy_offset", "end_timestamp", indexfile.HEADER_END_TIMESTAMP)):
        phy = header[off_name]
        if phy < ctx.min_phy:
            continue
        ok, reason, table, inv = look.records(np.array([phy]))
        if ok[0]:
            ts = int(table["store_timestamp"].to_numpy()[inv[0]])
            if ts != header[ts_name]:
                out.append(problem(rel, at, f"{ts_name} {header[ts_name]}, record at {off_name} {phy} "
                                                 f"was stored at {ts}"))
