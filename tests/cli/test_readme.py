"""Every command the README shows runs, in a fresh shell, as written.

The README's ```sh blocks run in order in one bash (``set -e``) in an empty directory, with
``.venv/bin`` on PATH and no PYSPARK_PYTHON (a new user's shell); ```python blocks run after them
with the same interpreter (they start Spark: that part is marked slow). ```text blocks are sample
outputs and cluster command lines (a cluster is not at hand here). The first block, ``make demo``
and ``make test``, is the suite itself and what CI runs. The run is marked slow (a Spark session,
and some twenty processes that each load pyarrow, numba and deltalake).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

README = os.path.join(ROOT, "README.md")


def blocks(kind: str) -> list:
    text = open(README, encoding="utf-8").read()
    return [b for k, b in re.findall(r"```(\w+)\n(.*?)```", text, re.S) if k == kind]


def shell_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def run_shell_blocks(cwd) -> subprocess.CompletedProcess:
    script = "set -e\n" + "\n".join(b for b in blocks("sh") if not b.lstrip().startswith("make "))
    return subprocess.run(["bash", "-c", script], cwd=str(cwd), env=shell_env(), capture_output=True, text=True,
                          timeout=600)


def test_readme_is_short_and_links_exist():
    text = open(README, encoding="utf-8").read()
    assert len(text.splitlines()) <= 250
    first = [ln.split("#")[0].strip() for ln in blocks("sh")[0].splitlines() if ln.split("#")[0].strip()]
    assert first == ["make demo", "make test"] and re.search(r"```(\w*)\n", text).group(1) == "sh", first
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        if link != "docs/CLUSTERS.md":             # written beside this README by the cluster work
            assert os.path.exists(os.path.join(ROOT, link)), link


def test_readme_says_what_the_install_and_the_suite_download():
    """What `make install` and `make test` fetch is what README's list says: the requirements files
    pip reads (every package it names pinned there), Debian's packages apt-get installs, and a pom
    for every RocketMQ version it names and every pom set the suite's fetchers read."""
    import glob
    text = open(README, encoding="utf-8").read()
    make = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
    pypi = text.split("* **PyPI**: ", 1)[1].split("\n* ", 1)[0]
    files = re.findall(r"-r (\S+)", next(ln for ln in make.splitlines() if "pip install" in ln and " -r " in ln))
    assert files and all(f"`{f}`" in pypi for f in files), files
    pinned = {ln.split("==")[0].split("[")[0].lower() for f in files
              for ln in open(os.path.join(ROOT, f), encoding="utf-8") if "==" in ln}
    named = {w.lower() for w in re.findall(r"\b([a-z][\w-]*[a-z0-9])\b", pypi.split("pin (", 1)[1])
             if w not in ("for", "and", "the", "tests", "hdfs", "rocketlake", "ui")}
    assert named <= pinned, named - pinned
    apt = set(re.findall(r"apt-get install -y -qq ([\w -]+?) >", make))
    assert apt and all(f"`{p}`" in text for a in apt for p in a.split()), apt
    for v in re.findall(r"\*\*(\d+\.\d+\.\d+)\*\*", text.split("* **Maven Central**", 1)[1]):
        assert os.path.exists(os.path.join(ROOT, "tests", "rocketmq", f"pom-{v}.xml")), v
    for pom in re.findall(r"`((?:conf|tests)/[\w/]+/pom[\w*.-]*\.xml)`", text):
        assert glob.glob(os.path.join(ROOT, pom)), pom
    steps = re.search(r"^test: (.*)$", make, re.M).group(1).split()
    if steps == ["setup"]:                  # its steps, one make each (tests/house/test_setup_steps.py)
        steps = re.search(r"^DRY_SETUP := (.*)$", make, re.M).group(1).split()
    install = ("install", "fuse3", "chromium", "setup-pip", "setup-builds", "setup-delta")
    for target in steps:
        assert target in install or target in ("rocketmq", "kafka", "s3proxy", "hdfs"), target
    assert "hadoop-client-minicluster" in text and "S3Proxy" in text and "Kafka" in text


@pytest.mark.slow
def test_readme_commands_run(tmp_path):
    """The shell blocks (about 15 rocketlake processes, none starting Spark), then the Python block
    (one local Spark session: the DataFrame ingest from a plain interpreter)."""
    r = run_shell_blocks(tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    out, err = r.stdout, r.stderr
    assert "status=committed messages=3" in out and "status=committed messages=2" in out
    assert '"body":"first order"' in out                                 # key lookup, --body-as text
    assert "rocketlake verify: status=ok problems=0" in err
    assert "ingest: 2000 messages" in out                                # rocketlake demo
    # the sample outputs README shows, but for times and what depends on them
    texts = blocks("text")
    summary = next(t for t in texts if "as seq 1" in t).splitlines()[-1].split(" seconds=")[0]
    assert summary in out, summary
    stats = next(t for t in texts if t.startswith("store: ")).split(" batch_id=")[0]
    assert stats in out, stats
    found = next(t for t in texts if t.startswith('{"commitlog_offset":0')).splitlines()
    assert found[0] in out and found[1] in err
    assert '"body":"paid"' in out                                        # the export's key lookup
    assert "rocketlake: status=dry-run " in out                          # expire --dry-run on the demo store
    assert "Traceback" not in err
    csv = open(tmp_path / "june.csv").read().splitlines()
    assert csv[0].startswith("commitlog_offset,") and len(csv) == 4      # the three June messages
    props = open(tmp_path / "broker-dir" / "rocketlake.properties").read()
    assert "mappedFileSizeCommitLog=1073741824" in props
    code = "\n".join(blocks("python"))
    p = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=shell_env(), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert "'status': 'committed'" in p.stdout and p.stdout.strip().endswith("1")
