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


_KERNELS_LEFT = '''
import sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from numba.core.registry import CPUDispatcher
from storelib.runtime import pydaemon

def loaded():
    return {(m.__name__, k, str(s)) for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("storelib")
            for k, v in list(vars(m).items()) if isinstance(v, CPUDispatcher) for s in v.signatures}

print(pydaemon.preload())
before = loaded()
from storelib.ingest import encode, inputs, topics
from storelib.ingest.context import EncodeContext
from storelib.format.config import StoreConfig
n = 3000
pairs = pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())]))
props = [[{"name": "TAGS", "value": f"t{i % 7}"}, {"name": "KEYS", "value": f"k{i} o{i}"},
          {"name": "UNIQ_KEY", "value": f"U{i}"}, {"name": "WAIT", "value": "true" if i % 2 else "false"}]
         if i % 5 else [] for i in range(n)]
pq.write_table(pa.table({
    "topic": [f"topic{i % 3}" for i in range(n)], "queue_id": pa.array([i % 4 for i in range(n)], pa.int32()),
    "sys_flag": pa.array([0] * n, pa.int32()), "born_timestamp": pa.array(range(n), pa.int64()),
    "store_timestamp": pa.array(range(1, n + 1), pa.int64()), "born_host": ["10.0.0.7:50123"] * n,
    "store_host": ["192.168.0.10:10911"] * n, "body": pa.array([b"x" * (i % 300 + 1) for i in range(n)], pa.large_binary()),
    "properties": pa.array(props, pairs)}), sys.argv[1] + "/in.parquet")
splits = inputs.plan_splits(sys.argv[1] + "/in.parquet", "parquet", 1)
ctx = EncodeContext(store=sys.argv[1] + "/store", config=StoreConfig(), topics=topics.Topics.default(),
                    staging="_rocketlake/staging/t/a", splits=tuple(s.to_dict() for s in splits), default_store_ts=1)
assert encode.encode_split(ctx, splits[0].to_dict())["count"] == n
print(sorted(loaded() - before))
'''


def test_the_daemon_loads_every_kernel_an_encode_task_calls(tmp_path):
    """``storelib.ingest.encode:load_kernels`` in the daemon's preload: an encode task of a Parquet
    split afterwards loads no compiled kernel of its own (each forked worker inherits them)."""
    env = dict(os.environ, PYTHONPATH=PROJECT_ROOT, **{PRELOAD_ENV: "storelib.ingest.encode:load_kernels"})
    out = subprocess.run([sys.executable, "-c", _KERNELS_LEFT, str(tmp_path)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["['storelib.ingest.encode:load_kernels']", "[]"]
