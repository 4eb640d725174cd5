"""storelib/compute/crc32.py: the PCLMULQDQ CRC-32 kernel against zlib.crc32, and the table fallback."""
from __future__ import annotations

import mmap
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from support.guardpage import guarded_page
from numba import njit

from storelib.compute import crc32

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T = crc32.CRC_TABLES
needs_clmul = pytest.mark.skipif(not crc32.HAVE_CLMUL, reason="numba's target CPU has no PCLMULQDQ (or ROCKETLAKE_CRC=table): "
                                                               "crc32_one is the table kernel")


def _crc(data: np.ndarray, i: int, end: int) -> int:
    return int(crc32.crc32_clmul(data, i, end, T))


@njit(nogil=True)
def _crc_all(data, starts, ends, tables, out):
    """Called from inside another njit function, as verify_scan calls it (masked like BODYCRC)."""
    for k in range(starts.shape[0]):
        out[k] = np.int64(crc32.crc32_one(data, starts[k], ends[k], tables)) & 0x7FFFFFFF


@needs_clmul
def test_every_length_and_alignment():
    data = np.random.default_rng(1).integers(0, 256, 16 + 300 + 16, dtype=np.uint8)
    bad = [(a, n) for n in range(301) for a in range(16)
           if _crc(data, a, a + n) != zlib.crc32(data[a:a + n].tobytes())]
    assert bad == []


@needs_clmul
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5000), st.integers(0, 2**32 - 1), st.data())
def test_random_ranges(size, seed, draw):
    buf = np.random.default_rng(seed).bytes(size)
    data = np.frombuffer(buf, np.uint8)                  # read-only, as Arrow buffers are
    i = draw.draw(st.integers(0, size), label="i")
    end = draw.draw(st.integers(i, size), label="end")
    assert _crc(data, i, end) == zlib.crc32(buf[i:end])


@needs_clmul
@pytest.mark.parametrize("byte", [0x00, 0xFF])
def test_constant_data(byte):
    data = np.full(4200, byte, np.uint8)
    for n in list(range(0, 200)) + [255, 256, 257, 1023, 1024, 1025, 4096, 4199]:
        assert _crc(data, 1, 1 + n) == zlib.crc32(bytes([byte]) * n), n


@needs_clmul
def test_reads_nothing_outside_the_range():
    """Ranges that start at a page start or end at a page end next to an inaccessible page: a read
    before i or from end on would crash the process."""
    with guarded_page(np.random.default_rng(3).integers(0, 256, mmap.PAGESIZE, dtype=np.uint8)) as (data, lo, hi):
        for n in list(range(0, 70)) + [255, 256, 1000]:
            want_lo, want_hi = zlib.crc32(data[lo:lo + n].tobytes()), zlib.crc32(data[hi - n:hi].tobytes())
            assert (_crc(data, lo, lo + n), _crc(data, hi - n, hi)) == (want_lo, want_hi), n


def test_from_another_njit_function():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    starts = rng.integers(0, len(data) - 2000, 2000).astype(np.int64)
    ends = starts + rng.integers(0, 2000, len(starts))
    out = np.empty(len(starts), np.int64)
    _crc_all(data, starts, ends, T, out)
    assert out.tolist() == [zlib.crc32(data[a:b].tobytes()) & 0x7FFFFFFF for a, b in zip(starts, ends)]


def test_selection():
    assert crc32.crc32_one is (crc32.crc32_clmul if crc32.HAVE_CLMUL else crc32.crc32_table)


def test_forced_table_fallback(tmp_path):
    """ROCKETLAKE_CRC=table: crc32_one is the table kernel itself (in a fresh process, with its
    own numba cache: compiled callers keep the kernel they were compiled with)."""
    code = ("import zlib, numpy as np\nfrom storelib.compute import crc32\n"
            "assert crc32.HAVE_CLMUL is False and crc32.crc32_one is crc32.crc32_table\n"
            "d = np.arange(300, dtype=np.uint8)\n"
            "assert int(crc32.crc32_one(d, 5, 290, crc32.CRC_TABLES)) == zlib.crc32(d[5:290].tobytes())\n")
    env = {**os.environ, "ROCKETLAKE_CRC": "table", "PYTHONPATH": ROOT, "NUMBA_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_fold_constants_python_model():
    """The folding identity with the module's constants, in plain Python integers (runs on any
    CPU): reflected carry-less products of one 16-byte block folded over the next equal zlib."""
    def clmul(a: int, b: int) -> int:
        r = 0
        while b:
            if b & 1:
                r ^= a
            a, b = a << 1, b >> 1
        return r

    block = bytes(range(1, 33))
    w0, w1 = int.from_bytes(block[:8], "little") ^ 0xFFFFFFFF, int.from_bytes(block[8:16], "little")
    folded = clmul(w0, int(crc32.K192)) ^ clmul(w1, int(crc32.K128)) ^ int.from_bytes(block[16:], "little")
    # zlib.crc32(x, 0xFFFFFFFF) starts from state 0 (zlib inverts the value given) and inverts at the end
    assert zlib.crc32(folded.to_bytes(16, "little"), 0xFFFFFFFF) == zlib.crc32(block)
