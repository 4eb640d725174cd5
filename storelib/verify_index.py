"""Verify index files (docs/FORMAT.md §3): header against entries, slots and hash chains, the zero
tail, the manifest row, and (``deep``) each entry against the keys and time of its commitlog
record (``storelib.verify``)."""
from __future__ import annotations

import json

import numpy as np

from . import arrays, codec, indexfile, kernels
from .config import StoreConfig
from .indexfile import ENTRY_SIZE as INDEX_ENTRY_SIZE, HEADER_SIZE as INDEX_HEADER_SIZE
from .verify_access import MAX_PROBLEMS_PER_FILE, FileData, SegmentLookup, problem, task_store

__all__ = ["verify_index", "deep_index"]

ENTRY_DTYPE = indexfile.ENTRY_DTYPE
INT_MAX = indexfile.INT_MAX


def verify_index(ctx: dict, t: dict) -> dict:
    store = task_store(ctx)
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
    ent_at = indexfile.entries_offset(cfg)
    ic, valid, avail = _entry_extent(rel, cfg, fd, ic, ent_at, out)
    nslots = cfg.maxHashSlotNum
    slots = indexfile.decode_slots(fd.buf, nslots, indexfile.slot_offset(0)).astype(np.int64) if avail >= ent_at \
        else np.zeros(0, np.int64)
    ents = fd.buf[ent_at:ent_at + ic * INDEX_ENTRY_SIZE].view(ENTRY_DTYPE) if ic else np.zeros(0, ENTRY_DTYPE)
    n = len(ents)
    hashes = ents["hash"].astype(np.int64)
    ephys = ents["phys"].astype(np.int64)
    tdiff = ents["time_diff"].astype(np.int64)
    prev = ents["prev"].astype(np.int64)
    if n > 1:
        _check_entries(rel, ent_at, hsc, bp, ep, hashes, ephys, prev, out)
        _check_chains(rel, ent_at, nslots, ic, slots, hashes, prev, out)
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
        _check_against_manifest(rel, m, fd, valid, sha, header, ic, out)
    if ctx["deep"] and n > 1:
        deep_index(ctx, cfg, rel, ent_at, header, hashes, ephys, tdiff, out)
    facts.update(file_size=fd.size, valid_bytes=valid, count=ic - 1, header=header, checksum=sha)
    return {"problems": out, "facts": facts, "bytes_read": fd.bytes_read, "logical_bytes": fd.size}


def _entry_at(ent_at: int, p) -> int:
    """Byte offset of entry position ``p``."""
    return ent_at + int(p) * INDEX_ENTRY_SIZE


def _entry_extent(rel, cfg, fd, ic, ent_at, out):
    """(indexCount clamped to what the configuration and the file allow, valid bytes, available bytes)."""
    full = cfg.index_file_size
    if not 1 <= ic <= cfg.maxIndexNum:
        out.append(problem(rel, indexfile.HEADER_INDEX_COUNT, f"indexCount {ic} outside [1, {cfg.maxIndexNum}]"))
        ic = max(1, min(ic, cfg.maxIndexNum))
    valid = ent_at + ic * INDEX_ENTRY_SIZE
    avail = max(0, min(fd.size, full))
    if valid > avail:
        out.append(problem(rel, avail, f"file ends before entry {ic - 1} (needs {valid} bytes)"))
        ic = max(1, (avail - ent_at) // INDEX_ENTRY_SIZE) if avail > ent_at else 1
        valid = min(valid, avail)
    return ic, valid, avail


def _check_entries(rel, ent_at, hsc, bp, ep, hashes, ephys, prev, out):
    """Entries (more than the unused entry 0): prevPos points backwards, keyHash not negative, and
    the header's hashSlotCount and begin/endPhyOffset agree with them."""
    n = len(prev)
    pos = np.arange(n)
    bad = np.flatnonzero((prev[1:] < 0) | (prev[1:] >= pos[1:])) + 1
    for i in bad[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, _entry_at(ent_at, i) + indexfile.ENTRY_PREV_POS,
                           f"entry {i}: prevPos {prev[i]} does not point to an earlier entry"))
    neg = np.flatnonzero(hashes[1:] < 0) + 1
    for i in neg[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, _entry_at(ent_at, i), f"entry {i}: keyHash {hashes[i]} is negative"))
    heads = int((prev[1:] == 0).sum())
    if heads != hsc:
        out.append(problem(rel, indexfile.HEADER_HASH_SLOT_COUNT,
                           f"hashSlotCount {hsc}, but {heads} entries start a chain"))
    if bp != ephys[1] or ep != ephys[n - 1]:
        out.append(problem(rel, indexfile.HEADER_BEGIN_PHY_OFFSET,
                           f"begin/endPhyOffset {bp}/{ep}, entries give {ephys[1]}/{ephys[n - 1]}"))


def _check_chains(rel, ent_at, nslots, ic, slots, hashes, prev, out):
    """Every entry must be reachable from exactly one slot head, and hash to that slot."""
    n = len(prev)
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
                out.append(problem(rel, _entry_at(ent_at, p),
                                   f"entry {p} is in two chains (slots {slot_of[p]} and {sidx})"))
                break
            slot_of[p] = sidx
            if prev[p] >= p or prev[p] < 0:
                break
            p = int(prev[p])
    reach = slot_of[1:]
    unreached = np.flatnonzero(reach < 0) + 1
    for i in unreached[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, _entry_at(ent_at, i), f"entry {i} is not reachable from any slot"))
    wrong = np.flatnonzero((reach >= 0) & (hashes[1:] % nslots != reach)) + 1
    for i in wrong[:MAX_PROBLEMS_PER_FILE]:
        out.append(problem(rel, _entry_at(ent_at, i), f"entry {i}: keyHash {hashes[i]} belongs to slot "
                                                      f"{hashes[i] % nslots}, found in the chain of slot "
                                                      f"{slot_of[i]}"))


def _check_against_manifest(rel, m, fd, valid, sha, header, ic, out):
    """The index file against its manifest row."""
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


def deep_index(ctx, cfg, rel, ent_at, header, hashes, ephys, tdiff, out):
    look = SegmentLookup(task_store(ctx), ctx["segments"], cfg.mappedFileSizeCommitLog)
    pos = np.arange(1, len(ephys))
    live = pos[ephys[1:] >= ctx["min_phy"]]
    shown = 0
    if len(live):
        ok, reason, table, inv = look.records(ephys[live])
        for j in np.flatnonzero(~ok)[:MAX_PROBLEMS_PER_FILE]:
            p = int(live[j])
            out.append(problem(rel, ent_at + p * INDEX_ENTRY_SIZE, f"entry {p} -> commitlog {ephys[p]}: {reason[j]}"))
            shown += 1
        if table is not None:
            okj = np.flatnonzero(ok)
            rows = inv[okj]
            p_ok = live[okj]
            # Every (record, key hash) the dispatch would index: UNIQ_KEY, then each KEYS token,
            # hashed as topic#key (the encoder's kernels, run over the decoded records).
            props = arrays.as_large_string(table["properties_string"])
            pdata, poff = arrays.string_buffers(props)
            vs, ve = kernels.property_spans(pdata, poff, ["KEYS", "UNIQ_KEY"])
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
                out.append(problem(rel, ent_at + p * INDEX_ENTRY_SIZE, f"entry {p} -> commitlog {ephys[p]}: " + "; ".join(errs)))
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
