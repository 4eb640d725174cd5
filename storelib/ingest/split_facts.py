"""What the planner reads of a split that straddles a commitlog segment boundary, in bounded pieces.

The sequencer (storelib.ingest.sequencer) places a split whole when it fits in the room left; only a
split that straddles a boundary needs its per-message facts, and only around each cut: where
the room ends (cumulative record bytes), how many index entries precede the cut, and the
queue offsets at the cut (units per topic/queue before it). Reading a split's whole facts for
that costs the driver memory in proportion to the split (a 1M-row split: ~75 MB per cut), so
the encode task also stages a "planner file" from which the driver reads a fixed-size chunk:

* per message, three raw little-endian int32 columns: record size, index entries, and a
  *planner queue code* (-1: no queue offset, PREPARED/ROLLBACK; ``0..K-1``: the split's
  topic/queue key K; ``K + off(t) + rank % writeQueueNums(t)``: a NOT/COMMIT round-robin row of
  topic t, whose queue is only known on the driver, (position of t at the split start + rank) %
  writeQueueNums, storelib.ingest.topics: its residue class is enough to count its units);
* per chunk start (every ``CHUNK_ROWS`` rows, and the split end): cumulative record bytes,
  cumulative index entries and cumulative units per planner queue code.

The file is a staged arrays file (storelib.ingest.staged_arrays) whose values name the keys and the
round-robin topics. ``ChunkedDetail`` answers the sequencer's questions about a row from the
checkpoint before it plus at most one chunk of rows (ranged reads, one chunk cached): the driver's
memory per straddling split is bounded by the chunk, not the split.
"""
from __future__ import annotations

import numpy as np

from . import staged_arrays

__all__ = ["CHUNK_ROWS", "planner_codes", "planner_file", "ChunkedDetail"]

# Rows per chunk: 64k rows are 768 KiB of the three columns, a few ms to read and scan.
CHUNK_ROWS = 1 << 16
_COLUMNS = ("sizes", "entries", "pcode")      # int32 per message
PLAN_KIND = "split plan"


def planner_codes(qcode: np.ndarray, nkeys: int, rr_topic: np.ndarray, rr_rank: np.ndarray,
                  rr_queue_nums: list) -> np.ndarray:
    """Per message its planner queue code (module docstring) from the encode task's queue codes
    (``qcode``: key index, -2 round-robin NOT/COMMIT, -1 no queue offset)."""
    pcode = qcode.astype(np.int32, copy=True)
    rr = np.flatnonzero(qcode == -2)
    if len(rr):
        nq = np.asarray(rr_queue_nums, np.int64)
        first = nkeys + np.concatenate([[0], np.cumsum(nq)[:-1]])   # first code of each rr topic
        t = rr_topic[rr].astype(np.int64)
        pcode[rr] = (first[t] + rr_rank[rr] % nq[t]).astype(np.int32)
    return pcode


def planner_file(sizes: np.ndarray, entries: np.ndarray, pcode: np.ndarray, keys: list, rr_topics: list,
                 rr_queue_nums: list, chunk_rows: int | None = None) -> list:
    """The planner file of one split, as a list of byte chunks to write back to back."""
    chunk_rows = chunk_rows or CHUNK_ROWS
    n = len(sizes)
    width = len(keys) + int(sum(rr_queue_nums))
    starts = np.arange(0, n, chunk_rows, dtype=np.int64)
    m = len(starts)

    def at_chunk_starts(values: np.ndarray) -> np.ndarray:
        # Cumulative sums at rows 0, C, 2C, ... and n (m + 1 checkpoints).
        out = np.zeros(m + 1, np.int64)
        if n:
            np.cumsum(np.add.reduceat(values.astype(np.int64), starts), out=out[1:])
        return out

    counts = np.zeros((m + 1, width), np.int64)
    rows = np.flatnonzero(pcode >= 0)
    if len(rows):
        per_chunk = np.bincount(rows // chunk_rows * width + pcode[rows], minlength=m * width)
        np.cumsum(per_chunk.reshape(m, width), axis=0, out=counts[1:])
    arrays = {"sizes": sizes.astype("<i4"), "entries": entries.astype("<i4"), "pcode": pcode.astype("<i4"),
              "cum_bytes": at_chunk_starts(sizes).astype("<i8"), "cum_entries": at_chunk_starts(entries).astype("<i8"),
              "counts": counts.astype("<i8")}
    return staged_arrays.file_chunks(PLAN_KIND, arrays, rows=n, chunk_rows=chunk_rows, width=width,
                                     keys=[list(k) for k in keys], rr_topics=list(rr_topics),
                                     rr_queue_nums=[int(x) for x in rr_queue_nums])


class ChunkedDetail:
    """The sequencer's view of one straddling split (``sequencer.SplitDetail``'s methods), read
    from its planner file a chunk at a time. ``rr_start``: each round-robin topic's position at
    the split start (the file records each topic's writeQueueNums)."""

    def __init__(self, store, path: str, rr_start: dict | None = None):
        self.file = staged_arrays.RangedArrays(store, path, PLAN_KIND)
        h = self.file.values
        self.rows, self.chunk_rows, self.width = h["rows"], h["chunk_rows"], h["width"]
        self.nchunks = -(-self.rows // self.chunk_rows)
        self.cum_bytes = self.file.rows("cum_bytes", 0, self.nchunks + 1)
        self.cum_entries = self.file.rows("cum_entries", 0, self.nchunks + 1)
        # Planner queue code -> final (topic, queue_id); several codes may land on one queue.
        start = rr_start or {}
        self.key_of_code = [tuple(k) for k in h["keys"]]
        for t, n in zip(h["rr_topics"], h["rr_queue_nums"]):
            s = int(start.get(t, 0))
            self.key_of_code += [(t, (s + r) % n) for r in range(n)]
        self._chunk: tuple[int, dict[str, np.ndarray]] = (-1, {})

    def _rows(self, j: int) -> dict:
        """Chunk ``j``'s columns (the last one read is kept: a cut and the next piece's start
        usually fall in the same chunk)."""
        if self._chunk[0] != j:
            lo = j * self.chunk_rows
            n = min(self.rows, lo + self.chunk_rows) - lo
            self._chunk = (j, {c: self.file.rows(c, lo, n) for c in _COLUMNS})
        return self._chunk[1]

    def _split_row(self, row: int) -> tuple:
        """(checkpoint j at or before ``row``, rows of chunk j before ``row``)."""
        j = min(row // self.chunk_rows, self.nchunks)
        return j, row - j * self.chunk_rows

    def _before(self, column: str, cum: np.ndarray, row: int) -> int:
        j, k = self._split_row(row)
        return int(cum[j]) + (int(self._rows(j)[column][:k].sum(dtype=np.int64)) if k else 0)

    def bytes_before(self, row: int) -> int:
        return self._before("sizes", self.cum_bytes, row)

    def entries_before(self, row: int) -> int:
        return self._before("entries", self.cum_entries, row)

    def fit_end(self, row: int, limit: int) -> int:
        """The largest ``end >= row`` with the records of rows ``row..end-1`` at most ``limit`` bytes."""
        target = self.bytes_before(row) + limit
        # The last chunk starting at or before the target: the end falls in it (or is its end).
        j = int(np.searchsorted(self.cum_bytes[:self.nchunks], target, side="right")) - 1
        if j < 0:
            return row
        local = np.cumsum(self._rows(j)["sizes"], dtype=np.int64)
        k = int(np.searchsorted(local, target - int(self.cum_bytes[j]), side="right"))
        return max(row, j * self.chunk_rows + k)

    def queue_counts_before(self, row: int) -> dict:
        """(topic, queue_id) -> NOT/COMMIT units of the split before ``row``."""
        j, k = self._split_row(row)
        counts = self.file.rows("counts", j, 1)[0]
        if k:
            codes = self._rows(j)["pcode"][:k]
            counts = counts + np.bincount(codes[codes >= 0], minlength=self.width)
        out: dict = {}
        for code in np.flatnonzero(counts).tolist():      # one per planner queue code, not per message
            key = self.key_of_code[code]
            out[key] = out.get(key, 0) + int(counts[code])
        return out
