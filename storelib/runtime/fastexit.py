"""A finished command ends its process at once, not after the interpreter takes itself apart.

When a job's ``main()`` has returned, its work is done: the batch committed and published (every
durable step waits for its fsyncs), its summary printed and its files closed. What Python still
does before the process ends is tear down every module and object it loaded: numba's kernels and
LLVM, pyarrow, pandas, deltalake, each freed one by one. Measured after an in-process ingest of
1,000 messages on this project's 2-core VMs: 0.2 s of wall and of CPU, a sixth of a
``rocketlake ingest`` of them; under ``spark-submit`` the driver's JVM waits for it too
(docs/PERFORMANCE.md, "A cold job's fixed cost").

``exit_now(code)`` does what the interpreter's shutdown does that anyone can observe, in its
order, and then ends the process with ``code``: joins every non-daemon thread (after the
``threading`` exit hooks, which let ``concurrent.futures`` workers finish their queues), runs the
``atexit`` handlers (logging's flush among them), flushes stdout and stderr; it skips only the
teardown. As the interpreter does, an error in these steps is printed and the next step runs (a
SIGTERM while the threads are joined does not turn a finished job into a failed one), and output
that cannot be flushed (a full disk, a closed pipe) ends a job that succeeded with status 120,
not 0: its output is lost, and the status says so. Used by the entry points ``jobs/*.py`` and ``python -m storelib.cli.main`` (the
``rocketlake`` console script still ends the ordinary way), never by ``main()`` itself, which tests call in their own
process. A ``main()`` that raises still exits as Python does (a traceback, status 1; argparse's
``SystemExit``).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

__all__ = ["exit_now"]


def exit_now(code) -> NoReturn:
    """End the process with ``code`` (an int; None is 0, as ``sys.exit``) after the threads,
    the ``atexit`` handlers and the standard streams (above)."""
    status = 0 if code is None else code if isinstance(code, int) else 1
    if not isinstance(code, (int, type(None))):
        print(code, file=sys.stderr)             # as sys.exit("message") would
    if threading.current_thread() is not threading.main_thread():
        sys.exit(status)                         # only the main thread may end the process this way
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        _reported(shutdown)                      # the interpreter's own: exit hooks, then the joins
    _reported(atexit._run_exitfuncs)
    if not _flushed() and status == 0:
        status = FLUSH_FAILED                    # a failed job keeps its own status
    os._exit(status)


FLUSH_FAILED = 120      # the interpreter's status when its final flush of stdout / stderr fails


def _reported(step) -> None:
    """Run ``step``; an error it raises (a signal's among them) is printed, as the interpreter's
    shutdown prints an error it ignores, and the exit goes on."""
    try:
        step()
    except BaseException as e:  # noqa: BLE001 - the job's status stands, as after sys.exit
        try:
            print(f"Exception ignored at exit in {getattr(step, '__name__', step)}: {e!r}", file=sys.stderr)
        except BaseException:  # noqa: BLE001 - a stderr that cannot take it: the status still stands
            pass


def _flushed() -> bool:
    """Flush stdout and stderr (each that is open); False if either failed (its error printed)."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except BaseException as e:  # noqa: BLE001 - as the interpreter: reported, status 120
            ok = False
            if stream is sys.stdout:
                try:
                    print(f"Exception ignored at exit flushing stdout: {e!r}", file=sys.stderr, flush=True)
                except BaseException:  # noqa: BLE001
                    pass
    return ok
