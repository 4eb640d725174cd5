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
teardown. Used by the entry points ``jobs/*.py`` and ``python -m storelib.cli.main`` (the
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
        shutdown()                               # the interpreter's own: exit hooks, then the joins
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(status)
