"""Delta Lake on Spark: delta-spark's jars and SQL configuration for a SparkSession.

    from pyspark.sql import SparkSession
    from storelib.table.delta_spark import configure_delta
    spark = configure_delta(SparkSession.builder.appName("mine")).getOrCreate()
    spark.read.format("delta").load(store + "/_rocketlake/manifest")
    spark.sql(f"DESCRIBE HISTORY delta.`{store}/_rocketlake/checkpoints`")

``configure_delta(builder)`` (also ``storelib.configure_delta``) puts the jars that ``make install``
fetched from Maven Central into ``.cache/jars/delta-spark/`` (``conf/jars/delta/pom.xml``:
delta-spark_2.13 ``DELTA_VERSION``, built against Spark 4.1) on the session's classpath
(``spark.jars``: nothing is downloaded when a job starts) and sets Delta's SQL extension and
catalog (``spark.sql.extensions``, ``spark.sql.catalog.spark_catalog``). Every session the jobs
and storelib create (``cli.common.spark_session``) goes through it. ``ROCKETLAKE_DELTA_JARS`` names
another directory of the same jars (a cluster image, say).

A builder of a plain ``python`` process passes the jars to the JVM it launches. Under
``spark-submit`` the driver's JVM is already running when Python builds the session: unless
Delta's classes are already there (``--jars``), ``configure_delta`` adds the jars to the class
loader spark-submit gave the driver (Spark's ``MutableURLClassLoader``, the one Spark loads
extensions and data sources with) before the session exists; ``spark.jars`` ships them to the
executors. ``ensure_delta(spark)`` checks a session can run Delta SQL and says what is missing.

Which library does what (README "Delta Lake"): the driver's commits stay on ``deltalake``
(delta-rs); delta-spark reads the tables and runs maintenance on them.
"""
from __future__ import annotations

from typing import Any

import os
import sys
from ..errors import DeltaJarsMissing
from ..format.paths import PROJECT_ROOT

__all__ = ["DELTA_VERSION", "EXTENSION", "CATALOG", "JARS_ENV", "jars_dir", "jars", "configure_delta",
           "delta_conf", "ensure_delta", "table_location", "committed_rows_sql",
           "live_files_sql", "register_tables"]

DELTA_VERSION = "4.3.1"           # conf/jars/delta/pom.xml's delta.version (a test holds them equal)
EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
JARS_ENV = "ROCKETLAKE_DELTA_JARS"
_ROOT = PROJECT_ROOT


def jars_dir() -> str:
    return os.environ.get(JARS_ENV) or os.path.join(_ROOT, ".cache", "jars", "delta-spark")


def jars() -> list[Any]:
    """Absolute paths of delta-spark's jars, sorted; ``DeltaJarsMissing`` when there are none."""
    d = jars_dir()
    found = sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".jar")) if os.path.isdir(d) else []
    if not any(os.path.basename(p).startswith("delta-spark_") for p in found):
        raise DeltaJarsMissing(f"no delta-spark jars in {d}: run `make install` (it fetches them from Maven "
                               f"Central with conf/jars/delta/pom.xml), or set {JARS_ENV}")
    return found


def delta_conf(existing_jars: str | None = None) -> dict[Any, Any]:
    """The Spark settings ``configure_delta`` applies (``spark.jars``: ``existing_jars`` first)."""
    paths = [p for p in (existing_jars or "").split(",") if p]
    paths += [j for j in jars() if j not in paths]
    return {"spark.jars": ",".join(paths), "spark.sql.extensions": EXTENSION,
            "spark.sql.catalog.spark_catalog": CATALOG}


def configure_delta(builder: Any) -> Any:
    """``builder`` (a ``SparkSession.Builder``) with delta-spark's jars, SQL extension and catalog.

    Keeps jars and extensions the builder already has (``spark.jars``, ``spark.sql.extensions``
    given before this call are extended, not replaced)."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:          # spark-submit: the driver JVM is running
        _attach_to_driver()
    opts = getattr(builder, "_options", {})
    for key, value in delta_conf(opts.get("spark.jars")).items():
        if key == "spark.sql.extensions":
            have = [e for e in (opts.get(key) or "").split(",") if e]
            value = ",".join(have + ([EXTENSION] if EXTENSION not in have else []))
        builder = builder.config(key, value)
    return builder


def _loadable(jvm: Any) -> bool:
    try:
        jvm.org.apache.spark.util.Utils.classForName(EXTENSION, True, False)
        return True
    except Exception:  # noqa: BLE001 - a Py4J ClassNotFoundException
        return False


def _attach_to_driver() -> None:
    """Add the jars to the running driver's class loader unless Delta's classes load already."""
    from pyspark import SparkContext
    SparkContext._ensure_initialized()
    jvm: Any = SparkContext._jvm
    if _loadable(jvm):
        return
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    if loader.getClass().getName() != "org.apache.spark.util.MutableURLClassLoader":
        raise DeltaJarsMissing(f"cannot add delta-spark's jars to this driver (class loader "
                               f"{loader.getClass().getName()}): give them with spark-submit --jars "
                               "\"$(python -m storelib.table.delta_spark --jars)\"")
    for path in jars():
        loader.addURL(jvm.java.io.File(path).toURI().toURL())


def ensure_delta(spark: Any) -> None:
    """``DeltaJarsMissing`` unless ``spark`` can run Delta SQL (classes loadable, extension set)."""
    if not _loadable(spark._jvm):
        raise DeltaJarsMissing("Delta's classes are not on this Spark driver's classpath: create the session "
                               "with storelib.table.delta_spark.configure_delta(builder), or give spark-submit --jars "
                               "\"$(python -m storelib.table.delta_spark --jars)\"")
    if EXTENSION not in (spark.conf.get("spark.sql.extensions", "") or ""):
        raise DeltaJarsMissing("this session was built without Delta's SQL extension: create it with "
                               "storelib.table.delta_spark.configure_delta(builder)")


# ---------------------------------------------------------------------------- the store's tables in SQL
def table_location(store_uri: str, table: str) -> str:
    """Where ``table`` (``manifest`` / ``checkpoints``) of the store lives, for Spark."""
    from ..format.paths import CHECKPOINTS_DIR, MANIFEST_DIR, local_root
    rel = {"manifest": MANIFEST_DIR, "checkpoints": CHECKPOINTS_DIR}[table]
    root = local_root(store_uri)
    if root is not None:
        store_uri = os.path.abspath(root)
    return store_uri.rstrip("/") + "/" + rel


def committed_rows_sql(manifest: str, checkpoints: str) -> str:
    """SQL of the manifest rows readers count (``manifest.load_snapshot``'s rule): rows of a batch
    that has a checkpoint row with the same sequence number, and, when that row names an ingest
    attempt, only that attempt's rows (a dead attempt may have committed manifest rows before it
    died; its rerun commits its own under the same batch id). A compaction's marker row is no file's.
    ``manifest``/``checkpoints``: table references (``D.manifest``, ``delta.`/store/_rocketlake/manifest```)."""
    return (f"SELECT m.* FROM {manifest} m JOIN {checkpoints} c "
            f"ON m.batch_id = c.batch_id AND m.batch_seq = c.batch_seq "
            f"WHERE (c.attempt_id IS NULL OR m.attempt_id = c.attempt_id) AND m.action <> 'compact'")


def live_files_sql(manifest: str, checkpoints: str) -> str:
    """SQL of the live files of the latest committed batch: what the ``rocketlake_manifest`` source
    returns (per path, the committed row of the highest batch, if it is an ``add``)."""
    return (f"SELECT * EXCEPT (_rank) FROM (SELECT *, row_number() OVER (PARTITION BY path "
            f"ORDER BY batch_seq DESC, committed_at DESC) AS _rank FROM ({committed_rows_sql(manifest, checkpoints)})) "
            f"WHERE _rank = 1 AND action = 'add'")


def _sql_string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def register_tables(spark: Any, store_uri: str, database: str) -> list[Any]:
    """Catalog tables over a store: ``database.manifest`` and ``database.checkpoints`` (external
    Delta tables at the store's paths: dropping them leaves the store alone), and the views
    ``database.committed_files`` (``committed_rows_sql``) and ``database.live_files``
    (``live_files_sql``). Existing tables of those names must point at the same store.
    Returns the names created or kept."""
    import re
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", database):
        raise ValueError(f"database name {database!r}: letters, digits and _ only")
    ensure_delta(spark)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    out = []
    for table in ("manifest", "checkpoints"):
        loc = table_location(store_uri, table)
        name = f"`{database}`.`{table}`"
        if spark.catalog.tableExists(f"{database}.{table}"):
            have = spark.sql(f"DESCRIBE DETAIL {name}").first()["location"]
            if have.replace("file:", "").rstrip("/") != loc.replace("file:", "").rstrip("/"):
                raise ValueError(f"{database}.{table} exists and points at {have}, not at {loc}")
        else:
            spark.sql(f"CREATE TABLE {name} USING delta LOCATION {_sql_string(loc)}")
        out.append(f"{database}.{table}")
    m, c = f"`{database}`.`manifest`", f"`{database}`.`checkpoints`"
    for view, sql in (("committed_files", committed_rows_sql(m, c)), ("live_files", live_files_sql(m, c))):
        spark.sql(f"CREATE OR REPLACE VIEW `{database}`.`{view}` AS {sql}")
        out.append(f"{database}.{view}")
    return out


def _main(argv: list[str] | None) -> int:
    if (argv or [])[:1] == ["--jars"]:
        print(",".join(jars()))
        return 0
    print("usage: python -m storelib.table.delta_spark --jars   (the jars' paths, comma-separated)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
