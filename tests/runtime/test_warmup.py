"""storelib.runtime.warmup: a cold job's imports overlapped with the JVM's start and the driver's planning."""
from __future__ import annotations

import sys
import threading
import time

import pytest

from storelib.runtime import warmup


def test_preload_imports_on_a_thread_and_wait_joins_it():
    sys.modules.pop("storelib.format.textforms", None)
    loading = warmup.preload(["storelib.format.textforms", "no_such_module_rocketlake"])   # a bad name is skipped
    loading.wait()
    assert "storelib.format.textforms" in sys.modules


def test_wait_joins_its_own_context_only_and_at_most_timeout():
    """A context without a warm-up returns at once even while another context's warm-up runs;
    waiting on a warm-up that hangs gives up after ``timeout``."""
    release = threading.Event()

    class Hanging:
        defaultParallelism = 2

        def setLocalProperty(self, key, value):
            pass

        def parallelize(self, data, slices):
            class Tasks:
                def foreachPartition(self, run):
                    release.wait(30)
            return Tasks()

    class Idle:
        defaultParallelism = 2
    hanging = Hanging()
    warmup.warm_workers(hanging, [])
    try:
        t0 = time.monotonic()
        warmup.wait_workers(Idle())
        assert time.monotonic() - t0 < 0.5
        warmup.wait_workers(hanging, timeout=0.3)
        assert 0.25 <= time.monotonic() - t0 < 5
        assert any(t.name == "rocketlake-warm-workers" and t.is_alive() for t in threading.enumerate())
    finally:
        release.set()


def test_warm_workers_loads_the_modules_in_the_workers_that_take_the_next_tasks(spark):
    sc = spark.sparkContext
    warmup.warm_workers(sc, ["storelib.ingest.encode", "no_such_module_rocketlake"])
    warmup.wait_workers(sc)

    def loaded(_rows):
        import sys as worker_sys
        yield "storelib.ingest.encode" in worker_sys.modules

    # PySpark reuses the idle workers the warm-up job left: every task of the next job finds it loaded
    assert sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism).mapPartitions(loaded).collect() \
        == [True] * sc.defaultParallelism


def test_cold_job_jvm_options():
    from storelib.runtime import jvm_archive
    assert jvm_archive.jvm_options(None) == jvm_archive.C1_ONLY
    opts = jvm_archive.jvm_options("/x/spark.jsa")
    # the archive is mapped quietly: a JVM that cannot use it would say so on stdout, where jobs answer
    assert opts.split() == [jvm_archive.C1_ONLY, "-XX:SharedArchiveFile=/x/spark.jsa", "-Xlog:cds*=off"]
    a, b = jvm_archive.archive_path("/c"), jvm_archive.archive_path("/c", base="-XX:+UseSerialGC")
    assert a.startswith("/c/spark-") and a.endswith(".jsa") and a != b    # one archive per java/pyspark/options


@pytest.mark.spark          # runs where conftest prepares the JVMs (not under `-m "not spark"`)
def test_the_tests_jvms_map_the_archive_when_it_was_built():
    """conftest builds the archive before any JVM starts and hands it to every spark-submit."""
    from storelib.runtime import jvm_archive
    import os
    archive = jvm_archive.archive_path()
    if "ROCKETLAKE_TEST_JVM_OPTS" in os.environ:
        pytest.skip("ROCKETLAKE_TEST_JVM_OPTS is set: the tests' JVMs run its options, not the archive")
    assert archive and os.path.exists(archive), "the class-data archive was not built"
    assert os.environ["SPARK_SUBMIT_OPTS"] == jvm_archive.jvm_options(archive)


def test_task_started_freezes_what_a_spark_worker_holds_and_nothing_outside_a_task(spark):
    """PySpark's daemon runs a full collection after every task of a reused worker: frozen at the
    task's start, the worker's objects are not walked again by it. Outside a Spark task nothing
    is frozen (the caller's garbage stays collectable)."""
    import gc
    held = [[] for _ in range(1000)]
    before = gc.get_freeze_count()
    warmup.task_started()
    # (not ==: a frozen object another thread of this process frees meanwhile leaves the count)
    assert gc.get_freeze_count() <= before
    del held

    def frozen(_rows):
        import gc as worker_gc
        from storelib.runtime import warmup as worker_warmup
        kept = [[] for _ in range(1000)]          # objects a task leaves in its worker
        n0 = worker_gc.get_freeze_count()
        worker_warmup.task_started()
        yield worker_gc.get_freeze_count() - n0 >= len(kept) and len(worker_gc.get_objects()) < len(kept)

    sc = spark.sparkContext
    assert sc.parallelize(range(2), 2).mapPartitions(frozen).collect() == [True, True]
