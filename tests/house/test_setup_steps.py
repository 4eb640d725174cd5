"""`make test`'s set-up (the `setup` target) runs every step `install rocketmq kafka s3proxy hdfs`
ran, in two sides at once (setup-venv, setup-jars): a step added to `install` but not to a side would
be skipped by `make test` alone. Read from make's own database (`make -p`, variables expanded; questioning a target that runs no make)."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUBMAKE = "$(MAKE) --no-print-directory "


def _database() -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    r = subprocess.run(["make", "-pRrq", "-f", "Makefile", "check-java"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    return r.stdout


def _prerequisites(db: str, target: str) -> list[str]:
    found = re.findall(rf"^{re.escape(target)}:(.*)$", db, re.M)
    assert len(found) == 1, (target, found)
    return found[0].split()


def _chain(makefile: str, target: str) -> list[str]:
    """The goals of the one-goal makes a side's recipe runs one after the other."""
    recipe = makefile.replace("\\\n\t", "").split(f"\n{target}:\n\t@", 1)[1].split("\n", 1)[0]
    parts = recipe.split(" && ")
    assert all(p.startswith(SUBMAKE) and len(p.split()) == 3 for p in parts), recipe
    return [p[len(SUBMAKE):] for p in parts]


def test_setup_runs_every_step_of_install_and_the_jars_once():
    db = _database()
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    assert _prerequisites(db, "test") == ["setup"]
    assert "$(MAKE) --no-print-directory $(if $(DRY_RUN),$(DRY_SETUP),-j4 setup-venv setup-jars)" in makefile
    venv, jars = _chain(makefile, "setup-venv"), _chain(makefile, "setup-jars")
    assert re.findall(r"^DRY_SETUP := (.*)$", db, re.M)[0].split() == venv + jars     # what `make -n` lists
    grouped = {"setup-pip", "setup-builds", "setup-delta"}
    steps = _prerequisites(db, "setup") + [s for s in venv + jars if s not in grouped]
    for g in grouped:
        steps += _prerequisites(db, g)
    assert sorted(steps) == sorted(set(steps)), steps          # nothing runs twice
    assert set(steps) == set(_prerequisites(db, "install")) | {"rocketmq", "kafka", "s3proxy", "hdfs"}
    # every mvn run shares .cache/m2 and every apt run dpkg's lock: one make each, on one side
    assert jars == ["setup-delta", "rocketmq", "kafka", "s3proxy", "hdfs"]
    assert _prerequisites(db, "setup-delta") == [".cache/jars/delta-spark.stamp"]
    assert venv[:2] == ["fuse3", "chromium"]
