"""The Delta tables under ``<store>/_rocketlake/``: what the store holds, batch by batch.

* ``_rocketlake/manifest``: one row per file version a batch wrote (``action = add``) or removed
  (``action = remove``): kind, relative path, base offset, valid bytes, counts, offset and store
  time ranges, sha256 of the valid bytes, the batch that wrote it, and (``detail``) kind-specific
  facts such as an index file's header.
* ``_rocketlake/checkpoints``: one row per committed batch: batch id and sequence number, max
  commitlog offset, next offset of every topic/queue, the three checkpoint-file timestamps,
  counts, wall time, the input's fingerprint and the store's file-shaping configuration.

A batch becomes visible when its checkpoint row is committed: that Delta commit is the atomic
switch. Manifest rows of a batch without a checkpoint row are ignored by every reader. Both
commits are conditional on the table versions read when the batch was planned, so of two
concurrent writers exactly one commits (the other fails before leaving a row anywhere).

The tables are written with ``deltalake`` (delta-rs) from the driver: plain Delta tables that
Spark with delta-spark reads too (``spark.read.format("delta").load(store + "/_rocketlake/manifest")``).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pyarrow as pa

from . import storage

META_DIR = "_rocketlake"
MANIFEST_DIR = f"{META_DIR}/manifest"
CHECKPOINTS_DIR = f"{META_DIR}/checkpoints"
STAGING_DIR = f"{META_DIR}/staging"

MANIFEST_SCHEMA = pa.schema([
    ("batch_id", pa.string()),
    ("batch_seq", pa.int64()),
    ("action", pa.string()),            # add | remove
    ("kind", pa.string()),              # commitlog | consumequeue | index | checkpoint
    ("path", pa.string()),              # relative to the store root
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("base_offset", pa.int64()),        # commitlog: file offset; consumequeue: first unit * 20
    ("file_size", pa.int64()),
    ("valid_bytes", pa.int64()),
    ("count", pa.int64()),              # records / units / index entries
    ("min_offset", pa.int64()),         # commitlog: first record offset; cq: first queue offset;
    ("max_offset", pa.int64()),         # index: begin/end phy offset
    ("min_store_ts", pa.int64()),
    ("max_store_ts", pa.int64()),
    ("checksum", pa.string()),          # sha256 of bytes [0, valid_bytes)
    ("staged_path", pa.string()),       # where the batch staged it (publish is redone from here)
    ("detail", pa.string()),            # JSON: index header, reason of a removal, ...
    ("committed_at", pa.int64()),
])

QUEUE_OFFSETS_TYPE = pa.list_(pa.struct([("topic", pa.string()), ("queue_id", pa.int32()),
                                          ("max_offset", pa.int64())]))

CHECKPOINTS_SCHEMA = pa.schema([
    ("batch_id", pa.string()),
    ("batch_seq", pa.int64()),
    ("operation", pa.string()),         # ingest | import | expire
    ("committed_at", pa.int64()),
    ("input_fingerprint", pa.string()),
    ("messages", pa.int64()),
    ("bytes", pa.int64()),
    ("index_entries", pa.int64()),
    ("total_messages", pa.int64()),
    ("min_phy_offset", pa.int64()),
    ("max_phy_offset", pa.int64()),
    ("queue_offsets", QUEUE_OFFSETS_TYPE),
    ("physic_msg_timestamp", pa.int64()),
    ("logics_msg_timestamp", pa.int64()),
    ("index_msg_timestamp", pa.int64()),
    ("min_store_ts", pa.int64()),
    ("max_store_ts", pa.int64()),
    ("wall_time_ms", pa.int64()),
    ("config", pa.string()),
    ("detail", pa.string()),
])


class ConcurrentWriteError(RuntimeError):
    """Another batch committed since this one was planned."""


@dataclass
class TableVersions:
    manifest: int | None
    checkpoints: int | None


@dataclass
class Snapshot:
    """The store as of one committed batch: its checkpoint row and its live files."""
    batch: dict | None                       # checkpoint row (None: nothing committed)
    files: dict = field(default_factory=dict)  # path -> manifest row (action add, latest version)
    versions: TableVersions | None = None
    batches: list = field(default_factory=list)  # every committed checkpoint row, in order

    @property
    def batch_seq(self) -> int:
        return self.batch["batch_seq"] if self.batch else 0

    def of_kind(self, kind: str) -> list:
        return sorted((r for r in self.files.values() if r["kind"] == kind), key=lambda r: r["path"])


def _table_uri(store: storage.Store, rel: str) -> str:
    return store.uri_of(rel) if not store.local else store.path(rel)


def _open(store: storage.Store, rel: str, version: int | None = None):
    from deltalake import DeltaTable
    uri = _table_uri(store, rel)
    opts = storage.delta_storage_options(store.uri)
    try:
        if not DeltaTable.is_deltatable(uri, storage_options=opts):
            return None
    except Exception:  # noqa: BLE001 - unreachable storage reports as "no table"
        return None
    dt = DeltaTable(uri, storage_options=opts)
    if version is not None:
        dt.load_as_version(version)
    return dt


def _read_rows(dt) -> list:
    if dt is None:
        return []
    return dt.to_pyarrow_table().to_pylist()


def load_snapshot(store: storage.Store, as_of_batch: str | int | None = None) -> Snapshot:
    """Latest committed state (or the one of ``as_of_batch``: a batch id or sequence number)."""
    ck = _open(store, CHECKPOINTS_DIR)
    mf = _open(store, MANIFEST_DIR)
    versions = TableVersions(mf.version() if mf else None, ck.version() if ck else None)
    batches = sorted(_read_rows(ck), key=lambda r: r["batch_seq"])
    if as_of_batch is not None:
        sel = [b for b in batches if b["batch_id"] == str(as_of_batch) or str(b["batch_seq"]) == str(as_of_batch)]
        if not sel:
            raise KeyError(f"no committed batch {as_of_batch!r} in {store.uri}")
        upto = sel[-1]["batch_seq"]
        batches_visible = [b for b in batches if b["batch_seq"] <= upto]
    else:
        batches_visible = batches
    if not batches_visible:
        return Snapshot(None, {}, versions, [])
    committed = {b["batch_id"]: b["batch_seq"] for b in batches_visible}
    files: dict = {}
    rows = [r for r in _read_rows(mf) if committed.get(r["batch_id"]) == r["batch_seq"]]
    rows.sort(key=lambda r: (r["batch_seq"], r["committed_at"]))
    for r in rows:
        if r["action"] == "add":
            files[r["path"]] = r
        else:
            files.pop(r["path"], None)
    return Snapshot(batches_visible[-1], files, versions, batches_visible)


def commit(store: storage.Store, versions: TableVersions, manifest_rows: list, checkpoint_row: dict,
           fault=None) -> None:
    """Conditional appends: manifest rows first, then the checkpoint row (the switch)."""
    from deltalake import write_deltalake, CommitProperties
    from deltalake.exceptions import CommitFailedError
    opts = storage.delta_storage_options(store.uri)
    props = CommitProperties(max_commit_retries=0,
                             custom_metadata={"rocketlake.batch_id": checkpoint_row["batch_id"],
                                              "rocketlake.operation": checkpoint_row["operation"]})
    for rel, rows, schema, version, point in (
            (MANIFEST_DIR, manifest_rows, MANIFEST_SCHEMA, versions.manifest, "between-delta-tables"),
            (CHECKPOINTS_DIR, [checkpoint_row], CHECKPOINTS_SCHEMA, versions.checkpoints, None)):
        table = pa.Table.from_pylist(rows, schema=schema)
        dt = _open(store, rel, version) if version is not None else None
        if version is None and _open(store, rel) is not None:
            raise ConcurrentWriteError(f"{rel} was created by another writer since this batch was planned")
        try:
            if dt is None:
                write_deltalake(_table_uri(store, rel), table, mode="append", storage_options=opts,
                                commit_properties=props)
            else:
                write_deltalake(dt, table, mode="append", commit_properties=props)
        except CommitFailedError as e:
            raise ConcurrentWriteError(f"another writer committed to {rel} since this batch was planned "
                                       f"({e})") from None
        except Exception as e:  # noqa: BLE001 - table creation races surface as several errors
            if "already exists" in str(e).lower() or "version" in str(e).lower():
                raise ConcurrentWriteError(f"another writer committed to {rel} ({e})") from None
            raise
        if point and fault:
            fault(point)


def history(store: storage.Store) -> list:
    """Delta history of both tables: version, time, operation, batch id."""
    out = []
    for name, rel in (("manifest", MANIFEST_DIR), ("checkpoints", CHECKPOINTS_DIR)):
        dt = _open(store, rel)
        if dt is None:
            continue
        for h in dt.history():
            out.append({"table": name, "version": h.get("version"), "timestamp": h.get("timestamp"),
                        "operation": h.get("operation"),
                        "batch_id": h.get("rocketlake.batch_id") or (h.get("userMetadata") or ""),
                        "rocketlake_operation": h.get("rocketlake.operation")})
    return sorted(out, key=lambda r: (r["timestamp"] or 0, r["table"]))


def now_ms() -> int:
    return int(time.time() * 1000)


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
