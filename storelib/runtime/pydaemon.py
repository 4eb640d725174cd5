"""PySpark's Python worker daemon, with PySpark imported from its installed package.

Started by the JVM as ``python -m storelib.runtime.pydaemon <worker module>`` when a job sets
``spark.python.daemon.module`` to it (``cli.common.spark_session``, local masters only: their
workers run this interpreter, which imports storelib as the tasks do). It is
``pyspark.daemon`` itself, run after ``pysparkpath.prefer_installed_pyspark()``: the daemon and
the workers it forks then load compiled PySpark instead of compiling ``pyspark.zip`` again.
"""
from __future__ import annotations

from .pysparkpath import prefer_installed_pyspark

__all__ = ["main"]


def main() -> None:
    from .milestones import mark
    mark("daemon")
    prefer_installed_pyspark()
    from pyspark import daemon
    daemon.manager()


if __name__ == "__main__":
    main()
