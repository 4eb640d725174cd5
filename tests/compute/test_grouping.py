"""storelib.compute.grouping: the same ranks and groups as a stable argsort gives, for any codes."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from storelib.compute.grouping import group_rows, ranks_in_group


def _by_argsort(codes, ncodes):
    elig = np.flatnonzero(codes >= 0)
    order = elig[np.argsort(codes[elig], kind="stable")]
    bounds = np.searchsorted(codes[order], np.arange(ncodes + 1))
    rank = np.full(len(codes), -1, np.int64)
    for c in range(ncodes):
        rows = order[bounds[c]:bounds[c + 1]]
        rank[rows] = np.arange(len(rows))
    return order, bounds, rank


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.lists(st.integers(-2, 39), max_size=300))
def test_same_as_a_stable_argsort(ncodes, raw):
    codes = np.asarray([c if c < ncodes else c % ncodes for c in raw], np.int32)
    order, bounds, rank = _by_argsort(codes, ncodes)
    got_order, got_bounds = group_rows(codes, ncodes)
    assert got_order.tolist() == order.tolist()
    assert got_bounds.tolist() == bounds.tolist()
    assert ranks_in_group(codes, ncodes).tolist() == rank.tolist()


def test_code_out_of_range_is_an_error():
    with pytest.raises(ValueError, match="out of range"):
        group_rows(np.asarray([0, 3], np.int32), 3)
    with pytest.raises(ValueError, match="out of range"):
        ranks_in_group(np.asarray([5], np.int32), 2)


def test_empty():
    order, bounds = group_rows(np.zeros(0, np.int32), 4)
    assert order.tolist() == [] and bounds.tolist() == [0] * 5
    assert ranks_in_group(np.zeros(0, np.int32), 0).tolist() == []


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5), st.integers(1, 9), st.lists(st.tuples(st.integers(0, 4), st.integers(0, 8)), max_size=200))
def test_distinct_pairs_as_np_unique(ntopics, width, pairs):
    from storelib.ingest.encode import _distinct_pairs
    pairs = [(a % ntopics, b % width) for a, b in pairs]
    t = np.asarray([a for a, _ in pairs], np.int64)
    q = np.asarray([b for _, b in pairs], np.int64)
    uniq, inv, w = _distinct_pairs(t, q, ntopics, width)
    ref_u, ref_inv = np.unique(t * (2**32) + q, return_inverse=True)
    assert [(u // w, u % w) for u in uniq.tolist()] == [(u >> 32, u & 0xFFFFFFFF) for u in ref_u.tolist()]
    assert inv.tolist() == ref_inv.tolist()
