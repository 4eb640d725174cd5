"""``verify --deep``'s cross-file checks, from the commitlog side (``storelib.verify``).

Every consume-queue unit must point at a record of its topic / queue id / queue offset, with the
stored size and tagsCode, not PREPARED/ROLLBACK; every index entry at a record (not a ROLLBACK)
one of whose keys hashes to the stored keyHash, with the stored timeDiff (docs/FORMAT.md §2, §3).

These checks used to decode each unit's and each entry's record again by offset (random reads
over the whole commitlog, one pyarrow table per file: 97 s for the 20M entries of one index
file). Here the segment task, which has just read every record of its segment
(``verify_records.fast_check``), computes each record's facts once (topic, tagsCode, index key
hashes: the encoder's kernels) and checks, in whole arrays, the units and entries that point
into its segment (found by two binary searches: units and entries are in commitlog order; the
queue and index tasks check a file out of order whole themselves) and matches them to their
records in one sweep. A target that is not the start of a record that passed every field check
(a damaged segment), and every target that fails a check, goes through the per-offset checks
as before (``verify_queues.deep_units``, ``verify_index.deep_index``), so the problems named, and
their words, are the same. Units and entries pointing into a missing segment are left to the
queue and index tasks.

Topics are compared by two independent 32-bit hashes of their bytes (Java's String.hashCode and
CRC-32): a different topic passes only if both collide.
"""
from __future__ import annotations

import zlib

import numpy as np

from . import codec, consumequeue, indexfile, kernels
from .config import StoreConfig
from .consumequeue import UNIT_SIZE as CQ_UNIT_SIZE
from .indexfile import ENTRY_SIZE as INDEX_ENTRY_SIZE, HEADER_SIZE as INDEX_HEADER_SIZE
from .verify_access import MAX_PROBLEMS_PER_FILE, FileData, SegmentLookup
from .verify_kernels import bisect_range, has_key, match_sorted, property_spans_slices

__all__ = ["RecordFacts", "topic_key", "check_targets"]


def topic_key(topic: str) -> int:
    """The two hashes of a topic name as one int64: ``String.hashCode << 32 | crc32``."""
    raw = np.frombuffer(topic.encode("utf-8"), np.uint8)
    jh = kernels.java_hash_utf8(raw, np.array([0, len(raw)], np.int64))[0][0]
    return (int(jh) << 32 | zlib.crc32(raw.tobytes())) - (1 << 64 if int(jh) >= 1 << 31 else 0)


class RecordFacts:
    """The records of one segment that passed every field check, in commitlog order, with what the
    cross checks compare: position, fields, topic key, and (on first use) tagsCode and index keys."""

    def __init__(self, buf: np.ndarray, base: int, starts: np.ndarray, fields: np.ndarray, good: np.ndarray,
                 config: StoreConfig):
        self.buf = buf
        self.config = config
        every = bool(good.all())
        self.f = fields if every else fields[:, good]                        # (no 0.5 GB copy when all are)
        starts = np.asarray(starts, np.int64)
        self.offsets = base + (starts if every else starts[good])           # ascending
        tpos, tlen = self.f[kernels.F_TOPIC_POS], self.f[kernels.F_TOPIC_LEN]
        self.topic_hash = kernels.java_hash_slices(buf, tpos, tpos + tlen)
        crc = kernels.crc32_slices(buf, tpos, tpos + tlen)
        self.topic_key = (self.topic_hash.astype(np.uint64) << np.uint64(32) | crc.astype(np.uint64)).view(np.int64)
        self._props = None
        self._tags = None
        self._keys = None

    def find(self, phys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of the record starting at each offset, found mask)."""
        return match_sorted(self.offsets, phys)

    def props(self):
        """Spans (positions in the segment) of TAGS, DELAY, KEYS, UNIQ_KEY: one parse, in place."""
        if self._props is None:
            p = self.f[kernels.F_PROPS_POS]
            self._props = property_spans_slices(self.buf, p, p + self.f[kernels.F_PROPS_LEN],
                                                ["TAGS", "DELAY", "KEYS", "UNIQ_KEY"])
        return self._props

    def tags_codes(self) -> np.ndarray:
        """tagsCode of every record (docs/FORMAT.md §2): Java hash of TAGS, or the delay deliver time."""
        if self._tags is None:
            pdata = self.buf
            vs, ve = self.props()
            code = np.where(vs[0] >= 0, kernels.java_hash_slices(pdata, vs[0], ve[0]).view(np.int32), 0)
            code = code.astype(np.int64)
            sched = (self.topic_key == topic_key(codec.SCHEDULE_TOPIC)) & (vs[1] >= 0)
            ts = self.f[kernels.F_STORETS]
            delays = self.config.delay_level_millis
            for i in np.flatnonzero(sched):                   # delay messages only (few)
                try:
                    level = int(pdata[vs[1][i]:ve[1][i]].tobytes().decode("utf-8", "replace"))
                except ValueError:
                    continue
                level = min(level, len(delays))
                if level > 0:
                    code[i] = int(ts[i]) + delays[level - 1]
            self._tags = code
        return self._tags

    def index_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """(record row, index key hash) of every key the dispatch indexes (rows ascending)."""
        if self._keys is None:
            vs, ve = self.props()
            rows, h = kernels.index_keys(self.buf, vs[3], ve[3], vs[2], ve[2], np.ones(len(self.offsets), bool),
                                         self.topic_hash)
            first = np.searchsorted(rows, np.arange(len(self.offsets) + 1))    # each record's keys: [first, next)
            self._keys = (rows, codec.index_key_hash(h.view(np.int32)).astype(np.int64), first)
        return self._keys

    def has_key(self, rows: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        """Whether record ``rows[i]`` has an index key hashing to ``hashes[i]``."""
        _, khash, kfirst = self.index_keys()
        return has_key(kfirst, khash, rows, hashes)


def check_targets(ctx: dict, store, fd: FileData, base: int, starts: np.ndarray, fields: np.ndarray,
                  good: np.ndarray, out: list) -> None:
    """The units and index entries pointing into the segment at ``base`` (see the module doc)."""
    cfg = StoreConfig.from_json(ctx["config"])
    seg = (max(base, ctx["min_phy"]), base + cfg.mappedFileSizeCommitLog)
    facts = RecordFacts(fd.buf, base, starts, fields, good, cfg)
    look = SegmentLookup(store, ctx["segments"], cfg.mappedFileSizeCommitLog)
    for q in ctx.get("queues", []):
        for k, f in enumerate(q["files"]):
            _check_units(store, cfg, facts, look, seg, q["topic"], q["queue_id"], f, k == len(q["files"]) - 1,
                         ctx["min_phy"], out)
    for x in ctx.get("index_files", []):
        _check_entries(ctx, store, cfg, facts, seg, x, out)


def _check_units(store, cfg, facts, look, seg, topic, qid, f, last, min_phy, out) -> None:
    from .verify_queues import deep_units, leading_units
    rel = f["path"]
    fd = FileData(store, rel)
    if not fd.exists:
        return                                               # reported by the queue task
    n = min(fd.size, cfg.cq_file_size) // CQ_UNIT_SIZE
    if last:
        n = leading_units(fd, n)
    # A queue's units ascend (else the queue task reports it and checks that file's units itself).
    a, b = bisect_range(fd.buf, consumequeue.UNIT_PHYSICALOFFSET, CQ_UNIT_SIZE, n, seg[0], seg[1])
    if a >= b:
        return
    idx = np.arange(a, b, dtype=np.int64)
    u = consumequeue.decode_units(fd.buf[: n * CQ_UNIT_SIZE])
    sel = u[a:b]                                             # only this segment's units, converted
    first_q = f["base"] // CQ_UNIT_SIZE
    row, found = facts.find(sel["phys"].astype(np.int64))
    if not found.all():                                      # not a sound record start: the per-offset checks
        deep_units(look, cfg, rel, topic, qid, first_q, u["phys"].astype(np.int64), u["size"].astype(np.int64),
                   u["tags"].astype(np.int64), min_phy, out, subset=idx[~found])
    idx, row, sel = idx[found], row[found], sel[found]
    size, tags = sel["size"].astype(np.int64), sel["tags"].astype(np.int64)
    rf = facts.f
    sysf, r_qid, r_qoff, r_size = (rf[k][row] for k in (kernels.F_SYSFLAG, kernels.F_QUEUEID, kernels.F_QUEUEOFFSET,
                                                         kernels.F_SIZE))
    where_bad = (facts.topic_key[row] != topic_key(topic)) | (r_qid != qid)
    qoff_bad = r_qoff != first_q + idx
    size_bad = r_size != size
    t_tags = facts.tags_codes()[row]
    tags_bad = t_tags != tags
    tran_bad = np.isin(sysf & codec.TRANSACTION_MASK, (codec.TRANSACTION_PREPARED, codec.TRANSACTION_ROLLBACK))
    bad = where_bad | qoff_bad | size_bad | tags_bad | tran_bad
    if bad.any():           # named by the per-offset checks (their words; the record decoded as Java does)
        deep_units(look, cfg, rel, topic, qid, first_q, u["phys"].astype(np.int64), u["size"].astype(np.int64),
                   u["tags"].astype(np.int64), min_phy, out, subset=idx[bad][:MAX_PROBLEMS_PER_FILE])


def index_extent(cfg: StoreConfig, fd: FileData, x: dict) -> tuple[int, dict | None]:
    """(entries visible, header) of index file ``x`` (``path``, snapshot ``header`` or None): the
    snapshot's indexCount and header when the manifest has them (later entries are a newer
    batch's), else the file's own; clamped to what the configuration and the file hold."""
    header = x.get("header")
    if header is None:
        if fd.size < INDEX_HEADER_SIZE:
            return 0, None
        header = indexfile.IndexHeader.parse(bytes(fd.buf[:INDEX_HEADER_SIZE])).to_dict()
    ent_at = indexfile.entries_offset(cfg)
    room = max(0, (min(fd.size, cfg.index_file_size) - ent_at) // INDEX_ENTRY_SIZE)
    return max(0, min(header["index_count"], cfg.maxIndexNum, room)), header


def _check_entries(ctx, store, cfg, facts, seg, x, out) -> None:
    from .verify_index import deep_index
    rel = x["path"]
    fd = FileData(store, rel)
    if not fd.exists:
        return
    count, header = index_extent(cfg, fd, x)
    if count <= 1:
        return
    ent_at = indexfile.entries_offset(cfg)
    # Entries are written in commitlog order (else the index task checks that file's entries itself).
    a, b = bisect_range(fd.buf, ent_at + indexfile.ENTRY_PHY_OFFSET, INDEX_ENTRY_SIZE, count, seg[0], seg[1])
    pos = np.arange(max(a, 1), b, dtype=np.int64)
    if not len(pos):
        return
    ents = fd.buf[ent_at:ent_at + count * INDEX_ENTRY_SIZE].view(indexfile.ENTRY_DTYPE)
    sel = ents[pos[0]:pos[-1] + 1]                           # only this segment's entries, converted
    row, found = facts.find(sel["phys"].astype(np.int64))
    if not found.all():                                      # not a sound record start: the per-offset checks
        deep_index(ctx, cfg, rel, ent_at, header, ents["hash"].astype(np.int64), ents["phys"].astype(np.int64),
                   ents["time_diff"].astype(np.int64), out, subset=pos[~found], header_checks=False)
    pos, row, sel = pos[found], row[found], sel[found]
    hashes, tdiff = sel["hash"].astype(np.int64), sel["time_diff"].astype(np.int64)
    rollback = (facts.f[kernels.F_SYSFLAG][row] & codec.TRANSACTION_MASK) == codec.TRANSACTION_ROLLBACK
    hash_ok = facts.has_key(row, hashes)
    begin = header["begin_timestamp"]
    d = facts.f[kernels.F_STORETS][row] - begin
    want = np.clip(np.abs(d) // 1000 * np.where(d >= 0, 1, -1), 0, indexfile.INT_MAX)
    td_bad = (pos > 1) & (begin > 0) & (want != tdiff)
    bad = rollback | ~hash_ok | td_bad
    if bad.any():           # named by the per-offset checks (their words; the record decoded as Java does)
        deep_index(ctx, cfg, rel, ent_at, header, ents["hash"].astype(np.int64), ents["phys"].astype(np.int64),
                   ents["time_diff"].astype(np.int64), out, subset=pos[bad][:MAX_PROBLEMS_PER_FILE],
                   header_checks=False)
