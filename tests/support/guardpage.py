"""A page of bytes between two inaccessible pages: a kernel that reads before or after the range
it was given crashes the test process instead of passing by luck (tests of the compiled CRC and
SHA-256 kernels, which load whole words and blocks)."""
from __future__ import annotations

import ctypes
import mmap
import sys
from contextlib import contextmanager

import numpy as np
import pytest

__all__ = ["guarded_page"]


@contextmanager
def guarded_page(fill: np.ndarray):
    """Yield (data, lo, hi): ``data[lo:hi]`` is one page holding ``fill`` (a page of uint8), the
    pages before ``lo`` and from ``hi`` on are PROT_NONE. Linux only (mprotect through libc)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("mprotect via libc: Linux only")
    page = mmap.PAGESIZE
    mem = mmap.mmap(-1, 3 * page)
    data = np.frombuffer(mem, np.uint8)
    data[page:2 * page] = fill
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = data.ctypes.data
    try:
        for at in (base, base + 2 * page):
            assert libc.mprotect(at, page, 0) == 0, ctypes.get_errno()     # PROT_NONE
        yield data, page, 2 * page
    finally:
        for at in (base, base + 2 * page):
            libc.mprotect(at, page, mmap.PROT_READ | mmap.PROT_WRITE)    # (the map goes with its last view)
