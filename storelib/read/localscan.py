"""``range`` and ``keys`` answered in this process, for stores small enough that a JVM would cost
more than the scan: the same segment scan (``rangescan.segment_messages``) and key lookup
(``keylookup.lookup_keys_local``) the Spark plans run in their tasks, on the driver.

``local_scan_bytes`` says how many commitlog bytes a range would read (after pruning by the
manifest's time statistics): the query command runs locally below ``LOCAL_SCAN_BYTES``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from ..format.config import StoreConfig
    from ..io.storage import Store
    from ..table.snapshots import StoreSnapshot
    from ..table.storefiles import SnapshotInfo, StoreFiles

__all__ = ["LOCAL_SCAN_BYTES", "local_scan_bytes", "scan_range_local", "lookup_keys_here"]

# A few hundred MB of records decode in seconds in one process; a JVM start alone costs 10-40 s.
LOCAL_SCAN_BYTES = 256 << 20


def _open(store_uri: str, as_of_batch: str | int | None, config: StoreConfig | None,
          snapshot: StoreSnapshot | None = None) -> tuple[Store, StoreFiles, SnapshotInfo]:
    from ..io.storage import Store
    from ..table.storefiles import open_files
    store = Store(store_uri)
    files, info = open_files(store, as_of_batch, config, snapshot)
    return store, files, info


def local_scan_bytes(store_uri: str, begin: int | None = None, end: int | None = None,
                     as_of_batch: str | int | None = None, config: StoreConfig | None = None,
                     snapshot: StoreSnapshot | None = None) -> int:
    """Valid commitlog bytes of the segments a range scan of [begin, end] reads (``snapshot``: the
    one the command opened, ``table.snapshots.open_snapshot``; else opened here)."""
    from .rangescan import prune_segments
    _store, files, info = _open(store_uri, as_of_batch, config, snapshot)
    return sum(int(s.valid) for s in prune_segments(files, info, begin, end))


def scan_range_local(store_uri: str, begin: int | None = None, end: int | None = None,
                     topic: str | list[str] | None = None, as_of_batch: str | int | None = None,
                     config: StoreConfig | None = None, snapshot: StoreSnapshot | None = None) -> pa.Table:
    """The rows ``rangescan.scan_range`` returns (MESSAGE_SCHEMA), in commitlog order."""
    from .queuemins import queue_minimums
    from .rangescan import MESSAGE_SCHEMA, prune_segments, segment_messages
    from ..table.expired import explained
    store, files, info = _open(store_uri, as_of_batch, config, snapshot)
    topics = None if topic is None else ({topic} if isinstance(topic, str) else set(topic))
    mins = queue_minimums(files)
    with explained(store, files.expired):
        parts = [t for seg in prune_segments(files, info, begin, end)
                 for t in segment_messages(store, seg, begin, end, topics, mins=mins)]
    return pa.concat_tables(parts) if parts else MESSAGE_SCHEMA.empty_table()


def lookup_keys_here(store_uri: str, keys: pa.Table, as_of_batch: str | int | None = None,
                     config: StoreConfig | None = None, snapshot: StoreSnapshot | None = None) -> pa.Table:
    """The rows ``keylookup.lookup_keys`` returns, computed in this process."""
    from .keylookup import lookup_keys_local
    from .rangescan import MESSAGE_SCHEMA
    out = lookup_keys_local(store_uri, keys, as_of_batch, config, snapshot)
    if out is not None:
        return out
    query_cols = [("query_topic", pa.string()), ("query_key", pa.string()), ("query_begin", pa.int64()),
                  ("query_end", pa.int64())]
    return pa.schema(query_cols + list(zip(MESSAGE_SCHEMA.names, MESSAGE_SCHEMA.types))).empty_table()
