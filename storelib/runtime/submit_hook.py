"""The cold-job JVM options for a plain ``spark-submit jobs/ingest.py``, through ``spark-env.sh``.

``spark-submit`` starts the driver's JVM before any of our Python runs, so the options of
``storelib.runtime.jvm_archive`` (C1 only, the class-data archive) cannot be applied by the job
itself: without them a cold 2M-message ingest spends ~7 s more JVM CPU (C2 compiler threads, class
loading while the SparkContext starts) on two cores the encode tasks need. Spark's launcher
sources ``$SPARK_CONF_DIR/spark-env.sh`` (default ``$SPARK_HOME/conf``) before it builds the java
command line, with spark-submit's arguments as the positional parameters, and puts
``SPARK_SUBMIT_OPTS`` on the driver's JVM. ``make install`` writes such a file into the
virtualenv's pyspark (``install``): it adds the options only when one of the arguments is this
checkout's ``jobs/ingest.py``; every other application of that ``spark-submit`` (a Parquet copy,
SQL over the ``rocketmq`` source, whose work is in the JVM and gains from C2) starts as before.

The same hook keeps the class-data archive usable. The launcher puts ``$SPARK_CONF_DIR`` on the
driver's class path, and a JVM maps a class-data archive only when every directory on its class
path is missing or empty, as it was when the archive was dumped: a conf directory holding
``spark-env.sh`` would turn the archive off for every JVM of this pyspark (the ingest's, the
``rocketlake`` command's, the tests'). While that directory holds nothing but this hook (nothing
else there for Spark to read), the hook points ``SPARK_CONF_DIR`` at a directory that does not
exist (``NO_CONF``). An ingest's launcher JVM (``org.apache.spark.launcher.Main``, which only
builds the java command) also starts with C1 and the serial collector (``LAUNCHER_OPTS``).

Every job of this checkout's ``jobs/`` also gets what the ``rocketlake`` command gives its
in-process Spark (``runtime.sparkenv``): the quiet log4j configuration (``conf/log4j2.properties``:
warnings and errors, not the 40-odd INFO lines of Spark's default profile) unless the caller set
one (``SPARK_SUBMIT_OPTS`` or a ``log4j2.properties`` in the conf directory), and, for a local
master (``--master local...``, or none given and no other conf), ``SPARK_LOCAL_IP=127.0.0.1``
unless set: a host name resolving to a loopback address otherwise makes Spark warn before log4j
is configured.

A ``spark-env.sh`` that we did not write is never replaced (``install`` says so and returns None);
with ``SPARK_CONF_DIR`` pointing elsewhere, or another Spark installation (a cluster's), the job
starts with Spark's defaults and gets the options from ``--driver-java-options`` or
``SPARK_SUBMIT_OPTS`` (``python -m storelib.runtime.jvm_archive`` prints them).
"""
from __future__ import annotations

import os
import shlex

from ..format.paths import LOG4J_CONFIG, PROJECT_ROOT

__all__ = ["MARKER", "HOOKED_JOBS", "NO_CONF", "LAUNCHER_OPTS", "hook_text", "hook_path", "install"]

MARKER = "# rocketlake submit hook"
# the jobs whose JVM mostly schedules Python tasks (storelib.runtime.jvm_archive)
HOOKED_JOBS = (os.path.join(PROJECT_ROOT, "jobs", "ingest.py"),)
JOBS_DIR = os.path.join(PROJECT_ROOT, "jobs")         # every job here gets the quiet log4j configuration
NO_CONF = ".rocketlake-no-conf"        # under the conf directory; never created
LAUNCHER_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def hook_text(options: str, jobs=HOOKED_JOBS, jobs_dir: str = JOBS_DIR, log4j: str = LOG4J_CONFIG) -> str:
    """The ``spark-env.sh`` body: ``options`` appended to ``SPARK_SUBMIT_OPTS`` when an argument
    names one of ``jobs`` (compared by real path). It runs under ``set -a`` (every variable it
    sets is exported), so it unsets its own."""
    cases = " | ".join(shlex.quote(os.path.realpath(j)) for j in jobs)
    return f"""{MARKER}: written by `make install` (storelib/runtime/submit_hook.py), rewritten by each install.
# spark-submit sources this with its arguments; a rocketlake ingest's driver JVM gets the cold-job
# options (C1 only, the class-data archive), every other application Spark's defaults.
__rl_opts={shlex.quote(options)}
for __rl_arg in "$@"; do
  case "$__rl_arg" in
    *.py)
      case "$(realpath -- "$__rl_arg" 2>/dev/null)" in
        {cases}) SPARK_SUBMIT_OPTS="${{SPARK_SUBMIT_OPTS:+$SPARK_SUBMIT_OPTS }}$__rl_opts"
          SPARK_LAUNCHER_OPTS="${{SPARK_LAUNCHER_OPTS:+$SPARK_LAUNCHER_OPTS }}{LAUNCHER_OPTS}"; break ;;
      esac ;;
  esac
done
# A conf directory on the class path that is not empty turns the class-data archive off; while
# this file is all it holds, the launcher gets a conf directory that does not exist.
__rl_only=1
for __rl_arg in "$SPARK_CONF_DIR"/* "$SPARK_CONF_DIR"/.[!.]*; do
  case "${{__rl_arg##*/}}" in
    spark-env.sh | '*' | '.[!.]*') ;;
    *) __rl_only=0 ;;
  esac
done
# Every job of this checkout: the quiet log4j configuration and, for a local master, a local IP
# (unless the caller chose them).
__rl_ours=0; __rl_local=$__rl_only; __rl_prev=
for __rl_arg in "$@"; do
  case "$__rl_prev" in --master) case "$__rl_arg" in local*) __rl_local=1 ;; *) __rl_local=0 ;; esac ;; esac
  case "$__rl_arg" in
    --master=local*) __rl_local=1 ;;
    --master=*) __rl_local=0 ;;
    *.py) case "$(realpath -- "$__rl_arg" 2>/dev/null)" in {shlex.quote(os.path.realpath(jobs_dir))}/*) __rl_ours=1 ;; esac ;;
  esac
  __rl_prev=$__rl_arg
done
if [ "$__rl_ours" = 1 ]; then
  case "$SPARK_SUBMIT_OPTS" in
    *log4j.configurationFile*) ;;
    *) [ -f "$SPARK_CONF_DIR/log4j2.properties" ] || \
         SPARK_SUBMIT_OPTS="${{SPARK_SUBMIT_OPTS:+$SPARK_SUBMIT_OPTS }}-Dlog4j.configurationFile={shlex.quote(log4j)}" ;;
  esac
  if [ "$__rl_local" = 1 ] && [ -z "$SPARK_LOCAL_IP" ]; then SPARK_LOCAL_IP=127.0.0.1; fi
fi
if [ "$__rl_only" = 1 ] && [ -n "$SPARK_CONF_DIR" ]; then SPARK_CONF_DIR="$SPARK_CONF_DIR/{NO_CONF}"; fi
unset __rl_arg __rl_opts __rl_only __rl_ours __rl_local __rl_prev
"""


def hook_path(spark_home: str | None = None) -> str:
    """Where spark-submit of the installed pyspark looks for ``spark-env.sh`` (unless
    ``SPARK_CONF_DIR`` says otherwise)."""
    if spark_home is None:
        import pyspark
        spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
    return os.path.join(spark_home, "conf", "spark-env.sh")


def install(options: str, spark_home: str | None = None) -> str | None:
    """Write the hook (``hook_text``) as pyspark's ``conf/spark-env.sh``; the path, or None when a
    ``spark-env.sh`` not written by us is there (left as it is)."""
    path = hook_path(spark_home)
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as fh:
            if not fh.read().startswith(MARKER):
                return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(hook_text(options))
    os.replace(tmp, path)
    return path
