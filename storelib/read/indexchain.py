"""The rules both index readers follow (``read.indexfile``: one key at a time; ``read.keylookup``:
many keys in a Spark job): which header and entry count of an index file a snapshot sees, the walk
of one hash slot's chain, and the store-time interval an entry's timeDiff guarantees
(docs/FORMAT.md §3.3). Layout: ``storelib.format.indexfile``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, overload

import numpy as np

from ..format.indexfile import HEADER_SIZE, IndexHeader
from ..io.checked import read_stored

if TYPE_CHECKING:
    from ..io.storage import Store
    from ..table.storefiles import IndexFileRef

__all__ = ["I64_MIN", "I64_MAX", "ref_header", "visible_count", "walk_chain", "walk_chains", "entry_time_bounds"]

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
INT_MAX = 2**31 - 1                 # IndexFile.putKey's clamp of timeDiff (Integer.MAX_VALUE)


def ref_header(store: Store, ref: IndexFileRef) -> IndexHeader:
    """The header of index file ``ref``: the snapshot's, else read from the file."""
    return ref.header or IndexHeader.parse(read_stored(store, ref.rel, 0, HEADER_SIZE))


def visible_count(ref: IndexFileRef, file_header: Callable[[], IndexHeader]) -> tuple[int, bool]:
    """(indexCount a reader uses, whether a snapshot fixed it): the snapshot's limit, else the
    header the snapshot recorded, else the file's own header (``file_header()``: a broker's
    directory)."""
    if ref.index_count is not None:
        return ref.index_count, True
    if ref.header is not None:
        return ref.header.index_count, True
    return file_header().index_count, False


def walk_chain(first: int, entry_at: Callable[[int], tuple[int, int, int, int]], count: int,
               max_index_num: int) -> Iterator[tuple[int, int, int, int]]:
    """(pos, keyHash, phyOffset, timeDiff) of every entry on the chain that starts at slot value
    ``first``, newest first. ``entry_at(pos)``: (keyHash, phyOffset, timeDiff, prevPos). Entries at
    positions >= ``count`` were written after the snapshot: skipped, their chain followed. A chain
    ends at a position out of the file, at a link that does not point backwards (a broker's
    always do), or after ``max_index_num`` steps, so a damaged chain cannot cycle."""
    yield from walk_chains([first], lambda wanted: [entry_at(pos) for _, pos in wanted], [count], max_index_num)[0]


def walk_chains(firsts: Sequence[int], entries_at: Callable[[list[tuple[int, int]]], list[tuple[int, int, int, int]]],
                counts: Sequence[int], max_index_num: int) -> list[list[tuple[int, int, int, int]]]:
    """``walk_chain`` of several chains (chain k starts at slot value ``firsts[k]``, in a file
    whose visible count is ``counts[k]``), walked side by side: each step asks
    ``entries_at([(k, pos), ...])`` for the next entry of every chain still going, at once, so a
    reader fetches them together (the chains of one key in every index file: the whole lookup
    waits for the longest chain rather than for all of them). Per chain, the same entries as
    ``walk_chain``, in its order."""
    out: list[list[tuple[int, int, int, int]]] = [[] for _ in firsts]
    going = [(k, pos, 0) for k, pos in enumerate(firsts) if _chain_goes_on(pos, 0, max_index_num)]
    while going:
        got = entries_at([(k, pos) for k, pos, _ in going])
        still = []
        for (k, pos, steps), (key_hash, phy, time_diff, prev) in zip(going, got):
            if pos < counts[k]:
                out[k].append((pos, key_hash, phy, time_diff))
            if prev < pos and _chain_goes_on(prev, steps + 1, max_index_num):
                still.append((k, prev, steps + 1))
        going = still
    return out


def _chain_goes_on(pos: int, steps: int, max_index_num: int) -> bool:
    return 0 < pos < max_index_num and steps < max_index_num


@overload
def entry_time_bounds(pos: int, time_diff: int, begin_timestamp: int) -> tuple[int, int]: ...


@overload
def entry_time_bounds(pos: np.ndarray, time_diff: np.ndarray,
                      begin_timestamp: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


def entry_time_bounds(pos: Any, time_diff: Any, begin_timestamp: Any) -> tuple[Any, Any]:
    """(lo, hi) store-time interval an entry's timeDiff guarantees: timeDiff > 0 (not a file's
    first entry) puts the store time in [begin + diff*1000, +999]; timeDiff 0 below begin + 1000;
    the first entry (pos 1) is unbounded. RocketMQ's putKey writes 0 for every entry of a file
    whose beginTimestamp is <= 0 and clamps a diff past Integer.MAX_VALUE to it: such an entry
    says nothing (begin <= 0), or only its lower bound (INT_MAX). Python ints for one entry (a
    lookup's few hits: numpy's per-call cost is ten times the arithmetic), or numpy arrays (the
    files' beginTimestamp one for all or one per entry)."""
    if isinstance(pos, int) and isinstance(time_diff, int) and isinstance(begin_timestamp, int):
        if pos <= 1 or begin_timestamp <= 0:
            return I64_MIN, I64_MAX
        if time_diff > 0:
            t0 = begin_timestamp + time_diff * 1000
            return t0, (t0 + 999 if time_diff < INT_MAX else I64_MAX)
        return I64_MIN, (begin_timestamp + 999 if time_diff == 0 else I64_MAX)
    pos = np.asarray(pos, np.int64)
    time_diff = np.asarray(time_diff, np.int64)
    t0 = begin_timestamp + time_diff * 1000
    later = (pos > 1) & (np.asarray(begin_timestamp, np.int64) > 0)
    lo = np.where(later & (time_diff > 0), t0, I64_MIN)
    hi = np.where(later & (time_diff > 0) & (time_diff < INT_MAX), t0 + 999,
                  np.where(later & (time_diff == 0), begin_timestamp + 999, I64_MAX))
    return lo, hi
