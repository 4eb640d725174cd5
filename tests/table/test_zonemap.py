"""A segment's zone map (storelib.table.zonemap) against brute force: built in pieces and merged it
equals the map of all records at once; its runs hold every record whose store time meets a range."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from storelib.table import zonemap

ZONE = 4096


@st.composite
def records(draw):
    """(ascending record starts, store times) of one segment: sizes 20..9000 bytes (some records
    span whole zones), times in a few clusters."""
    sizes = draw(st.lists(st.integers(20, 9000), min_size=1, max_size=120))
    pos = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    ts = np.array(draw(st.lists(st.integers(0, 50), min_size=len(pos), max_size=len(pos))), np.int64) * 1000
    return pos, ts, int(np.sum(sizes))


def _brute(pos, ts):
    z = pos // ZONE
    out = {}
    for p, t, k in zip(pos.tolist(), ts.tolist(), z.tolist()):
        f, lo, hi = out.get(k, (p, t, t))
        out[k] = (min(f, p), min(lo, t), max(hi, t))
    keys = sorted(out)
    return [out[k] for k in keys]


@settings(max_examples=150, deadline=None)
@given(records(), st.data())
def test_built_in_pieces_and_merged_equals_built_at_once(rec, data):
    pos, ts, _ = rec
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(pos)), max_size=4))))
    edges = [0] + cuts + [len(pos)]
    parts = [zonemap.build(ZONE, pos[a:b], ts[a:b]) for a, b in zip(edges, edges[1:])]
    merged = zonemap.merge(*reversed(parts))
    whole = zonemap.build(ZONE, pos, ts)
    assert list(zip(merged.pos.tolist(), merged.min_ts.tolist(), merged.max_ts.tolist())) == _brute(pos, ts)
    back = zonemap.from_detail(zonemap.to_detail(whole))
    for m in (merged, back):
        assert m.bytes == ZONE
        for f in ("pos", "min_ts", "max_ts"):
            assert getattr(m, f).tolist() == getattr(whole, f).tolist()


@settings(max_examples=200, deadline=None)
@given(records(), st.integers(-5, 55), st.integers(0, 30), st.data())
def test_runs_hold_every_record_in_time(rec, b0, width, data):
    """Every record with store time in [begin, end] starts inside a run, the runs start and end on
    record starts (or the valid end), and a zone outside every run holds no such record; a map cut
    short (``clip``) by a repair keeps that for the bytes left."""
    pos, ts, valid = rec
    cut = data.draw(st.integers(1, valid))
    zm = zonemap.build(ZONE, pos, ts)
    keep = pos < cut
    pos_c, ts_c = pos[keep], ts[keep]
    begin, end = b0 * 1000, (b0 + width) * 1000
    runs = zm.runs(cut, begin, end)
    starts = set(pos_c.tolist()) | {cut}
    for a, b, lo, hi in runs:
        assert a in starts and b in starts and a < b
        inside = (pos_c >= a) & (pos_c < b)
        assert lo <= ts_c[inside].min() and hi >= ts_c[inside].max()
    hit = (ts_c >= begin) & (ts_c <= end)
    covered = np.zeros(len(pos_c), bool)
    for a, b, _, _ in runs:
        covered |= (pos_c >= a) & (pos_c < b)
    assert not (hit & ~covered).any()
    all_runs = zm.runs(cut)
    assert [(a, b) for a, b, _, _ in all_runs] == ([(0, cut)] if len(pos_c) else [])


def test_unknown_parts_make_no_map():
    """A prefix without a map (adopted, written before maps) leaves the merged segment without
    one, and a malformed detail reads as none: readers then fall back, never guess."""
    a = zonemap.build(ZONE, np.array([0, 100]), np.array([5, 6]))
    assert zonemap.merge(None, a) is None
    assert zonemap.from_detail({"bytes": ZONE, "pos": [0, 0], "min_ts": [1, 1], "max_ts": [2, 2]}) is None
    assert zonemap.from_detail({"bytes": ZONE, "pos": [0], "min_ts": [1]}) is None
    assert zonemap.from_detail(None) is None
    assert zonemap.of_row({"detail": '{"blocks": []}'}) is None
    assert zonemap.zone_bytes(1 << 30) == 16 << 20 and zonemap.zone_bytes(65536) == 4096
