"""Reading the rows of the Delta tables under ``_rocketlake/`` (``storelib.table.manifest`` decides
what they mean): a table version's data files, named by its log and checked to lie inside the
table, read with pyarrow.

* ``read_rows``: every row of a table version.
* ``batch_rows_lean``: the checkpoints table's rows with ``queue_offsets`` in the latest batch's
  alone (a writer's read: the column lists every queue a batch changed, 160,000 at 10^10
  messages when every batch continues every queue, so reading it for every row grows with the
  batches); ``batch_row_whole`` reads another batch's from its data file.
* ``as_read``, ``batch_as_read``: rows a writer built, as a read of what it committed gives them back.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import pyarrow as pa

from ..errors import StoreError, StorePathError
from ..format.paths import CHECKPOINTS_DIR, MANIFEST_DIR
from ..io import storage
from . import deltalog
from .rows import BatchRow

__all__ = ["history", "QUEUE_OFFSETS", "SOURCE", "table_uri", "open_table", "read_rows", "read_rows_where",
           "batch_rows_lean", "batch_row_whole", "as_read", "batch_as_read"]

QUEUE_OFFSETS = "queue_offsets"
SOURCE = "__filename"          # (pyarrow's name for the data file a row was read from)


def table_uri(store: storage.Store, rel: str) -> str:
    return store.path(rel) if store.os_paths else store.uri_of(rel)


def open_table(store: storage.Store, rel: str, version: int | None = None) -> Any:
    """The deltalake ``DeltaTable`` at ``rel`` (``MANIFEST_DIR`` / ``CHECKPOINTS_DIR``), at
    ``version`` if given; None without a table (or unreachable storage)."""
    from deltalake import DeltaTable
    uri = table_uri(store, rel)
    if store.os_paths:
        store.list_files(f"{rel}/_delta_log")    # StorePathError if a log file links out of the store
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


def read_rows(dt: Any) -> list[dict[str, Any]]:
    """Every row of the table version ``dt`` holds (``[]`` for None), committed or not: its Parquet
    files (from the Delta log) read with pyarrow. (deltalake's own to_pyarrow_table leaves threads that abort the interpreter at exit.)"""
    if dt is None:
        return []
    uris = _check_table_files(dt, dt.file_uris())
    if not uris:
        return []
    import pyarrow.parquet as pq
    fs, _ = storage.filesystem(uris[0])
    rows: list[dict[str, Any]] = pq.read_table([storage.filesystem(u)[1] for u in uris], filesystem=fs).to_pylist()
    return rows


def read_rows_where(dt: Any, where: Any, columns: list[str], schema: pa.Schema) -> list[dict[str, Any]]:
    """``columns`` of the rows of the table version ``dt`` (``[]`` for None) that the pyarrow
    expression ``where`` admits, read as ``schema`` (the table's: a file written before a column
    was added gives nulls): row groups whose statistics exclude it are not decoded (a rare look
    at one batch's rows, not a reader's whole read)."""
    uris = _check_table_files(dt, dt.file_uris()) if dt is not None else []
    if not uris:
        return []
    import pyarrow.dataset as pads
    fs, _ = storage.filesystem(uris[0])
    data = pads.dataset([storage.filesystem(u)[1] for u in uris], schema=schema, filesystem=fs, format="parquet")
    rows: list[dict[str, Any]] = data.to_table(columns=columns, filter=where).to_pylist()
    return rows


def batch_rows_lean(dt: Any) -> list[dict[str, Any]]:
    """The rows of the checkpoints-table version ``dt`` holds, ``queue_offsets`` only in the
    latest batch's (the others lack the key) and ``SOURCE`` in each: the data file holding the
    row (``batch_row_whole`` reads another batch's from it). A table where two rows are one batch
    (never written: each batch's row is its own commit) is read whole."""
    uris = _check_table_files(dt, dt.file_uris()) if dt is not None else []
    if not uris:
        return []
    import pyarrow.dataset as pads
    fs, _ = storage.filesystem(uris[0])
    uri_of = {storage.filesystem(u)[1]: u for u in uris}
    data = pads.dataset(list(uri_of), filesystem=fs, format="parquet")
    if QUEUE_OFFSETS not in data.schema.names:
        return read_rows(dt)
    rows: list[dict[str, Any]] = data.to_table(
        columns=[n for n in data.schema.names if n != QUEUE_OFFSETS] + [SOURCE]).to_pylist()
    keys = [(r["batch_id"], r["batch_seq"]) for r in rows]
    if len(set(keys)) != len(keys):
        return read_rows(dt)
    latest = max(r["batch_seq"] for r in rows)
    for r in rows:
        r[SOURCE] = uri_of[r[SOURCE]]
        if r["batch_seq"] == latest:
            r[QUEUE_OFFSETS] = _queue_offsets_of(r)
    return rows


def batch_row_whole(row: BatchRow, source: str) -> BatchRow:
    """``row`` (read by ``batch_rows_lean`` without ``queue_offsets``) with them, from its data
    file ``source``; Arrow's error for a file that cannot be read."""
    return BatchRow.of({**row, QUEUE_OFFSETS: _queue_offsets_of({**row, SOURCE: source})})


def _queue_offsets_of(row: Mapping[str, Any]) -> Any:
    """The row's ``queue_offsets`` from its data file: the row groups whose batch-sequence
    statistics admit it (a merged file holds many batches, ``storelib.table.ckmerge``), the row
    picked in Arrow before any Python object is made."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    fs, path = storage.filesystem(row[SOURCE])
    f = pq.ParquetFile(path, filesystem=fs)
    at = f.schema_arrow.get_field_index("batch_seq")
    groups = []
    for g in range(f.metadata.num_row_groups):
        st = f.metadata.row_group(g).column(at).statistics if at >= 0 else None
        if st is None or not st.has_min_max or st.min <= row["batch_seq"] <= st.max:
            groups.append(g)
    got = f.read_row_groups(groups, columns=["batch_id", "batch_seq", QUEUE_OFFSETS])
    got = got.filter(pc.and_(pc.equal(got.column("batch_id"), row["batch_id"]),
                             pc.equal(got.column("batch_seq"), row["batch_seq"])))
    mine = got.column(QUEUE_OFFSETS).to_pylist()
    if len(mine) != 1:
        raise ValueError(f"{row[SOURCE]}: {len(mine)} rows of batch {row['batch_id']!r} (seq {row['batch_seq']}), "
                         f"where its read found one")
    return mine[0]


def _check_table_files(dt: Any, uris: list[str]) -> list[str]:
    """The data files a Delta log names must lie inside the table's directory (an ``add`` path
    with ``..``, an absolute path or a symlink out is refused, never read)."""
    from urllib.parse import unquote, urlparse
    root = dt.table_uri.rstrip("/")
    local = storage.is_local(root)
    base = os.path.realpath(unquote(urlparse(root).path) if root.startswith("file:") else root) if local else root
    for u in uris:
        if local:
            p = storage.local_path(u)
            inside = os.path.realpath(p).startswith(base.rstrip("/") + "/")
        else:
            inside = u.startswith(base + "/") and ".." not in u[len(base) + 1:].split("/")
        if not inside:
            raise StorePathError(f"Delta table {root}: its log names the data file {u}, which is (or "
                                         f"links to) a path outside the table directory; refusing to read it")
    return uris


_PYTHON_TYPE = {pa.string(): str, pa.int64(): int, pa.int32(): int}


def as_read(rows: list[Any], table: pa.Table) -> list[Any]:
    """``rows`` as a read of ``table`` (built from them) gives them back: ``rows`` themselves when
    each has every column and no other, each value None or of its column's Python type exactly
    (Arrow took them as they are: ``from_pylist`` raised on a value out of range); else
    ``to_pylist`` (a bool, a numpy integer, a missing column: Arrow's value)."""
    columns = [(f.name, _PYTHON_TYPE.get(f.type)) for f in table.schema]
    names = {n for n, _ in columns}
    if all(t is not None for _, t in columns) and all(
            r.keys() == names and all(r[n] is None or type(r[n]) is t for n, t in columns) for r in rows):
        return rows
    back: list[Any] = table.to_pylist()
    return back


_OFFSET_TYPES = {"topic": str, "queue_id": int, "max_offset": int}


def batch_as_read(row: Mapping[str, Any], table: pa.Table) -> list[Any]:
    """[the checkpoint row] as a read of ``table`` (built from it) gives it back: its own values,
    in the schema's order, when each is None or of its column's Python type exactly (``as_read``)
    and its queue offsets are plain entries of the struct's fields and types (the 160,000 of a
    batch at 10^10 messages are then not copied); else ``to_pylist``."""
    offsets = row.get(QUEUE_OFFSETS)
    lean = [{k: v for k, v in row.items() if k != QUEUE_OFFSETS}]
    if as_read(lean, table.drop_columns([QUEUE_OFFSETS])) is lean and QUEUE_OFFSETS in row and (
            offsets is None or type(offsets) is list and all(
                type(q) is dict and q.keys() == _OFFSET_TYPES.keys()
                and all(type(q[k]) is t for k, t in _OFFSET_TYPES.items()) for q in offsets)):
        return [{n: row[n] for n in table.schema.names}]
    back: list[Any] = table.to_pylist()
    return back


def history(store: storage.Store) -> list[Any]:
    """Delta history of both tables: version, time, operation, batch id."""
    out = []
    for name, rel in (("manifest", MANIFEST_DIR), ("checkpoints", CHECKPOINTS_DIR)):
        failure = None
        try:
            dt = open_table(store, rel)
            hist = dt.history() if dt is not None else []
        except StoreError as e:
            failure = e
        except Exception as e:  # noqa: BLE001 - a damaged Delta log
            failure = deltalog.corrupt(store, rel, e)
        dt = None
        if failure is not None:
            raise failure.with_traceback(None)
        for h in hist:
            out.append({"table": name, "version": h.get("version"), "timestamp": h.get("timestamp"),
                        "operation": h.get("operation"),
                        "batch_id": h.get("rocketlake.batch_id") or (h.get("userMetadata") or ""),
                        "rocketlake_operation": h.get("rocketlake.operation")})
    return sorted(out, key=lambda r: (r["timestamp"] or 0, r["table"]))
