"""Hadoop's HDFS mini cluster on 127.0.0.1 for the hdfs:// tests (`make hdfs` fetches it).

``tests/hdfs/pom-minicluster.xml`` (``hadoop-client-minicluster`` of pyspark's Hadoop line) is
resolved by mvn into ``.cache/jars/hdfs-minicluster/``; ``tests/hdfs/HdfsMini.java`` is compiled
there by the JDK's javac. ``cluster()`` starts one NameNode and three DataNodes in a JVM of its own
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "hdfs")
JARS = os.path.join(ROOT, ".cache", "jars", "hdfs-minicluster")
LAUNCHER = os.path.join(ROOT, ".cache", "jars", "hdfs-minicluster-launcher")
_launcher = [LAUNCHER]          # the built launcher's directory (``jars``)


def jars() -> str:
    """The directory holding the mini cluster's jars and its compiled launcher (fetched and built
    on first use); ``mavenfetch.Unavailable`` when they cannot be had."""
    from support.mavenfetch import Unavailable, fetch_pom
    pom = os.path.join(HERE, "pom-minicluster.xml")
    src = os.path.join(HERE, "HdfsMini.java")
    want = hashlib.sha256(open(pom, "rb").read()).hexdigest()
    d = fetch_pom(pom, JARS, want, "the HDFS mini cluster",
                  ("-q", "-s", os.path.join(ROOT, "tests", "kafka", "settings.xml")))
    key = hashlib.sha256(open(src, "rb").read() + want.encode()).hexdigest()
    # one directory per launcher source: worktrees with another HdfsMini.java never rebuild this one
    launcher = f"{LAUNCHER}-{key[:12]}"
    if not os.path.isdir(launcher):
        if shutil.which("javac") is None:
            raise Unavailable("javac (a JDK 17) is needed to build the HDFS mini cluster's launcher")
        tmp = f"{launcher}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        r = subprocess.run(["javac", "-cp", os.path.join(d, "*"), "-d", tmp, src], capture_output=True, text=True)
        if r.returncode != 0:
            raise Unavailable(f"javac could not build {os.path.relpath(src, ROOT)}:\n{r.stderr[-2000:]}")
        try:
            os.rename(tmp, launcher)
        except OSError:                 # built meanwhile by another process
            shutil.rmtree(tmp, ignore_errors=True)
    _launcher[0] = launcher
    return d


_running: dict = {}           # hdfs://... -> the JVM serving it


def power_cut(url: str) -> None:
    """kill -9 the JVM of the cluster at ``url`` (its NameNode and DataNodes at once)."""
    proc = _running.pop(url)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def cluster(timeout: float = 120, work: str | None = None, restart: str | None = None):
    """A running mini cluster: yields its ``hdfs://127.0.0.1:<port>``. ``work``: its data stays
    there (not removed at exit); ``restart``: the URL of a cluster that ran on ``work`` before
    (``power_cut``): the same data, the same port."""
    d = jars()
    keep = work is not None
    work = work or tempfile.mkdtemp(prefix="hdfs-mini-")
    log = open(os.path.join(work, "cluster.log"), "ab")
    extra = [f"rocketlake.minicluster.restart={restart.rsplit(':', 1)[1]}"] if restart else []
    proc = subprocess.Popen(["java", "-Xmx768m", "-XX:TieredStopAtLevel=1", "-cp",
                             os.pathsep.join([_launcher[0], os.path.join(d, "*")]), "HdfsMini", os.path.join(work, "dfs"),
                             *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    url = None
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
        url = line.split()[1]
        _running[url] = proc
        yield url
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
        _running.pop(url, None)
        if not keep:
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
