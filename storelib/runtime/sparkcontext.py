"""A Spark application without a SQL session, for jobs that only schedule Python tasks.

A file ingest uses nothing of Spark but its ``SparkContext``: broadcast a context, run a list of
tasks, collect what they return (``storelib.ingest.driver``). A ``SparkSession`` costs a cold
driver JVM about two seconds before the first task can start (the SQL session's classes, the
Delta extension's, the catalog), and Delta's jars on the classpath cost the executor a fetch of
each; neither is ever used by such a job. ``context_session(app, master)`` starts only the
``SparkContext`` and returns ``ContextSession``, the part of a ``SparkSession`` these jobs touch
(``sparkContext``, ``stop``). Asking it for anything of SQL is an error that says so, never a
session built on the side.

Errors of the job's tasks read as under a ``SparkSession``: PySpark's converter of JVM errors
(``install_exception_handler``, which a session installs) is installed here too. On a local master
the Python workers start with ``storelib.runtime.pydaemon`` (PySpark's daemon importing compiled
PySpark, ``storelib.runtime.pysparkpath``) unless the job's configuration names a daemon module.
"""
from __future__ import annotations

__all__ = ["ContextSession", "context_session"]


class ContextSession:
    """``sparkContext`` and ``stop()`` of a ``SparkSession``; nothing of SQL."""

    def __init__(self, sc):
        self.sparkContext = sc

    def stop(self) -> None:
        self.sparkContext.stop()

    def __getattr__(self, name):
        raise AttributeError(f"this job's Spark application has no SQL session (SparkSession.{name}): "
                             "it was started with a SparkContext only (storelib.runtime.sparkcontext)")


def context_session(app: str, master: str | None = None, starting=None) -> ContextSession:
    """Start (or join) the process's ``SparkContext`` named ``app``; ``master`` unless spark-submit
    gave one (None: spark-submit's, or Spark's default); ``starting()`` is called just before."""
    from .pysparkpath import DAEMON_CONF, WORKER_DAEMON, prefer_installed_pyspark
    prefer_installed_pyspark()
    from pyspark import SparkConf, SparkContext
    from pyspark.errors.exceptions.captured import install_exception_handler
    conf = SparkConf().setAppName(app)
    if master:
        conf.setMaster(master)
    if str(conf.get("spark.master", "local[*]")).startswith("local") and not conf.contains(DAEMON_CONF):
        conf.set(DAEMON_CONF, WORKER_DAEMON)
    if starting:
        starting()
    sc = SparkContext.getOrCreate(conf)
    install_exception_handler()
    return ContextSession(sc)
