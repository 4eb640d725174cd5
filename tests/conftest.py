"""Shared fixtures: golden sets, one Spark session for in-process tests, store helpers."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ROCKETLAKE_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
GOLDEN = os.path.join(SHARED, "golden")
TOOLS = os.path.join(SHARED, "tools")
sys.path.insert(0, ROOT)


def golden_set(name: str) -> str:
    path = os.path.join(GOLDEN, name)
    if not os.path.isdir(path):
        pytest.fail(f"golden set {name} not found under {GOLDEN} (set ROCKETLAKE_SHARED)")
    return path


@pytest.fixture(scope="session")
def golden_dir():
    return GOLDEN


@pytest.fixture(scope="session")
def restored_golden(tmp_path_factory):
    """golden_restore.py of a set, once per session: the store exactly as RocketMQ left it."""
    cache = {}

    def restore(name: str) -> str:
        if name not in cache:
            out = str(tmp_path_factory.mktemp(f"golden-{name}"))
            subprocess.run([sys.executable, os.path.join(TOOLS, "golden_restore.py"), golden_set(name), out],
                           check=True, capture_output=True)
            cache[name] = out
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
