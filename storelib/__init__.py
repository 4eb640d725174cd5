"""rocketlake: write and read Apache RocketMQ's on-disk store format in batch (Spark).

Every public function names the store it works on ``store`` (a local path or a URI). The public API,
imported on first use (``import storelib`` itself loads no pyspark, numba,
pyarrow or deltalake, so the shell query path stays fast):

* ``open_store(store, as_of_batch=None, config=None)``: a reader of a store (storelib.read.query);
* ``run_ingest(spark, store, input_path, fmt, config, ...)``: ingest one batch (storelib.ingest.driver);
* ``ingest_dataframe(df, store, config=None, batch_id=None, ...)``: ingest a DataFrame's rows as one
  batch, exactly as the file ingest (storelib.ingest.frame);
* ``register_sink(spark)``: the ``rocketlake`` data source, ``writeStream`` / ``write`` into a store, one
  batch per micro-batch, exactly once (storelib.ingest.sink); ``rocketlake_batch_writer(store)``: the same
  as a ``foreachBatch`` function running the ingest on Spark;
* ``register_source(spark)``: ``rocketmq`` for ``read`` and ``readStream`` (tailing committed batches)
  and the manifest / checkpoints tables (storelib.read.stream);
* ``verify_store(store, config=None, deep=False, spark=None, ...)``: check every file (storelib.verify.driver);
* ``expire_store(store, reserved_hours, ...)``: retention like fileReservedTime (storelib.ops.expire.expire);
* ``adopt_store(spark, store, source_uri, config, ...)``: adopt a broker's store (storelib.ops.adopt.adopt);
* ``configure_delta(builder)``: delta-spark's jars, SQL extension and catalog on a user's own
  ``SparkSession.builder`` (storelib.table.delta_spark; the store's Delta tables in Spark SQL);
* ``StoreConfig`` / ``load_config``: the store configuration (storelib.format.config);
* the error types, all defined in storelib.errors (with the exit status each means): ``StoreError``,
  ``CorruptStore``, ``StorePathError``, ``StoreNotFound``, ``InputError``, ``ConfigError``,
  ``TopicsError``, ``IngestError``, ``AlreadyCommitted``, ``ConcurrentWriteError``, ``ExpireError``,
  ``AdoptError``.

Exit statuses of the jobs: ``storelib.errors.ExitCode`` and ``EXIT_TABLE``.
``storelib.__version__``: the version in pyproject.toml (its one source), as ``rocketlake --version`` says it.
"""
from __future__ import annotations

import importlib

# public name -> (module, name in that module)
_LAZY = {
    "open_store": ("storelib.read.query", "open_store"),
    "run_ingest": ("storelib.ingest.driver", "run_ingest"),
    "ingest_dataframe": ("storelib.ingest.frame", "ingest_dataframe"),
    "register_sink": ("storelib.ingest.sink", "register"),
    "rocketlake_batch_writer": ("storelib.ingest.sink", "rocketlake_batch_writer"),
    "register_source": ("storelib.read.stream", "register"),
    "verify_store": ("storelib.verify.driver", "verify_store"),
    "expire_store": ("storelib.ops.expire", "expire"),
    "adopt_store": ("storelib.ops.adopt", "adopt"),
    "configure_delta": ("storelib.table.delta_spark", "configure_delta"),
    "StoreConfig": ("storelib.format.config", "StoreConfig"),
    "load_config": ("storelib.format.config", "load_config"),
    "StoreError": ("storelib.errors", "StoreError"),
    "CorruptStore": ("storelib.errors", "CorruptStore"),
    "StorePathError": ("storelib.errors", "StorePathError"),
    "StoreNotFound": ("storelib.errors", "StoreNotFound"),
    "InputError": ("storelib.errors", "InputError"),
    "ConfigError": ("storelib.errors", "ConfigError"),
    "TopicsError": ("storelib.errors", "TopicsError"),
    "IngestError": ("storelib.errors", "IngestError"),
    "AlreadyCommitted": ("storelib.errors", "AlreadyCommitted"),
    "ConcurrentWriteError": ("storelib.errors", "ConcurrentWriteError"),
    "ExpireError": ("storelib.errors", "ExpireError"),
    "AdoptError": ("storelib.errors", "AdoptError"),
}

__all__ = list(_LAZY)


def _version() -> str:
    """pyproject.toml's version: read from the checkout storelib runs from, else from the installed
    package's metadata (which setuptools took from the same file)."""
    import os
    pyproject = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")
    if os.path.exists(pyproject):
        import tomllib
        with open(pyproject, "rb") as fh:
            project = tomllib.load(fh).get("project", {})
        if project.get("name") == "rocketlake" and project.get("version"):
            return project["version"]
    from importlib.metadata import version
    return version("rocketlake")


def __getattr__(name: str):
    # Only the public names: anything else must raise AttributeError, so that
    # ``from storelib import <submodule>`` goes on to import the submodule.
    if name == "__version__":
        globals()[name] = _version()
        return globals()[name]
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'storelib' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
