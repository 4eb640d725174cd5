"""Shared fixtures: golden sets, one Spark session for in-process tests, store helpers."""
from __future__ import annotations

import os
import sys

import pytest

import goldenlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The golden sets, uncompressed: the repository's tests/golden/<set>.tar.xz unpacked once into
# tests/golden/.cache/, or $ROCKETLAKE_SHARED/golden as it is when ROCKETLAKE_SHARED is set.
GOLDEN = goldenlib.golden_root()
sys.path.insert(0, ROOT)


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
    """One local[2] SparkSession for in-process tests (ingest, distributed verify)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[2]").appName("rocketlake-tests")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def pytest_collection_modifyitems(config, items):
    """Tests that use the in-process SparkSession are marked ``spark``; ``make check`` runs the
    rest (no Spark at all: ``-m "not slow and not spark"``)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
