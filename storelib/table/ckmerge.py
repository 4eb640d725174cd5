"""Merging the checkpoints table's data files, so a writer's read of it stays flat in history.

Each batch's checkpoint row is its own Delta commit and so its own Parquet file: after 10,000
batches a read of the table opens 10,000 files (~0.4 ms each), however few columns it reads.
After a batch's commit (``manifest.commit``, still under the writer's lease), once
``MERGE_MIN_FILES`` files of one size tier hold earlier batches' rows, they are replaced by one
file holding the same rows, in batch order: one conditional Delta commit on the checkpoints
table, ``dataChange = false`` (every version from it on reads the same rows; the versions before
it read their own files until a vacuum). Tiers: below ``MERGE_BASE_BYTES``, then each
``MERGE_MIN_FILES`` times larger; files of ``MERGE_TARGET_BYTES`` or more are never merged again,
and a merge takes at most that many bytes. So a row is copied about once per tier (two or three
times), not at every merge, and the table has at most ``MERGE_MIN_FILES`` files a tier plus one
per ``MERGE_TARGET_BYTES`` of rows, whatever the number of batches (a store whose batches change
160,000 queues writes ~0.1-0.5 MB a row: a few dozen files after 10,000 batches). The latest
batch's row is never merged: a writer's read takes its ``queue_offsets`` from its own small file
(``tableread.batch_rows_lean``).

A merged file's row groups hold at most ``ROW_GROUP_ROWS`` rows and about ``ROW_GROUP_OFFSETS``
queue offsets, and its ``add`` action records the batch sequence range of its rows: reading one
batch's ``queue_offsets`` (``--as-of-batch``) decodes the row group holding it, not the file.
The rows are copied a record batch at a time (memory bounded by a row group, not the file).

Kill points (``storelib.runtime.faults.MERGE_POINTS``): ``before-checkpoints-merge``,
``mid-checkpoints-merge`` (the merged file in the table, no version names it), and
``after-checkpoints-merge``.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable, Mapping

import pyarrow as pa

from ..errors import StoreError
from ..format.paths import CHECKPOINTS_DIR
from ..io import storage
from . import deltacommit, deltalog
from .tableread import open_table, table_uri

__all__ = ["MERGE_MIN_FILES", "MERGE_BASE_BYTES", "MERGE_TARGET_BYTES", "ROW_GROUP_ROWS", "ROW_GROUP_OFFSETS", "merge", "due", "writer"]

MERGE_MIN_FILES = 32
MERGE_BASE_BYTES = 1 << 20
MERGE_TARGET_BYTES = 64 << 20
ROW_GROUP_ROWS = 1024
ROW_GROUP_OFFSETS = 1 << 20
_SEQ = "batch_seq"
_OFFSETS = "queue_offsets"


def merge(store: storage.Store, version: int, checkpoint_row: Mapping[str, Any], schema: pa.Schema,
          fault: Callable[[str], None] | None, durable: bool, lease: Any) -> bool:
    """The checkpoints table's merge after the batch's commit at ``version`` (its row
    ``checkpoint_row``; ``schema``: the table's), when ``due``: one conditional commit on top of
    ``version``, the writer's ``lease`` checked first; whether it went in."""
    failure = None
    try:
        dt = open_table(store, CHECKPOINTS_DIR, version)
        files = due(dt, checkpoint_row["batch_seq"]) if dt is not None else None
    except StoreError as e:
        failure = e
    except Exception as e:  # noqa: BLE001 - deltalake errors of a damaged log: no merge
        failure = deltalog.corrupt(store, CHECKPOINTS_DIR, e)
    dt = None
    if failure is not None:
        raise failure.with_traceback(None)
    if files is None:
        return False
    if fault:
        fault("before-checkpoints-merge")
    if lease is not None:
        lease.check()
    write = writer(table_uri(store, CHECKPOINTS_DIR), files, schema, {"rocketlake.batch_id": checkpoint_row["batch_id"],
                                                                      "rocketlake.operation": "merge",
                                                                      "userMetadata": checkpoint_row["batch_id"]})
    deltacommit.commit_version(store, CHECKPOINTS_DIR, version, write, durable, fault, "mid-checkpoints-merge")
    if fault:
        fault("after-checkpoints-merge")
    return True


def due(dt: Any, latest_seq: int) -> list[tuple[str, int]] | None:
    """(path, bytes) of the data files of the checkpoints-table version ``dt`` to merge, in batch
    order: ``MERGE_MIN_FILES`` or more of the lowest size tier that has that many, among those
    smaller than ``MERGE_TARGET_BYTES`` whose rows are all of batches before ``latest_seq`` (a
    file without batch-sequence statistics is left as it is), at most ``MERGE_TARGET_BYTES`` of
    them; None when no tier has enough."""
    adds = pa.table(dt.get_add_actions(flatten=True))
    lo, hi = f"min.{_SEQ}", f"max.{_SEQ}"
    if lo not in adds.column_names or hi not in adds.column_names:
        return None
    tiers: dict[int, list[tuple[int, str, int]]] = {}
    for p, n, a, b in zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(),
                          adds.column(lo).to_pylist(), adds.column(hi).to_pylist()):
        if n < MERGE_TARGET_BYTES and a is not None and b is not None and b < latest_seq:
            tiers.setdefault(_tier(n), []).append((a, p, n))
    for tier in sorted(tiers):
        files, total = [], 0
        for _, p, n in sorted(tiers[tier]):
            if total + n > MERGE_TARGET_BYTES:
                break
            files.append((p, n))
            total += n
        if len(files) >= MERGE_MIN_FILES:
            return files
    return None


def _tier(size: int) -> int:
    tier, bound = 0, MERGE_BASE_BYTES
    while size >= bound:
        tier, bound = tier + 1, bound * MERGE_MIN_FILES
    return tier


def _as_schema(rb: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``rb`` with ``schema``'s columns (a column a file written before it was added: nulls)."""
    cols = [rb.column(f.name).cast(f.type) if f.name in rb.schema.names else pa.nulls(rb.num_rows, f.type)
            for f in schema]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def writer(table: str, files: list[tuple[str, int]], schema: pa.Schema, custom_metadata: dict[str, str]
           ) -> Callable[..., None]:
    """The ``write(dt, hooks)`` of the merge's commit (``deltacommit.commit_version``): the rows of
    ``files`` (``due``) of the table at ``table`` (its URI or path; ``dt`` may be a scratch copy
    of its log, ``storelib.table.deltacommit``) into one new data file of ``dt``'s table, ``add``
    it and ``remove`` them."""
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction, RemoveAction
    import pyarrow.parquet as pq

    def write(dt: Any, hooks: Any = None) -> None:
        root = dt.table_uri.rstrip("/")
        unknown = set()
        name = f"part-00000-{uuid.uuid4()}-c000.merged.snappy.parquet"
        fs, path = storage.filesystem(f"{root}/{name}")
        rows, lo, hi = 0, None, None
        buf: list[pa.RecordBatch] = []
        held = [0, 0]                         # rows, queue offsets in ``buf``
        with pq.ParquetWriter(path, schema, filesystem=fs, compression="snappy") as out:
            def flush() -> None:
                if buf:
                    t = pa.Table.from_batches(buf, schema)
                    out.write_table(t, row_group_size=t.num_rows)
                    buf.clear()
                    held[:] = [0, 0]
            for rel, _ in files:
                ffs, fpath = storage.filesystem(f"{table.rstrip('/')}/{rel}")
                src = pq.ParquetFile(fpath, filesystem=ffs)
                unknown |= set(src.schema_arrow.names) - set(schema.names)
                if unknown:
                    raise ValueError(f"{rel}: columns {sorted(unknown)} the merge does not know; not merged")
                for rb in src.iter_batches(batch_size=1):      # (a row at a time: row groups by size)
                    rb = _as_schema(rb, schema)
                    seqs = rb.column(_SEQ).to_pylist()
                    lo = min([lo, *seqs] if lo is not None else seqs)
                    hi = max([hi, *seqs] if hi is not None else seqs)
                    rows += rb.num_rows
                    offsets = len(rb.column(_OFFSETS).flatten()) if _OFFSETS in schema.names else 0
                    if buf and (held[0] + rb.num_rows > ROW_GROUP_ROWS or held[1] + offsets > ROW_GROUP_OFFSETS):
                        flush()
                    buf.append(rb)
                    held[0] += rb.num_rows
                    held[1] += offsets
            flush()
        size = fs.get_file_info(path).size
        now = int(time.time() * 1000)
        stats = json.dumps({"numRecords": rows, "minValues": {_SEQ: lo}, "maxValues": {_SEQ: hi}, "nullCount": {}})
        actions: list[Any] = [AddAction(name, size, {}, now, False, stats)]
        actions += [RemoveAction(p, False, now, n) for p, n in files]
        props = CommitProperties(max_commit_retries=0, custom_metadata=custom_metadata)
        kw = {} if hooks is None else {"post_commithook_properties": hooks}
        dt.create_write_transaction(actions, mode="append", schema=schema, commit_properties=props, **kw)
    return write
