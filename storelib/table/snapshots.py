"""Which committed snapshot a reader asked for, and the store configuration it was written with.

``--as-of-batch`` (a batch id or seq) and ``--version`` (a checkpoints-table version) name a
snapshot; the file-shaping configuration recorded in its checkpoint row shapes every read of it.
"""
from __future__ import annotations

import dataclasses
import json

from ..errors import NoSuchBatch
from ..format import paths
from ..format.config import FILE_SHAPING_KEYS, StoreConfig
from ..io import storage
from . import manifest

__all__ = ["resolve_snapshot", "snapshot_config"]


def resolve_snapshot(store: storage.Store, as_of_batch=None, version: int | None = None) -> manifest.Snapshot:
    """The snapshot of ``--as-of-batch`` (id or seq) or ``--version`` (checkpoints-table version)."""
    if version is not None:
        dt = manifest.open_table(store, paths.CHECKPOINTS_DIR, version)
        if dt is None:
            raise NoSuchBatch(f"{store.uri} has no checkpoints table")
        rows = manifest.read_rows(dt)
        if not rows:
            raise NoSuchBatch(f"checkpoints table version {version} holds no batch")
        seq = max(r["batch_seq"] for r in rows)
        if as_of_batch is not None:
            seq = min(seq, _batch_seq(rows, as_of_batch))
        return manifest.load_snapshot(store, seq)
    return manifest.load_snapshot(store, as_of_batch)


def _batch_seq(rows, as_of_batch) -> int:
    for r in rows:
        if r["batch_id"] == str(as_of_batch) or str(r["batch_seq"]) == str(as_of_batch):
            return r["batch_seq"]
    raise NoSuchBatch(f"no committed batch {as_of_batch!r}")


def snapshot_config(snap: manifest.Snapshot, base: StoreConfig | None = None) -> StoreConfig:
    """The store's file-shaping configuration (from its checkpoint row) over ``base``'s other values."""
    base = base or StoreConfig()
    if snap.batch is None:
        return base
    shaping = {k: v for k, v in json.loads(snap.batch["config"]).items() if k in FILE_SHAPING_KEYS}
    return dataclasses.replace(base, **shaping)
