"""storelib.warmup: a cold job's imports overlapped with the JVM's start and the driver's planning."""
from __future__ import annotations

import sys

from storelib import warmup


def test_preload_imports_on_a_thread_and_wait_joins_it():
    sys.modules.pop("storelib.textforms", None)
    loading = warmup.preload(["storelib.textforms", "no_such_module_rocketlake"])   # a bad name is skipped
    loading.wait()
    assert "storelib.textforms" in sys.modules


def test_wait_without_a_warm_up_returns_at_once():
    class Context:
        defaultParallelism = 2
    warmup.wait_workers(Context())


def test_warm_workers_loads_the_modules_in_the_workers_that_take_the_next_tasks(spark):
    sc = spark.sparkContext
    warmup.warm_workers(sc, ["storelib.encode_stage", "no_such_module_rocketlake"])
    warmup.wait_workers(sc)

    def loaded(_rows):
        import sys as worker_sys
        yield "storelib.encode_stage" in worker_sys.modules

    # PySpark reuses the idle workers the warm-up job left: every task of the next job finds it loaded
    assert sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism).mapPartitions(loaded).collect() \
        == [True] * sc.defaultParallelism
