"""PySpark's Python worker daemon, with PySpark imported from its installed package.

Started by the JVM as ``python -m storelib.runtime.pydaemon <worker module>`` when a job sets
``spark.python.daemon.module`` to it (``cli.common.spark_session``, local masters only: their
workers run this interpreter, which imports storelib as the tasks do). It is
``pyspark.daemon`` itself, run after ``pysparkpath.prefer_installed_pyspark()``: the daemon and
the workers it forks then load compiled PySpark instead of compiling ``pyspark.zip`` again.

Before it serves, the daemon imports the modules named in ``ROCKETLAKE_DAEMON_PRELOAD``
(comma-separated; ``warmup.warm_workers`` sets it in a fresh context's worker environment; a
``module:function`` entry also runs the module's warm-up function, ``warmup.import_all``): every
worker it forks then starts with them loaded, so a job's task modules (pyarrow, numba, the
encoder) are imported once per job instead of once per worker, and the objects they made are
frozen out of the collector's generations (``gc.freeze``, as ``warmup`` does in a worker). Best
effort: a module that fails to import is imported again, and fails, in the task that needs it.
"""
from __future__ import annotations

import os

from .pysparkpath import prefer_installed_pyspark
from .warmup import PRELOAD_ENV

__all__ = ["PRELOAD_ENV", "main", "preload"]


def main() -> None:
    from .milestones import mark
    mark("daemon")
    prefer_installed_pyspark()
    from pyspark import daemon
    preload()
    daemon.manager()


def preload() -> list:
    """Import the modules ``PRELOAD_ENV`` names (and freeze what they made); the names imported."""
    names = tuple(n for n in os.environ.get(PRELOAD_ENV, "").split(",") if n.strip())
    if not names:
        return []
    import gc
    import sys
    from .milestones import mark
    from .warmup import import_all
    import_all(names)
    gc.freeze()
    mark("daemon-preloaded")
    return [n for n in names if n.partition(":")[0] in sys.modules]


if __name__ == "__main__":
    main()
