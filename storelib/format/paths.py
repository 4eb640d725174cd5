"""Where rocketlake keeps its own files under a store root (docs/FORMAT.md §11.2).

Every path under ``_rocketlake/`` is named here and nowhere else, and so is the project root (where
``conf/`` lives). A leaf module (stdlib only), so the shell lookup path takes these names without
loading pyarrow or deltalake.
"""
from __future__ import annotations

import os

__all__ = ["PROJECT_ROOT", "CONF_DIR", "LOG4J_CONFIG", "META_DIR", "MANIFEST_DIR", "CHECKPOINTS_DIR", "STAGING_DIR",
           "TMP_DIR", "OBJECTS_DIR", "INCOMING_DIR", "LEASE_PATH", "SNAPSHOT_CACHE", "BROKER_TOPICS", "delta_commit"]

# The checkout or installed tree that holds storelib/ and conf/.
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONF_DIR = os.path.join(PROJECT_ROOT, "conf")
LOG4J_CONFIG = os.path.join(CONF_DIR, "log4j2.properties")     # Spark's quiet logging in rocketlake's jobs

META_DIR = "_rocketlake"
MANIFEST_DIR = f"{META_DIR}/manifest"
CHECKPOINTS_DIR = f"{META_DIR}/checkpoints"
STAGING_DIR = f"{META_DIR}/staging"
TMP_DIR = f"{META_DIR}/tmp"                 # scratch Delta tables, staging dirs being removed
OBJECTS_DIR = f"{META_DIR}/objects"         # object stores: the immutable extents (storelib.io.fragments)
INCOMING_DIR = f"{META_DIR}/incoming"      # rows handed to a commit (storelib.ingest.sink)
LEASE_PATH = f"{META_DIR}/writer.lock"      # the writer lease (storelib.table.writerlease)
SNAPSHOT_CACHE = f"{META_DIR}/snapshot-cache.json"    # storelib.table.snapcache
# A broker keeps its topic table here under its storePathRootDir (read by an import: storelib.ops.adopt).
BROKER_TOPICS = "config/topics.json"


def delta_commit(table: str, version: int) -> str:
    """Store-relative path of a Delta table's commit file of ``version``."""
    return f"{table}/_delta_log/{version:020d}.json"
