"""Hadoop's HDFS mini cluster on 127.0.0.1 for the hdfs:// tests (`make hdfs` fetches it).

``tests/hdfs/pom-minicluster.xml`` (``hadoop-client-minicluster`` of pyspark's Hadoop line) is
resolved by mvn into ``.cache/jars/hdfs-minicluster/``; ``tests/hdfs/HdfsMini.java`` is compiled
there by the JDK's javac. ``cluster()`` starts one NameNode and one DataNode in a JVM of its own
(every port ephemeral on 127.0.0.1, data in a fresh directory) and yields the name node's
``hdfs://127.0.0.1:<port>``; on exit the JVM's standard input is closed (it shuts the cluster down)
and its process group is killed.

    PYTHONPATH=tests python -m support.hdfscluster fetch
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "hdfs")
JARS = os.path.join(ROOT, ".cache", "jars", "hdfs-minicluster")
LAUNCHER = os.path.join(ROOT, ".cache", "jars", "hdfs-minicluster-launcher")


def jars() -> str:
    """The directory holding the mini cluster's jars and its compiled launcher (fetched and built
    on first use); ``mavenfetch.Unavailable`` when they cannot be had."""
    from support.mavenfetch import Unavailable, fetch_pom
    pom = os.path.join(HERE, "pom-minicluster.xml")
    src = os.path.join(HERE, "HdfsMini.java")
    want = hashlib.sha256(open(pom, "rb").read()).hexdigest()
    d = fetch_pom(pom, JARS, want, "the HDFS mini cluster",
                  ("-q", "-s", os.path.join(ROOT, "tests", "kafka", "settings.xml")))
    stamp = os.path.join(LAUNCHER, ".stamp")
    key = hashlib.sha256(open(src, "rb").read() + want.encode()).hexdigest()
    if not (os.path.isfile(stamp) and open(stamp).read() == key):
        if shutil.which("javac") is None:
            raise Unavailable("javac (a JDK 17) is needed to build the HDFS mini cluster's launcher")
        tmp = LAUNCHER + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        r = subprocess.run(["javac", "-cp", os.path.join(d, "*"), "-d", tmp, src], capture_output=True, text=True)
        if r.returncode != 0:
            raise Unavailable(f"javac could not build {os.path.relpath(src, ROOT)}:\n{r.stderr[-2000:]}")
        shutil.rmtree(LAUNCHER, ignore_errors=True)
        os.rename(tmp, LAUNCHER)
        with open(stamp, "w") as fh:
            fh.write(key)
    return d


@contextlib.contextmanager
def cluster(timeout: float = 120):
    """A running mini cluster: yields its ``hdfs://127.0.0.1:<port>``."""
    d = jars()
    work = tempfile.mkdtemp(prefix="hdfs-mini-")
    log = open(os.path.join(work, "cluster.log"), "wb")
    proc = subprocess.Popen(["java", "-Xmx768m", "-XX:TieredStopAtLevel=1", "-cp",
                             os.pathsep.join([LAUNCHER, os.path.join(d, "*")]), "HdfsMini", os.path.join(work, "dfs")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        got: list = []
        reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        line = (got[0] if got else b"").decode().strip()
        if not line.startswith("ready hdfs://"):
            log.flush()
            tail = open(os.path.join(work, "cluster.log"), "rb").read()[-3000:].decode(errors="replace")
            raise AssertionError(f"the HDFS mini cluster did not start ({line!r}):\n{tail}")
        yield line.split()[1]
    finally:
        try:
            proc.stdin.close()                       # HdfsMini shuts the cluster down
            proc.wait(timeout=30)
        except (subprocess.TimeoutExpired, OSError):
            pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from support.mavenfetch import Unavailable
    if sys.argv[1:] != ["fetch"]:
        print(__doc__)
        sys.exit(2)
    try:
        d = jars()
    except Unavailable as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"HDFS mini cluster: {len(glob.glob(os.path.join(d, '*.jar')))} jars in {os.path.relpath(d, ROOT)}")
