"""An order-independent digest of a batch's encoded records: the identity of a DataFrame's batch.

A file input is identified by its files' contents before anything is encoded
(storelib.ingest.identity). A DataFrame has no such identity: the same rows may come from another plan,
in other partitions, in another order (a shuffle without a sort). What identifies the batch is the
messages it encodes to, so its fingerprint is a digest of the **multiset** of its encoded records
(with placeholder placement: they are the same whatever the store already holds): each record
is hashed on its own (two independent 64-bit lanes of an xxHash64-style hash, seeded apart, so a
record's hash never depends on its neighbours or its partition), and a lane's digest is the sum
of its records' hashes mod 2**64. Sums add across partitions in any order, so the same messages
give the same fingerprint however the DataFrame is partitioned or ordered, and a rerun is found
to be "already committed" instead of being stored twice. (Which queue a round-robin row gets is
not in its record yet: the row's flag goes into its seed.) Accidental collisions of two different
batches need both 64-bit lanes to agree.
"""
from __future__ import annotations

import hashlib

import numba
from ..compute import kernelcache  # noqa: F401  (before the kernels: numba picks their cache location then)
import numpy as np

__all__ = ["LANE_SEEDS", "digest_records", "digest_staged", "combine", "fingerprint"]

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
LANE_SEEDS = np.array([0x243F6A8885A308D3, 0x13198A2E03707344], np.uint64)   # digits of pi
_READ_BYTES = 64 << 20          # staged records are digested this much at a time


@numba.njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(cache=True, nogil=True, inline="always")
def _avalanche(h):
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@numba.njit(cache=True, nogil=True)
def _digest(data, starts, sizes, flags, seeds, out):
    """out[lane] += hash(record) for every record (both lanes in one pass over its bytes)."""
    for r in range(len(starts)):
        start, end = starts[r], starts[r] + sizes[r]
        h0 = seeds[0] ^ (np.uint64(sizes[r]) * _P5) ^ (np.uint64(flags[r]) * _P4)
        h1 = seeds[1] ^ (np.uint64(sizes[r]) * _P5) ^ (np.uint64(flags[r]) * _P4)
        i = start
        while i + 8 <= end:
            w = np.uint64(0)
            for k in range(8):
                w |= np.uint64(data[i + k]) << np.uint64(8 * k)
            k1 = _rotl(w * _P2, 31) * _P1
            h0 = _rotl(h0 ^ k1, 27) * _P1 + _P4
            h1 = _rotl(h1 ^ k1, 29) * _P1 + _P3
            i += 8
        while i < end:
            b = np.uint64(data[i]) * _P5
            h0 = _rotl(h0 ^ b, 11) * _P1
            h1 = _rotl(h1 ^ b, 13) * _P1
            i += 1
        out[0] += _avalanche(h0)
        out[1] += _avalanche(h1)


def digest_records(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, flags: np.ndarray) -> list:
    """[count, lane0, lane1] of the records ``data[starts[k]:starts[k]+sizes[k]]`` (``flags[k]``:
    a per-record bit that is not in its bytes)."""
    out = np.zeros(2, np.uint64)
    if len(starts):
        _digest(data, starts.astype(np.int64), sizes.astype(np.int64), flags.astype(np.uint64), LANE_SEEDS, out)
    return [len(starts), int(out[0]), int(out[1])]


def digest_staged(store, records_path: str, sizes: np.ndarray, flags: np.ndarray) -> list:
    """``digest_records`` of a staged records file (back to back records of ``sizes``), read in
    pieces of whole records from ``store`` (a ``storage.Store`` or a ``split_staging.LocalStaging``)."""
    sizes = sizes.astype(np.int64)
    ends = np.cumsum(sizes)
    total = [0, 0, 0]
    r0 = 0
    while r0 < len(sizes):
        lo = int(ends[r0] - sizes[r0])
        r1 = max(r0 + 1, int(np.searchsorted(ends, lo + _READ_BYTES, side="right")))
        data = store.read_array(records_path, lo, int(ends[r1 - 1]) - lo)
        part = digest_records(data, ends[r0:r1] - sizes[r0:r1] - lo, sizes[r0:r1], flags[r0:r1])
        total = combine([total, part])
        r0 = r1
    return total


def combine(parts: list) -> list:
    """The digest of the union of record multisets: counts add, lanes add mod 2**64."""
    mask = (1 << 64) - 1
    return [sum(p[0] for p in parts), sum(p[1] for p in parts) & mask, sum(p[2] for p in parts) & mask]


def fingerprint(digest: list) -> str:
    """The batch's input fingerprint (hex sha256 of its digest; ``auto-<first 16>`` names it)."""
    return hashlib.sha256(f"rocketlake-dataframe-records-v1 {digest[0]} {digest[1]:016x} {digest[2]:016x}"
                          .encode()).hexdigest()
