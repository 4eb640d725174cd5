"""hdfs:// stores and inputs on Hadoop's own mini cluster (tests/support/hdfscluster.py: a NameNode
and a DataNode on 127.0.0.1, `make hdfs`), through hdfs-native (files) and deltalake's HDFS
object store (the Delta tables). `make test`: the store's file operations and the Delta commit
race on the cluster; `make backends` (ROCKETLAKE_BACKENDS=1): the store's tests below too.

One store for the module, built by its fixture: batch A (small-roll's first 1700 messages,
spark-submit, input on local disk), then batch B killed at a fault point between the two Delta
commits (no Spark: the committed snapshot stays A's, file for file), then B rerun by spark-submit
with its input on hdfs://. Then: the exported store is byte-identical to RocketMQ's; RocketMQ's
213 golden queries (keys, queue offsets, times, ids...) are answered byte for byte by the compat
job; spark.read.format("rocketmq") reads every message; verify finds one flipped byte; expire
removes the old segments and the store still verifies; two Delta commits of one table version:
one wins (HDFS create-if-absent at the NameNode, docs/DESIGN.md).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import goldenlib
from conftest import ROOT, golden_set

import test_ingest_s3 as ingest_cases

pytestmark = pytest.mark.slow
# The store's tests start Spark jobs and clusters (several minutes together), so they run in
# `make backends` (and `make long`); `make test` runs the cluster, the store's file operations and
# the Delta commit race.
store_tests = pytest.mark.skipif(not (os.environ.get("ROCKETLAKE_BACKENDS") or os.environ.get("ROCKETLAKE_LONG")),
                                 reason="the HDFS store's tests: make backends (ROCKETLAKE_BACKENDS=1)")

PY = sys.executable
BIN = os.path.dirname(PY)
SMALL = goldenlib.SMALL_ROLL_CONFIG
CUT = 1700


def _spark_submit(script: str, args: list, timeout: int = 600):
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)
    cmd = [os.path.join(BIN, "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false",
           "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
           os.path.join(ROOT, "jobs", script), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _run(args: list, env_extra: dict | None = None, timeout: int = 300):
    return subprocess.run([PY, *args], cwd=ROOT, env=dict(os.environ, **(env_extra or {})), capture_output=True,
                          text=True, timeout=timeout)


def _snapshot(uri: str):
    from storelib.io import storage
    from storelib.table import manifest
    snap = manifest.load_snapshot(storage.Store(uri))
    return snap, {p: (r["file_size"], r["valid_bytes"], r["checksum"]) for p, r in snap.files.items()}


@pytest.fixture(scope="module")
def namenode():
    """``hdfs://127.0.0.1:<port>`` of the module's mini cluster."""
    from support import hdfscluster
    from support.mavenfetch import Unavailable
    try:
        hdfscluster.jars()
    except Unavailable as e:
        pytest.skip(f"the HDFS mini cluster is unavailable: {e}")
    with hdfscluster.cluster() as nn:
        yield nn


@pytest.fixture(scope="module")
def hdfs_store(namenode, tmp_path_factory):
    """(name node URL, store URI, work dir) of the module's store: A, B killed, B rerun."""
    tmp = tmp_path_factory.mktemp("hdfs")
    g = golden_set("small-roll")
    props = tmp / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()
    (tmp / "a.jsonl").write_text("".join(lines[:CUT]), encoding="utf-8")
    b_local = tmp / "b.jsonl"
    b_local.write_text("".join(lines[CUT:]), encoding="utf-8")
    nn = namenode
    uri = f"{nn}/warehouse/stores/small"
    r = _spark_submit("ingest.py", ["--store", uri, "--input", str(tmp / "a.jsonl"), "--config", str(props),
                                    "--batch-id", "A"])
    assert r.returncode == 0, r.stderr[-4000:]
    snap_a, files_a = _snapshot(uri)
    assert [b["batch_id"] for b in snap_a.batches] == ["A"]
    # B dies between the manifest's commit and the checkpoint's: A stays the store, file for file
    r = _run([os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest", uri, str(b_local), str(props),
              "B"], {"ROCKETLAKE_FAULT": "between-delta-tables", "ROCKETLAKE_FAULT_SKIP": "0"})
    assert r.returncode == -9, (r.returncode, r.stderr[-3000:])
    snap, files = _snapshot(uri)
    assert snap.batch["batch_id"] == "A" and files == files_a
    # the rerun: a Spark job whose input is on hdfs://
    from storelib.io import storage
    st = storage.Store(f"{nn}/warehouse/inputs")
    st.write_file("b.jsonl", [b_local.read_bytes()])
    r = _spark_submit("ingest.py", ["--store", uri, "--input", f"{nn}/warehouse/inputs/b.jsonl", "--config",
                                    str(props), "--batch-id", "B", "--json-summary", str(tmp / "b.json")])
    assert r.returncode == 0, r.stderr[-4000:]
    assert json.loads((tmp / "b.json").read_text())["status"] == "committed"
    yield nn, uri, tmp


@store_tests
def test_hdfs_store_is_golden_after_a_kill_and_rerun(hdfs_store):
    nn, uri, tmp = hdfs_store
    snap, _ = _snapshot(uri)
    assert [b["batch_id"] for b in snap.batches] == ["A", "B"]
    from storelib.format import paths
    from storelib.io import storage
    st = storage.Store(uri)
    assert not st.exists(paths.STAGING_DIR) and not st.exists(paths.LEASE_PATH)
    # every object under the store is of a committed attempt: the killed one left none
    committed = {(b["batch_id"], b["attempt_id"]) for b in snap.batches}
    objects = st.list_files(paths.OBJECTS_DIR)
    stray = [o for o in objects if tuple(o.split("/")[2:4]) not in committed]
    assert objects and not stray, stray[:10]
    out = tmp / "export"
    r = _run([os.path.join(ROOT, "jobs", "export.py"), "--store", uri, "--to", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert goldenlib.compare(golden_set("small-roll"), str(out)) == []
    r = _run([os.path.join(ROOT, "jobs", "inspect.py"), "--store", uri, "verify", "--no-spark"])
    assert r.returncode == 0 and "status=ok problems=0" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]


@store_tests
def test_golden_queries_on_hdfs_answer_as_rocketmq(hdfs_store):
    """keys, queue offsets, times, message ids, ... : RocketMQ's answers, byte for byte."""
    nn, uri, tmp = hdfs_store
    g = golden_set("small-roll")
    out = tmp / "answers.jsonl"
    r = _spark_submit("query.py", ["--store", uri, "--queries", os.path.join(g, "queries.jsonl"), "--output", str(out)])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert out.read_bytes() == open(os.path.join(g, "answers.jsonl"), "rb").read()
    r = _run([os.path.join(ROOT, "jobs", "query.py"), "--store", uri, "key", "--topic", "metrics-raw", "--key",
              "hot-metrics-raw", "--local", "always"])
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-2000:]


@store_tests
def test_spark_reads_an_hdfs_store(hdfs_store, spark):
    nn, uri, tmp = hdfs_store
    from storelib.read.datasource import register
    register(spark)
    puts = [json.loads(x) for x in open(os.path.join(golden_set("small-roll"), "put_results.jsonl"), encoding="utf-8")]
    got = sorted(r["commitlog_offset"] for r in spark.read.format("rocketmq").load(uri)
                 .select("commitlog_offset").collect())
    assert got == sorted(p["wrote_offset"] for p in puts)


@store_tests
def test_verify_finds_a_flipped_byte_on_hdfs(hdfs_store):
    nn, uri, tmp = hdfs_store
    from storelib.io import storage
    snap, _ = _snapshot(uri)
    row = next(r for p, r in sorted(snap.files.items()) if p.startswith("commitlog/") and r["valid_bytes"] > 1000)
    obj = json.loads(row["detail"])["extents"][0][2]
    st = storage.Store(uri)
    data = st.read(obj)
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0x01
    st.write_file(obj, [bytes(bad)])
    try:
        r = _run([os.path.join(ROOT, "jobs", "inspect.py"), "--store", uri, "verify", "--no-spark"])
        assert r.returncode == 1 and row["path"] in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    finally:
        st.write_file(obj, [data])
    r = _run([os.path.join(ROOT, "jobs", "inspect.py"), "--store", uri, "verify", "--no-spark"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_store_files_on_hdfs(namenode):
    """The file operations a store makes, through hdfs-native: whole files with zero tails, files
    as bounded objects read back through their extents, listings, a tree removed."""
    from storelib.io import storage
    st = storage.Store(f"{namenode}/warehouse/files")
    assert st.objects and not st.atomic_rename and not st.os_paths
    data = os.urandom(5000)
    assert st.write_file("commitlog/00000000000000000000", [data[:100], data[100:]], 8192, durable=True) == 8192
    assert st.size("commitlog/00000000000000000000") == 8192
    assert st.read("commitlog/00000000000000000000", 4990, 20) == data[4990:] + bytes(10)
    objs = ingest_cases.write_mapped(st, "index/x", data, 0, 6000)
    assert st.read("index/x", 0, 6000) == data + bytes(1000)
    assert st.list_files("_rocketlake") == sorted(r for r, _ in objs)
    assert st.list_dirs("") == ["_rocketlake", "commitlog"]
    st.delete("_rocketlake")
    assert not st.exists("_rocketlake") and st.exists("commitlog/00000000000000000000")
    # a file read right after its close is whole (the writer lease reads its own back; with the
    # NameNode closing files on COMMITTED blocks, hdfs-native read them empty: HdfsMini.java)
    for k in range(20):
        body = os.urandom(50 + k)
        st.write_file(f"_rocketlake/lease-{k}", [body])
        assert st.read(f"_rocketlake/lease-{k}") == body, k


def test_two_delta_commits_of_one_version_on_hdfs_one_wins(namenode):
    """What the commit relies on (docs/DESIGN.md): deltalake creates the log file of version N at
    the NameNode only if it is absent; the second writer of version N fails."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake, CommitProperties
    from deltalake.exceptions import CommitFailedError
    table = f"{namenode}/warehouse/race-table"
    write_deltalake(table, pa.table({"x": [0]}))
    one, two = DeltaTable(table), DeltaTable(table)
    props = CommitProperties(max_commit_retries=0)
    write_deltalake(one, pa.table({"x": [1]}), mode="append", commit_properties=props)
    with pytest.raises(CommitFailedError):
        write_deltalake(two, pa.table({"x": [2]}), mode="append", commit_properties=props)
    assert DeltaTable(table).version() == 1
    assert sorted(DeltaTable(table).to_pyarrow_table()["x"].to_pylist()) == [0, 1]


def test_one_name_node_however_a_uri_names_it(namenode, tmp_path, monkeypatch):
    """``hdfs:///path`` (fs.defaultFS), ``hdfs://localhost:P`` and ``hdfs://127.0.0.1:P`` are one
    name node: an export, a query's output, an import naming the store one way and a place inside
    it another is refused (exit 2) and nothing is written; a name node that cannot be resolved is
    refused as "may be the same", naming both."""
    from storelib.errors import BadInput
    from storelib.cli.common import check_outputs
    from storelib.io import storage
    from storelib.ops import adopt
    from storelib.table.export import export_store
    conf = tmp_path / "hadoop"
    conf.mkdir()
    (conf / "core-site.xml").write_text("<configuration><property><name>fs.defaultFS</name>"
                                        f"<value>{namenode}</value></property></configuration>")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
    props = tmp_path / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    part = tmp_path / "part.jsonl"
    part.write_text("".join(open(os.path.join(ROOT, "samples", "messages.jsonl")).readlines()[:20]))
    port = namenode.rsplit(":", 1)[1]
    store = f"{namenode}/warehouse/spelled"
    r = _run([os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest", store, str(part), str(props), "A"])
    assert r.returncode == 0, r.stderr[-3000:]
    before = storage.Store(store).list_files("")
    spellings = [(store, "hdfs:///warehouse/spelled"), ("hdfs:///warehouse/spelled", store),
                 (f"hdfs://LocalHost:{port}/warehouse/spelled", store), (store, f"hdfs://localhost:{port}/warehouse/spelled")]
    for a, b in spellings:
        with pytest.raises(BadInput, match="inside the store"):
            export_store(a, b + "/sub")
        with pytest.raises(BadInput, match="inside the store"):
            check_outputs(a, {"--output": b + "/rows.csv"})
        assert adopt.in_place(storage.Store(a), storage.Store(b)), (a, b)
        with pytest.raises(BadInput, match="inside the broker's directory"):
            adopt._check_apart(storage.Store(a), storage.Store(b + "/sub"))
    assert storage.Store(store).list_files("") == before
    # another name node (port) is another file system: its paths may be the same
    assert not storage.inside(storage.Store(store), storage.Store(f"hdfs://127.0.0.1:{int(port) + 1}/warehouse/spelled/x"))
    # a name node that cannot be resolved may be the store's: refused, naming both
    with pytest.raises(BadInput, match="cannot tell whether .*127.0.0.1.* and .*no-such-host.invalid"):
        export_store(store, "hdfs://no-such-host.invalid:9000/warehouse/spelled/sub")
    monkeypatch.delenv("HADOOP_CONF_DIR")
    monkeypatch.delenv("HADOOP_HOME", raising=False)
    with pytest.raises(BadInput, match="fs.defaultFS is not set"):
        storage.inside(storage.Store(store), storage.Store("hdfs:///warehouse/spelled/sub"))


@store_tests
def test_expire_on_hdfs(hdfs_store):
    """Runs last: expiry removes whole old segments; the store still verifies."""
    nn, uri, tmp = hdfs_store
    r = _run([os.path.join(ROOT, "jobs", "expire.py"), "--store", uri, "--reserved-hours", "1", "--now",
              "2100-01-01T00:00:00Z", "--json-summary", str(tmp / "expire.json")])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    s = json.loads((tmp / "expire.json").read_text())
    assert any(p.startswith("commitlog/") for p in s["removed"]), s
    snap, files = _snapshot(uri)
    assert snap.batch["operation"] == "expire" and not set(s["removed"]) & set(files)
    r = _run([os.path.join(ROOT, "jobs", "inspect.py"), "--store", uri, "verify", "--no-spark"])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


# A power cut on HDFS (docs/DESIGN.md): the writer, the NameNode and every DataNode die at once at a
# point of the commit, and the cluster comes back on the same disks. `make backends` (~2 min each).
POWER_CUT_POINTS = ("mid-records-write", "after-files-staged", "between-delta-tables", "after-commit-before-publish")


@store_tests
@pytest.mark.parametrize("point", POWER_CUT_POINTS)
def test_power_cut_of_the_cluster_and_the_writer(point, tmp_path):
    """Batch A committed; batch B's writer killed at ``point`` and, at that instant, the NameNode
    and DataNodes too (kill -9 of the cluster's JVM); the cluster restarted on its disks (edit log
    replayed, block reports, the dead writer's open files under lease). Then: a batch committed
    before is intact file for file and verifies, B is visible only if its commit was durable, and
    B's rerun leaves a store byte-identical to RocketMQ's."""
    from support import hdfscluster
    from storelib.runtime import faults
    assert point in faults.POINTS
    g = golden_set("small-roll")
    props, (part_a, part_b) = ingest_cases.small_roll_parts(tmp_path, CUT)
    ingest = [os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest"]
    work = tmp_path / "cluster"
    work.mkdir()
    from support.mavenfetch import Unavailable
    try:
        hdfscluster.jars()
    except Unavailable as e:
        pytest.skip(f"the HDFS mini cluster is unavailable: {e}")
    with hdfscluster.cluster(work=str(work)) as nn:
        uri = f"{nn}/stores/cut"
        r = _run([*ingest, uri, part_a, str(props), "A"])
        assert r.returncode == 0, r.stderr[-3000:]
        snap_a, files_a = _snapshot(uri)
        r = _run([*ingest, uri, part_b, str(props), "B"],
                 {"ROCKETLAKE_FAULT": point, "ROCKETLAKE_FAULT_SKIP": "0"})
        assert r.returncode == -9, (r.returncode, r.stderr[-3000:])
        hdfscluster.power_cut(nn)
    with hdfscluster.cluster(work=str(work), restart=nn) as again:
        assert again == nn
        snap, files = _snapshot(uri)
        ids = [b["batch_id"] for b in snap.batches]
        if point in faults.POST_COMMIT_POINTS:
            assert ids == ["A", "B"]                  # committed before the cut: durable
        else:
            assert ids == ["A"] and files == files_a
        r = _run([os.path.join(ROOT, "jobs", "inspect.py"), "--store", uri, "verify", "--no-spark"])
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        r = _run([*ingest, uri, part_b, str(props), "B"])
        assert r.returncode == 0, r.stderr[-3000:]
        assert [b["batch_id"] for b in _snapshot(uri)[0].batches] == ["A", "B"]
        out = tmp_path / "export"
        r = _run([os.path.join(ROOT, "jobs", "export.py"), "--store", uri, "--to", str(out)])
        assert r.returncode == 0, r.stderr[-3000:]
        assert goldenlib.compare(g, str(out)) == []


@store_tests
def test_a_stream_tails_a_store_on_hdfs(namenode, tmp_path):
    """readStream.format("rocketmq") on hdfs://: a batch committed while the query runs is read,
    every row once, as spark.read reads the store."""
    from support import stream_tail
    got = stream_tail.tail(f"{namenode}/stores/tail", tmp_path, os.path.join(golden_set("small-roll"), "messages.jsonl"))
    assert got["same"] and got["phases"] == [1000, 1000, 1000], got
