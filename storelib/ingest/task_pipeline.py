"""Executor-side plumbing every ingest task shares (stage 1 encode, stage 3 write).

* ``attempt_tag``: a name unique to this task attempt, part of every staged path, so a retried
  or speculative attempt never rewrites a file another attempt (or the driver) may read;
* ``task_cpus`` / ``writer_threads`` / ``in_order``: a thread pool, sized to the cores of the Spark
  task (not the machine's), that runs compiled kernels, reads and writes ahead of the consumer, in
  order and with bounded memory;
* ``RUN_ROWS``: messages per unit of that pipelined work;
* ``profiled``: with ``ROCKETLAKE_TASK_PROFILE=DIR``, each task's cProfile statistics go to a file
  in DIR (where a task's seconds go: read, encode, write, hashing, index build; off by default).
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import os
import sys
import uuid

__all__ = ["RUN_ROWS", "attempt_tag", "task_cpus", "writer_threads", "in_order", "profiled", "profiled_iter",
           "PROFILE_ENV"]

PROFILE_ENV = "ROCKETLAKE_TASK_PROFILE"

RUN_ROWS = 200_000     # messages per unit of pipelined work (encode, read + patch) inside a task


def attempt_tag() -> str:
    tc = None
    if "pyspark" in sys.modules:        # a Spark task has it loaded; a local run need not pay its import
        from pyspark import TaskContext
        tc = TaskContext.get()
    if tc is None:
        return f"local-{uuid.uuid4().hex[:8]}"
    return f"s{tc.stageId()}-p{tc.partitionId()}-a{tc.attemptNumber()}-{uuid.uuid4().hex[:6]}"


def task_cpus() -> int:
    """Cores this Spark task owns (``spark.task.cpus``, 1 by default); outside a task, the machine's.

    Spark runs as many tasks at once as it has cores divided by this: a task that sized its pools
    by ``os.cpu_count()`` would put cpu_count threads on every core and slow every other task down."""
    tc = None
    if "pyspark" in sys.modules:        # a Spark task has it loaded; a local run need not pay its import
        from pyspark import TaskContext
        tc = TaskContext.get()
    if tc is not None:
        try:
            return max(1, int(tc.cpus()))
        except Exception:  # noqa: BLE001 - a Spark without TaskContext.cpus (< 3.3): one core per task
            return 1
    return os.cpu_count() or 1


def writer_threads() -> int:
    """Threads of a task's pipeline pool: one per core the task owns (``ROCKETLAKE_WRITER_THREADS``
    overrides). The consumer (the thread writing the output) is one more, mostly waiting on I/O."""
    return max(1, int(os.environ.get("ROCKETLAKE_WRITER_THREADS", "0") or 0) or task_cpus())


def in_order(pool, jobs, window: int):
    """Run ``jobs`` (callables) on ``pool``, at most ``window`` ahead of the consumer, and yield
    their results in order: compiled kernels, reads and writes overlap while memory stays bounded."""
    if os.environ.get(PROFILE_ENV):        # profiled: every job on this thread, where cProfile sees it
        for job in jobs:
            yield job()
        return
    pending: collections.deque = collections.deque()
    jobs = iter(jobs)
    try:
        for job in itertools.islice(jobs, window):
            pending.append(pool.submit(job))
        while pending:
            out = pending.popleft().result()
            job = next(jobs, None)
            if job is not None:
                pending.append(pool.submit(job))
            yield out
    finally:
        for f in pending:
            f.cancel()


@contextlib.contextmanager
def profiled(what: str):
    """Profile the body (this thread) into ``$ROCKETLAKE_TASK_PROFILE/<what>-<attempt>.prof`` when
    that variable names a directory; otherwise a no-op that costs one environment lookup."""
    out = os.environ.get(PROFILE_ENV)
    if not out:
        yield
        return
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        os.makedirs(out, exist_ok=True)
        prof.dump_stats(os.path.join(out, f"{what}-{attempt_tag()}.prof"))


def profiled_iter(what: str, items):
    """``items`` unchanged; when profiling (``profiled``), all of them produced first under one
    profile of the task, then handed on."""
    if not os.environ.get(PROFILE_ENV):
        return items
    return _profiled_items(what, iter(items))


def _profiled_items(what: str, it):
    with profiled(what):
        done = []
        for item in it:
            done.append(item)
    yield from done
