"""The broker lock from outside, for tests: another process holding ``<store>/lock`` as a running
broker does (``FileChannel.tryLock(0, 1, false)`` is an exclusive ``fcntl`` lock on its first byte;
Python's ``lockf`` takes the same lock), whether another process could take it now, and a
store's tree as a writer would change it (to show that a refused one changed nothing)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from contextlib import contextmanager

__all__ = ["broker_holding", "lock_state", "stat_tree"]

# It makes the file when there is none, as a broker's RandomAccessFile "rw" does.
_HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("locked", flush=True)
time.sleep(300)
"""

_TRY = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, (fcntl.LOCK_SH if sys.argv[2] == "shared" else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    print("free")
except OSError:
    print("held")
"""


@contextmanager
def broker_holding(lock: str):
    """Another process holding ``lock`` exclusively, as a running broker does, until the block ends."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, lock], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()


def lock_state(lock: str, mode: str = "exclusive") -> str:
    """"free" if another process could take ``lock`` now (``exclusive``: a broker; ``shared``: a
    rocketlake writer), else "held". (Never opened in this process: closing an fd of the file
    here would drop this process's own lock.)"""
    return subprocess.run([sys.executable, "-c", _TRY, lock, mode], capture_output=True, text=True,
                          check=True).stdout.strip()


def stat_tree(root: str, tops: tuple | None = None) -> dict:
    """Every entry under ``root`` (under its top-level ``tops`` only, when given, with the root's
    own names under ""): kind, size, mtime, inode, and a file's sha256."""
    out: dict = {"": sorted(os.listdir(root))} if tops is not None else {}
    for top in tops if tops is not None else ("",):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            for name in dirs + files:
                p = os.path.join(d, name)
                st = os.lstat(p)
                digest = None
                if name in files:
                    with open(p, "rb") as fh:
                        digest = hashlib.sha256(fh.read()).hexdigest()
                out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino, digest)
    return out
