"""Merging a Delta table's data files (the checkpoints table's and the manifest table's), so a
read of either and its Delta checkpoints stay bounded whatever the number of batches.

Each batch's commit appends one Parquet file to each table: after 10,000 batches a read opens
10,000 files (~0.4 ms each), and every Delta checkpoint (every 100 versions) lists an ``add``
action per live file, so its upload grows with the batches (the periodic spike a small batch on
an object store paid). After a batch's commit (``manifest.commit``, still under the writer's
lease), once ``MERGE_MIN_FILES`` files of one size tier of a table hold earlier batches' rows,
they are replaced by one file holding the same rows, in batch order (each file's rows in their
order): one conditional Delta commit on that table, ``dataChange = false`` (every version from
it on reads the same rows; the versions before it read their own files until a vacuum). Tiers:
below ``MERGE_BASE_BYTES``, then each ``MERGE_MIN_FILES`` times larger; files of
``MERGE_TARGET_BYTES`` or more are never merged again, and a merge takes at most that many bytes.
So a row is copied about once per tier (two or three times), not at every merge, and a table has
at most ``MERGE_MIN_FILES`` files a tier plus one per ``MERGE_TARGET_BYTES`` of rows. The latest
batch's file is never merged: a writer's read takes its ``queue_offsets`` from its own small file
(``tableread.batch_rows_lean``). A file without batch-sequence statistics (the manifest table's
compacted file, ``manifest._compact``) is left as it is. The manifest table's merge takes files of
at most ``MERGE_SHARE`` of the batch's record bytes (``budget``), so that it never uploads more at
once than a share of what the batch adds; a small store whose batches rewrite most of its rows
is bounded by its compaction instead (``manifest.compaction_due``). A batch that writes no
records (an expiry, a repair) may merge the lowest tier's files (``share``).

What a merge needs of the table (its files, their sizes and batch-sequence ranges: ``files_of``)
comes from the commit's own write: the Delta table object after it holds the new version's
``add`` actions, so deciding costs no second open of the table.

Statistics: the tables are created with ``TABLE_PROPERTIES`` (``delta.dataSkippingStatsColumns
= batch_seq``): an ``add`` carries the minimum and maximum of the batch sequence only, the one
column a read prunes files on (``due``); without it every column's were kept, the longest those of
``config``, ``detail`` and ``input_fingerprint`` (~1.3-1.7 KB of a ~2 KB ``add``). Tables of stores
created before keep every column's statistics in the files their batches append (their merged
files carry the batch sequence's only): nothing is rewritten.

A merged file's row groups hold at most ``ROW_GROUP_ROWS`` rows and about ``ROW_GROUP_OFFSETS``
queue offsets, and its ``add`` action records the batch sequence range of its rows: reading one
batch's ``queue_offsets`` (``--as-of-batch``) decodes the row group holding it, not the file.
The rows are copied a record batch at a time (memory bounded by a row group, not the file).

Kill points (``storelib.runtime.faults.MERGE_POINTS`` and ``MANIFEST_MERGE_POINTS``):
``before-<table>-merge``, ``mid-<table>-merge`` (the merged file in the table, no version names
it), ``after-<table>-merge``, ``<table>`` ``checkpoints`` or ``manifest``.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable

import pyarrow as pa

from ..format.paths import CHECKPOINTS_DIR, MANIFEST_DIR
from ..io import storage
from . import deltacommit
from .tableread import table_uri

__all__ = ["merge_tables", "share", "MERGE_MIN_FILES", "MERGE_BASE_BYTES", "MERGE_TARGET_BYTES", "ROW_GROUP_ROWS", "ROW_GROUP_OFFSETS",
           "MERGE_SHARE", "TABLE_PROPERTIES", "merge", "due", "files_of", "writer"]

MERGE_MIN_FILES = 32
MERGE_BASE_BYTES = 1 << 20
MERGE_TARGET_BYTES = 64 << 20
ROW_GROUP_ROWS = 1024
ROW_GROUP_OFFSETS = 1 << 20
# A merge of the manifest table's files rewrites at most this share of the batch's record bytes
# (``merge``'s ``budget``): its rows are ~20-40 KB a small batch and barely compress across
# batches, so 32 of them would upload ~0.6 MB at once, a periodic spike of ~1.5 times a 1,000-message
# batch (measured on S3Proxy). The checkpoints table's rows compress ~10 times across batches
# (32 small batches' merge: 20-50 KB) and are merged without one.
MERGE_SHARE = 0.1
_SEQ = "batch_seq"
_OFFSETS = "queue_offsets"
# What a new table of either kind is created with: statistics of the batch sequence alone
TABLE_PROPERTIES = {"delta.dataSkippingStatsColumns": _SEQ}
_NAMES = {CHECKPOINTS_DIR: "checkpoints", MANIFEST_DIR: "manifest"}      # (in the kill points' names)
_FILE_COLUMNS = ("path", "size_bytes", f"min.{_SEQ}", f"max.{_SEQ}")


def files_of(dt: Any) -> pa.Table:
    """The data files of the table version ``dt`` as ``due`` reads them: path, bytes and the
    batch-sequence range of each (``min.batch_seq`` / ``max.batch_seq``, where its ``add`` has them)."""
    adds = pa.table(dt.get_add_actions(flatten=True))
    return adds.select([c for c in _FILE_COLUMNS if c in adds.column_names])


def merge(store: storage.Store, rel: str, version: int, files: pa.Table | None, batch_id: str, latest_seq: int,
          schema: pa.Schema, fault: Callable[[str], None] | None, durable: bool, lease: Any,
          budget: int | None = None) -> bool:
    """The merge of the table at ``rel`` (``CHECKPOINTS_DIR`` or ``MANIFEST_DIR``; ``schema``:
    its) after the commit of batch ``batch_id`` (sequence ``latest_seq``) made its ``version``,
    whose data files are ``files`` (``files_of``; None: unknown, no merge), when ``due`` (within
    ``budget`` bytes): one conditional commit on top of ``version``, the writer's ``lease``
    checked first; whether it went in."""
    todo = due(files, latest_seq, budget) if files is not None else None
    if todo is None:
        return False
    name = _NAMES[rel]
    if fault:
        fault(f"before-{name}-merge")
    if lease is not None:
        lease.check()
    mine = deltacommit.commit_token()
    write = writer(table_uri(store, rel), todo, schema, {"rocketlake.batch_id": batch_id,
                                                          "rocketlake.operation": "merge", "userMetadata": batch_id,
                                                          **mine})
    deltacommit.commit_version(store, rel, version, write, durable, fault, f"mid-{name}-merge", mine=mine)
    if fault:
        fault(f"after-{name}-merge")
    return True


def merge_tables(store: storage.Store, versions: dict[str, int], files: dict[str, pa.Table],
                 schemas: dict[str, pa.Schema], checkpoint_row: Any, compacted: bool,
                 fault: Callable[[str], None] | None, durable: bool, lease: Any) -> dict[str, bool]:
    """After a batch's commit (``checkpoint_row``), each table's ``merge`` when due, at the
    ``versions`` the commit made, with the data ``files`` its writes left: the manifest table's
    unless the commit just ``compacted`` it into one, and within the batch's ``share`` (none
    recorded: no limit). A merge that fails leaves its table as it was: the
    batch is committed, and a later commit merges (``LeaseLost``: never). Whether each went in."""
    merged = {MANIFEST_DIR: False, CHECKPOINTS_DIR: False}
    for rel in (MANIFEST_DIR, CHECKPOINTS_DIR):
        if rel == MANIFEST_DIR and compacted:
            continue
        budget = None if rel != MANIFEST_DIR else share(checkpoint_row.get("bytes"))
        try:
            merged[rel] = merge(store, rel, versions[rel], files.get(rel), checkpoint_row["batch_id"],
                                checkpoint_row["batch_seq"], schemas[rel], fault, durable, lease, budget)
        except Exception:  # noqa: BLE001 - the batch is committed; a later commit merges
            pass
    return merged


def share(record_bytes: int | None) -> int | None:
    """The bytes of manifest files a batch that wrote ``record_bytes`` may merge (None: no limit):
    ``MERGE_SHARE`` of them; a batch that writes no records (an expiry, a repair: 0) the lowest
    tier's ``MERGE_MIN_FILES`` files (below ``MERGE_BASE_BYTES`` each). Its rows are a few, so a
    share of them would never admit a merge, and a run of expiries alone would add a file each
    until a compaction; they are not the small batches whose upload the share bounds."""
    if record_bytes is None:
        return None
    return int(MERGE_SHARE * record_bytes) if record_bytes > 0 else MERGE_MIN_FILES * MERGE_BASE_BYTES


def due(files: pa.Table, latest_seq: int, budget: int | None = None) -> list[tuple[str, int]] | None:
    """(path, bytes) of the data files ``files`` (``files_of``) to merge, in batch order:
    ``MERGE_MIN_FILES`` or more of the lowest size tier that has that many, among those smaller
    than ``MERGE_TARGET_BYTES`` whose rows are all of batches before ``latest_seq`` (a file
    without batch-sequence statistics is left as it is), at most ``MERGE_TARGET_BYTES`` (and
    ``budget``) bytes of them; None when no tier has enough."""
    cap = MERGE_TARGET_BYTES if budget is None else min(MERGE_TARGET_BYTES, budget)
    lo, hi = f"min.{_SEQ}", f"max.{_SEQ}"
    if lo not in files.column_names or hi not in files.column_names:
        return None
    tiers: dict[int, list[tuple[int, str, int]]] = {}
    for p, n, a, b in zip(files.column("path").to_pylist(), files.column("size_bytes").to_pylist(),
                          files.column(lo).to_pylist(), files.column(hi).to_pylist()):
        if n < MERGE_TARGET_BYTES and a is not None and b is not None and b < latest_seq:
            tiers.setdefault(_tier(n), []).append((a, p, n))
    for tier in sorted(tiers):
        todo, total = [], 0
        for _, p, n in sorted(tiers[tier]):
            if total + n > cap:
                break
            todo.append((p, n))
            total += n
        if len(todo) >= MERGE_MIN_FILES:
            return todo
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
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    def write(dt: Any, hooks: Any = None) -> None:
        root = dt.table_uri.rstrip("/")
        unknown = set()
        name = f"part-00000-{uuid.uuid4()}-c000.merged.snappy.parquet"
        fs, path = storage.filesystem(f"{root}/{name}")
        rows, seqs = 0, []                    # (seqs: each record batch's least and greatest batch sequence)
        buf: list[pa.RecordBatch] = []
        held = [0, 0]                         # rows, queue offsets in ``buf``
        # a row at a time where rows hold queue offsets (row groups by their size), else a group's
        step = 1 if _OFFSETS in schema.names else ROW_GROUP_ROWS
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
                for rb in src.iter_batches(batch_size=step):
                    rb = _as_schema(rb, schema)
                    seqs += [v for v in pc.min_max(rb.column(_SEQ)).as_py().values() if v is not None]
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
        stats = json.dumps({"numRecords": rows, "minValues": {_SEQ: min(seqs)}, "maxValues": {_SEQ: max(seqs)},
                            "nullCount": {}})
        actions: list[Any] = [AddAction(name, size, {}, now, False, stats)]
        actions += [RemoveAction(p, False, now, n) for p, n in files]
        props = CommitProperties(max_commit_retries=0, custom_metadata=custom_metadata)
        kw = {} if hooks is None else {"post_commithook_properties": hooks}
        dt.create_write_transaction(actions, mode="append", schema=schema, commit_properties=props, **kw)
    return write
