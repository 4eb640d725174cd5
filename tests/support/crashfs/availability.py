"""Can this machine mount the crash simulator? One question, answered once, with a reason.

The tests skip (never fail) when FUSE is missing, so a machine without /dev/fuse, libfuse3 or
root still runs the rest of the suite; the reason names what is missing and how to get it.
"""
from __future__ import annotations

import ctypes.util
import functools
import importlib.util
import os
import shutil


@functools.lru_cache(maxsize=1)
def libfuse3_path() -> str | None:
    """The libfuse3 shared library's name for ctypes, or None. libfuse3 only: the file system
    relies on fuse 3's rename flags (RENAME_NOREPLACE from Rust's std) and its config struct."""
    return ctypes.util.find_library("fuse3")


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when a crash-simulator mount can work here, else one line saying why not."""
    if not os.path.exists("/dev/fuse"):
        return "crashfs: /dev/fuse is missing (no FUSE in this kernel or container)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "crashfs: /dev/fuse is not readable and writable by this user"
    if os.geteuid() != 0:
        # fusermount3 is setuid, so a user could mount; but the tests (and unmounting another
        # user's leftovers) are only kept working as root, which this project's machines and CI are
        return "crashfs: the crash simulator runs only as root (this user is not)"
    if libfuse3_path() is None:
        return "crashfs: libfuse3 is not installed (`make install` as root installs Debian's fuse3)"
    if shutil.which("fusermount3") is None:
        return "crashfs: fusermount3 is not on PATH (Debian package fuse3)"
    # Not imported here: mfusepy binds a libfuse at import, and only the server process (which
    # points it at libfuse3 first) should do that.
    if importlib.util.find_spec("mfusepy") is None:
        return "crashfs: the Python package mfusepy is not installed (requirements.txt; `make install`)"
    return None
