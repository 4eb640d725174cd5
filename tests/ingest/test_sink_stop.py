"""``q.stop()`` on a streaming query into the ``rocketlake`` sink while its write tasks run prints
nothing of Spark's (no ``ERROR ... aborting``, no ``TaskKilled``, no PySpark ``EOFError`` trace) and
commits nothing. The user's own session, as docs/STREAMING.md starts it, in a process of its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from storelib.table import manifest
from storelib.io import storage
from support.longrun import long_test

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r'''
import os, sys, time
from pyspark.sql import SparkSession
import storelib
src, store, ck, gate = sys.argv[1:]
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
storelib.register_sink(spark)
df = spark.readStream.schema("topic string, body string, store_timestamp long").json(src)
q = df.writeStream.format("rocketlake").option("checkpointLocation", ck).start(store)
deadline = time.time() + 300
while not os.path.exists(gate + ".reached") and time.time() < deadline:
    time.sleep(0.1)
print("STOPPING", file=sys.stderr, flush=True)
q.stop()
spark.stop()
print("STOPPED", file=sys.stderr, flush=True)
'''


@pytest.mark.slow
@long_test("its own JVM held mid-write, minutes on 2 cores")
def test_stop_during_the_write_prints_nothing_of_sparks(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    with open(src / "a.json", "w") as f:
        for i in range(50):
            f.write(json.dumps({"topic": "orders", "body": f"m{i}", "store_timestamp": 1717236000000 + i}) + "\n")
    script = tmp_path / "stop.py"
    script.write_text(SCRIPT)
    gate, store = str(tmp_path / "gate"), str(tmp_path / "store")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
               ROCKETLAKE_HOLD=f"sink-write:{gate}", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(script), str(src), store, str(tmp_path / "ck"), gate],
                          capture_output=True, text=True, timeout=600, env=env)
    err = proc.stderr
    assert proc.returncode == 0 and "STOPPED" in err, err
    assert os.path.exists(gate + ".reached"), err            # stopped while a write task held
    after = err.split("STOPPING", 1)[1]
    for noise in ("ERROR", "TaskKilled", "Traceback", "EOFError", "Exception"):
        assert noise not in after, after
    assert not os.path.exists(os.path.join(store, "commitlog")) or \
        manifest.load_snapshot(storage.Store(store)).batch is None
