"""``verify --deep``'s cross-file checks, from the commitlog side (``storelib.verify.driver``).

Every consume-queue unit must point at a record of its topic / queue id / queue offset, with the
stored size and tagsCode, not PREPARED/ROLLBACK; every index entry at a record (not a ROLLBACK)
one of whose keys hashes to the stored keyHash, with the stored timeDiff (docs/FORMAT.md §2, §3).

Decoding each unit's and each entry's record again by offset would be random reads over the whole
commitlog (97 s for the 20M entries of one index file). So the segment task, which has just read
every record of its segment (``verify.scan.scan_records``: topic key, tagsCode, the spans of KEYS
/ UNIQ_KEY, in the same pass as the field checks), checks the units and entries that point into
its segment (found by two binary searches: units and entries are in commitlog order; the queue and
index tasks check a file out of order whole themselves). A file is opened for a segment only when
the offsets of its first and last unit / entry, read once per verify and process
(``file_bounds``), bracket part of the segment, and a file opened is kept for the next segments
(``VerifyContext.targets``): the files read grow with the units and entries to check, not with
segments times files. The comparisons are compiled and read the files in place: the units of all
the segment's queue files in one pass over the records (``verify.scan.units_by_records``: each
record checks the unit at its queue offset); a file with a unit that points elsewhere, and each
range of an index file's entries, by finding each one's record in one sweep over the record
positions (``units_against``, ``entries_against``: one 64-byte row gathered each). The pieces run
on the segment's threads and their findings are named file by file afterwards, in order. A target
that is not the start of a record that passed every field check (a damaged segment), and every
target that fails a check, goes through the per-offset checks (``verify.consumequeue.deep_units``,
``verify.indexfile.deep_index``), so a problem is named in the same words whichever task finds it.
Units and entries pointing into a missing segment are left to the queue and index tasks.

Topics are compared by two independent 32-bit hashes of their bytes (Java's String.hashCode and
CRC-32): a different topic passes only if both collide.
"""
from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, TypeVar

import numpy as np

from ..codec import messages as codec
from ..format import consumequeue, indexfile
from ..compute import kernels
from ..format.config import StoreConfig
from ..io import storage
from .access import FileData, MAX_PROBLEMS_PER_FILE, Problem, SegmentLookup, VerifyContext
from .kernels import bisect_range
from .scan import entries_against, units_against, units_by_records

__all__ = ["RecordFacts", "topic_key", "check_targets", "file_bounds", "index_extent"]

ENTRIES_PER_PIECE = 1 << 18          # an index file's entries in one segment, checked as pieces of this many
CHUNK_UNITS = 1 << 16                # a queue's last file read this many units at a time for its units in use
BOUNDS_READERS = 16                  # object stores: files whose bounds are read at once


def topic_key(topic: str) -> int:
    """The two hashes of a topic name as one int64: ``String.hashCode << 32 | crc32``."""
    raw = np.frombuffer(topic.encode("utf-8"), np.uint8)
    jh = kernels.java_hash_utf8(raw, np.array([0, len(raw)], np.int64))[0][0]
    return (int(jh) << 32 | zlib.crc32(raw.tobytes())) - (1 << 64 if int(jh) >= 1 << 31 else 0)


class RecordFacts:
    """The records of one segment that passed every field check, in commitlog order: their
    positions and their ``verify.scan`` rows (tagsCode of delay messages patched in)."""

    def __init__(self, buf: np.ndarray, base: int, starts: np.ndarray, scan: tuple, good: np.ndarray,
                 config: StoreConfig):
        recs, _, delay = scan
        self.buf = buf
        every = bool(good.all())
        keep = None if every else np.flatnonzero(good)
        self.starts = np.asarray(starts, np.int64) if every else np.asarray(starts, np.int64)[keep]
        self.recs = recs if every else recs[keep]                # (no copy when all records are sound)
        self.base = base
        pairs = delay.reshape(-1, 2)
        self._delay_tags(pairs if every else pairs[keep], config)

    def _delay_tags(self, delay: np.ndarray, config: StoreConfig) -> None:
        """tagsCode of a delay message (docs/FORMAT.md §2): its deliver time, store time + the delay."""
        sched = np.flatnonzero((self.recs["topic_key"] == topic_key(codec.SCHEDULE_TOPIC)) & (delay[:, 0] >= 0))
        delays = config.delay_level_millis
        for i in sched:                                      # delay messages only (few)
            s = int(self.starts[i])
            try:
                level = int(self.buf[s + int(delay[i, 0]):s + int(delay[i, 1])].tobytes().decode("utf-8", "replace"))
            except ValueError:
                continue
            level = min(level, len(delays))
            if level > 0:
                self.recs["tags"][i] = int(self.recs["store_ts"][i]) + delays[level - 1]


def check_targets(ctx: VerifyContext, store: storage.Store, facts: RecordFacts, out: list[Problem],
                  pool: ThreadPoolExecutor | None = None, threads: int = 1, segment: FileData | None = None) -> None:
    """The units and index entries pointing into the segment of ``facts`` (see the module doc);
    the pieces run on ``pool`` (``threads`` workers) when given. ``segment``: the segment's file
    as its task read it, for the per-offset checks of targets in it (a record the scan left to
    the slow path: not opened, or downloaded, again)."""
    cfg = ctx.config
    base = facts.base
    seg = (max(base, ctx.min_phy), base + cfg.mappedFileSizeCommitLog)
    look = SegmentLookup(store, ctx.segments, cfg.mappedFileSizeCommitLog)
    if segment is not None:
        look.cache[segment.rel] = segment
    bounds = file_bounds(ctx, store)
    kept = ctx.targets
    jobs: list[tuple[int | None, Callable[[], Any]]] = []        # (file, piece): None is the units' sweep
    files: list[tuple[str, tuple[Any, ...]]] = []
    unit_files = []
    for q in ctx.queues:
        for f in q["files"]:
            fb = bounds.get(f["path"])
            if fb is None or not _meets(fb, seg):
                continue
            r = _unit_range(kept.file(store, f["path"]), fb[0], seg)
            if r is not None:
                files.append(("units", (q["topic"], q["queue_id"], f, r[0])))
                unit_files.append((len(files) - 1, r + (f["base"] // consumequeue.UNIT_SIZE, topic_key(q["topic"]),
                                                        q["queue_id"])))
    if unit_files:
        sweep = [(buf, a, b, first_q, tkey, qid) for _, (buf, _, a, b, first_q, tkey, qid) in unit_files]
        jobs.append((None, partial(units_by_records, facts.starts, facts.base, facts.recs, sweep)))
    for x in ctx.index_files:
        fb = bounds.get(x["path"])
        if fb is None or not _meets(fb, seg):
            continue
        span = _entry_span(cfg, kept.file(store, x["path"]), fb[0], fb[1], seg)
        if span is None:
            continue
        files.append(("entries", (x["path"],) + span))
        p0, p1 = span[4], span[5]
        step = max(ENTRIES_PER_PIECE, -(-(p1 - p0) // max(1, threads)))
        for a in range(p0, p1, step):
            jobs.append((len(files) - 1, partial(_entry_masks, facts, span[0], span[2], a, min(p1, a + step),
                                                 span[3]["begin_timestamp"])))
    per_file: dict[int, list[Any]] = {}
    fallback: list[tuple[int, Callable[[], Any]]] = []
    for i, r in _run(jobs, pool, threads):
        if i is not None:
            per_file.setdefault(i, []).append(r)
            continue
        for (k, (fd_u, n, a, b, first_q, tkey, qid)), bad in zip(unit_files, r):    # the units' sweep
            if bad is None:                  # a unit the sweep did not reach: find what each points at
                fallback.append((k, partial(_unit_masks, facts, fd_u, n, a, b, first_q, tkey, qid)))
            else:
                per_file[k] = [(n, np.zeros(0, np.int64), bad)]
    for k, r in _run(fallback, pool, threads):
        per_file.setdefault(k, []).append(r)
    for i, (kind, what) in enumerate(files):
        if i in per_file:
            name = _name_units if kind == "units" else _name_entries
            name(ctx, cfg, look, what, per_file[i], out)


def file_bounds(ctx: VerifyContext, store: storage.Store) -> dict:
    """{path: bounds} of every queue and index file of ``ctx``, read once per verify and process
    (``ctx.targets``; the first segment task reads them, the others wait): a queue file's (units
    in use, lowest and highest commitlog offset of its first and last unit), an index file's
    (entries visible, header, lowest and highest offset of its first and last entry, 1 and
    count - 1); none for a missing file or one without units / entries. Units and entries are in
    commitlog order (else the queue and index tasks check the file's whole), so a segment outside
    a file's bounds has nothing of it to check, and the file is not opened for that segment. A few
    bytes of each file are read (each unit of a queue's last file until the first not in use),
    in place: on object stores by ranged reads, ``BOUNDS_READERS`` at once."""
    kept = ctx.targets
    with kept.bounds_lock:
        if kept.bounds is None:
            cfg = ctx.config
            jobs: list[tuple[str, Callable[[], Any]]] = [
                (f["path"], partial(_queue_bounds, store, cfg, f["path"], k == len(q["files"]) - 1))
                for q in ctx.queues for k, f in enumerate(q["files"])]
            jobs += [(x["path"], partial(_index_bounds, store, cfg, x)) for x in ctx.index_files]
            if store.os_paths or len(jobs) < 2:
                got = [(rel, job()) for rel, job in jobs]
            else:                            # latency-bound reads
                with ThreadPoolExecutor(max_workers=min(BOUNDS_READERS, len(jobs))) as readers:
                    got = list(readers.map(lambda j: (j[0], j[1]()), jobs))
            kept.bounds = {rel: b for rel, b in got if b is not None}
        return kept.bounds


def _meets(fb: tuple, seg: tuple[int, int]) -> bool:
    """Whether a file's [lowest, highest] offsets (``file_bounds``: its last two values) meet the segment's [start, end)."""
    return fb[-2] < seg[1] and fb[-1] >= seg[0]


def _int64_at(store: storage.Store, rel: str, pos: int) -> int | None:
    """The big-endian int64 at ``pos`` of ``rel`` (a ranged read), None past its end."""
    raw = store.read(rel, pos, 8)
    return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else None


def _queue_bounds(store: storage.Store, cfg: StoreConfig, rel: str, last: bool) -> tuple[int, int, int] | None:
    """(units in use, lowest, highest offset of the first and last unit) of a queue file (a last
    one's units in use: a broker's view, ``consumequeue.leading_units``), or None."""
    size = store.size(rel)
    if size is None:
        return None
    n = min(size, cfg.cq_file_size) // consumequeue.UNIT_SIZE
    first = end = None
    if last:
        n, first, end = _units_in_use(store, rel, n)
    elif n:
        first, end = (_int64_at(store, rel, i * consumequeue.UNIT_SIZE + consumequeue.UNIT_PHYSICALOFFSET)
                      for i in (0, n - 1))
    if n == 0 or first is None or end is None:
        return None
    return n, min(first, end), max(first, end)


def _units_in_use(store: storage.Store, rel: str, n: int) -> tuple[int, int | None, int | None]:
    """(units in use, offset of the first, of the last) of a queue's last file of ``n`` units:
    read ``CHUNK_UNITS`` at a time until one is not in use (``consumequeue.valid_units``)."""
    first = end = None
    done = 0
    while done < n:
        want = min(n - done, CHUNK_UNITS)
        raw = store.read(rel, done * consumequeue.UNIT_SIZE, want * consumequeue.UNIT_SIZE)
        u = consumequeue.decode_units(raw[:len(raw) // consumequeue.UNIT_SIZE * consumequeue.UNIT_SIZE])
        good = consumequeue.valid_units(u)
        if good:
            first = int(u["phys"][0]) if first is None else first
            end = int(u["phys"][good - 1])
        done += good
        if good < want:
            break
    return done, first, end


def _index_bounds(store: storage.Store, cfg: StoreConfig, x: dict) -> tuple[int, dict, int, int] | None:
    """(entries visible, header, lowest, highest offset of entries 1 and count - 1) of index file
    ``x`` (``index_extent``), or None."""
    rel = x["path"]
    size = store.size(rel)
    if size is None:
        return None
    count, header = index_extent(cfg, size, x, lambda: store.read(rel, 0, indexfile.HEADER_SIZE))
    if count <= 1 or header is None:
        return None
    at = indexfile.entries_offset(cfg) + indexfile.ENTRY_PHY_OFFSET
    first, end = (_int64_at(store, rel, at + p * indexfile.ENTRY_SIZE) for p in (1, count - 1))
    if first is None or end is None:
        return None
    return count, header, min(first, end), max(first, end)


K = TypeVar("K")


def _run(pieces: list[tuple[K, Callable[[], Any]]], pool: ThreadPoolExecutor | None,
         threads: int) -> list[tuple[K, Any]]:
    """(key, answer) of each piece, on ``pool`` when it has more than one thread."""
    if pool is not None and threads > 1:
        return list(pool.map(lambda j: (j[0], j[1]()), pieces))
    return [(key, piece()) for key, piece in pieces]


def _unit_range(fd: FileData, n: int, seg: tuple[int, int]):
    """(file, units in use, a, b): the units [a, b) of the ``n`` units in use of the queue file
    ``fd`` pointing into the segment ``seg``, or None."""
    n = min(n, fd.size // consumequeue.UNIT_SIZE)            # (a file cut since its bounds were read)
    # A queue's units ascend (else the queue task reports it and checks that file's units itself).
    a, b = bisect_range(fd.buf, consumequeue.UNIT_PHYSICALOFFSET, consumequeue.UNIT_SIZE, n, seg[0], seg[1])
    return (fd.buf, n, a, b) if a < b else None


def _unit_masks(facts, buf, n, a, b, first_q, tkey, qid):
    """(units in the file, unit indexes not at a sound record, indexes disagreeing with their
    record) of units [a, b) of a queue file's bytes ``buf``, each found by its offset."""
    missing, bad = units_against(buf, a, b, facts.starts, facts.base, facts.recs, first_q, tkey, qid)
    return n, missing, bad


def _name_units(ctx, cfg, look, what, parts, out) -> None:
    """Units found wrong, named by the per-offset checks (their words; the record decoded as Java does)."""
    from .consumequeue import QueueUnits, deep_units
    topic, qid, f, buf = what
    (n, missing, bad), = parts
    first_q = f["base"] // consumequeue.UNIT_SIZE
    if not len(missing) and not len(bad):
        return
    u = consumequeue.decode_units(buf[:n * consumequeue.UNIT_SIZE])
    units = QueueUnits(f["path"], topic, qid, first_q, u["phys"], u["size"], u["tags"])
    if len(missing):                                         # not a sound record start
        deep_units(look, cfg, units, ctx.min_phy, out, subset=missing)
    if len(bad):
        deep_units(look, cfg, units, ctx.min_phy, out, subset=bad[:MAX_PROBLEMS_PER_FILE])


def index_extent(cfg: StoreConfig, size: int, x: dict, head: Callable[[], Any]) -> tuple[int, dict | None]:
    """(entries visible, header) of index file ``x`` (``path``, snapshot ``header`` or None) of
    ``size`` bytes: the snapshot's indexCount and header when the manifest has them (later
    entries are a newer batch's), else the file's own (``head()``: its first bytes); clamped to
    what the configuration and the file hold."""
    header = x.get("header")
    if header is None:
        if size < indexfile.HEADER_SIZE:
            return 0, None
        header = indexfile.IndexHeader.parse(bytes(head()[:indexfile.HEADER_SIZE])).to_dict()
    ent_at = indexfile.entries_offset(cfg)
    room = max(0, (min(size, cfg.index_file_size) - ent_at) // indexfile.ENTRY_SIZE)
    return max(0, min(header["index_count"], cfg.maxIndexNum, room)), header


def _entry_span(cfg: StoreConfig, fd: FileData, count: int, header: dict, seg: tuple[int, int]):
    """(file, entries, entries offset, header, first, end): the entry positions [first, end) of
    the ``count`` entries visible of index file ``fd`` that point into the segment (never entry
    0), or None."""
    ent_at = indexfile.entries_offset(cfg)
    count = min(count, max(0, (fd.size - ent_at) // indexfile.ENTRY_SIZE))   # (a file cut since)
    # Entries are written in commitlog order (else the index task checks that file's entries itself).
    a, b = bisect_range(fd.buf, ent_at + indexfile.ENTRY_PHY_OFFSET, indexfile.ENTRY_SIZE, count, seg[0], seg[1])
    if max(a, 1) >= b:
        return None
    ents = fd.buf[ent_at:ent_at + count * indexfile.ENTRY_SIZE].view(indexfile.ENTRY_DTYPE)
    return fd, ents, ent_at, header, max(a, 1), b


def _entry_masks(facts, fd, ent_at, a, b, begin):
    """(positions not at a sound record, positions disagreeing with their record) of entries [a, b)."""
    return entries_against(fd.buf, ent_at, a, b, facts.buf, facts.starts, facts.base, facts.recs, begin)


def _name_entries(ctx, cfg, look, what, parts, out) -> None:
    """Entries found wrong, named by the per-offset checks (their words; the record decoded as Java does)."""
    from .indexfile import IndexEntries, deep_index
    rel, _, ents, ent_at, header = what[:5]
    missing = np.concatenate([p[0] for p in parts])
    bad = np.concatenate([p[1] for p in parts])
    if not len(missing) and not len(bad):
        return
    entries = IndexEntries(rel, ent_at, ents)
    if len(missing):                                         # not a sound record start
        deep_index(ctx, entries, header, out, subset=missing, header_checks=False)
    if len(bad):
        deep_index(ctx, entries, header, out, subset=bad[:MAX_PROBLEMS_PER_FILE], header_checks=False)
