"""rocketlake: write and read Apache RocketMQ's on-disk store format in batch (Spark).

The public API, imported on first use (``import storelib`` itself loads no pyspark, numba,
pyarrow or deltalake, so the shell query path stays fast):

* ``open_store(uri, as_of_batch=None, config=None)``: a reader of a store (storelib.query);
* ``run_ingest(spark, store_uri, input_path, fmt, config, ...)``: ingest one batch (storelib.ingest);
* ``ingest_dataframe(df, store, config=None, batch_id=None, ...)``: ingest a DataFrame's rows as one
  batch, exactly as the file ingest (storelib.frame_ingest);
* ``verify_store(store_uri, config=None, deep=False, spark=None, ...)``: check every file (storelib.verify);
* ``expire_store(store_uri, reserved_hours, ...)``: retention like fileReservedTime (storelib.retention.expire);
* ``adopt_store(spark, store_uri, source_uri, config, ...)``: adopt a broker's store (storelib.adopt.adopt);
* ``configure_delta(builder)``: delta-spark's jars, SQL extension and catalog on a user's own
  ``SparkSession.builder`` (storelib.delta_spark; the store's Delta tables in Spark SQL);
* ``StoreConfig`` / ``load_config``: the store configuration (storelib.config);
* the error types, each where it is raised: ``StoreError`` and ``CorruptStore`` (storelib.errors), ``StorePathError``
  (storage), ``StoreNotFound`` (storefiles), ``InputError`` (codec), ``ConfigError`` (config),
  ``TopicsError`` (topics), ``IngestError`` and ``AlreadyCommitted`` (ingest_errors),
  ``ConcurrentWriteError`` (manifest), ``ExpireError`` (retention), ``AdoptError`` (adopt).

Exit statuses of the jobs: ``storelib.cli.ExitCode``.
"""
from __future__ import annotations

import importlib

# public name -> (module, name in that module)
_LAZY = {
    "open_store": ("storelib.query", "open_store"),
    "run_ingest": ("storelib.ingest", "run_ingest"),
    "ingest_dataframe": ("storelib.frame_ingest", "ingest_dataframe"),
    "verify_store": ("storelib.verify", "verify_store"),
    "expire_store": ("storelib.retention", "expire"),
    "adopt_store": ("storelib.adopt", "adopt"),
    "configure_delta": ("storelib.delta_spark", "configure_delta"),
    "StoreConfig": ("storelib.config", "StoreConfig"),
    "load_config": ("storelib.config", "load_config"),
    "StoreError": ("storelib.errors", "StoreError"),
    "CorruptStore": ("storelib.errors", "CorruptStore"),
    "StorePathError": ("storelib.storage", "StorePathError"),
    "StoreNotFound": ("storelib.storefiles", "StoreNotFound"),
    "InputError": ("storelib.codec", "InputError"),
    "ConfigError": ("storelib.config", "ConfigError"),
    "TopicsError": ("storelib.topics", "TopicsError"),
    "IngestError": ("storelib.ingest_errors", "IngestError"),
    "AlreadyCommitted": ("storelib.ingest_errors", "AlreadyCommitted"),
    "ConcurrentWriteError": ("storelib.manifest", "ConcurrentWriteError"),
    "ExpireError": ("storelib.retention", "ExpireError"),
    "AdoptError": ("storelib.adopt", "AdoptError"),
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    # Only the public names: anything else must raise AttributeError, so that
    # ``from storelib import <submodule>`` goes on to import the submodule.
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'storelib' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
