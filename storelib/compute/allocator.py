"""Process memory settings for the hot paths (set once, on import of the codec).

Encoding and decoding allocate a few large buffers per batch (records, bodies, offsets). With
glibc's defaults every allocation over 32 MiB is a fresh ``mmap`` that is unmapped again on
free, so each batch pays a page fault per 4 KiB of output: on the VMs this project runs on that
costs as much as the encoding itself (a fresh 400 MB buffer takes ~0.3-1 s to touch, a reused
one ~1 ms). So large allocations come from one heap that keeps freed memory for the next batch:

* ``M_MMAP_THRESHOLD`` 1 GiB and ``M_TRIM_THRESHOLD`` 1 GiB: big buffers are carved from the
  heap and up to 1 GiB of freed memory stays mapped;
* ``M_ARENA_MAX`` 1: writer threads share that heap (a per-thread arena cannot grow past
  64 MiB and falls back to ``mmap``);
* pyarrow allocates through the same malloc (its system pool) instead of mimalloc, which
  returns freed pages to the OS.

``ROCKETLAKE_MALLOC_TUNING=0`` leaves the process as it is. Non-glibc platforms are left alone.
"""
from __future__ import annotations

import ctypes
import os

__all__ = ["tune", "release"]

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
KEEP_BYTES = 1 << 30

_done = False
_libc = None            # set by tune()


def tune() -> bool:
    """Apply the settings above once per process; returns whether malloc was tuned."""
    global _done, _libc
    if _done:
        return True
    _done = True
    if os.environ.get("ROCKETLAKE_MALLOC_TUNING", "1") == "0":
        return False
    try:
        # the process's own symbols, libc's among them: no library search (ctypes.util.find_library
        # runs ``ldconfig -p`` in a child, which shares this process's memory until it execs)
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        gnu = libc.gnu_get_libc_version                     # glibc only
    except (OSError, AttributeError):
        return False
    del gnu
    _libc = libc
    ok = bool(mallopt(M_MMAP_THRESHOLD, KEEP_BYTES)) & bool(mallopt(M_TRIM_THRESHOLD, KEEP_BYTES)) \
        & bool(mallopt(M_ARENA_MAX, 1))
    import pyarrow as pa
    pa.set_memory_pool(pa.system_memory_pool())
    return ok


def release() -> bool:
    """Give the heap's free pages back to the OS (glibc ``malloc_trim``): a task's buffers, kept
    for its own next batch, would otherwise stay mapped while the worker runs other tasks."""
    if not _done or os.environ.get("ROCKETLAKE_MALLOC_TUNING", "1") == "0":
        return False
    return bool(_libc.malloc_trim(0)) if _libc is not None else False
