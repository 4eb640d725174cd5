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
    assert "make demo" in blocks("sh")[0] and "make test" in blocks("sh")[0]
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        if link != "docs/CLUSTERS.md":             # written beside this README by the cluster work
            assert os.path.exists(os.path.join(ROOT, link)), link


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
