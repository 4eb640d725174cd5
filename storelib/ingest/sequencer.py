"""Driver-side sequencer: places a batch of messages in the store without seeing the messages.

Input: what the store already holds (``StoreState``) and one small ``SplitSummary`` per input
split (message count, total record bytes, NOT/COMMIT counts per topic/queue, index entry count).
Output: a ``BatchPlan`` that tells every executor task exactly which bytes to write:

* commitlog: one ``SegmentPlan`` per segment file, each a list of ``Piece`` (a row range of one
  split and the absolute offset of its first record). A message of size L stays in the current
  file only if ``L + 8 <= remaining``, else a BLANK closes the file (commitlog.py). A split that
  fits whole in the room left needs nothing more; only a split that straddles a segment boundary
  needs per-message facts around each cut (``get_detail``: ``SplitDetail`` in memory, or
  ``split_facts.ChunkedDetail``, which reads one bounded chunk of rows per cut). Driver memory
  therefore grows with splits and segments, not messages.
* queue offsets: per piece, the first queue offset of every topic/queue in it (counters continue
  per topic/queue; PREPARED/ROLLBACK messages take none).
* index: every index entry gets a global position in dispatch order; ``IndexFilePlan`` cuts that
  sequence into files of ``maxIndexNum - 1`` entries, continuing the store's last file, and adds
  the empty file RocketMQ creates when a message finds the last file full (docs/FORMAT.md §3.4, §9.9).
* consume queue files: ``CQFilePlan`` per (topic, queue, file) touched, continuing the last file.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..format.config import StoreConfig
from ..format import commitlog

__all__ = ["SplitSummary", "SplitDetail", "IndexTail", "StoreState", "Piece", "SplitBase", "SegmentPlan", "CQFilePlan",
           "IndexFilePlan", "BatchPlan", "plan_batch"]

QueueKey = tuple  # (topic, queue_id)


@dataclass
class SplitSummary:
    index: int
    count: int
    total_bytes: int
    queue_counts: dict            # (topic, queue_id) -> NOT/COMMIT messages in the split
    entries: int                  # index entries
    last_entry_row: int = -1      # row of the last message with index entries (-1: none)
    last_store_ts: int = 0
    last_cq_store_ts: int | None = None
    last_wait_store_ts: int | None = None   # store time of the last put that waits for the flush
    min_store_ts: int | None = None
    max_store_ts: int | None = None
    first_store_ts: int | None = None


@dataclass
class SplitDetail:
    """Per-message facts of one split in memory, for splits that straddle a segment boundary.

    What ``plan_batch`` asks of a straddling split's detail (``split_facts.ChunkedDetail``
    answers the same from a staged file, a chunk at a time): ``fit_end``, ``bytes_before``,
    ``entries_before``, ``queue_counts_before``."""
    sizes: np.ndarray             # int64 record sizes
    qkey: np.ndarray              # int32 index into qkeys, -1 for PREPARED/ROLLBACK
    qkeys: list                   # [(topic, queue_id)]
    entries: np.ndarray           # int32 index entries per message

    def _cums(self) -> tuple:
        if not hasattr(self, "_cum"):
            self._cum = (np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)]),
                         np.concatenate([[0], np.cumsum(self.entries, dtype=np.int64)]))
        return self._cum

    def bytes_before(self, row: int) -> int:
        return int(self._cums()[0][row])

    def entries_before(self, row: int) -> int:
        return int(self._cums()[1][row])

    def fit_end(self, row: int, limit: int) -> int:
        """The largest ``end >= row`` with the records of rows ``row..end-1`` at most ``limit`` bytes."""
        cum = self._cums()[0]
        return max(row, int(np.searchsorted(cum, cum[row] + limit, side="right")) - 1)

    def queue_counts_before(self, row: int) -> dict:
        """(topic, queue_id) -> NOT/COMMIT units of the split before ``row``."""
        before = np.bincount(self.qkey[:row][self.qkey[:row] >= 0], minlength=len(self.qkeys))
        return {self.qkeys[i]: int(before[i]) for i in np.flatnonzero(before).tolist()}


@dataclass
class IndexTail:
    """The store's newest index file, as the last committed batch left it."""
    rel_path: str
    header: dict                  # indexfile.IndexHeader fields
    full: bool


@dataclass
class StoreState:
    next_phys: int = 0                                   # end of the last record (max phy offset)
    queue_next: dict = field(default_factory=dict)       # (topic, qid) -> next queue offset
    index_tail: IndexTail | None = None
    index_files: int = 0
    messages: int = 0


@dataclass
class Piece:
    split: int
    row_start: int
    row_end: int
    phys_start: int
    queue_base: dict              # (topic, qid) -> queue offset of the piece's first unit there
    entry_base: int               # batch-global position of the piece's first index entry
    msg_base: int                 # batch-global index of the piece's first message


@dataclass
class SplitBase:
    """Where a split's messages continue the store: its first queue offset per topic/queue and
    its first index entry's batch-global position (a split's own ranks are added to these)."""
    queue_base: dict              # (topic, qid) -> queue offset of the split's first unit there
    entry_base: int


@dataclass
class SegmentPlan:
    base_offset: int
    start_pos: int                # bytes kept from the existing file (0 for a new file)
    end_pos: int                  # position after the last record
    close: bool                   # BLANK record at end_pos (the next file follows)
    pieces: list

    @property
    def rel_path(self) -> str:
        return commitlog.rel_path(self.base_offset)


@dataclass
class CQFilePlan:
    topic: str
    queue_id: int
    file_start_unit: int
    kept_units: int               # units of the existing file kept as they are
    first_unit: int               # queue offset of the first new unit
    count: int                    # new units


@dataclass
class IndexFilePlan:
    ordinal: int                  # 0.. within the batch, creation order
    first_entry: int              # batch-global position of its first new entry
    count: int
    extend: str | None            # rel path of the existing file continued, else None (new file)
    inherit: dict | None          # header end values inherited from a full existing file
    needs_pred: bool              # inherits from the previous entry of this batch (entry first_entry-1)
    roll: bool                    # created because the previous file was full


@dataclass
class BatchPlan:
    segments: list
    cq_files: list
    index_files: list
    messages: int
    total_bytes: int
    entries: int
    next_phys: int
    queue_next: dict
    index_entry_starts: list      # first_entry of every index file plan (for routing)
    split_bases: dict = field(default_factory=dict)   # split -> SplitBase (non-empty splits)

    def index_ordinal(self, entry: np.ndarray) -> np.ndarray:
        starts = np.asarray(self.index_entry_starts, dtype=np.int64)
        return np.searchsorted(starts, entry, side="right") - 1

    def pred_targets(self) -> dict:
        """Batch entry position -> index file ordinals that inherit their header from it."""
        out: dict = {}
        for f in self.index_files:
            if f.needs_pred:
                out.setdefault(f.first_entry - 1, []).append(f.ordinal)
        return out


def plan_batch(state: StoreState, summaries: list, get_detail, config: StoreConfig) -> BatchPlan:
    F = config.mappedFileSizeCommitLog
    pos = state.next_phys
    seg_base = pos // F * F
    segments: list[SegmentPlan] = []
    current = SegmentPlan(seg_base, pos - seg_base, pos - seg_base, False, []) if pos % F else None
    queue_next = dict(state.queue_next)
    entry_run = 0
    msg_run = 0
    last_entry_msg = -1
    split_bases: dict = {}

    def add_piece(split, r0, r1, nbytes, qbase, ebase, mbase):
        nonlocal pos, current
        if current is None or current.base_offset != pos // F * F:
            if current is not None:
                segments.append(current)
            current = SegmentPlan(pos // F * F, 0, 0, False, [])
        current.pieces.append(Piece(split, r0, r1, pos, qbase, ebase, mbase))
        pos += nbytes
        current.end_pos = pos - current.base_offset

    def roll():
        nonlocal pos, current
        if current is None or current.base_offset != pos // F * F:
            if current is not None:
                segments.append(current)
            base = pos // F * F
            current = SegmentPlan(base, pos - base, pos - base, False, [])
        current.close = True
        current.end_pos = pos - current.base_offset
        segments.append(current)
        current = None
        pos = (pos // F + 1) * F

    for s in summaries:
        if s.count == 0:
            continue
        if s.last_entry_row >= 0:
            last_entry_msg = msg_run + s.last_entry_row
        split_bases[s.index] = SplitBase({k: queue_next.get(k, 0) for k in s.queue_counts}, entry_run)
        in_file = pos - pos // F * F
        if in_file + s.total_bytes + commitlog.MIN_BLANK <= F:
            qbase = {k: queue_next.get(k, 0) for k in s.queue_counts}
            add_piece(s.index, 0, s.count, s.total_bytes, qbase, entry_run, msg_run)
        else:
            d = get_detail(s.index)         # SplitDetail or split_facts.ChunkedDetail
            r = 0
            while r < s.count:
                room = F - (pos - pos // F * F)
                # messages r..end-1 fit when each ends at least 8 bytes before the file end
                end = d.fit_end(r, room - commitlog.MIN_BLANK)
                if end > r:
                    qbase = _queue_base_at(d, r, s.queue_counts, queue_next)
                    add_piece(s.index, r, end, d.bytes_before(end) - d.bytes_before(r), qbase,
                              entry_run + d.entries_before(r), msg_run + r)
                    r = end
                if r < s.count:
                    roll()
            del d                           # one split's detail at a time
        for k, c in s.queue_counts.items():
            queue_next[k] = queue_next.get(k, 0) + c
        entry_run += s.entries
        msg_run += s.count
    if current is not None:
        segments.append(current)

    total_bytes = sum(s.total_bytes for s in summaries)
    cq_files = _plan_cq_files(state.queue_next, queue_next, config)
    index_files = _plan_index_files(state, entry_run, msg_run, last_entry_msg, config)
    return BatchPlan(segments=segments, cq_files=cq_files, index_files=index_files, messages=msg_run,
                     total_bytes=total_bytes, entries=entry_run, next_phys=pos, queue_next=queue_next,
                     index_entry_starts=[f.first_entry for f in index_files], split_bases=split_bases)


def _queue_base_at(d, row: int, queue_counts: dict, queue_next: dict) -> dict:
    """Queue offsets at ``row`` of a split, for the topics/queues with units at or after ``row``:
    the split's base plus the units before ``row`` (``queue_counts``: the split's units)."""
    before = d.queue_counts_before(row)
    return {k: queue_next.get(k, 0) + before.get(k, 0) for k, c in queue_counts.items() if before.get(k, 0) < c}


def _plan_cq_files(before: dict, after: dict, config: StoreConfig) -> list:
    U = config.cq_units_per_file
    out = []
    for (topic, qid), end in sorted(after.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        start = before.get((topic, qid), 0)
        if end <= start:
            continue
        for f in range(start // U, (end - 1) // U + 1):
            lo = max(start, f * U)
            hi = min(end, (f + 1) * U)
            out.append(CQFilePlan(topic, qid, f * U, lo - f * U, lo, hi - lo))
    return out


def _plan_index_files(state: StoreState, entries: int, messages: int, last_entry_msg: int,
                      config: StoreConfig) -> list:
    if messages == 0:
        return []
    C = config.maxIndexNum - 1
    tail = state.index_tail
    files: list[IndexFilePlan] = []
    if tail is not None and not tail.full:
        if entries == 0:
            return []
        used = tail.header["index_count"] - 1
        cap0 = C - used
        files.append(IndexFilePlan(0, 0, min(entries, cap0), tail.rel_path, None, False, False))
        full_after = used + files[0].count >= C
    else:
        inherit = None
        if tail is not None:
            inherit = {"end_phy_offset": tail.header["end_phy_offset"],
                       "end_timestamp": tail.header["end_timestamp"]}
        files.append(IndexFilePlan(0, 0, min(entries, C), None, inherit, False, tail is not None))
        full_after = files[0].count >= C
    placed = files[0].count
    while placed < entries:
        n = min(C, entries - placed)
        files.append(IndexFilePlan(len(files), placed, n, None, None, True, True))
        placed += n
        full_after = n >= C
    # A message dispatched after the last file filled up creates one more (empty) file.
    if entries > 0 and full_after and last_entry_msg < messages - 1:
        files.append(IndexFilePlan(len(files), entries, 0, None, None, True, True))
    return files


# The index files of a batch placed elsewhere (a mirror's records come placed by their broker).
plan_index_files = _plan_index_files
__all__ += ["plan_index_files"]
