"""storelib.runtime.pydaemon's preload: a job's task modules imported once, in the worker daemon, before
it forks a worker; asked for only by a fresh context's warm-up (warmup.warm_workers)."""
from __future__ import annotations

import os
import subprocess
import sys

from storelib.format.paths import PROJECT_ROOT
from storelib.runtime import warmup
from storelib.runtime.pydaemon import PRELOAD_ENV


def test_the_daemon_imports_the_named_modules_before_it_serves():
    code = ("import sys; from storelib.runtime import pydaemon; got = pydaemon.preload(); "
            "import gc; print(got, 'storelib.format.textforms' in sys.modules, gc.get_freeze_count() > 0)")
    env = dict(os.environ, PYTHONPATH=PROJECT_ROOT,
               **{PRELOAD_ENV: "storelib.format.textforms,no_such_module_rocketlake"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['storelib.format.textforms']", "True", "True"]   # a bad name is skipped
    env.pop(PRELOAD_ENV)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["[]", "False", "False"]


class _Context:
    """What warm_workers touches of a SparkContext; ``jobs``: the ids of the jobs it ran."""
    defaultParallelism = 2

    def __init__(self, jobs=()):
        self.environment: dict = {}
        self.jobs = list(jobs)

    def statusTracker(self):
        ctx = self

        class Tracker:
            def getJobIdsForGroup(self, _group):
                return ctx.jobs

            def getActiveJobsIds(self):
                return []
        return Tracker()

    def setLocalProperty(self, key, value):
        pass

    def parallelize(self, data, slices):
        class Tasks:
            def foreachPartition(self, run):
                pass
        return Tasks()


def test_a_fresh_context_names_the_modules_for_its_daemon_and_a_used_one_keeps_its_workers():
    fresh, used = _Context(), _Context(jobs=[0])
    for sc in (fresh, used):
        warmup.warm_workers(sc, ["storelib.ingest.encode", "storelib.ingest.write"])
        warmup.wait_workers(sc)
    assert fresh.environment == {PRELOAD_ENV: "storelib.ingest.encode,storelib.ingest.write"}
    assert used.environment == {}          # its daemon runs already: a changed environment would start another
