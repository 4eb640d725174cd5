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

import harness
import s3bench
import table
from support.s3server import moto
from support.longrun import long_test

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


_DRIVER = """
import subprocess, sys, time
buf = bytearray(300 * (1 << 20))            # touched: resident, then freed (a peak between samples)
for i in range(0, len(buf), 4096):
    buf[i] = 1
del buf
keep = bytearray(200 * (1 << 20))
for i in range(0, len(keep), 4096):
    keep[i] = 1
end = time.time() + 2.0
while time.time() < end:                    # children started with vfork: each shares this memory until it execs
    subprocess.run(["true"])
"""


def test_driver_peak_is_its_high_water_mark(tmp_path):
    """The driver's figure is the process's own peak (VmHWM): a peak freed before the next sample
    is in it. A child sharing the driver's memory until it execs is not counted again in the
    driver's figures."""
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    run = harness.run_process([sys.executable, str(script)], workdir=str(tmp_path))
    assert run["rc"] == 0, run["stderr"]
    assert 300 * MB <= run["peak_hwm_by_kind"]["python_driver"] < 400 * MB
    assert 200 * MB <= run["peak_rss_by_kind"]["python_driver"] < 400 * MB      # sampled: the short peak may be missed
    assert 200 * MB <= run["peak_anon_by_kind"]["python_driver"] < 400 * MB     # the 200 MB it holds is anonymous
    # (not the tree's sum: a sample may read a child's memory before its exec and its command line
    # after it, "true", which no rule can match to its parent; the driver's kind needs the command
    # line of the driver, read before the exec, when the child still shares the driver's memory)


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
@long_test("four spark-submits of the benchmark at tiny sizes, ~1 min")
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


def _event_log(path, events):
    path.mkdir(parents=True)
    (path / "app-1").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_anchor_phases_from_spark_event_log_and_jvm_timers(tmp_path):
    """Stages overlapping in time count once in the driver-only figure; the JVM's phase line parses."""
    import anchor
    def stage(i, a, b):
        return {"Event": "SparkListenerStageCompleted", "Stage Info": {
            "Stage ID": i, "Stage Name": f"collect at {ROOT}/storelib/x.py:{i}", "Number of Tasks": 2,
            "Submission Time": a, "Completion Time": b}}

    def task(i, ms):
        return {"Event": "SparkListenerTaskEnd", "Stage ID": i, "Task Metrics": {"Executor Run Time": ms}}
    _event_log(tmp_path / "log", [{"Event": "SparkListenerApplicationStart", "Timestamp": 1000}, task(0, 1500),
                                  task(0, 500), stage(0, 2000, 4000), task(1, 700), stage(1, 3000, 5000),
                                  {"Event": "SparkListenerApplicationEnd", "Timestamp": 11000}])
    phases = dict(anchor.rocketlake_phases(14.0, 12.5, str(tmp_path / "log")))
    assert phases["process start-up and exit (imports, Spark start, outside the job)"] == 1.5
    assert phases["Spark application, driver outside every stage (planning, commit)"] == 10 - 3
    assert phases["stage 0 collect at storelib/x.py:0 (2 tasks, 2.0 task-s)"] == 2.0
    assert phases["stage 1 collect at storelib/x.py:1 (2 tasks, 0.7 task-s)"] == 2.0
    (tmp_path / "empty").mkdir()
    assert len(anchor.rocketlake_phases(3.0, 2.0, str(tmp_path / "empty"))) == 3      # in process: no Spark
    got = anchor.jvm_phases("x\nphases messages=5 open_s=1.000 parse_s=0.500 put_s=2.000 dispatch_wait_s=0.010 "
                            "shutdown_s=3.000\n")
    assert got == {"messages": 5, "open_s": 1.0, "parse_s": 0.5, "put_s": 2.0, "dispatch_wait_s": 0.01,
                   "shutdown_s": 3.0}


def test_anchor_refuses_stores_that_differ(tmp_path):
    """Only the checkpoint's first field (physicMsgTimestamp: the flush type's) may differ."""
    import anchor
    for name, phys, data in (("rmq", 1, b"\x01" * 64), ("ours", 2, b"\x01" * 64), ("bad", 2, b"\x01" * 63 + b"\x02")):
        (tmp_path / name / "commitlog").mkdir(parents=True)
        (tmp_path / name / "commitlog" / "00000000000000000000").write_bytes(data)
        (tmp_path / name / "checkpoint").write_bytes(phys.to_bytes(8, "big") + b"\x07" * 16)
    diffs, note = anchor.compare_stores(str(tmp_path / "rmq"), str(tmp_path / "ours"))
    assert diffs == ["differs: checkpoint: first difference at byte 7"] and "physicMsgTimestamp 2 vs" in note
    with pytest.raises(AssertionError, match="commitlog/00000000000000000000"):
        anchor.compare_stores(str(tmp_path / "rmq"), str(tmp_path / "bad"))


def test_scale_figure_and_docs_block(tmp_path):
    """The growth figure is a PNG that says when it is only a harness check; the doc block is rewritten."""
    import scale
    points = [{"n": n, "ingest_s": n / 1e5, "copy_s": n / 5e4, "ingest_s_per_m": 10.0, "warm_ingest_s": n / 2e5,
               "warm_copy_s": n / 1e5, "warm_ingest_s_per_m": 5.0, "driver_rss_gb": 0.26, "driver_anon_gb": 0.11,
               "tree_rss_gb": 1.2, "load_avg": 1.0, "lookup_p50_ms": 1.5, "lookup_warm_p50_ms": 0.08,
               "lookup": {"entries_mean": 5.25},
               "reads": {"full": (4.0, 5.0), "topic": (2.0, 4.0), "time": (1.0, 3.0)}} for n in (100_000, 200_000)]
    png = scale.plot(points, str(tmp_path / "fig.png"))
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    doc = tmp_path / "P.md"
    doc.write_text(f"a\n{scale.BEGIN}\n(regenerated)\n{scale.END}\nb\n")
    scale.update_docs(points, png, str(doc))
    text = doc.read_text()
    assert "(regenerated)" not in text and "![time against messages" in text and "(fig.png)" in text
    assert "| 200,000 | 10.00 (20.00) | 5.00 (10.00) | 0.26 (0.11) | 1.20 | 0.80x / 0.50x / 0.33x | 1.50 / 0.08 (5.2) | 1.0 |" in text
    assert text.endswith(f"{scale.END}\nb\n")
    assert scale.spread([2.0, 2.2, 2.1]) == pytest.approx(1.1)
    real = open(os.path.join(ROOT, "docs", "PERFORMANCE.md")).read()
    assert real.count(scale.BEGIN) == 1 and real.count(scale.END) == 1
