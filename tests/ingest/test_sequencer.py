"""The driver-side sequencer equals a plain sequential reference (one message at a time).

The reference places every message as CommitLog/ConsumeQueue/IndexService do (docs/FORMAT.md §1.7,
§2, §3.2-3.4); the sequencer only sees per-split summaries (and per-message detail for splits
that straddle a segment boundary). Hypothesis draws message sizes, file sizes, queue keys,
transaction types, index entry counts, split cuts and batch cuts.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st, HealthCheck

from support.longrun import LONG
from storelib.ingest import sequencer
from storelib.format.config import StoreConfig


def reference(sizes, qkeys, eligible, entries, F, max_index_num):
    """Per-message phys/queue offsets, segment closes, index file entry counts, one by one."""
    pos, phys, qoff, counters, blanks = 0, [], [], {}, []
    for L, k, e in zip(sizes, qkeys, eligible):
        if L + 8 > F - pos % F:
            blanks.append(pos)
            pos = (pos // F + 1) * F
        phys.append(pos)
        pos += L
        if e:
            qoff.append(counters.get(k, 0))
            counters[k] = counters.get(k, 0) + 1
        else:
            qoff.append(0)
    files = []          # entries per index file, in creation order
    C = max_index_num - 1
    for n in entries:
        if not files or files[-1] >= C:
            files.append(0)     # created at message start (even with no keys)
        for _ in range(n):
            if files[-1] >= C:
                files.append(0)
            files[-1] += 1
    return phys, qoff, blanks, files, pos, counters


def summaries_for(sizes, qkeys, eligible, entries, cuts):
    out, details = [], {}
    bounds = [0, *cuts, len(sizes)]
    for i in range(len(bounds) - 1):
        lo, hi = bounds[i], bounds[i + 1]
        keys = sorted({qkeys[j] for j in range(lo, hi) if eligible[j]})
        counts = {k: sum(1 for j in range(lo, hi) if eligible[j] and qkeys[j] == k) for k in keys}
        with_entries = [j - lo for j in range(lo, hi) if entries[j] > 0]
        out.append(sequencer.SplitSummary(index=i, count=hi - lo, total_bytes=int(sum(sizes[lo:hi])),
                                          queue_counts=counts, entries=int(sum(entries[lo:hi])),
                                          last_entry_row=with_entries[-1] if with_entries else -1))
        kid = {k: n for n, k in enumerate(keys)}
        details[i] = sequencer.SplitDetail(
            sizes=np.asarray(sizes[lo:hi], np.int64),
            qkey=np.asarray([kid[qkeys[j]] if eligible[j] else -1 for j in range(lo, hi)], np.int32),
            qkeys=keys, entries=np.asarray(entries[lo:hi], np.int32))
    return out, details, bounds


def apply_plan(plan, bounds, sizes, qkeys, eligible, msg_offset):
    """Per-message (phys, queue offset) the executors would write for this plan."""
    n = bounds[-1]
    phys = [None] * n
    qoff = [None] * n
    for seg in plan.segments:
        for p in seg.pieces:
            lo = bounds[p.split] + p.row_start
            hi = bounds[p.split] + p.row_end
            pos = p.phys_start
            seen = {}
            for j in range(lo, hi):
                phys[j] = pos
                pos += sizes[msg_offset + j]
                k = qkeys[msg_offset + j]
                if eligible[msg_offset + j]:
                    qoff[j] = p.queue_base[k] + seen.get(k, 0)
                    seen[k] = seen.get(k, 0) + 1
                else:
                    qoff[j] = 0
            assert pos - seg.base_offset <= seg.end_pos
    return phys, qoff


@st.composite
def workloads(draw):
    F = draw(st.sampled_from([200, 256, 300, 1000, 4096]))
    n = draw(st.integers(1, 120))
    sizes = draw(st.lists(st.integers(92, F - 8), min_size=n, max_size=n))
    qkeys = draw(st.lists(st.sampled_from([("a", 0), ("a", 1), ("b", 0), ("c", 3)]), min_size=n, max_size=n))
    eligible = draw(st.lists(st.booleans().map(lambda b: b or draw(st.booleans())), min_size=n, max_size=n))
    entries = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    max_index_num = draw(st.sampled_from([2, 3, 5, 8, 64]))
    batch_cut = draw(st.integers(0, n))
    cuts1 = sorted(set(draw(st.lists(st.integers(1, max(1, batch_cut)), max_size=5)))) if batch_cut > 1 else []
    cuts2 = sorted(set(draw(st.lists(st.integers(1, max(1, n - batch_cut)), max_size=5)))) \
        if n - batch_cut > 1 else []
    cuts1 = [c for c in cuts1 if 0 < c < batch_cut]
    cuts2 = [c for c in cuts2 if 0 < c < n - batch_cut]
    return F, sizes, qkeys, eligible, entries, max_index_num, batch_cut, cuts1, cuts2


@settings(max_examples=300 if LONG else 150, deadline=None, suppress_health_check=[HealthCheck.too_slow])   # make long: all
@given(workloads())
def test_sequencer_matches_sequential_reference(w):
    F, sizes, qkeys, eligible, entries, max_index_num, batch_cut, cuts1, cuts2 = w
    cfg = StoreConfig(mappedFileSizeCommitLog=F, maxIndexNum=max_index_num, maxHashSlotNum=7)
    ref_phys, ref_qoff, ref_blanks, ref_files, ref_end, ref_counters = reference(
        sizes, qkeys, eligible, entries, F, max_index_num)

    state = sequencer.StoreState()
    got_phys, got_qoff, blanks, files = [], [], [], []   # files: [entries] across batches
    for lo, hi, cuts in ((0, batch_cut, cuts1), (batch_cut, len(sizes), cuts2)):
        if hi <= lo:
            continue
        summ, details, bounds = summaries_for(sizes[lo:hi], qkeys[lo:hi], eligible[lo:hi], entries[lo:hi], cuts)
        plan = sequencer.plan_batch(state, summ, details.__getitem__, cfg)
        phys, qoff = apply_plan(plan, bounds, sizes, qkeys, eligible, lo)
        got_phys += phys
        got_qoff += qoff
        blanks += [s.base_offset + s.end_pos for s in plan.segments if s.close]
        assert all(not s.close for s in plan.segments[-1:]), "the last segment is never closed"
        for f in plan.index_files:
            if f.extend:
                files[-1] += f.count
            else:
                files.append(f.count)
        # The state the next batch continues from (what the commit records).
        tail = None
        if files:
            tail = sequencer.IndexTail(f"index/{len(files)}", {"index_count": files[-1] + 1,
                                                                "end_phy_offset": 1, "end_timestamp": 1},
                                       files[-1] + 1 >= max_index_num)
        state = sequencer.StoreState(next_phys=plan.next_phys, queue_next=plan.queue_next, index_tail=tail,
                                     index_files=len(files), messages=hi)
        assert plan.messages == hi - lo
    assert got_phys == ref_phys
    assert got_qoff == ref_qoff
    assert blanks == ref_blanks
    assert files == ref_files
    assert state.next_phys == ref_end
    assert state.queue_next == ref_counters


def test_partition_that_fits_needs_no_detail():
    """Only splits that straddle a segment boundary have their per-message sizes read."""
    cfg = StoreConfig(mappedFileSizeCommitLog=1000, maxIndexNum=10, maxHashSlotNum=7)
    sizes = [100] * 25
    summ, details, _ = summaries_for(sizes, [("t", 0)] * 25, [True] * 25, [1] * 25, [5, 9, 18])
    asked = []

    def detail(i):
        asked.append(i)
        return details[i]
    plan = sequencer.plan_batch(sequencer.StoreState(), summ, detail, cfg)
    # splits: rows 0-4 (500 B at 0: fits), 5-8 (400 B at 500: ends at 900, fits),
    # 9-17 (900 B at 900: straddles), 18-24 (700 B at 1900: straddles)
    assert asked == [2, 3]
    assert [s.base_offset for s in plan.segments] == [0, 1000, 2000]
    assert [(s.end_pos, s.close) for s in plan.segments] == [(900, True), (900, True), (700, False)]
