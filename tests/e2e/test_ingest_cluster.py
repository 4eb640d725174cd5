"""A real cluster: Spark standalone master + two workers on 127.0.0.1, the ingest submitted to
it; the store is byte-identical to the golden set. The workers share the driver's disk, which the
job is told (ROCKETLAKE_SHARED_PATHS): a multi-host master refuses local paths otherwise.

Where network namespaces can be made, test_cluster_multihost.py runs a cluster whose workers
share nothing with the driver but S3, which covers this and more; this test then skips."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from support import goldenlib
from support import netns
from support import procgroup
from conftest import GOLDEN, ROOT, golden_set

pytestmark = [pytest.mark.slow, pytest.mark.skipif(netns.unavailable() is None,
                                                   reason="test_cluster_multihost.py runs a multi-host cluster here")]

PY = sys.executable
BIN = os.path.dirname(PY)
SMALL = goldenlib.SMALL_ROLL_CONFIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    port, ui = free_port(), free_port()
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY, SPARK_LOCAL_IP="127.0.0.1",
               SPARK_WORKER_DIR=str(tmp / "work"), SPARK_LOG_DIR=str(tmp / "logs"))
    cls = os.path.join(BIN, "spark-class")
    procs = []
    logs = []
    try:
        def start(name, *args):
            log = open(tmp / f"{name}.log", "w")
            logs.append(log)
            procs.append(subprocess.Popen([cls, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True, cwd=str(tmp)))
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(ui))
        url = f"spark://127.0.0.1:{port}"
        for k in range(2):
            start(f"worker{k}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                  "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(tmp / f"work{k}"), url)
        deadline = time.time() + 120
        while True:                       # both workers registered (the master's JSON status)
            try:
                status = json.load(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5))
                if sum(1 for w in status.get("workers", []) if w.get("state") == "ALIVE") >= 2:
                    break
            except OSError:
                pass
            assert time.time() < deadline and all(p.poll() is None for p in procs), \
                "cluster did not come up: " + "".join(open(tmp / f"{n}.log").read()[-1500:]
                                                      for n in ("master", "worker0", "worker1"))
            time.sleep(1)
        yield url, env
    finally:
        procgroup.stop(*procs)
        for log in logs:
            log.close()


def test_ingest_on_a_standalone_cluster_is_golden(cluster, tmp_path):
    url, env = cluster
    g = golden_set("small-roll")
    props = tmp_path / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    store = str(tmp_path / "store")
    cmd = [os.path.join(BIN, "spark-submit"), "--master", url, "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.executor.memory=512m",
           "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
           os.path.join(ROOT, "jobs", "ingest.py"), "--store", store, "--input", os.path.join(g, "messages.jsonl"),
           "--config", str(props), "--partitions", "4", "--json-summary", str(tmp_path / "s.json")]
    env = dict(env, ROCKETLAKE_SHARED_PATHS=f"{tmp_path}:{GOLDEN}")
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["status"] == "committed" and s["messages"] == 3000
    diffs = goldenlib.compare(g, store)
    assert diffs == [], diffs[:20]
