"""A cold job's fixed costs, overlapped instead of paid in a row.

A cold ``spark-submit`` pays, one after the other: the JVM's SparkContext start (the Python
driver only waits on Py4J meanwhile), the driver's own imports (pyarrow, numba's cached kernels,
deltalake: about a second), then in the first stage every executor's Python worker starting and
importing the same. Two helpers let these run beside each other:

* ``preload(modules)``: import ``modules`` on a driver thread while the SparkSession starts
  (``cli.common.run_job``); ``wait()`` joins it before the job's body runs, so no module is ever
  imported by two threads of a running job at once.
* ``warm_workers(sc, modules)``: one tiny Spark job, one task per core, whose tasks import
  ``modules`` in the Python workers; PySpark reuses a worker for later tasks
  (``spark.python.worker.reuse``, on by default), so the first real stage finds them loaded.
  It runs while the driver reads the store's state and plans; ``wait_workers(sc)`` joins it
  before the first real stage, so its tasks never share a stage's progress or a kill point.

Both are best effort: a failure of either only means the cost is paid later, as before.

Once the modules are in, both call ``gc.freeze()``: the objects the imports made (numba's and
pyarrow's are over a million) move out of the collector's generations, which every full
collection would otherwise walk again. Profiled in a 10M ingest, the collector took ~6% of
each Python worker's time before.

``task_started()``, called as each ingest task starts, does the same for what a worker's first
tasks leave behind: PySpark's daemon runs a full ``gc.collect()`` after every task of a reused
worker, and the ~85,000 objects an encode task's first run creates (numba's loaded kernels and
their type caches) made each of those collections 25-135 ms on this project's 2-core VMs, paid
between one task and the next (docs/PERFORMANCE.md, "the collector between tasks"). Frozen at the next task's
start, the daemon's collection walks only what that task left.
"""
from __future__ import annotations

import gc
import importlib
import sys
import threading

__all__ = ["PRELOAD_ENV", "preload", "import_all", "warm_workers", "wait_workers", "task_started"]

# the modules the worker daemon imports before it forks a worker (storelib.runtime.pydaemon)
PRELOAD_ENV = "ROCKETLAKE_DAEMON_PRELOAD"

_warming: dict = {}          # id(SparkContext) -> the thread running its warm-up job


class _Preload:
    def __init__(self, modules):
        self._thread = threading.Thread(target=import_all, args=(tuple(modules),), daemon=True,
                                        name="rocketlake-preload")
        self._thread.start()

    def wait(self, timeout: float = 120.0) -> None:
        self._thread.join(timeout)
        if not self._thread.is_alive():
            gc.freeze()


def import_all(modules: tuple) -> None:
    """Import each of ``modules``; one that fails is skipped. ``module:function`` also calls
    ``function()`` of the module once it is imported (a warm-up: ``encode.load_kernels``)."""
    for entry in modules:
        name, _, call = entry.partition(":")
        try:
            module = importlib.import_module(name)
            if call:
                getattr(module, call)()
        except Exception:  # noqa: BLE001 - the job imports it again and reports any error there
            pass


def preload(modules) -> _Preload:
    """Start importing ``modules`` on a background thread; ``.wait()`` joins it."""
    return _Preload(modules)


def _warm_partition(modules: tuple):
    def run(_rows):
        from .milestones import mark
        mark("warm-task")
        import_all(modules)
        gc.freeze()
        mark("warm-task-end")
        return iter(())
    return run


def warm_workers(sc, modules) -> None:
    """Start the warm-up job of ``sc`` (one task per default-parallelism slot) on a thread."""
    modules = tuple(modules)
    n = max(1, sc.defaultParallelism)
    _daemon_preload(sc, modules)

    def job():
        try:
            sc.setLocalProperty("spark.job.description", "rocketlake: warm up Python workers")
            sc.parallelize(range(n), n).foreachPartition(_warm_partition(modules))
            from .milestones import mark
            mark("warm-job-done")
        except Exception:  # noqa: BLE001 - best effort (a stopped context, a cancelled job)
            pass

    t = threading.Thread(target=job, daemon=True, name="rocketlake-warm-workers")
    _warming[id(sc)] = t
    t.start()


def _daemon_preload(sc, modules: tuple) -> None:
    """Have the worker daemon import ``modules`` before it forks a worker (``runtime.pydaemon``),
    when no job ran on ``sc`` yet: its Python workers' environment is then still unfixed (a
    changed environment would start a second daemon beside the first)."""
    env = getattr(sc, "environment", None)
    if not isinstance(env, dict) or not modules or PRELOAD_ENV in env:
        return
    try:
        if sc.statusTracker().getJobIdsForGroup(None) or sc.statusTracker().getActiveJobsIds():
            return
    except Exception:  # noqa: BLE001 - a context that cannot say: leave its workers as they are
        return
    env[PRELOAD_ENV] = ",".join(modules)


def wait_workers(sc, timeout: float = 120.0) -> None:
    """Join ``sc``'s warm-up job, if one was started (at most ``timeout`` seconds)."""
    t = _warming.pop(id(sc), None)
    if t is not None:
        t.join(timeout)
        from .milestones import mark
        mark("warm-joined")


def task_started() -> None:
    """A Spark task starting in a Python worker: move every object the worker holds now into the
    collector's permanent generation (``gc.freeze``), so the full collection PySpark's daemon runs
    after the task walks only the objects the task itself made.

    Nothing garbage is frozen: the daemon collected right after the worker's previous task, and a
    worker's first task follows a fresh fork (or the warm-up, which froze). A frozen object is
    still freed when its last reference goes; only a reference cycle it later joins outlives the
    worker's collections. Outside a Spark task (an ingest run in this process, tests) this does
    nothing: the caller's own objects stay collectable."""
    if "pyspark" not in sys.modules:
        return
    from pyspark import TaskContext
    if TaskContext.get() is not None:
        gc.freeze()
