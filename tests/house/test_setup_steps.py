"""`make test`'s set-up (the `setup` target) runs every step `install rocketmq kafka s3proxy hdfs`
ran, in two makes at once: a step added to `install` but not to setup's lists would be skipped by
`make test` alone. Read from make's own database (`make -p`), with the variables expanded."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _database() -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    r = subprocess.run(["make", "-pRrq", "-f", "Makefile", "setup"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    return r.stdout


def _line(db: str, pattern: str) -> list[str]:
    found = re.findall(pattern, db, re.M)
    assert len(found) == 1, (pattern, found)
    return found[0].split()


def test_setup_runs_every_step_of_install_and_the_jars():
    db = _database()
    install = _line(db, r"^install: (.*)$")
    assert _line(db, r"^test: (.*)$") == ["setup"]
    setup = _line(db, r"^setup: (.*)$")
    venv, builds, jars = (_line(db, rf"^setup-{k}: (.*)$") for k in ("venv", "builds", "jars"))
    assert "$(MAKE) --no-print-directory setup-jars &" in open(os.path.join(ROOT, "Makefile")).read()
    steps = setup + venv + builds + jars
    assert sorted(steps) == sorted(set(steps)), steps          # nothing runs twice
    assert set(steps) == set(install) | {"rocketmq", "kafka", "s3proxy", "hdfs"}
    # every mvn run shares .cache/m2 and every apt run dpkg's lock: each on one side only
    assert {".cache/jars/delta-spark.stamp", "rocketmq", "kafka", "s3proxy", "hdfs"} <= set(jars)
    assert {"fuse3", "chromium"} <= set(venv)
