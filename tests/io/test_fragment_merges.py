"""The incremental merge of a file's extents (storelib.io.fragments: ``merge_run``,
``plan_merges``): bounded bytes per batch, extents bounded where the budget allows, no
periodic rewrite of a file's tail (issue 40 item 2). No Spark, no store: extents only."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from storelib.io import fragments
from storelib.io.fragments import Extent


def _file(sizes, start=0):
    out, pos = [], start
    for k, n in enumerate(sizes):
        out.append(Extent(pos, n, f"_rocketlake/objects/b{k}/a/t/x", 0))
        pos += n
    return out


def _apply(extents, run, tag):
    i, j = run
    lo, hi = extents[i].file_pos, extents[j - 1].file_pos + extents[j - 1].length
    return extents[:i] + [Extent(lo, hi - lo, f"_rocketlake/objects/{tag}/a/t/x.merged0", 0)] + extents[j:]


def test_no_merge_at_or_below_max_extents_or_without_budget():
    ext = _file([10] * fragments.MAX_EXTENTS)
    assert fragments.merge_run(ext, 10**9) is None
    assert fragments.merge_run(_file([10] * 100), 0) is None
    assert fragments.merge_run(_file([10] * 100), 15) is None      # no two extents fit


def test_longest_run_that_fits_then_shortest_then_oldest():
    sizes = [1000] * 60 + [5, 5, 5, 1000, 3, 3, 3, 1000]
    ext = _file(sizes)
    assert fragments.merge_run(ext, 15) == (64, 67)               # three 3s (span 9) beat three 5s (15)
    assert fragments.merge_run(ext, 10) == (64, 67)
    assert fragments.merge_run(ext, 6) == (64, 66)                # the oldest pair of 3s
    assert fragments.merge_run(ext, 2000) == (60, 67)             # seven extents (1,024 bytes) beat three


def test_a_gap_counts_as_bytes_of_the_run():
    ext = _file([100] * 70)
    gapped = ext[:65] + [Extent(ext[65].file_pos + 500, 1, "_rocketlake/objects/g/a/t/x", 0)]
    assert fragments.merge_run(gapped, 250) == (0, 2)
    assert fragments.run_bytes(gapped, (64, 66)) == 100 + 500 + 1


def test_plan_shares_the_batch_budget_files_with_most_extents_first():
    files = {"consumequeue/a/0/0": _file([600] * 80), "consumequeue/b/0/0": _file([600] * 70),
             "commitlog/0": _file([400_000] * 90)}
    plan = fragments.plan_merges(files, 80_000)
    assert "commitlog/0" not in plan                              # no run of its extents fits
    assert plan == {"consumequeue/a/0/0": 48_000, "consumequeue/b/0/0": 31_800}   # a whole, then what fits of b
    assert sum(plan.values()) <= 80_000


@pytest.mark.parametrize("batches", [300])
def test_small_batches_bounded_cost_and_bounded_small_files(batches):
    """The bench's shape: per batch 410 KB of records into one segment, 625 B into each of 32
    consume queues, 41 KB of index entries. The merge bytes of every batch stay within its share;
    no batch merges more than any other by a periodic spike; the queues and the index entries
    stay near MAX_EXTENTS while the segment and the index entries (whose extents no share of
    these batches can pair) gain one a batch."""
    R = 410_000
    files = {"commitlog/0": [], "index/0": [], **{f"consumequeue/t/{q}/0": [] for q in range(32)}}
    adds = {"commitlog/0": R, "index/0": 41_000, **{f"consumequeue/t/{q}/0": 625 for q in range(32)}}
    ends = dict.fromkeys(files, 0)
    per_batch = []
    for b in range(batches):
        plan = fragments.plan_merges({r: e for r, e in files.items() if e}, int(fragments.MERGE_SHARE * R))
        spent = 0
        for rel in files:
            files[rel] = files[rel] + [Extent(ends[rel], adds[rel], f"_rocketlake/objects/b{b}/a/t/{rel}", 0)]
            ends[rel] += adds[rel]
            run = fragments.merge_run(files[rel], plan.get(rel, 0))
            if run is not None:
                spent += fragments.run_bytes(files[rel], run)
                files[rel] = _apply(files[rel], run, f"b{b}")
        per_batch.append(spent)
    assert max(per_batch) <= fragments.MERGE_SHARE * R
    assert max(len(files[f"consumequeue/t/{q}/0"]) for q in range(32)) <= 2 * fragments.MAX_EXTENTS
    assert len(files["index/0"]) == len(files["commitlog/0"]) == batches
    assert sum(per_batch) > 0.5 * batches * 32 * 625     # the queues' tiny extents were merged


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=0, max_size=150), st.integers(0, 20_000))
def test_merge_run_is_within_budget_and_keeps_bytes_in_place(sizes, budget):
    ext = _file(sizes)
    run = fragments.merge_run(ext, budget)
    if run is None:
        return
    i, j = run
    assert len(ext) > fragments.MAX_EXTENTS and j - i >= 2 and fragments.run_bytes(ext, run) <= budget
    merged = _apply(ext, run, "m")
    assert sum(e.length for e in merged) == sum(sizes)
    assert all(a.file_pos + a.length == b.file_pos for a, b in zip(merged, merged[1:]))


def test_a_versions_own_new_extents_are_never_merged():
    ext = _file([10] * 70) + [Extent(700, 10, "_rocketlake/objects/new/a/t/x", 0)]
    assert fragments.merge_run(ext, 10**6) == (0, 71)
    assert fragments.merge_run(ext, 10**6, keep="_rocketlake/objects/new/") == (0, 70)
    assert fragments.merge_run(ext[65:], 10**6, keep="_rocketlake/objects/new/") is None
    mid = ext[:30] + [Extent(300, 10, "_rocketlake/objects/new/a/t/x", 0)] + [e._replace(file_pos=e.file_pos + 10) for e in ext[30:70]]
    assert fragments.merge_run(mid, 10**6, keep="_rocketlake/objects/new/") == (31, 71)
