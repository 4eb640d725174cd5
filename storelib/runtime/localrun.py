"""Stages run in this process instead of on Spark: the same encode, write and commit code.

An ingest needs very little of a ``SparkContext``: broadcast a context, run a list of tasks and
collect what they return, cancel, and ask whether a stage still runs. ``LocalSession`` gives
exactly that, running the tasks one after the other in the calling process. It serves what has
no use for a JVM: the suite's crash simulator (one ingest recorded under a lazy file system, then
checked at every fsync) and ``make check``'s tiny end-to-end store, which must catch a broken
write or commit stage without starting Spark.

    from storelib.runtime.localrun import LocalSession
    run_ingest(LocalSession(), store, "msgs.jsonl", "jsonl", config)
"""
from __future__ import annotations

__all__ = ["LocalSession", "LocalContext"]


class _Broadcast:
    def __init__(self, value):
        self.value = value


class _Dataset:
    """The few RDD operations the stages use, evaluated eagerly in order."""

    def __init__(self, items: list):
        self._items = items

    def map(self, fn) -> "_Dataset":
        return _Dataset([fn(x) for x in self._items])

    def flatMap(self, fn) -> "_Dataset":  # Spark's name
        return _Dataset([y for x in self._items for y in fn(x)])

    def foreachPartition(self, fn) -> None:
        fn(iter(self._items))

    def collect(self) -> list:
        return list(self._items)


class _Tracker:
    def getActiveStageIds(self) -> list:
        return []

    def getStageInfo(self, _sid):
        return None


class _Conf(dict):
    def get(self, key, default=None):
        return super().get(key, default)


class LocalContext:
    """The part of ``SparkContext`` an ingest uses, in this process."""
    master = "local-inprocess"

    def __init__(self, parallelism: int = 2):
        self.defaultParallelism = parallelism

    def broadcast(self, value) -> _Broadcast:
        return _Broadcast(value)

    def parallelize(self, items, _slices: int = 1) -> _Dataset:
        return _Dataset(list(items))

    def statusTracker(self) -> _Tracker:
        return _Tracker()

    def cancelAllJobs(self) -> None:
        pass

    def setLocalProperty(self, _key, _value) -> None:
        pass

    def getConf(self) -> _Conf:
        return _Conf()


class LocalSession:
    """Stands in for a ``SparkSession`` where an ingest only needs its ``sparkContext``."""

    def __init__(self, parallelism: int = 2):
        self.sparkContext = LocalContext(parallelism)
