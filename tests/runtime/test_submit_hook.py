"""The spark-env.sh hook that gives a plain ``spark-submit jobs/ingest.py`` the cold-job JVM options
(storelib.runtime.submit_hook), sourced by bash the way Spark's launcher sources it."""
from __future__ import annotations

import os
import subprocess

import pytest

from storelib.format.paths import PROJECT_ROOT
from storelib.runtime import jvm_archive, submit_hook
from storelib.runtime.sparkenv import LOG4J_CONFIG


def _opts_after(hook: str, *args: str, cwd: str = PROJECT_ROOT, env_opts: str | None = None) -> tuple[str, str]:
    """(SPARK_SUBMIT_OPTS, the hook's leftover variables) after sourcing ``hook`` as load-spark-env.sh
    does (``set -a``), with spark-class's arguments."""
    script = f'set -a; . {hook}; set +a; printf "%s\\n" "$SPARK_SUBMIT_OPTS"; compgen -v __rl_ || true'
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    if env_opts is not None:
        env["SPARK_SUBMIT_OPTS"] = env_opts
    r = subprocess.run(["bash", "-c", script, "spark-class", "org.apache.spark.deploy.SparkSubmit", *args],
                       cwd=cwd, env=env, capture_output=True, text=True, check=True)
    first, _, rest = r.stdout.partition("\n")
    return first, rest.strip()


def test_hook_adds_the_options_to_ingest_only(tmp_path):
    hook = tmp_path / "spark-env.sh"
    hook.write_text(submit_hook.hook_text("-XX:TieredStopAtLevel=1 -Xlog:cds*=off"))
    # relative (as the README runs it, from the checkout), absolute, after other options
    quiet = f"-Dlog4j.configurationFile={LOG4J_CONFIG}"
    opts, left = _opts_after(str(hook), "--master", "local[2]", "--py-files", "x.py", "jobs/ingest.py", "--store", "s")
    assert opts == f"-XX:TieredStopAtLevel=1 -Xlog:cds*=off {quiet}" and left == ""
    opts, _ = _opts_after(str(hook), os.path.join(PROJECT_ROOT, "jobs", "ingest.py"), cwd=str(tmp_path),
                          env_opts="-Dkeep=1")
    assert opts == f"-Dkeep=1 -XX:TieredStopAtLevel=1 -Xlog:cds*=off {quiet}"
    # the other jobs get the quiet logging only; any other application keeps Spark's defaults
    assert _opts_after(str(hook), "--master", "local[2]", "jobs/query.py")[0] == quiet
    for other in ("bench/parquet_copy.py", "pyspark-shell"):
        assert _opts_after(str(hook), "--master", "local[2]", other)[0] == ""
    assert _opts_after(str(hook), str(tmp_path / "ingest.py"), cwd=str(tmp_path), env_opts="-Dx=1")[0] == "-Dx=1"


def test_install_never_replaces_a_foreign_spark_env(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-env.sh").write_text("export SPARK_WORKER_CORES=3\n")
    assert submit_hook.install("-XX:TieredStopAtLevel=1", spark_home=str(tmp_path)) is None
    assert (conf / "spark-env.sh").read_text() == "export SPARK_WORKER_CORES=3\n"
    (conf / "spark-env.sh").unlink()
    path = submit_hook.install("-XX:TieredStopAtLevel=1", spark_home=str(tmp_path))
    assert path == str(conf / "spark-env.sh") and open(path).read().startswith(submit_hook.MARKER)
    assert submit_hook.install("-Xint", spark_home=str(tmp_path)) == path       # ours: rewritten
    assert "-Xint" in open(path).read()


def test_installed_hook_gives_plain_spark_submit_the_fast_path():
    """What `make install` left in this virtualenv's pyspark: a plain `spark-submit jobs/ingest.py`
    starts its driver's JVM with the cold-job options."""
    pytest.importorskip("pyspark")
    path = submit_hook.hook_path()
    if os.environ.get("SPARK_CONF_DIR") or not os.path.exists(path):
        pytest.skip(f"no hook at {path} (make install writes it) or SPARK_CONF_DIR set")
    opts, _ = _opts_after(path, "--master", "local[2]", "jobs/ingest.py", "--store", "s")
    assert opts.split()[0] == jvm_archive.C1_ONLY
    assert _opts_after(path, "--master", "local[2]", "bench/parquet_copy.py", "a", "b")[0] == ""


def _env_after(hook: str, conf_dir: str, *args: str) -> dict:
    """SPARK_CONF_DIR and SPARK_LAUNCHER_OPTS after sourcing ``hook`` as load-spark-env.sh does."""
    script = f'set -a; . {hook}; set +a; printf "%s\\n%s\\n" "$SPARK_CONF_DIR" "$SPARK_LAUNCHER_OPTS"'
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LAUNCHER_OPTS", "SPARK_SUBMIT_OPTS")}
    env["SPARK_CONF_DIR"] = conf_dir
    r = subprocess.run(["bash", "-c", script, "spark-class", "org.apache.spark.deploy.SparkSubmit", *args],
                       cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, check=True)
    conf, launcher = r.stdout.split("\n")[:2]
    return {"conf": conf, "launcher": launcher}


def test_a_conf_dir_holding_only_the_hook_leaves_the_class_path(tmp_path):
    """The conf directory goes on the driver's class path, where a non-empty directory turns the
    class-data archive off: while it holds only the hook, the launcher is pointed past it; a
    directory with anything else of Spark's in it is used as it is."""
    conf = tmp_path / "conf"
    conf.mkdir()
    hook = conf / "spark-env.sh"
    hook.write_text(submit_hook.hook_text("-XX:TieredStopAtLevel=1"))
    got = _env_after(str(hook), str(conf), "--master", "local[2]", "bench/parquet_copy.py", "a", "b")
    assert got == {"conf": str(conf / submit_hook.NO_CONF), "launcher": ""}
    assert not (conf / submit_hook.NO_CONF).exists()
    got = _env_after(str(hook), str(conf), "--master", "local[2]", "jobs/ingest.py", "--store", "s")
    assert got == {"conf": str(conf / submit_hook.NO_CONF), "launcher": submit_hook.LAUNCHER_OPTS}
    for other in ("spark-defaults.conf", ".hidden-setting"):
        (conf / other).write_text("spark.ui.enabled false\n")
        assert _env_after(str(hook), str(conf), "jobs/ingest.py")["conf"] == str(conf)
        (conf / other).unlink()


def _quiet_after(hook: str, conf_dir: str, *args: str, env_extra: dict | None = None) -> tuple[str, str]:
    """(SPARK_SUBMIT_OPTS, SPARK_LOCAL_IP) after sourcing ``hook`` with spark-class's arguments."""
    script = f'set -a; . {hook}; set +a; printf "%s\\n%s\\n" "$SPARK_SUBMIT_OPTS" "$SPARK_LOCAL_IP"'
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_SUBMIT_OPTS", "SPARK_LOCAL_IP")}
    env.update(SPARK_CONF_DIR=conf_dir, **(env_extra or {}))
    r = subprocess.run(["bash", "-c", script, "spark-class", "org.apache.spark.deploy.SparkSubmit", *args],
                       cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, check=True)
    opts, ip = r.stdout.split("\n")[:2]
    return opts, ip


def test_jobs_get_quiet_logging_and_a_local_ip_on_a_local_master(tmp_path):
    """A plain `spark-submit jobs/ingest.py` printed 42 INFO lines (Spark's default log4j profile) and
    a WARN that the host name resolves to a loopback address: every job of this checkout gets the
    quiet log4j configuration, and a local master SPARK_LOCAL_IP, unless the caller chose them."""
    conf = tmp_path / "conf"
    conf.mkdir()
    hook = conf / "spark-env.sh"
    hook.write_text(submit_hook.hook_text("-XX:TieredStopAtLevel=1"))
    quiet = f"-Dlog4j.configurationFile={LOG4J_CONFIG}"
    opts, ip = _quiet_after(str(hook), str(conf), "--master", "local[2]", "jobs/verify.py", "--store", "s")
    assert opts == quiet and ip == "127.0.0.1"
    assert _quiet_after(str(hook), str(conf), "jobs/inspect.py")[1] == "127.0.0.1"          # local[*] by default
    opts, ip = _quiet_after(str(hook), str(conf), "--master", "spark://head:7077", "jobs/verify.py")
    assert opts == quiet and ip == ""                                  # a cluster's driver binds as Spark decides
    assert _quiet_after(str(hook), str(conf), "--master=yarn", "jobs/query.py")[1] == ""
    assert _quiet_after(str(hook), str(conf), "jobs/query.py", env_extra={"SPARK_LOCAL_IP": "10.1.2.3"})[1] == "10.1.2.3"
    opts, _ = _quiet_after(str(hook), str(conf), "jobs/query.py", env_extra={"SPARK_SUBMIT_OPTS": "-Dlog4j.configurationFile=mine"})
    assert opts == "-Dlog4j.configurationFile=mine"
    (conf / "log4j2.properties").write_text("rootLogger.level = info\n")     # the user's own logging
    assert _quiet_after(str(hook), str(conf), "--master", "local[1]", "jobs/query.py")[0] == ""
    assert _quiet_after(str(hook), str(conf), "bench/parquet_copy.py") == ("", "")
