"""Rows grouped by a small integer code, in row order, in one pass (numba).

A split's rows carry a code per (topic, queue) (``-1``: no consume-queue unit). The writers need
each row's rank among the earlier rows of its code (its queue offset is the queue's base plus
that rank) and each code's rows in order (a consume-queue file takes one queue's rows). A stable
argsort does both in O(n log n) and, per split placed, cost ~0.1 s for 833k rows: each write task
places every split it draws on, so that was several CPU-seconds of a 10M ingest. With the
number of codes known, a count per code does it in O(n + codes).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from . import kernelcache  # noqa: F401  (before the kernels: numba picks their cache location then)

__all__ = ["ranks_in_group", "group_rows"]


@njit(cache=True, nogil=True)
def _ranks(codes, ncodes):
    seen = np.zeros(ncodes, np.int64)
    out = np.empty(codes.shape[0], np.int64)
    for i in range(codes.shape[0]):
        c = codes[i]
        if c >= 0:
            out[i] = seen[c]
            seen[c] += 1
        else:
            out[i] = -1
    return out


@njit(cache=True, nogil=True)
def _group(codes, ncodes):
    bounds = np.zeros(ncodes + 1, np.int64)
    for i in range(codes.shape[0]):
        if codes[i] >= 0:
            bounds[codes[i] + 1] += 1
    for c in range(ncodes):
        bounds[c + 1] += bounds[c]
    fill = bounds[:-1].copy()
    order = np.empty(bounds[ncodes], np.int64)
    for i in range(codes.shape[0]):
        c = codes[i]
        if c >= 0:
            order[fill[c]] = i
            fill[c] += 1
    return order, bounds


def _checked(codes: np.ndarray, ncodes: int) -> np.ndarray:
    codes = np.ascontiguousarray(codes)
    if len(codes) and int(codes.max()) >= ncodes:
        raise ValueError(f"code {int(codes.max())} out of range for {ncodes} codes")
    return codes


def ranks_in_group(codes: np.ndarray, ncodes: int) -> np.ndarray:
    """Per row, how many earlier rows have its code (int64; -1 for rows whose code is negative)."""
    return _ranks(_checked(codes, ncodes), ncodes)


def group_rows(codes: np.ndarray, ncodes: int) -> tuple:
    """(order, bounds): the rows of code ``c`` are ``order[bounds[c]:bounds[c + 1]]``, ascending;
    rows with a negative code are in no group. The same as a stable argsort of the codes."""
    return _group(_checked(codes, ncodes), ncodes)
