"""Shared fixtures: golden sets, one Spark session for in-process tests, store helpers."""
from __future__ import annotations

import os
import sys

import pytest

from storelib.runtime import jvm_archive
from support import goldenlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# pytest imports storelib from this checkout and the helpers as the package ``support`` (tests/support;
# pyproject.toml's pythonpath: the checkout and tests/). Every process a test starts (spark-submit jobs,
# their Python workers, the scripts under tests/support) imports them the same way.
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "tests"),
                                            *filter(None, [os.environ.get("PYTHONPATH")])])
# The golden sets, uncompressed: the repository's tests/golden/<set>.tar.xz unpacked once into
# tests/golden/.cache/, or $ROCKETLAKE_SHARED/golden as it is when ROCKETLAKE_SHARED is set.
GOLDEN = goldenlib.golden_root()
# Every JVM the tests start (spark-submit, SparkSession, ingest_runner) is short-lived and mostly
# moves bytes between Python processes, like a cold ingest: they get a cold job's options
# (storelib.runtime.jvm_archive: C1 only, and the class-data archive once pytest_configure has it). A
# trivial local[2] session under the suite's load took 39 s with the default JVM, 27 s with C1 only,
# 21 s with the archive too. Tests check behaviour, never the JVM's speed.
# ROCKETLAKE_TEST_JVM_OPTS="" runs the default JVM.
os.environ.setdefault("SPARK_SUBMIT_OPTS", os.environ.get("ROCKETLAKE_TEST_JVM_OPTS", jvm_archive.C1_ONLY))
# The golden sets and the differential cases are messages RocketMQ's store wrote, empty bodies
# among them (5% of each set); a user's ingest refuses those as RocketMQ's producers do. The
# refusal itself is tested with the variable removed (tests/cli/test_second_hour.py).
os.environ.setdefault("ROCKETLAKE_ALLOW_EMPTY_BODY", "1")


def golden_set(name: str) -> str:
    """The directory of one golden set (messages.jsonl, config.json, files.json, store/, ...)."""
    path = os.path.join(GOLDEN, name)
    if not os.path.isdir(path):
        pytest.fail(f"golden set {name} not found under {GOLDEN}")
    return path


@pytest.fixture(scope="session")
def golden_dir():
    return GOLDEN


@pytest.fixture(scope="session")
def restored_golden(tmp_path_factory):
    """goldenlib.restore of a set (sha256-checked), once per session: the store exactly as RocketMQ left it."""
    cache = {}

    def restore(name: str) -> str:
        if name not in cache:
            out = str(tmp_path_factory.mktemp(f"golden-{name}"))
            cache[name] = goldenlib.restore(golden_set(name), out)
        return cache[name]

    return restore


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for in-process tests (ingest, distributed verify), with Delta Lake
    as every session of the jobs has it (storelib.table.delta_spark.configure_delta)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from storelib.table.delta_spark import configure_delta
    s = configure_delta(SparkSession.builder.master("local[2]").appName("rocketlake-tests")
                        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                        .config("spark.driver.extraJavaOptions",
                                f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties")).getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


# ============================================================================ pytest-xdist
# `make test` runs the suite on two xdist workers. The schedule is this file's (UnitScheduling,
# for -n with --dist load, loadgroup or worksteal): a work unit, run by one worker in order, is
#
# * a whole module for the modules in TOGETHER: their tests depend on each other (the kill-point
#   tests leave the stores that test_rerun_finishes_every_killed_batch reruns);
# * a test function of HEAVY (all its parametrizations), and each other ``slow`` test: long ones,
#   spread over the workers;
# * the other tests of a module, together (their module fixtures are built once).
#
# Units are handed out longest first (estimates: idle 2-core seconds from --durations; the rest
# after them in collection order), so that no long test is left to run alone at the end. The
# estimates only steer the order: a stale one costs balance, never correctness.
TOGETHER = {
    "test_ingest_faults.py": 120,       # 11 kill/rerun jobs sharing one base store and KILLED
    "test_delta_spark.py": 220,         # one store (three ingests, a killed attempt, an expiry) for all
    "test_store_browser.py": 60,        # one store, one `rocketlake ui` and one Chromium for all (tests/ui)
    "test_hdfs.py": 25,                 # one HDFS mini cluster for all (make backends: its store too, ~300)
    "test_s3proxy.py": 95,              # one S3Proxy for all: a race round, a kill, a refusal (make backends: more)
    "test_object_sweep.py": 200,        # one seeded store of small batches on moto for all (objstores.seed_copies)
    "test_staged_deletes_objects.py": 55,   # the same: one seeded store for its documents
    "test_sweep_state.py": 150,          # the same: one seeded store for the sweep's skip
    "test_s3_topic_expire.py": 50,      # the same: one seeded store (and its expired reference) for all
}
HEAVY = {
    "test_crash_sim.py::test_power_cuts_during_an_appended_batch": 35,
    # RocketMQ in the loop (needs `make rocketmq`): per version one writer JVM (writes, then answers)
    # and one process writing the cases with rocketlake, mostly without Spark
    "test_rocketmq_differential.py::test_differential_5_3_3": 115,
    "test_rocketmq_broker.py::test_broker_serves_a_rocketlake_store": 45,
    "test_rocketmq_broker.py::test_broker_4_9_serves_a_rocketmq_version_4_9_store": 40,     # make long
    "test_rocketmq_differential.py::test_differential_4_9_8": 25,
    "test_rocketmq_differential.py::test_differential_newest_5x": 30,
    "test_rocketmq_differential.py::test_reference_writer_rebuilds_the_golden_stores": 25,
    "test_query_differential.py::test_lookups_answer_as_rocketmq": 40,
    "test_ingest_race.py::test_racing_ingests_on_s3": 95,        # make faults
    # a Kafka broker and two spark-submits of one streaming query (one SIGKILLed); make streaming:
    # three (two SIGKILLed)
    "test_streaming.py::test_kafka_stream_killed_once_is_exactly_once": 85,
    "test_streaming.py::test_kafka_stream_killed_twice_is_exactly_once": 120,
    "test_stream_source.py": 40,        # readStream in the session: a restart, an expiry
    "test_crash_sim.py::test_power_cuts_during_expire": 40,
    "test_crash_sim.py::test_power_cuts_during_a_first_batch": 35,
    "test_crash_sim.py::test_power_cuts_during_adopt": 30,
    "test_nothing_lost.py::test_expire_and_export_racing_an_ingest": 45,
    "test_nothing_lost.py::test_an_append_never_launders_damage": 40,
    "test_nothing_lost.py::test_a_stalled_writer_never_commits_after_losing_its_lease": 35,
    "test_nothing_lost.py::test_export_and_verify_while_a_batch_is_published": 30,
    "test_dataframe_ingest.py": 105,    # a module: its tests that are neither slow nor in HEAVY
    "test_datasource.py::test_filters_and_pushdown": 75,
    "test_ingest_s3.py::test_default_sizes_on_s3_take_several_batches": 50,     # its compare reads no holes
    "test_hostile_names.py": 60,
    "test_query_cli.py": 35,
    "test_dataframe_ingest.py::test_jobs_table_and_sql_formats": 58,
    "test_ingest_race.py::test_racing_ingests_on_local_disk": 55,
    "test_ingest_s3.py::test_ingest_to_s3_is_golden": 53,
    "test_bench_smoke.py::test_bench_smoke_runs_the_cold_sections": 17,
    "test_fuzz_readers.py": 50,
    "test_keylookup.py::test_batch_lookup_100k_keys_equals_per_key": 45,    # both plans
    "test_datasource.py": 52,           # incl. splits and topic queues under Spark (~7 s)
    "test_jvm_reader.py": 52,           # the JVM reader against the Python one (each read twice)
    "test_ingest_cluster.py::test_ingest_on_a_standalone_cluster_is_golden": 23,  # runs where namespaces cannot
    "test_cluster_multihost.py::test_multihost_ingest_shares_nothing_but_s3": 110,   # + its module fixture
    "test_durability.py::test_batch_is_on_stable_storage_before_its_commit": 23,
    "test_s3_kills.py": 35,             # one kill and rerun on the S3 server (make faults: 13)
    "test_readme.py::test_readme_commands_run": 40,
    "test_broker_lock_live.py::test_writers_are_refused_while_a_broker_runs_on_an_adopted_store": 40,
    "test_small_batches_s3.py": 30,
    "test_extent_lists_s3.py::test_small_batches_with_extent_lists_on_s3": 35,    # + its module fixture
    "test_mirror.py": 30,
}
SLOW_DEFAULT = 15                        # a slow test not in HEAVY: a spark-submit or two


def _unit(item) -> tuple[str, float]:
    """(work unit, estimated seconds) of a collected test: a module's name, or its node id."""
    module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    if module in TOGETHER:
        return module, TOGETHER[module]
    test = f"{module}::{getattr(item, 'originalname', item.name)}"
    if test in HEAVY:                     # all its parametrizations: they may share module fixtures
        return test, HEAVY[test]
    if item.get_closest_marker("slow") is not None:
        return item.nodeid, SLOW_DEFAULT
    return module, HEAVY.get(module, 0)


def _xdist_units(config) -> str | None:
    """On an xdist worker scheduled by UnitScheduling: the file its units go to."""
    return getattr(config, "workerinput", {}).get("rocketlake_units")


SCHEDULED_MODES = ("load", "loadgroup", "worksteal")


def pytest_configure(config):
    """Controller of an xdist run in one of SCHEDULED_MODES: a directory for the workers' units.
    The controller (or the only process) of a run that may start JVMs: the run's class-data
    archive (tests/jvm_archive.py), before any worker starts, so that every JVM maps it."""
    if hasattr(config, "workerinput"):
        return
    import tempfile
    if getattr(config.option, "dist", "no") in SCHEDULED_MODES:
        config._rocketlake_units_dir = tempfile.mkdtemp(prefix="rocketlake-xdist-")
    if "ROCKETLAKE_TEST_JVM_OPTS" not in os.environ and "not spark" not in (config.option.markexpr or ""):
        # built by `make install` (or now, once): rebuilt when java or pyspark changes
        archive = jvm_archive.cached_archive()
        if archive:
            os.environ["SPARK_SUBMIT_OPTS"] = jvm_archive.jvm_options(archive)


def pytest_unconfigure(config):
    import shutil
    for attr in ("_rocketlake_units_dir",):
        path = getattr(config, attr, None)
        if path:
            shutil.rmtree(path, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    units_dir = getattr(node.config, "_rocketlake_units_dir", None)
    if units_dir:
        node.workerinput["rocketlake_units"] = os.path.join(units_dir, f"{node.gateway.id}.json")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    units_dir = getattr(config, "_rocketlake_units_dir", None)
    if not units_dir:
        return None
    import json
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """LoadScopeScheduling with the scopes (units) the workers computed (_unit), handed out
        in the order they collected them (longest first)."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False
            self.units = None

        def _split_scope(self, nodeid):
            if self.units is None:                # the workers have collected: read their units
                self.units = {}
                for name in sorted(n for n in os.listdir(units_dir) if n.endswith(".json")):
                    with open(os.path.join(units_dir, name), encoding="utf-8") as fh:
                        self.units = json.load(fh)
                    break
            return self.units.get(nodeid) or nodeid.split("::", 1)[0]

    return UnitScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests that use the in-process SparkSession are marked ``spark``; ``make check`` runs the
    rest (no Spark at all: ``-m "not slow and not spark"``). On an xdist worker the tests are
    ordered by work unit, longest first (a stable sort: a unit's tests keep their order), and
    the units are written for UnitScheduling."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
    out = _xdist_units(config)
    if out is None:
        return
    first, order, units = {}, {}, {}
    for i, item in enumerate(items):
        unit, secs = _unit(item)
        first.setdefault(unit, i)
        order[item.nodeid] = (-secs, first[unit])
        units[item.nodeid] = unit
    items.sort(key=lambda it: order[it.nodeid])
    import json
    with open(out + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(units, fh)
    os.replace(out + ".tmp", out)
