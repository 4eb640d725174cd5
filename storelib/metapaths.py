"""Where rocketlake keeps its own files under a store root (docs/FORMAT.md §11.2).

A leaf module (no imports): ``manifest`` (the Delta tables, which needs pyarrow) re-exports these
names, and the shell lookup path (``storefiles``, ``snapcache``) takes them from here without
loading pyarrow or deltalake.
"""
from __future__ import annotations

__all__ = ["META_DIR", "MANIFEST_DIR", "CHECKPOINTS_DIR", "STAGING_DIR", "SNAPSHOT_CACHE", "delta_commit"]

META_DIR = "_rocketlake"
MANIFEST_DIR = f"{META_DIR}/manifest"
CHECKPOINTS_DIR = f"{META_DIR}/checkpoints"
STAGING_DIR = f"{META_DIR}/staging"
SNAPSHOT_CACHE = f"{META_DIR}/snapshot-cache.json"    # storelib.snapcache


def delta_commit(table: str, version: int) -> str:
    """Store-relative path of a Delta table's commit file of ``version``."""
    return f"{table}/_delta_log/{version:020d}.json"
