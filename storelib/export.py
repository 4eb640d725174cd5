"""Export: a committed snapshot as a broker-ready RocketMQ store directory.

Writes every live file of the snapshot (commitlog segments, consume queues, index files, the
checkpoint) under its RocketMQ name with its full file size (zero tail), reading each one as the
readers do: through its extents on object stores (storelib.fragments), its final name on local
stores. The result is byte-identical to what a RocketMQ broker keeps for the same messages, and
every file's bytes are checked against its manifest checksum on the way. ``_rocketlake/`` is not
exported: the directory is a plain RocketMQ store a broker can start on (``storePathRootDir``).
"""
from __future__ import annotations

import json

from . import checksum, manifest, storage
from .errors import StoreError
from .fragments import extents_from_detail

__all__ = ["ExportError", "export_store"]

_CHUNK = 64 << 20


class ExportError(StoreError):
    """The export target is not empty, or a file's bytes do not match the manifest."""


def export_store(store_uri: str, target: str, as_of_batch=None, durable: bool = True) -> dict:
    """Export the latest committed snapshot (or ``as_of_batch``) of ``store_uri`` to ``target``
    (a local directory or any store URI), which must be empty or absent; returns a summary."""
    store = storage.Store(store_uri)
    out = storage.Store(target)
    if out.list_files(""):
        raise ExportError(f"{target} is not empty: export writes into an empty directory only (nothing was written)")
    snap = manifest.load_snapshot(store, as_of_batch)
    if snap.batch is None:
        raise ExportError(f"{store_uri} has no committed batch to export")
    n_bytes = 0
    for rel, row in sorted(snap.files.items()):
        n_bytes += _export_file(store, out, row, durable)
    return {"store": store_uri, "target": target, "batch_id": snap.batch["batch_id"],
            "batch_seq": snap.batch["batch_seq"], "files": len(snap.files), "valid_bytes": n_bytes}


def _export_file(store: storage.Store, out: storage.Store, row: dict, durable: bool) -> int:
    rel, valid = row["path"], int(row["valid_bytes"])
    detail = json.loads(row.get("detail") or "{}")
    if "extents" in detail:
        store.map_file(rel, int(row["file_size"]), extents_from_detail(detail["extents"]))
    hasher = checksum.BlockHasher()

    def chunks():
        for pos in range(0, valid, _CHUNK):
            data = store.read(rel, pos, min(_CHUNK, valid - pos))
            if len(data) != min(_CHUNK, valid - pos):
                raise ExportError(f"{rel}: {len(data)} bytes at {pos}, the manifest says {valid} valid bytes")
            hasher.update(data)
            yield data
    out.write_file(rel, chunks(), int(row["file_size"]), durable=durable)
    got, _ = hasher.finish()
    if got != row["checksum"]:
        out.delete(rel)
        raise ExportError(f"{rel}: its bytes do not match the manifest checksum (batch {row['batch_id']}); "
                          f"the file was not exported")
    return valid
