"""storelib.runtime.pysparkpath and .sparkcontext: what a cold job's Python start skips (PySpark
compiled from spark-submit's zip, a SQL session a file ingest never uses)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from storelib.runtime.sparkcontext import ContextSession

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = ("import sys; from storelib.runtime.pysparkpath import prefer_installed_pyspark as p; moved = p(); "
         "import importlib, pyspark; importlib.invalidate_caches(); "
         "print(moved, pyspark.__file__, any(k.endswith('pyspark.zip') for k in list(sys.path) + list(sys.path_importer_cache)))")


def _probe(pythonpath: str) -> tuple:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=pythonpath), check=True).stdout.split()
    return out[0] == "True", out[1], out[2] == "True"


def test_the_installed_packages_own_zip_leaves_the_path():
    """spark-submit's PYTHONPATH of a pip-installed Spark: the same pyspark is imported compiled,
    and no zip importer is left for a task's importlib.invalidate_caches() to re-read."""
    import importlib.util
    pkg = os.path.dirname(importlib.util.find_spec("pyspark").origin)
    zip_path = os.path.join(pkg, "python", "lib", "pyspark.zip")
    if not os.path.exists(zip_path):
        pytest.skip("this pyspark installation has no python/lib/pyspark.zip")
    moved, origin, zips_left = _probe(zip_path)
    assert moved and origin == os.path.join(pkg, "__init__.py") and not zips_left


def test_another_installations_zip_stays_first(tmp_path):
    """A zip that is not the installed package's (a cluster's Spark) keeps precedence."""
    zip_path = tmp_path / "spark" / "python" / "lib" / "pyspark.zip"
    zip_path.parent.mkdir(parents=True)
    with zipfile.ZipFile(zip_path, "w") as z:
        z.writestr("pyspark/__init__.py", "")
    moved, origin, zips_left = _probe(str(zip_path))
    assert not moved and origin == os.path.join(str(zip_path), "pyspark", "__init__.py") and zips_left


def test_context_session_stops_its_context_and_has_no_sql():
    class Context:
        stopped = False

        def stop(self):
            self.stopped = True
    sc = Context()
    spark = ContextSession(sc)
    assert spark.sparkContext is sc
    with pytest.raises(AttributeError, match="no SQL session.*SparkSession.sql"):
        spark.sql("SELECT 1")
    spark.stop()
    assert sc.stopped
