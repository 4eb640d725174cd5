"""SIGTERM / SIGINT end a job whose main thread is blocked in native code.

Python runs a signal's handler on the main thread, between two bytecodes. A main thread blocked
inside a C call that does not give up on EINTR (pyarrow's GCS client waiting on a server that
accepts and never answers) never gets there: the job's handler (``cli.common.on_signals``: its one
line, exit 128 + the signal) never runs, and only SIGKILL would end the job.

``install`` has the C-level handler of every signal with a Python handler also write the signal's
number to a pipe (``signal.set_wakeup_fd``), which a daemon thread reads. A SIGTERM or SIGINT the
main thread has not taken (``taken``, called first thing by the job's handler) within ``GRACE``
seconds ends the process from that thread: ``interrupted (SIGTERM): ...`` on stderr, exit 128 +
the signal's number, as the handler would have, without the job's own words about the store (it
could not be asked). Nothing of a batch is committed half: a commit cut there is a crash, which
the next run of the same command recovers from (docs/DESIGN.md).

While the main thread holds the signals back (``pthread_sigmask``: a Spark session starting), they
are not delivered, so nothing is written to the pipe and the thread waits too; the thread itself
blocks them, so the kernel never hands one to it in the main thread's stead.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__ = ["GRACE", "install", "taken"]

GRACE = 5.0                 # seconds the main thread has to take a signal before the process ends
_WATCHED = (signal.SIGINT, signal.SIGTERM)
_taken: dict[int, int] = {}             # signal number -> how many the job's handler took
_seen: dict[int, int] = {}              # signal number -> how many were delivered (bytes on the pipe)
_installed: list[int] = []              # the pid that installed (a forked child installs again)
_handler: list[object] = [None]         # the job's handler: a signal is watched while it is installed


def taken(signum: int) -> None:
    """The job's handler took ``signum`` (called from it, on the main thread)."""
    _taken[signum] = _taken.get(signum, 0) + 1


def install(handler: object) -> None:
    """Watch SIGTERM / SIGINT from a daemon thread (see the module docstring) while ``handler`` (the
    job's, which calls ``taken``) is their Python handler: a caller that puts its own back (a test
    running a command in its process) is not watched. On the main thread only (``ValueError``
    elsewhere, as ``signal.signal``); the thread starts once per process."""
    _handler[0] = handler
    if _installed and _installed[-1] == os.getpid():
        return
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:
        os.close(r)
        os.close(w)
        raise
    if not _installed:
        os.register_at_fork(after_in_child=_forked)
    _installed.append(os.getpid())
    threading.Thread(target=_watch, args=(r,), name="rocketlake-signals", daemon=True).start()


def _forked() -> None:
    """A forked child has no watching thread: its signals must not land in the parent's pipe (the
    parent would count them as its own, not taken)."""
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass


def _watch(fd: int) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    while True:
        try:
            got = os.read(fd, 64)
        except OSError:
            return
        if not got:
            return
        for signum in got:
            if signum in _WATCHED:
                _seen[signum] = _seen.get(signum, 0) + 1
                _wait_taken(signum)


def _wait_taken(signum: int) -> None:
    """End the process unless the main thread has taken every ``signum`` delivered so far within
    GRACE seconds. (Two signals that land before the handler runs are taken once: the process
    ends, as a second signal ends a job anyway.)"""
    deadline = time.monotonic() + GRACE
    while time.monotonic() < deadline:
        if _taken.get(signum, 0) >= _seen[signum] or signal.getsignal(signum) is not _handler[0]:
            return
        time.sleep(0.05)
    if _taken.get(signum, 0) >= _seen[signum] or signal.getsignal(signum) is not _handler[0]:
        return
    name = {2: "SIGINT", 15: "SIGTERM"}.get(signum, f"signal {signum}")
    try:
        print(f"interrupted ({name}): the command was blocked in a call that did not return within {GRACE:g} s "
              "of the signal (a server that does not answer?) and was ended there; rerun the same command",
              file=sys.stderr, flush=True)
    finally:
        os._exit(128 + signum)
