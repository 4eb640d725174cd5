"""Splits inside commitlog segments, and the consume-queue read of a topic filter (the
``rocketmq`` data source's plan and its tasks).

A segment is read by several tasks at once, each one a ``Split``: the records starting in
[start, stop) of one segment.

* Walk splits (every record of the range): a split starts on a record start found through the
  consume queues: the first unit at or after the wanted byte position in a few of the densest
  queues (a binary search over their units, read in small blocks). A unit is a record start
  by construction; the start is also checked (MAGIC, PHYSICALOFFSET = its own position), and
  a split's walk must end exactly where the next split starts, else ``CorruptStore``. A
  segment's last split walks on like a broker's recovery (to a BLANK, a zero size or an
  unknown magic). Without consume queues (or a segment no queue points into) a segment is one
  split.
* Queue splits (a ``topic`` filter, =/IN): the records of the topics' queues whose units point
  into [start, stop) (any byte positions: the units say where records start), sorted by
  offset, read as byte ranges coalesced across gaps up to ``coalesce_gap`` bytes (reading a
  small gap beats another request), decoded and checked against their units (PHYSICALOFFSET
  and TOTALSIZE; a mismatch is ``CorruptStore``) and their topic. Only when every record has a
  unit: a rocketlake snapshot whose live consume-queue units number its live records
  (``queue_plan_ok``; transaction PREPARED/ROLLBACK records have no unit, multi-dispatch queues
  hold extra ones). Otherwise the filter walks every record and keeps the topic's.

Either way the rows and their order (commitlog order) are those of a walk over the whole
segment with the same filters.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..format import commitlog as cl
from ..format.consumequeue import UNIT_DTYPE, UNIT_SIZE
from ..errors import CorruptStore
from ..io.checked import read_stored
from .tasks import task_count

if TYPE_CHECKING:
    import pyarrow as pa

    from ..io.protocol import Store
    from .queuemins import QueueMins
    from ..table.storefiles import CommitLogSegment, ConsumeQueueFile, SnapshotInfo, StoreFiles

# A coalesced read: (bytes, record starts in them, the records' commitlog offsets, their sizes)
Chunk = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# One queue's files as a split carries them: (rel, base, units) tuples
QueueFiles = tuple[tuple[str, int, int], ...]

# The reading half (tasks) imports the decoder (codec: compiled kernels) and pyarrow where it
# runs: planning runs in short-lived processes that need neither.

__all__ = ["SPLIT_BYTES", "BATCH_ROWS", "COALESCE_LOCAL", "Split", "QueueUnits", "queue_plan_ok", "refuse_expired",
           "plan_splits", "group_splits", "split_messages"]

SPLIT_BYTES = 256 << 20        # bytes of commitlog per split (a task: each costs Spark a Python round trip)
BATCH_ROWS = 65536             # rows per Arrow batch handed to Spark (fewer, larger batches: less per-batch cost)
COALESCE_LOCAL = 64 << 10      # read across a gap up to this many bytes (local files)
COALESCE_REMOTE = 1 << 20      # (object stores: a request costs about a megabyte of transfer)
MAX_RANGE = 32 << 20           # a coalesced read is at most this large (memory per task)
_JOIN_LIMIT = 4 << 20          # coalesced reads smaller than this are joined into one buffer per decode
_BLOCK_UNITS = 1024            # units per consume-queue read of the binary search (20 KiB)
_SEARCH_QUEUES = 3             # queues searched for each split boundary (the densest)
_MULTI_DISPATCH_PREFIX = "%LMQ%"


class Split(NamedTuple):
    rel: str                    # the segment's file (as StoreFiles names it)
    base: int                   # the segment's first offset
    valid: int                  # the segment's valid bytes
    start: int                  # records starting in [start, stop) (absolute commitlog offsets)
    stop: int
    queues: tuple[QueueFiles, ...] | None = None   # queue splits: each queue's files; None: a walk

    @property
    def last(self) -> bool:
        return self.stop >= self.base + self.valid


# ----------------------------------------------------------------------------- consume-queue units
class QueueUnits:
    """The valid units of one queue (its files in order) as one sorted sequence, read on demand in
    blocks of ``_BLOCK_UNITS`` (a binary search touches a few blocks, not the whole queue)."""

    def __init__(self, store: Store, files: Sequence[ConsumeQueueFile] | QueueFiles):
        self.store = store
        self.files: list[tuple[str, int, int]] = [(str(f[0]), int(f[1]), int(f[2])) for f in files if f[2] > 0]
        self.cum = np.concatenate([[0], np.cumsum([f[2] for f in self.files])]).astype(np.int64)
        self.n = int(self.cum[-1])
        self._blocks: dict[tuple[int, int], np.ndarray] = {}

    def _read(self, fi: int, u0: int, u1: int) -> np.ndarray:
        rel = self.files[fi][0]
        raw = read_stored(self.store, rel, u0 * UNIT_SIZE, (u1 - u0) * UNIT_SIZE)
        return np.frombuffer(raw, UNIT_DTYPE)

    def phys(self, k: int) -> int:
        fi = bisect.bisect_right(self.cum, k) - 1
        j = k - int(self.cum[fi])
        b = j // _BLOCK_UNITS
        blk = self._blocks.get((fi, b))
        if blk is None:
            u0 = b * _BLOCK_UNITS
            blk = self._blocks[(fi, b)] = self._read(fi, u0, min(u0 + _BLOCK_UNITS, self.files[fi][2]))["phys"]
        return int(blk[j - b * _BLOCK_UNITS])

    def lower_bound(self, x: int) -> int:
        """Index of the first unit whose commitlog offset is >= x (``n``: none)."""
        lo, hi = 0, self.n
        while lo < hi:
            mid = (lo + hi) // 2
            if self.phys(mid) < x:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def units(self, k0: int, k1: int) -> tuple[np.ndarray, np.ndarray]:
        """(commitlog offsets, sizes) of units [k0, k1), units not in use (size <= 0) left out."""
        phys, size = [], []
        fi = max(0, bisect.bisect_right(self.cum, k0) - 1)
        while k0 < k1 and fi < len(self.files):
            a, b = k0 - int(self.cum[fi]), min(k1, int(self.cum[fi + 1])) - int(self.cum[fi])
            if b > a:
                u = self._read(fi, a, b)
                phys.append(u["phys"].astype(np.int64))
                size.append(u["size"].astype(np.int64))
                k0 = int(self.cum[fi]) + b
            fi += 1
        if not phys:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        p, s = np.concatenate(phys), np.concatenate(size)
        keep = s > 0
        return (p, s) if keep.all() else (p[keep], s[keep])


def queue_plan_ok(files: StoreFiles, info: SnapshotInfo | None) -> bool:
    """Every live record has exactly one live consume-queue unit: a rocketlake snapshot whose
    queues' valid units number its segments' records, with no multi-dispatch queue."""
    counts = getattr(info, "seg_count", None) or {}
    if getattr(info, "source", None) != "manifest" or not files.commitlog:
        return False
    if any(counts.get(s.base) is None for s in files.commitlog):
        return False
    if any(t.startswith(_MULTI_DISPATCH_PREFIX) for t, _ in files.consume_queues):
        return False
    units = sum(f.units for fs in files.consume_queues.values() for f in fs)
    return bool(units == sum(int(counts[s.base]) for s in files.commitlog))


# ----------------------------------------------------------------------------- planning
def _is_record_start(store: Store, seg: CommitLogSegment, pos: int) -> bool:
    rel_pos = pos - seg.base
    if rel_pos < 0 or rel_pos + cl.POS_PHYSICALOFFSET + cl.SIZE_PHYSICALOFFSET > seg.valid:
        return False
    try:
        raw = store.read(seg.rel, rel_pos, cl.POS_PHYSICALOFFSET + cl.SIZE_PHYSICALOFFSET)
    except OSError:
        return False
    if len(raw) < cl.POS_PHYSICALOFFSET + cl.SIZE_PHYSICALOFFSET:
        return False
    size = int.from_bytes(raw[0:4], "big", signed=True)
    magic = int.from_bytes(raw[4:8], "big", signed=True)
    phys = int.from_bytes(raw[cl.POS_PHYSICALOFFSET:cl.POS_PHYSICALOFFSET + 8], "big", signed=True)
    return size > 0 and magic in (cl.MAGIC_V1, cl.MAGIC_V2) and phys == pos and rel_pos + size <= seg.valid


def _record_boundaries(store: Store, seg: CommitLogSegment, targets: list[int], queues: list[QueueUnits]) -> list[int]:
    """Record starts at or after each target (the nearest any searched queue knows), checked;
    sorted, unique, strictly inside the segment."""
    end = seg.base + seg.valid
    out: set[int] = set()
    for x in targets:
        best: int | None = None
        for q in queues:
            k = q.lower_bound(x)
            if k < q.n:
                p = q.phys(k)
                if x <= p < end and (best is None or p < best):
                    best = p
        if best is not None and best > seg.base and _is_record_start(store, seg, best):
            out.add(best)
    return sorted(out)


def plan_splits(store: Store, files: StoreFiles, segs: Sequence[CommitLogSegment], topics: set[str] | None = None,
                queue_plan: bool = False, lo: int | None = None, hi: int | None = None,
                split_bytes: int = SPLIT_BYTES, info: SnapshotInfo | None = None, begin: int | None = None,
                end: int | None = None) -> list[Split]:
    """The splits of ``segs`` (already pruned): queue splits for ``topics`` when ``queue_plan``,
    else walk splits. ``lo``/``hi``: inclusive commitlog-offset bounds; splits wholly outside
    them are left out. A segment with a zone map (``info.zones``, ``table.zonemap``) is cut on
    zone starts, and only its runs of zones meeting store time [``begin``, ``end``] are read.
    A file of an older batch an expiry deleted is said so (``table.expired``)."""
    from ..table.expired import explained
    with explained(store, files.expired):
        return _plan_splits(store, files, segs, topics, queue_plan, lo, hi, max(1, int(split_bytes)), info, begin, end)


def refuse_expired(as_of_batch: str | int | None, store: Store, files: StoreFiles, rels: Iterable[str]) -> None:
    """A plan of an older batch (``as_of_batch`` given) that reads a file (``rels``) an expiry after
    that batch deleted is refused on the driver, naming the file and the expiry (``table.expired``):
    a task of either engine would only find the file missing (the history is read only when a
    planned file is no longer live: ``ExpiredFiles.check``)."""
    if as_of_batch not in (None, "") and files.expired is not None:
        files.expired.check(store, sorted(rels))


def _plan_splits(store: Store, files: StoreFiles, segs: Sequence[CommitLogSegment], topics: set[str] | None,
                 queue_plan: bool, lo: int | None, hi: int | None, split_bytes: int, info: SnapshotInfo | None,
                 begin: int | None, end: int | None) -> list[Split]:
    out = []
    qsel: tuple[QueueFiles, ...] | None = None
    if queue_plan and topics is not None:
        qsel = tuple(tuple((f.rel, f.base, f.units) for f in fs) for (t, _), fs in sorted(files.consume_queues.items())
                     if t in topics and fs)
        if not qsel:
            return []
    dense: list[QueueUnits] | None = None
    for seg in segs:
        zoned = _zoned_edges(store, seg, info, begin, end, split_bytes)
        if zoned is not None:
            runs = zoned
        else:
            k = -(-seg.valid // split_bytes)
            targets = [seg.base + (seg.valid * i) // k for i in range(1, k)]
            if qsel is not None:
                bounds = sorted(set(targets))
            elif targets:
                if dense is None:
                    ranked = sorted(files.consume_queues.values(), key=lambda fs: -sum(f.units for f in fs))
                    dense = [QueueUnits(store, fs) for fs in ranked[:_SEARCH_QUEUES]]
                bounds = _record_boundaries(store, seg, targets, dense)
            else:
                bounds = []
            runs = [[seg.base] + bounds + [seg.base + seg.valid]]
        for edges in runs:
            for a, b in zip(edges, edges[1:]):
                if (lo is not None and b <= lo) or (hi is not None and a > hi):
                    continue
                out.append(Split(seg.rel, seg.base, seg.valid, a, b, qsel))
    return out


def group_splits(splits: Sequence[Split], parallelism: int, split_bytes: int = SPLIT_BYTES) -> list[list[Split]]:
    """``splits`` (in plan order) as ``task_count`` runs of consecutive splits of about equal
    bytes, about ``split_bytes`` each: splits of small segments share a task, as Spark's file
    sources pack small files; no two splits of ``split_bytes`` or more share one."""
    sizes = [max(1, s.stop - s.start) for s in splits]
    k = task_count(sizes, max(1, parallelism), split_bytes)
    total = sum(sizes)
    out: list[list[Split]] = []
    last, before = -1, 0
    for sp, n in zip(splits, sizes):
        g = ((2 * before + n) * k) // (2 * total)       # the group of the split's middle byte
        if g != last:
            out.append([])
            last = g
        out[-1].append(sp)
        before += n
    return out


def _zoned_edges(store: Store, seg: CommitLogSegment, info: SnapshotInfo | None, begin: int | None, end: int | None,
                 split_bytes: int) -> list[list[int]] | None:
    """Per run of zones meeting [begin, end]: its split edges (absolute offsets, zone starts,
    about ``split_bytes`` apart); None: the segment has no usable zone map."""
    zm = info.zones(seg.base) if info is not None else None
    if zm is None:
        return None
    zm = zm.clip(seg.valid)
    if not len(zm.pos) or int(zm.pos[0]) != 0:
        return None
    out: list[list[int]] = []
    checked: dict[int, bool] = {}
    for a, b, _, _ in zm.runs(seg.valid, begin, end):
        k = -(-(b - a) // split_bytes)
        cuts = {zm.aligned(seg.valid, a + ((b - a) * i) // k) for i in range(1, k)}
        edges = [a] + sorted(c for c in cuts if c is not None and a < c < b) + [b]
        for e in edges:
            if e not in checked:
                checked[e] = e == 0 or e == seg.valid or _is_record_start(store, seg, seg.base + e)
            if not checked[e]:
                return None           # the file disagrees with the map: plan as if there were none
        out.append([seg.base + e for e in edges])
    return out


# ----------------------------------------------------------------------------- reading
def _walk_chunks(store: Store, sp: Split, chunk: int) -> Iterator[tuple[np.ndarray, int, np.ndarray]]:
    """(buf, buf's commitlog offset, record starts in buf) over the records of a walk split.
    The walk must end exactly at ``stop``, or for the segment's last split at a BLANK record (a
    full segment's end): the valid bytes were read as records by whatever set them (the manifest,
    a broker's recovery), so a zero size, an unknown magic or a record running past them before
    they end is damage (``CorruptStore``), never a read that ends early in silence."""
    from ..codec import messages as codec
    pos, stop = sp.start - sp.base, sp.stop - sp.base
    size = chunk
    blank = False
    while stop - pos >= cl.BLANK_SIZE:
        end = min(stop, pos + size)
        buf = np.frombuffer(read_stored(store, sp.rel, pos, end - pos), np.uint8)
        starts, at, reason = codec.record_starts(buf)
        if len(starts):
            yield buf, sp.base + pos, starts
        if reason == 1:                             # BLANK record
            pos += at
            blank = True
            break
        if reason == 2:
            rec_size, magic = cl.parse_size_magic(buf, at)
            if rec_size <= 0 or magic not in (cl.MAGIC_V1, cl.MAGIC_V2) or end >= stop:
                pos += at                           # end of data, or a record running past the split
                break
            if at == 0:                             # a record longer than the chunk
                size = max(size * 2, rec_size + cl.BLANK_SIZE)
                continue
            pos += at
            size = max(chunk, rec_size + cl.BLANK_SIZE)
            continue
        pos += at
        size = chunk
        if end >= stop:
            break
    if not sp.last and pos != stop:
        raise CorruptStore(sp.rel, pos, f"the records do not end at {stop}, where a consume-queue unit says the "
                                        "next record starts")
    if sp.last and not blank and pos < stop:
        raise CorruptStore(sp.rel, pos, f"the records end here, before the segment's {sp.valid} valid bytes (a zero "
                                        "size, an unknown magic or a record running past them)")


def _coalesce(phys: np.ndarray, size: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """[(first, last + 1)] index ranges of records read together: the next record starts at most
    ``gap`` bytes after the end of the one before, and the range stays under MAX_RANGE."""
    if not len(phys):
        return []
    ends = phys + size
    brk = np.flatnonzero(phys[1:] - ends[:-1] > gap) + 1
    out = []
    edges = np.concatenate([[0], brk, [len(phys)]])
    for a, b in zip(edges[:-1], edges[1:]):
        a, b = int(a), int(b)
        while a < b:                               # split ranges longer than MAX_RANGE
            lim = phys[a] + MAX_RANGE
            c = a + max(1, int(np.searchsorted(ends[a:b], lim, "right")))
            out.append((a, min(c, b)))
            a = min(c, b)
    return out


def _queue_chunks(store: Store, sp: Split, lo: int | None, hi: int | None, gap: int,
                  batch_rows: int) -> Iterator[Chunk]:
    """(buf, 0, starts in buf, expected offsets, expected sizes) of the queue split's records,
    about ``batch_rows`` at a time."""
    start = sp.start if lo is None else max(sp.start, lo)
    stop = sp.stop if hi is None else min(sp.stop, hi + 1)
    if start >= stop:
        return
    phys_parts, size_parts = [], []
    for fs in sp.queues or ():
        q = QueueUnits(store, fs)
        k0, k1 = q.lower_bound(start), q.lower_bound(stop)
        if k1 > k0:
            p, s = q.units(k0, k1)
            keep = (p >= start) & (p < stop)
            phys_parts.append(p[keep])
            size_parts.append(s[keep])
    if not phys_parts:
        return
    phys, size = np.concatenate(phys_parts), np.concatenate(size_parts)
    order = np.argsort(phys, kind="stable")
    phys, size = phys[order], size[order]
    seg_end = sp.base + sp.valid
    if len(phys) and (phys[-1] + size[-1] > seg_end or (size < cl.BLANK_SIZE).any()):
        bad = int(np.flatnonzero((phys + size > seg_end) | (size < cl.BLANK_SIZE))[0])
        raise CorruptStore(sp.rel, int(phys[bad] - sp.base), f"a consume-queue unit of {int(size[bad])} bytes points "
                                                             "past the segment's valid bytes")
    pend: list[Chunk] = []
    rows = nbytes = 0
    for a, b in _coalesce(phys, size, gap):
        r0 = int(phys[a])
        r1 = int(phys[b - 1] + size[b - 1])
        buf = np.frombuffer(read_stored(store, sp.rel, r0 - sp.base, r1 - r0), np.uint8)
        part = (buf, phys[a:b] - r0, phys[a:b], size[a:b])
        if len(buf) >= _JOIN_LIMIT:                # large enough alone: not copied into a joint buffer
            if pend:
                yield _joined(pend)
                pend, rows, nbytes = [], 0, 0
            yield part
            continue
        pend.append(part)
        rows += b - a
        nbytes += len(buf)
        if rows >= batch_rows or nbytes >= 2 * _JOIN_LIMIT:
            yield _joined(pend)
            pend, rows, nbytes = [], 0, 0
    if pend:
        yield _joined(pend)


def _joined(pend: list[Chunk]) -> Chunk:
    if len(pend) == 1:
        buf, starts, p, s = pend[0]
        return buf, starts, p, s
    lens = np.array([len(x[0]) for x in pend], np.int64)
    shift = np.concatenate([[0], np.cumsum(lens)[:-1]])
    buf = np.concatenate([x[0] for x in pend])
    starts = np.concatenate([x[1] + d for x, d in zip(pend, shift)])
    return buf, starts, np.concatenate([x[2] for x in pend]), np.concatenate([x[3] for x in pend])


def split_messages(store: Store, sp: Split, begin: int | None = None, end: int | None = None,
                   topics: set[str] | None = None, lo: int | None = None, hi: int | None = None,
                   batch_rows: int = BATCH_ROWS, coalesce_gap: int | None = None,
                   mins: QueueMins | None = None) -> Iterator[pa.Table]:
    """MESSAGE_SCHEMA tables of one split's records, filtered exactly (store time in
    [begin, end], topic in ``topics``, record start in [lo, hi]), in commitlog order; a walk
    leaves out the records below their queue's minimum offset (``mins``: a queue plan reads
    only the units the queues still hold)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from ..codec import messages as codec
    from .queuemins import drop_below_minimum
    from .rangescan import CHUNK_BYTES, message_table, time_mask, within
    topic_arr = pa.array(sorted(topics), pa.string()) if topics is not None else None
    if sp.queues is not None:
        gap = coalesce_gap if coalesce_gap is not None else \
            COALESCE_LOCAL if getattr(store, "local", False) else COALESCE_REMOTE
        for buf, starts, phys, size in _queue_chunks(store, sp, lo, hi, gap, batch_rows):
            keep = time_mask(buf, starts, begin, end)
            if keep is not None:
                starts, phys, size = starts[keep], phys[keep], size[keep]
            if not len(starts):
                continue
            dec = codec.decode_records(buf, 0, starts, origin=(sp.rel, 0))
            got_phys = dec.column("commitlog_offset").to_numpy()
            got_size = dec.column("store_size").to_numpy()
            if not (np.array_equal(got_phys, phys) and np.array_equal(got_size, size)):
                i = int(np.flatnonzero((got_phys != phys) | (got_size != size))[0])
                raise CorruptStore(sp.rel, int(phys[i] - sp.base),
                                   f"a consume-queue unit says a record of {int(size[i])} bytes starts here; the "
                                   f"record there says offset {int(got_phys[i])}, {int(got_size[i])} bytes")
            dec = dec.filter(pc.is_in(dec.column("topic"), value_set=topic_arr))
            if dec.num_rows:
                yield message_table(dec)
        return
    for buf, base, starts in _walk_chunks(store, sp, CHUNK_BYTES):
        keep, t = within(starts + base, lo, hi), time_mask(buf, starts, begin, end)
        keep = t if keep is None else keep if t is None else keep & t
        if keep is not None and not keep.all():
            starts = starts[keep]
        for k in range(0, len(starts), batch_rows):
            dec = codec.decode_records(buf, base, starts[k:k + batch_rows], origin=(sp.rel, base - sp.base))
            dec = drop_below_minimum(dec, mins)
            if topic_arr is not None:
                dec = dec.filter(pc.is_in(dec.column("topic"), value_set=topic_arr))
            if dec.num_rows:
                yield message_table(dec)
