"""The index rules both key readers share (``read.indexchain``): the chain walk and the timeDiff
bound, on hand-made chains (no files, no Spark)."""
from __future__ import annotations

import numpy as np

from storelib.read.indexchain import I64_MAX, I64_MIN, entry_time_bounds, walk_chain


def test_walk_skips_entries_after_the_snapshot_and_follows_their_chain():
    entries = {5: (7, 500, 3, 4), 4: (8, 400, 2, 2), 2: (7, 200, 1, 0)}     # pos -> (hash, phy, diff, prev)
    got = list(walk_chain(5, entries.__getitem__, count=5, max_index_num=100))
    assert got == [(4, 8, 400, 2), (2, 7, 200, 1)]                          # 5 is after the snapshot
    assert [p for p, *_ in walk_chain(5, entries.__getitem__, 6, 100)] == [5, 4, 2]


def test_a_damaged_chain_ends():
    forward = {3: (1, 30, 0, 3)}                                 # points at itself
    assert len(list(walk_chain(3, forward.__getitem__, 10, 100))) == 1
    assert list(walk_chain(200, forward.__getitem__, 10, 100)) == []          # outside the file
    assert list(walk_chain(0, forward.__getitem__, 10, 100)) == []            # empty slot


def test_time_bounds_scalar_and_vector_agree():
    begin = 1_700_000_000_000
    pos = np.array([1, 2, 3, 4])
    diff = np.array([5, 0, 7, -1])
    lo, hi = entry_time_bounds(pos, diff, begin)
    assert lo.tolist() == [I64_MIN, I64_MIN, begin + 7000, I64_MIN]
    assert hi.tolist() == [I64_MAX, begin + 999, begin + 7999, I64_MAX]
    for i in range(4):
        assert tuple(int(x) for x in entry_time_bounds(int(pos[i]), int(diff[i]), begin)) == (lo[i], hi[i])


def test_time_bounds_where_the_time_diff_says_nothing():
    """RocketMQ's IndexFile.putKey writes timeDiff 0 for every entry of a file whose beginTimestamp
    is <= 0 (a first message stored at time 0 or before), and Integer.MAX_VALUE for any store time
    2^31 s or more past it: neither bounds the entry's store time from above."""
    pos, diff = np.array([2, 3, 2]), np.array([0, 0, 2**31 - 1])
    begins = np.array([0, -5000, 1_000_000_000_000])
    lo, hi = entry_time_bounds(pos, diff, begins)
    assert lo.tolist() == [I64_MIN, I64_MIN, 1_000_000_000_000 + (2**31 - 1) * 1000]
    assert hi.tolist() == [I64_MAX, I64_MAX, I64_MAX]
    for i in range(3):
        assert tuple(int(x) for x in entry_time_bounds(int(pos[i]), int(diff[i]), int(begins[i]))) == (lo[i], hi[i])
