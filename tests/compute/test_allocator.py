"""The process's malloc settings (storelib.compute.allocator)."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

_TUNE = """
import sys
spawned = []
sys.addaudithook(lambda event, args: spawned.append(event) if event in ("subprocess.Popen", "os.posix_spawn",
                                                                         "os.fork", "os.system") else None)
from storelib.compute import allocator
assert allocator.tune() and allocator.release()
print(spawned)
"""


def test_tune_starts_no_child_process():
    """libc's functions come from the process's own symbols: no library search in a child
    (``ldconfig -p``), which shares the memory of the process (an ingest's driver) until it execs."""
    out = subprocess.run([sys.executable, "-c", _TUNE], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT), check=True).stdout
    assert out.strip() == "[]"
