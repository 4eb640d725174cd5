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

    def restore(name: str, files_json: str | None = None) -> str:
        key = (name, files_json)
        if key not in cache:
            out = str(tmp_path_factory.mktemp(f"golden-{name}"))
            src = golden_set(name)
            if files_json:
                # golden_restore reads files.json; point it at another listing through a shadow dir.
                shadow = str(tmp_path_factory.mktemp(f"shadow-{name}"))
                for entry in os.listdir(src):
                    if entry != "files.json":
                        os.symlink(os.path.join(src, entry), os.path.join(shadow, entry))
                os.symlink(os.path.join(src, files_json), os.path.join(shadow, "files.json"))
                src = shadow
            subprocess.run([sys.executable, os.path.join(TOOLS, "golden_restore.py"), src, out],
                           check=True, capture_output=True)
            cache[key] = out
        return cache[key]

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
