"""`make bench` is not part of the test suite, but its code is: the measuring parts (process-tree
sampling, the S3 counting proxy, the README table) are checked against known answers, and a
smoke run at tiny sizes runs the cold sections end to end (spark-submit, moto)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))

import harness  # noqa: E402
import s3bench  # noqa: E402
import table  # noqa: E402
from s3server import moto  # noqa: E402

MB = 1 << 20

_CHILD = """
import os, sys, time
buf = bytearray(300 * (1 << 20))            # touched: resident
for i in range(0, len(buf), 4096):
    buf[i] = 1
with open(sys.argv[1], "wb") as fh:
    fh.write(os.urandom(16 * (1 << 20)))
    fh.flush(); os.fsync(fh.fileno())
time.sleep(0.3)
"""


def test_process_tree_peak_memory_and_bytes_written(tmp_path):
    """A parent whose child holds 300 MB and writes 16 MB: both show in the tree's figures."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    parent = f"import subprocess, sys; subprocess.run([sys.executable, {str(script)!r}, {str(tmp_path / 'out')!r}])"
    run = harness.run_process([sys.executable, "-c", parent], workdir=str(tmp_path))
    assert run["rc"] == 0, run["stderr"]
    assert 300 * MB <= run["peak_rss_bytes"] < 2000 * MB
    assert 16 * MB <= run["tree_written_bytes"] < 64 * MB
    if run["device_written_bytes"] is not None:
        assert run["device_written_bytes"] >= 16 * MB


def test_counting_proxy_counts_uploads_copies_downloads():
    import boto3
    with moto("counted") as (env, _), s3bench.CountingProxy(env["AWS_ENDPOINT_URL"]) as proxy:
        s3 = boto3.client("s3", endpoint_url=proxy.url, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
        s3.put_object(Bucket="counted", Key="a/one", Body=b"x" * 1_000_000)
        s3.copy_object(Bucket="counted", Key="a/two", CopySource={"Bucket": "counted", "Key": "a/one"})
        assert s3.get_object(Bucket="counted", Key="a/two")["Body"].read() == b"x" * 1_000_000
        s3.head_object(Bucket="counted", Key="a/one")
        got = proxy.counts.snapshot()
    assert got["bytes"] == {"uploaded": 1_000_000, "copied": 1_000_000, "downloaded": 1_000_000}
    assert got["requests"] == {"PutObject": 1, "CopyObject": 1, "GetObject": 1, "HEAD": 1}


def test_readme_table_is_generated_between_markers(tmp_path):
    res = harness.Results()
    res.record("ingest", "ingest 10 msgs: median wall (s)", 3.0, 4.0, "s", "a|b", mode="cold")
    path = res.save(str(tmp_path / "results"), {"n": 10}, [])
    assert json.loads(open(path).read())["rows"][0]["ratio"] == 0.75
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{table.BEGIN}\nPLACEHOLDER\n{table.END}\nrest\n")
    table.update_readme(str(readme), str(tmp_path / "results" / "latest.json"))
    text = readme.read_text()
    assert "PLACEHOLDER" not in text and text.startswith("intro\n") and text.endswith(f"{table.END}\nrest\n")
    assert "| ingest | cold | ingest 10 msgs: median wall (s) | 3 | 4 | 0.75x | s | a/b |" in text
    real = open(os.path.join(ROOT, "docs", "PERFORMANCE.md")).read()
    assert real.count(table.BEGIN) == 1 and real.count(table.END) == 1


@pytest.mark.slow
def test_bench_smoke_runs_the_cold_sections(tmp_path):
    """incremental and s3 at tiny sizes (4 spark-submits): every figure present and positive."""
    results = tmp_path / "results"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run.py"), "--smoke", "--only", "incremental,s3",
                        "--workdir", str(tmp_path / "work"), "--results", str(results)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    doc = json.loads((results / "latest.json").read_text())
    assert doc["commit"] and doc["machine"]["cores"] and doc["n"]["smoke"]
    rows = {(x["section"], x["metric"]): x for x in doc["rows"]}
    assert not [m for _, m in rows if "FAILED" in m], rows
    wall = rows[("incremental", "batch into big store vs empty: median wall (s)")]
    assert wall["value"] > 0 and wall["baseline"] > 0 and wall["ratio"] > 0
    assert rows[("incremental", "MB written by the batch, tree: median")]["value"] > 0
    for what in ("ingest 5000 msgs", "small batch into that store"):
        up = rows[("s3", f"{what}: uploaded per record byte")]
        assert up["value"] >= 1.0 and up["bytes"] >= up["record_bytes"] > 0     # every record byte went up
        assert rows[("s3", f"{what}: downloaded per record byte")]["value"] >= 0
