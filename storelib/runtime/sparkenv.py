"""How a Spark session of storelib is started or joined: the workers' Python, JVM options, logging.

* ``python_for_workers(sc)``: PySpark starts its Python workers with ``PYSPARK_PYTHON``, else
  ``python3`` from PATH (which lacks the venv's pyarrow and numba). Before a session starts,
  ``PYSPARK_PYTHON`` defaults to the running interpreter; a local session joined later that still
  has the ``python3`` default is pointed at the running interpreter too (on a cluster the
  executors' Python is the cluster's business: ``spark.pyspark.python`` / ``PYSPARK_PYTHON``).
* ``submit_args(master, confs)``: the ``spark-submit`` arguments of an in-process session the way
  the Makefile's ``SUBMIT`` sets them: the cold-job JVM options (``jvm_archive``), the quiet log4j
  configuration (``conf/log4j2.properties``), no console progress or UI; set as
  ``PYSPARK_SUBMIT_ARGS`` before the JVM starts (``prepare_in_process``, ``apply_submit_args``).
"""
from __future__ import annotations

import os
import shlex
import sys

from ..format.paths import LOG4J_CONFIG

__all__ = ["LOG4J_CONFIG", "JVM_BOOT_NOISE", "python_for_workers", "submit_args", "prepare_in_process",
           "apply_submit_args", "quiet_jvm_boot"]

# What the JVM prints on its stderr before log4j runs and no rocketlake user can act on: Spark's
# launcher always adds --add-modules=jdk.incubator.vector (JavaModuleOptions), and the JVM says so.
JVM_BOOT_NOISE = (b"WARNING: Using incubator modules:",)



def python_for_workers(sc=None) -> None:
    """``PYSPARK_PYTHON`` defaults to this interpreter; a joined local context follows (above)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if sc is None or not hasattr(sc, "pythonExec"):
        return
    try:
        local = str(sc.master).startswith("local")
    except Exception:  # noqa: BLE001 - a stopped context: nothing to point anywhere
        return
    if local and sc.pythonExec == "python3" and os.environ.get("PYSPARK_PYTHON") == sys.executable:
        sc.pythonExec = sys.executable


def _args_text(master: str, confs) -> str:
    return " ".join(shlex.quote(a) for a in submit_args(master, confs)) + " pyspark-shell"


def submit_args(master: str, confs: list | tuple = ()) -> list:
    """``spark-submit`` options of a rocketlake job (the module docstring)."""
    java = [f"-Dlog4j.configurationFile={LOG4J_CONFIG}"] if os.path.exists(LOG4J_CONFIG) else []
    try:
        from . import jvm_archive
        java = [jvm_archive.job_options()] + java
    except Exception:  # noqa: BLE001 - without the archive a job runs, only its JVM starts slower
        java = ["-XX:TieredStopAtLevel=1"] + java
    args = ["--master", master, "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.ui.enabled=false"]
    for c in confs:
        args += ["--conf", c]
    return args + ["--driver-java-options", " ".join(java)]


def prepare_in_process(master: str, confs: list | tuple = ()) -> None:
    """Note how the next in-process SparkSession of a command is to start (``apply_submit_args``
    turns it into ``PYSPARK_SUBMIT_ARGS`` when the session is made: a command that never starts
    Spark never runs ``java -version`` or imports pyspark)."""
    import json
    python_for_workers()
    os.environ["ROCKETLAKE_MASTER"] = master
    os.environ["ROCKETLAKE_SPARK_CONFS"] = json.dumps(list(confs))


def apply_submit_args() -> None:
    """``PYSPARK_SUBMIT_ARGS`` from what ``prepare_in_process`` noted (unless already set)."""
    import json
    master = os.environ.get("ROCKETLAKE_MASTER")
    if master and "PYSPARK_SUBMIT_ARGS" not in os.environ:
        confs = json.loads(os.environ.get("ROCKETLAKE_SPARK_CONFS") or "[]")
        os.environ["PYSPARK_SUBMIT_ARGS"] = _args_text(master, confs)
    if master and master.startswith("local"):
        # a host name resolving to 127.0.0.1 makes Spark warn before log4j is configured
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def quiet_jvm_boot() -> None:
    """The in-process JVM's stderr through a pipe that drops ``JVM_BOOT_NOISE`` lines and passes
    every other line on to this process's stderr (fd 2), as it comes. Wraps pyspark's
    ``launch_gateway`` for the next gateway this process starts (a no-op once one runs, or under
    spark-submit, whose JVM is this process's parent). At exit what the JVM has written so far is
    passed on before the process ends (``exit_now`` skips the wait for daemon threads, and the
    JVM outlives this process by a moment, so the pipe never ends first)."""
    try:
        from pyspark.core import context as ctx_mod
    except ImportError:                  # an older pyspark layout
        from pyspark import context as ctx_mod
    launch = ctx_mod.launch_gateway
    if getattr(launch, "rocketlake_quiet", False) or getattr(ctx_mod.SparkContext, "_gateway", None):
        return

    def quiet_launch(conf=None, popen_kwargs=None):
        kw = dict(popen_kwargs or {})
        if "stderr" in kw:
            return launch(conf, kw)
        w = _start_relay()
        kw["stderr"] = w
        try:
            return launch(conf, kw)
        finally:
            os.close(w)                  # the JVM holds its own copy

    quiet_launch.rocketlake_quiet = True  # type: ignore[attr-defined]  # marks the wrapper as ours
    ctx_mod.launch_gateway = quiet_launch


def _start_relay() -> int:
    """A thread relaying lines from a new pipe to fd 2 without ``JVM_BOOT_NOISE``; returns the
    pipe's write end. An ``atexit`` handler wakes the thread, which then relays what the pipe holds
    (a last line without its newline too) and ends; the handler waits for it (at most 2 s)."""
    import atexit
    import select
    import threading
    r, w = os.pipe()
    wake_r, wake_w = os.pipe()

    def relay() -> None:
        poller = select.poll()
        poller.register(r, select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        pending, draining, chunk = b"", False, b"-"
        while chunk:
            if not draining and any(fd == wake_r for fd, _ in poller.poll()):
                draining = True
                os.set_blocking(r, False)
            try:
                chunk = os.read(r, 65536)
            except BlockingIOError:      # draining, and the pipe holds nothing more
                chunk = b""
            pending = _relay_lines(pending + chunk, last=not chunk)
        os.close(r)

    thread = threading.Thread(target=relay, daemon=True, name="rocketlake-jvm-stderr")
    thread.start()

    def drain() -> None:
        os.write(wake_w, b"x")           # the pipe holds room for it: nothing else writes there
        thread.join(2.0)
        if not thread.is_alive():
            os.close(wake_r)
            os.close(wake_w)
    atexit.register(drain)
    return w


def _relay_lines(data: bytes, last: bool) -> bytes:
    """Write ``data``'s whole lines that are not boot noise to fd 2, and its unfinished tail too
    when ``last`` (with a newline); return the tail otherwise."""
    *lines, tail = data.split(b"\n")
    if last and tail:
        lines.append(tail)
    out = b"".join(line + b"\n" for line in lines if not line.startswith(JVM_BOOT_NOISE))
    if out:
        try:
            os.write(2, out)
        except OSError:
            pass
    return b"" if last else tail
