"""Where a cold job's fixed seconds go: timestamped milestones, written only when asked for.

With ``ROCKETLAKE_STARTUP_TRACE=FILE`` in the environment, every process of a job that calls
``mark(name)`` (the Python driver, the Python worker daemon and its workers: Spark passes the
driver's environment on to local workers) appends one line per milestone to ``FILE``:
``<epoch seconds> <pid> <name>``. The first mark of a process also writes the moment the process
was started (``process-start``, from ``/proc``) and registers an ``exit`` mark for when its Python
ends, so the interpreter's own start and the imports before the first mark show too. Lines are
single ``O_APPEND`` writes: processes writing at once do not mix them. Without the variable
``mark`` costs one dictionary look-up. ``bench/startup.py`` turns the file into the table of
docs/PERFORMANCE.md ("A cold job's fixed cost").
"""
from __future__ import annotations

import os
import time

__all__ = ["ENV", "mark"]

ENV = "ROCKETLAKE_STARTUP_TRACE"
_started: set = set()        # pids whose process-start line is written


def _process_start() -> float | None:
    """When this process started (epoch seconds), from /proc: its age since boot against the
    system's uptime now (both in hundredths of a second); None where there is no /proc."""
    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _write(path: str, line: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass                    # a trace is never a reason for a job to fail


def _exit_mark(pid: int) -> None:
    if os.getpid() == pid:          # not a forked child that inherited the handler
        mark("exit")


def mark(name: str) -> None:
    """Note that this process reached ``name`` now (only under ``ROCKETLAKE_STARTUP_TRACE``)."""
    path = os.environ.get(ENV)
    if not path:
        return
    now = time.time()
    pid = os.getpid()
    if pid not in _started:
        _started.add(pid)
        start = _process_start()
        if start is not None:
            _write(path, f"{start:.3f} {pid} process-start\n")
        import atexit
        atexit.register(_exit_mark, pid)
    _write(path, f"{now:.6f} {pid} {name}\n")
