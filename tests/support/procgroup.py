"""Stopping the servers and jobs a test started in their own process groups (``start_new_session``):
a signal to each whole group, then up to 20 s for each to end, SIGKILL to a group that does not."""
from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["stop"]


def stop(*procs: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to the process group of each of ``procs`` (one already gone is passed over),
    then wait for each, killing the group of one still there after 20 s."""
    for p in procs:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
