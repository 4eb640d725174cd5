"""Delta Lake on Spark over a store's tables: delta-spark reads what rocketlake's commits
(delta-rs) write, at every version; the SQL views equal the Python sources; Delta maintenance run
from Spark (OPTIMIZE, VACUUM, a delta-spark checkpoint, log cleanup) leaves rocketlake's readers,
its next ingest, expire, verify and the snapshot cache working; a delta-spark reader during an
ingest; ``jobs/inspect.py register`` in a persistent (Hive) catalog read by another Spark process.

One store for the module (small-roll cut into three ingests, the third one killed once between
its two Delta commits and rerun, then an expiry), read by the suite's shared SparkSession
(conftest ``spark``: every session has delta-spark); each maintenance case works on a copy.

Runtime (shared 2-core machine, load 7-10 from other suites): the maintenance case ~140 s, of
which its two VACUUMs ~28 s (with Spark's default listing parallelism, 10000 tasks for a table of
a few files, ~70 s each: ``small_delta``); the store ~90 s with the session's start; register (two
JVMs) ~45 s.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from support import goldenlib
from conftest import ROOT
from support.opshelp import small_config, small_properties, SUBMIT

from storelib.table import delta_spark, manifest, snapcache
from storelib.ops import expire as retention
from storelib.io import storage
from storelib.verify import driver as verify
from storelib.read.datasource import register as register_sources
from storelib.ingest.driver import run_ingest
from storelib.format import paths

CFG = small_config()
CUTS = (0, 1000, 2000, None)
RUNNER = os.path.join(ROOT, "tests", "support", "local_ingest.py")


def _canon(rows) -> list:
    """Rows (dicts) as sorted canonical JSON: equal multisets of rows compare equal."""
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


def _spark_rows(df) -> list:
    return _canon(r.asDict(recursive=True) for r in df.collect())


def _loc(store, table):
    return delta_spark.table_location(store, table)


def _delta(spark, store, table, version=None):
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(_loc(store, table))


def _rs_rows(store, table, version=None) -> list:
    rel = {"manifest": paths.MANIFEST_DIR, "checkpoints": paths.CHECKPOINTS_DIR}[table]
    return _canon(manifest.read_rows(manifest.open_table(storage.Store(store), rel, version)))


def _latest(store, table) -> int:
    rel = {"manifest": paths.MANIFEST_DIR, "checkpoints": paths.CHECKPOINTS_DIR}[table]
    return manifest.open_table(storage.Store(store), rel).version()


def _inputs(tmp) -> list:
    with open(os.path.join(goldenlib.golden_root(), "small-roll", "messages.jsonl"), encoding="utf-8") as fh:
        lines = fh.readlines()
    out = []
    for i, (a, b) in enumerate(zip(CUTS, CUTS[1:])):
        path = os.path.join(tmp, f"part{i}.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(lines[a:b])
        out.append(path)
    return out


def _views_sql(store):
    m, c = f"delta.`{_loc(store, 'manifest')}`", f"delta.`{_loc(store, 'checkpoints')}`"
    return delta_spark.committed_rows_sql(m, c), delta_spark.live_files_sql(m, c)


@pytest.fixture(scope="module")
def small_delta(spark):
    """The tables are a few small files: Delta's log replay in 2 partitions, not 50, and VACUUM's
    listing of the table in 2 tasks, not 10000 (parallelPartitionDiscovery.parallelism: ~70 s per
    VACUUM on local[2]); time only, VACUUM lists and deletes the same files."""
    conf = {"spark.databricks.delta.snapshotPartitions": "2", "spark.sql.shuffle.partitions": "2",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"}
    old = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    yield
    for k, v in old.items():
        spark.conf.unset(k) if v is None else spark.conf.set(k, v)


@pytest.fixture(scope="module")
def base(spark, small_delta, tmp_path_factory):
    """The store, and what a delta-spark reader saw while the third batch's first attempt was held
    between its manifest commit and its checkpoint commit (then SIGKILLed there: a dead attempt)."""
    tmp = str(tmp_path_factory.mktemp("delta-spark"))
    store = os.path.join(tmp, "store")
    parts = _inputs(tmp)
    run_ingest(spark, store, parts[0], "jsonl", CFG, batch_id="b1", quiet=True)
    run_ingest(spark, store, parts[1], "jsonl", CFG, batch_id="b2", quiet=True)
    before = {t: _spark_rows(_delta(spark, store, t)) for t in ("manifest", "checkpoints")}
    committed_sql, live_sql = _views_sql(store)
    live_before = _spark_rows(spark.sql(live_sql))
    gate = os.path.join(tmp, "gate")
    # (the attempt's writer is a process without Spark: what a reader sees between its Delta
    # commits is the same whoever wrote it, and a JVM's start would add ~15 s)
    env = {**os.environ, "ROCKETLAKE_HOLD": f"between-delta-tables:{gate}"}
    proc = subprocess.Popen([sys.executable, RUNNER, "ingest", store, parts[2], small_properties(tmp), "b3"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 300
        while not os.path.exists(gate + ".reached"):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.time() < deadline, "the ingest never reached between-delta-tables"
            time.sleep(0.2)
        during = {t: _spark_rows(_delta(spark, store, t)) for t in ("manifest", "checkpoints")}
        during_committed = _spark_rows(spark.sql(committed_sql))
        during_live = _spark_rows(spark.sql(live_sql))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    run_ingest(spark, store, parts[2], "jsonl", CFG, batch_id="b3", quiet=True)      # the rerun commits
    with open(parts[2], encoding="utf-8") as fh:
        last_ts = max(json.loads(line)["store_timestamp"] for line in fh)
    res = retention.expire(store, 0, now_ms=last_ts + 3_600_000, quiet=True)
    assert res["status"] == "committed" and res["commitlog_removed"] > 0, res
    return {"store": store, "tmp": tmp, "before": before, "during": during, "live_before": live_before,
            "during_committed": during_committed, "during_live": during_live, "extra": parts[0]}


def test_jars_are_the_pinned_release_and_none_of_pysparks():
    """The fetched jars are delta-spark DELTA_VERSION (conf/jars/delta/pom.xml) and add no jar that
    pyspark already ships (another version of one class on the classpath)."""
    import re
    import pyspark
    pom = open(os.path.join(ROOT, "conf", "jars", "delta", "pom.xml"), encoding="utf-8").read()
    assert re.search(r"<delta.version>([^<]+)</delta.version>", pom).group(1) == delta_spark.DELTA_VERSION
    names = [os.path.basename(j) for j in delta_spark.jars()]
    assert f"delta-spark_2.13-{delta_spark.DELTA_VERSION}.jar" in names
    assert f"delta-storage-{delta_spark.DELTA_VERSION}.jar" in names

    def artifact(name):
        return re.sub(r"-\d[\w.\-]*\.jar$", "", name)
    spark_jars = {artifact(n) for n in os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))}
    assert not {artifact(n) for n in names} & spark_jars


def test_every_version_reads_the_same_with_delta_spark_and_deltalake(spark, base):
    """Every version of both tables, as rocketlake's commits left them (three ingests, a dead
    attempt's manifest commit, an expiry with delta-rs housekeeping), reads the same rows through
    delta-spark (versionAsOf) and deltalake."""
    store = base["store"]
    for table in ("manifest", "checkpoints"):
        latest = _latest(store, table)
        assert latest == (4 if table == "manifest" else 3)     # manifest: + the dead attempt's commit
        for v in range(latest + 1):
            assert _spark_rows(_delta(spark, store, table, v)) == _rs_rows(store, table, v), (table, v)


def test_sql_equals_the_python_sources(spark, base):
    """checkpoints (raw Delta) == rocketlake_checkpoints; the live-files view == rocketlake_manifest;
    the raw manifest holds more: the dead attempt's rows and every replaced or removed version."""
    store = base["store"]
    register_sources(spark)
    ck = _spark_rows(_delta(spark, store, "checkpoints"))
    assert ck == _spark_rows(spark.read.format("rocketlake_checkpoints").load(store))
    committed_sql, live_sql = _views_sql(store)
    py_live = _spark_rows(spark.read.format("rocketlake_manifest").load(store))
    assert _spark_rows(spark.sql(live_sql)) == py_live
    snap = manifest.load_snapshot(storage.Store(store))
    assert py_live == _canon(snap.files.values())
    raw = spark.read.format("delta").load(_loc(store, "manifest"))
    dead = raw.join(spark.read.format("delta").load(_loc(store, "checkpoints")).selectExpr(
        "batch_id", "attempt_id AS won"), "batch_id").where("won IS NOT NULL AND attempt_id <> won")
    assert dead.count() > 0 and dead.where("batch_id <> 'b3'").count() == 0
    assert spark.sql(committed_sql).count() == raw.count() - dead.count()
    # a path has at most one committed row per batch, so "the latest row per path" is well defined
    assert spark.sql(f"SELECT batch_seq, path FROM ({committed_sql}) GROUP BY 1, 2 HAVING count(*) > 1").count() == 0
    # the same snapshot of an older batch: VERSION AS OF on both tables
    b2 = manifest.load_snapshot(storage.Store(store), as_of_batch="b2")
    m = f"(SELECT * FROM delta.`{_loc(store, 'manifest')}` VERSION AS OF 1)"
    c = f"(SELECT * FROM delta.`{_loc(store, 'checkpoints')}` VERSION AS OF 1)"
    assert _spark_rows(spark.sql(delta_spark.live_files_sql(m, c))) == _canon(b2.files.values())


def test_a_reader_during_an_ingest_sees_whole_batches(base):
    """Held between the manifest commit and the checkpoint commit (the switch): the raw manifest
    already holds the batch's rows, the checkpoints table and the views do not change."""
    assert base["during"]["checkpoints"] == base["before"]["checkpoints"]
    assert len(base["during"]["manifest"]) > len(base["before"]["manifest"])     # not yet a batch
    assert base["during_live"] == base["live_before"]
    assert len(base["during_committed"]) == len(base["before"]["manifest"])


def test_history_and_time_travel_map_to_batches(spark, base):
    """checkpoints table: version v is the store after batch v+1 (one version per batch, as long as
    only rocketlake writes); TIMESTAMP AS OF a history timestamp == VERSION AS OF its version."""
    store = base["store"]
    ck = _loc(store, "checkpoints")
    hist = spark.sql(f"DESCRIBE HISTORY delta.`{ck}`").collect()
    assert sorted(h["version"] for h in hist) == [0, 1, 2, 3]
    batches = manifest.load_snapshot(storage.Store(store)).batches
    for h in hist:
        seqs = [r["batch_seq"] for r in spark.sql(f"SELECT batch_seq FROM delta.`{ck}` VERSION AS OF {h['version']}")
                .collect()]
        assert sorted(seqs) == list(range(1, h["version"] + 2))
        assert batches[h["version"]]["batch_seq"] == h["version"] + 1
        ts = h["timestamp"].strftime("%Y-%m-%d %H:%M:%S.%f")
        at_ts = spark.sql(f"SELECT batch_seq FROM delta.`{ck}` TIMESTAMP AS OF '{ts}'").collect()
        assert sorted(r["batch_seq"] for r in at_ts) == sorted(seqs)


def _maintain(spark, store, vacuum_hours=None, backdate_days=0):
    """Delta maintenance from Spark on both tables: checkpointInterval 1 (every later commit writes
    a delta-spark checkpoint, and cleans up the log files older than the default 30-day log
    retention: ``backdate_days`` ages every file of the table first); OPTIMIZE; VACUUM."""
    for table in ("manifest", "checkpoints"):
        loc = _loc(store, table)
        spark.sql(f"ALTER TABLE delta.`{loc}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
        if backdate_days:
            old = time.time() - backdate_days * 86400
            for root, _, files in os.walk(loc):
                for name in files:
                    os.utime(os.path.join(root, name), (old, old))
        spark.sql(f"OPTIMIZE delta.`{loc}`").collect()
        if vacuum_hours is None:
            spark.sql(f"VACUUM delta.`{loc}`").collect()
        else:
            spark.sql(f"VACUUM delta.`{loc}` RETAIN {vacuum_hours} HOURS").collect()


# make test: the aggressive case (VACUUM RETAIN 0 HOURS, backdated log cleanup) covers what the
# default one does and more; ROCKETLAKE_LONG=1 (`make long`) runs the default VACUUM too.
MAINTENANCE = (["default-vacuum"] if os.environ.get("ROCKETLAKE_LONG") else []) + ["vacuum-0h-and-log-cleanup"]


@pytest.mark.parametrize("case", MAINTENANCE)
def test_rocketlake_works_after_spark_maintenance(spark, base, tmp_path, case):
    store = shutil.copytree(base["store"], str(tmp_path / "store"))
    st = storage.Store(store)
    snap0 = manifest.load_snapshot(st)
    protocol0 = {t: spark.sql(f"DESCRIBE DETAIL delta.`{_loc(store, t)}`").select(
        "minReaderVersion", "minWriterVersion").first() for t in ("manifest", "checkpoints")}
    if case == "default-vacuum":
        _maintain(spark, store)
    else:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
        try:
            _maintain(spark, store, vacuum_hours=0, backdate_days=40)
        finally:
            spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    for t in ("manifest", "checkpoints"):
        d = spark.sql(f"DESCRIBE DETAIL delta.`{_loc(store, t)}`").first()
        assert (d["minReaderVersion"], d["minWriterVersion"]) == tuple(protocol0[t]), t     # no upgrade
        assert d["numFiles"] == 1, t                                                         # OPTIMIZE'd
        names = os.listdir(os.path.join(_loc(store, t), "_delta_log"))
        assert any(n.endswith(".checkpoint.parquet") for n in names), names
        if case != "default-vacuum":
            assert "00000000000000000000.json" not in names, names        # delta-spark's log cleanup
            data = [n for n in os.listdir(_loc(store, t)) if n.endswith(".parquet")]
            assert len(data) == 1, data                                   # VACUUM removed the replaced files
    # readers: the same snapshot; the stale cache is not used (the Delta tables are read instead)
    snap1 = manifest.load_snapshot(st)
    assert snap1.files == snap0.files and snap1.batches == snap0.batches
    assert snapcache.load(st) is None
    assert verify.verify_store(store, CFG).ok
    # the writer: one more batch, then an expiry (and its delta-rs housekeeping)
    summary = run_ingest(spark, store, base["extra"], "jsonl", CFG, batch_id="b5", store_timestamp=None, quiet=True)
    assert summary["status"] == "committed", summary
    snap2 = manifest.load_snapshot(st)
    assert snap2.batch["batch_id"] == "b5" and len(snap2.batches) == len(snap0.batches) + 1
    cached = snapcache.load(st)
    assert cached is not None and cached.batch == snap2.batch and cached.files == snap2.files
    # (a "now" other than the first expiry's: the expire batch id is expire-<now>)
    res = retention.expire(store, 0, now_ms=snap2.batch["max_store_ts"] + 7_200_000, quiet=True)
    assert res["status"] in ("committed", "nothing to expire"), res
    for t in ("manifest", "checkpoints"):
        hk = res.get("housekeeping", {}).get(t)
        assert hk is None or (hk["checkpoint"] is True and hk["cleanup_metadata"] is True), hk
    assert verify.verify_store(store, CFG).ok
    # and delta-spark still reads what delta-rs wrote after its maintenance, at every remaining version
    for table in ("manifest", "checkpoints"):
        assert _spark_rows(_delta(spark, store, table)) == _rs_rows(store, table)
    committed_sql, live_sql = _views_sql(store)
    assert _spark_rows(spark.sql(live_sql)) == _canon(manifest.load_snapshot(st).files.values())


@pytest.mark.slow
def test_register_makes_catalog_tables_another_spark_process_reads(base, tmp_path):
    """`spark-submit jobs/inspect.py register` with a Hive metastore under tmp_path, then a second
    Spark process (plain python, a new JVM on the same metastore) runs SELECT ... FROM D.manifest /
    D.live_files."""
    conf = {"spark.sql.catalogImplementation": "hive", "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
            "spark.hadoop.javax.jdo.option.ConnectionURL":
                f"jdbc:derby:;databaseName={tmp_path / 'metastore_db'};create=true"}
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYSPARK_SUBMIT_ARGS": " ".join(f"--conf {k}={v}" for k, v in conf.items()) + " pyspark-shell"}
    # spark-submit: the driver's JVM runs before Python builds the session (delta_spark attaches the jars)
    submit = [SUBMIT, "--master", "local[1]"] + [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
    r = subprocess.run(submit + [os.path.join(ROOT, "jobs", "inspect.py"), "--store", base["store"], "register",
                                 "--database", "rl"], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["rl.manifest", "rl.checkpoints", "rl.committed_files", "rl.live_files"]
    reader = ("import json\n"
              "from pyspark.sql import SparkSession\n"
              "from storelib.table.delta_spark import configure_delta\n"
              "s = configure_delta(SparkSession.builder.master('local[1]')).getOrCreate()\n"
              "out = {t: s.sql(f'SELECT count(*) AS n FROM rl.{t}').first()['n'] for t in "
              "('manifest', 'checkpoints', 'live_files')}\n"
              "out['kinds'] = sorted(r[0] for r in s.sql('SELECT DISTINCT kind FROM rl.live_files').collect())\n"
              "print('RESULT ' + json.dumps(out))\n")
    r2 = subprocess.run([sys.executable, "-c", reader], cwd=str(tmp_path), env=env, capture_output=True,
                        text=True, timeout=600)
    assert r2.returncode == 0, r2.stderr[-3000:]
    out = json.loads(next(line for line in r2.stdout.splitlines() if line.startswith("RESULT "))[7:])
    st = storage.Store(base["store"])
    snap = manifest.load_snapshot(st)
    assert out["checkpoints"] == len(snap.batches)
    assert out["live_files"] == len(snap.files)
    assert out["manifest"] == len(_rs_rows(base["store"], "manifest"))
    assert out["kinds"] == sorted({r["kind"] for r in snap.files.values()})
