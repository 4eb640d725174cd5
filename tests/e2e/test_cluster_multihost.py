"""A multi-host cluster whose hosts share nothing but object storage (tests/support/netns.py): a Spark
standalone master, the driver and a moto S3 server in one network namespace, two workers each in
its own network and mount namespace (own /tmp, no view of the checkouts, no AWS_* variables, an
interpreter that cannot import storelib until the driver ships it).

Two batches are ingested from s3:// into an s3:// store, the S3 settings given to the driver
only; in the second a worker is killed (SIGKILL, the whole host's processes) while it encodes,
and Spark reruns its tasks on the other. The exported store is byte-identical to RocketMQ's.
Inputs and stores on the driver's disk are refused before the application starts (exit 2, one
line); the driver's code zip is gone after each job; the secret key is in no log; each worker
compiled its kernels into one per-host cache. (A failed first batch on S3 leaving nothing behind
is test_ingest_s3's, without a JVM.)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from support import goldenlib
from support import netns
from support import procgroup
from support import s3server
from conftest import ROOT, golden_set

pytestmark = pytest.mark.slow

PY = sys.executable
BIN = os.path.dirname(PY)
SMALL = goldenlib.SMALL_ROLL_CONFIG
BUCKET = "rl-cluster"
S3_PORT, MASTER_PORT, UI_PORT = 9000, 7077, 8080
SECRET = f"rl-secret-{os.getpid()}-{time.time_ns() % 10**9}"
S3 = {"AWS_ENDPOINT_URL": f"http://{netns.CTL_IP}:{S3_PORT}", "AWS_ACCESS_KEY_ID": "rl-key",
      "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
JVM = "-XX:TieredStopAtLevel=1"
WHY = netns.unavailable()


class Cluster:
    def __init__(self, hosts: netns.Hosts, tmp):
        self.hosts, self.tmp = hosts, tmp
        self.procs: dict = {}
        self.url = f"spark://{netns.CTL_IP}:{MASTER_PORT}"
        self.driver_tmp = tmp / "driver-tmp"
        self.driver_tmp.mkdir()
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self.env = dict(base, **S3, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY, SPARK_LOCAL_IP=netns.CTL_IP,
                        TMPDIR=str(self.driver_tmp))

    def start(self, name, argv, env=None):
        log = open(self.tmp / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(argv, env=env or self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=str(self.tmp))
        log.close()

    def ctl(self, argv, timeout=300, env=None, **kw):
        return subprocess.run(self.hosts.in_ctl(argv), env=env or self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT, **kw)

    def s3(self, code: str, *args):
        """Python with boto3 against the S3 server (in the control namespace); its stdout as JSON."""
        pre = ("import sys, json, boto3; s3 = boto3.client('s3', endpoint_url=%r, aws_access_key_id='rl-key', "
               "aws_secret_access_key=%r, region_name='us-east-1')\n" % (S3["AWS_ENDPOINT_URL"], SECRET))
        r = self.ctl([PY, "-c", pre + code, *args], timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout or "null")

    def keys(self, prefix: str) -> list:
        return self.s3("p = s3.get_paginator('list_objects_v2').paginate(Bucket=%r, Prefix=%r)\n"
                       "print(json.dumps([o['Key'] for pg in p for o in pg.get('Contents', [])]))" % (BUCKET, prefix))

    def worker_root(self, k: int) -> str:
        """Worker k's own file system root, seen from here (its /tmp is in its mount namespace)."""
        return f"/proc/{self.procs[f'worker{k}'].pid}/root"

    def submit(self, args, conf=(), popen=False):
        cmd = [os.path.join(BIN, "spark-submit"), "--master", self.url, "--conf", "spark.ui.enabled=false",
               "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.executor.memory=512m",
               "--conf", f"spark.driver.host={netns.CTL_IP}", "--conf", f"spark.executor.extraJavaOptions={JVM}",
               *[a for c in conf for a in ("--conf", c)],
               "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
               os.path.join(ROOT, "jobs", "ingest.py"), *args]
        if popen:
            return subprocess.Popen(self.hosts.in_ctl(cmd), env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
        return self.ctl(cmd, timeout=600)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if WHY:
        pytest.skip(f"multi-host cluster test: {WHY}")
    tmp = tmp_path_factory.mktemp("multihost")
    hosts = netns.Hosts(2).up()
    c = Cluster(hosts, tmp)
    try:
        c.start("s3", hosts.in_ctl([PY, s3server.__file__, "moto", "-H", netns.CTL_IP, "-p", str(S3_PORT)]))
        c.start("master", hosts.in_ctl([os.path.join(BIN, "spark-class"), "org.apache.spark.deploy.master.Master",
                                        "--host", netns.CTL_IP, "--port", str(MASTER_PORT),
                                        "--webui-port", str(UI_PORT)]),
                env=dict(c.env, SPARK_LOG_DIR=str(tmp), SPARK_SUBMIT_OPTS=JVM))
        java_home = os.path.dirname(os.path.dirname(os.path.realpath(
            subprocess.run(["sh", "-c", "command -v java"], capture_output=True, text=True).stdout.strip())))
        for k in range(2):
            env = {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp/home", "JAVA_HOME": java_home,
                   "SPARK_LOCAL_IP": netns.worker_ip(k), "SPARK_WORKER_DIR": "/tmp/work", "SPARK_LOG_DIR": "/tmp/logs",
                   "SPARK_SUBMIT_OPTS": JVM}
            c.start(f"worker{k}", hosts.worker_shell(k, env, [
                os.path.join(BIN, "spark-class"), "org.apache.spark.deploy.worker.Worker", "--host",
                netns.worker_ip(k), "--cores", "1", "--memory", "1g", "--webui-port", "8081", "--work-dir",
                "/tmp/work", c.url]))
        deadline = time.time() + 120
        while True:
            r = c.ctl([PY, "-c", "import json, urllib.request; s = json.load(urllib.request.urlopen("
                                 f"'http://{netns.CTL_IP}:{UI_PORT}/json/', timeout=5)); "
                                 "print(sum(w['state'] == 'ALIVE' for w in s['workers']))"], timeout=30)
            if r.returncode == 0 and r.stdout.strip() == "2":
                break
            assert time.time() < deadline and all(p.poll() is None for p in c.procs.values()), \
                "cluster did not come up: " + " | ".join(
                    f"{n}: {(tmp / f'{n}.log').read_text()[-800:]}" for n in c.procs)
            time.sleep(1)
        c.s3("s3.create_bucket(Bucket=%r)" % BUCKET)
        yield c
    finally:
        for p in c.procs.values():
            procgroup.stop(p)
        hosts.down()


def _parts(tmp, cluster) -> list:
    """small-roll's messages in 2 batches, uploaded to S3 (the workers cannot read the driver's disk)."""
    g = golden_set("small-roll")
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()
    uploads = []
    for k, (lo, hi) in enumerate(((0, 1500), (1500, len(lines)))):
        p = tmp / f"part{k}.jsonl"
        p.write_text("".join(lines[lo:hi]), encoding="utf-8")
        uploads.append((str(p), f"in/part{k}.jsonl"))
    cluster.s3("for src, key in %r: s3.upload_file(src, %r, key)" % (uploads, BUCKET))
    return [f"s3://{BUCKET}/{key}" for _, key in uploads]


def _finished(p: subprocess.Popen, timeout: float = 600) -> subprocess.CompletedProcess:
    out, err = p.communicate(timeout=timeout)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _one_line_refusal(r, what):
    out = r.stdout + r.stderr            # spark-submit merges the Python driver's stderr into stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(lines) == 1 and what in lines[0], (r.returncode, out[-3000:])
    assert "Traceback" not in out and "multi-host master" in lines[0], out[-3000:]


def test_multihost_ingest_shares_nothing_but_s3(cluster, tmp_path):
    props = tmp_path / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    parts = _parts(tmp_path, cluster)
    store = f"s3://{BUCKET}/stores/small"
    common = ["--store", store, "--config", str(props), "--partitions", "4"]

    # Refused before the application starts: input or store on the driver's disk (the two
    # spark-submits side by side: each is a JVM's start, then one line).
    local_in = tmp_path / "part0.jsonl"
    refused = [cluster.submit(["--store", store, "--input", str(local_in), "--config", str(props)], popen=True),
               cluster.submit(["--store", str(tmp_path / "store"), "--input", parts[0], "--config", str(props)],
                              popen=True)]
    try:
        for p, what in zip(refused, ("--input", "--store")):
            _one_line_refusal(_finished(p), what)
    finally:
        procgroup.stop(*[p for p in refused if p.poll() is None], sig=signal.SIGKILL)
    assert not (tmp_path / "store").exists() and cluster.keys("stores/") == []

    times = []
    for k, part in enumerate(parts[:1]):
        t = time.time()
        r = cluster.submit([*common, "--input", part, "--batch-id", f"b{k}", "--json-summary",
                            str(tmp_path / f"s{k}.json")])
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        times.append(round(time.time() - t, 1))
        assert json.loads((tmp_path / f"s{k}.json").read_text())["status"] == "committed"
        assert SECRET not in r.stdout + r.stderr

    # Second batch, appended: worker 0 dies (the whole host's processes) while its executor encodes a split.
    gate = "/tmp/rl-gate"
    t = time.time()
    p = cluster.submit([*common, "--input", parts[1], "--batch-id", "b1", "--json-summary", str(tmp_path / "s1.json")],
                       conf=[f"spark.executorEnv.ROCKETLAKE_HOLD=encode-split:{gate}"], popen=True)
    try:
        w0, w1 = cluster.worker_root(0), cluster.worker_root(1)
        deadline = time.time() + 180
        while not os.path.exists(w0 + gate + ".reached"):
            assert p.poll() is None and time.time() < deadline, p.communicate()[1][-4000:] if p.poll() else "no hold"
            time.sleep(0.2)
        procgroup.stop(cluster.procs["worker0"], sig=signal.SIGKILL)
        open(w1 + gate, "w").close()
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            procgroup.stop(p, sig=signal.SIGKILL)
    times.append(round(time.time() - t, 1))
    assert p.returncode == 0, (out + err)[-4000:]
    assert json.loads((tmp_path / "s1.json").read_text())["status"] == "committed"
    assert SECRET not in out + err

    keys = cluster.keys("stores/small/")
    assert not [k for k in keys if "/_rocketlake/staging/" in k or k.endswith("writer.lock")]
    export = tmp_path / "export"
    r = cluster.ctl([PY, os.path.join(ROOT, "jobs", "export.py"), "--store", store, "--to", str(export)])
    assert r.returncode == 0, r.stderr[-3000:]
    diffs = goldenlib.compare(golden_set("small-roll"), str(export))
    assert diffs == [], diffs[:20]

    # The driver's code zips are gone; the surviving worker kept one kernel cache for all jobs and
    # never saw the secret.
    assert not [n for n in os.listdir(cluster.driver_tmp) if n.startswith("rocketlake-code-")]
    kernels = w1 + "/tmp/home/.cache/rocketlake/kernels"
    mods = os.listdir(kernels)
    assert mods and len(mods) == len({m.rsplit("-", 1)[0] for m in mods}), mods
    for d, _, files in os.walk(w1 + "/tmp"):
        if d.startswith(kernels):
            continue
        for f in files:
            if f in ("stdout", "stderr") or f.endswith(".out") or f.endswith(".log"):
                with open(os.path.join(d, f), errors="replace") as fh:
                    assert SECRET not in fh.read(), os.path.join(d, f)
    print(f"cluster batch seconds (wall, incl. spark-submit): {times}")
    if os.environ.get("ROCKETLAKE_CLUSTER_TIMES"):
        with open(os.environ["ROCKETLAKE_CLUSTER_TIMES"], "w") as fh:
            json.dump({"cluster_batches_s": times}, fh)
