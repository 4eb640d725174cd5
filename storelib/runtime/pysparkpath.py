"""PySpark imported from its installed package, not from the zip spark-submit puts first.

``spark-submit`` (and the JVM, for each Python worker daemon it starts) puts
``$SPARK_HOME/python/lib/pyspark.zip`` at the head of ``PYTHONPATH``. A zip holds no bytecode and
Python's zip importer writes none, so every such process compiles PySpark's sources again: about
half a second of one core for the driver and again for each worker daemon, before either does
anything. When that zip is the one inside the installed ``pyspark`` package that this interpreter
would import anyway (the pip-installed Spark whose ``spark-submit`` ran us), its sources are the
same files, already compiled in ``__pycache__``: ``prefer_installed_pyspark()`` takes the zip off
``sys.path`` (and drops its cached zip importer: every Spark task calls
``importlib.invalidate_caches()``, which makes a zip importer parse the zip's whole directory of
1,300 entries again, in Python). A zip of another Spark installation (a cluster's) stays first,
untouched, as does everything when ``pyspark`` is already imported.

``WORKER_DAEMON``: the module local Python workers start with (``spark.python.daemon.module``),
PySpark's daemon after this reordering (``storelib.runtime.pydaemon``).
"""
from __future__ import annotations

import os
import sys

__all__ = ["prefer_installed_pyspark", "WORKER_DAEMON", "DAEMON_CONF"]

WORKER_DAEMON = "storelib.runtime.pydaemon"
DAEMON_CONF = "spark.python.daemon.module"


def prefer_installed_pyspark() -> bool:
    """Take the installed pyspark package's own ``pyspark.zip`` off ``sys.path``; True if it was there."""
    if "pyspark" in sys.modules:
        return False
    zips = [p for p in sys.path if os.path.basename(p) == "pyspark.zip"]
    if not zips:
        return False
    from importlib.machinery import PathFinder
    rest = [p for p in sys.path if p not in zips]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or not spec.origin:
        return False
    own = os.path.realpath(os.path.join(os.path.dirname(spec.origin), "python", "lib", "pyspark.zip"))
    mine = [p for p in zips if os.path.realpath(p) == own]
    if not mine:
        return False
    sys.path[:] = [p for p in sys.path if p not in mine]
    for p in mine:
        sys.path_importer_cache.pop(p, None)
    return True
