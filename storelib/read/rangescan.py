"""Commitlog segments -> Arrow message tables; the distributed time-range scan.

The shared core of ``range``, the ``rocketmq`` data source and the batch key lookup:

* ``iter_segment_chunks``: walk one segment's valid bytes in large chunks (numba record walk),
  so a 1 GiB segment is never held whole in memory.
* ``message_table``: ``codec.decode_records`` output -> the public message columns
  (``MESSAGE_SCHEMA``): properties parsed vectorized into ``map<string,string>`` exactly like
  ``MessageDecoder.string2messageProperties`` (``properties.parse_properties``), plus
  ``tags``/``keys``/``uniq_key``.
* ``scan_range(spark, store, begin, end, topic)``: segments pruned by the manifest's min/max
  store time (all segments of a store without manifest), consecutive segments grouped into tasks
  (``task_count``), exact filter on the record's store timestamp (and topic).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..codec import messages as codec
from ..errors import CorruptStore
from ..format import commitlog as cl
from ..format.records import MESSAGE_FIELDS
from ..io.checked import read_stored
from ..codec.properties import MAP_TYPE, parse_properties
from .schema import MESSAGE_DDL  # (Spark DDL of MESSAGE_SCHEMA; re-exported)
from .pruning import prune_segments  # (re-exported)
from .queuemins import QueueMins, drop_below_minimum, queue_minimums
from .tasks import TASK_BYTES, task_count  # (re-exported)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..format.config import StoreConfig
    from ..io.protocol import Store
    from ..table.snapshots import StoreSnapshot
    from ..table.storefiles import CommitLogSegment

__all__ = ["CHUNK_BYTES", "MESSAGE_SCHEMA", "MESSAGE_DDL", "message_table", "empty_messages",
           "record_starts", "store_timestamps", "within", "time_mask", "iter_segment_chunks", "segment_messages",
           "prune_segments", "TASK_BYTES", "task_count", "scan_range"]

CHUNK_BYTES = 64 << 20

# The public message columns (records.MESSAGE_FIELDS): the record fields (codec.DECODED_SCHEMA) with the
# body as binary and the properties parsed; as Arrow here, as Spark DDL in read/schema.py.
_ARROW_TYPES = {"bigint": pa.int64(), "int": pa.int32(), "string": pa.string(), "binary": pa.binary(),
                "map<string,string>": MAP_TYPE}
MESSAGE_SCHEMA = pa.schema([(name, _ARROW_TYPES[sql]) for name, sql in MESSAGE_FIELDS])

_PASS = [n for n in MESSAGE_SCHEMA.names if n not in ("body", "properties", "tags", "keys", "uniq_key")]


def message_table(decoded: pa.Table) -> pa.Table:
    """``codec.decode_records`` output (DECODED_SCHEMA) -> MESSAGE_SCHEMA."""
    mapped, extra = parse_properties(decoded.column("properties_string").combine_chunks())
    cols = {n: decoded.column(n) for n in _PASS}
    cols["body"] = decoded.column("body").cast(pa.binary())
    cols["properties"] = mapped
    cols["tags"] = extra["TAGS"]
    cols["keys"] = extra["KEYS"]
    cols["uniq_key"] = extra["UNIQ_KEY"]
    return pa.table(cols, schema=MESSAGE_SCHEMA)


def empty_messages() -> pa.Table:
    return MESSAGE_SCHEMA.empty_table()


# ----------------------------------------------------------------------------- segments
def record_starts(buf: np.ndarray) -> tuple[np.ndarray, int, int]:
    """(starts, stop, reason) of the records of a whole segment buffer (codec.record_starts)."""
    starts, stop, reason = codec.record_starts(buf, 0, len(buf))
    return starts, int(stop), int(reason)


def store_timestamps(buf: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """STORETIMESTAMP of the records at ``starts`` (position depends on the born host width)."""
    if not len(starts):
        return np.zeros(0, np.int64)
    sys_flag = codec.gather_int(buf, starts + cl.POS_SYSFLAG, cl.SIZE_SYSFLAG)
    return codec.gather_int(buf, starts + cl.storetimestamp_offset(sys_flag), cl.SIZE_STORETIMESTAMP)


def within(values: np.ndarray, lo: int | None, hi: int | None) -> np.ndarray | None:
    """Which of ``values`` lie in [lo, hi] (inclusive; a None bound is open); None when both are."""
    if lo is None and hi is None:
        return None
    keep = np.ones(len(values), bool)
    if lo is not None:
        keep &= values >= lo
    if hi is not None:
        keep &= values <= hi
    return keep


def time_mask(buf: np.ndarray, starts: np.ndarray, begin: int | None, end: int | None) -> np.ndarray | None:
    """Which records at ``starts`` have a store time in [begin, end] (``within``); None: no bound."""
    return None if begin is None and end is None else within(store_timestamps(buf, starts), begin, end)


def iter_segment_chunks(store: Store, seg: CommitLogSegment, lo: int | None = None, hi: int | None = None,
                        chunk: int = CHUNK_BYTES) -> Iterator[tuple[np.ndarray, int, np.ndarray]]:
    """Yield (buf uint8 array, buf_base_offset, record starts in buf) over a segment's valid bytes.

    ``lo``/``hi``: optional commitlog-offset bounds; records starting outside [lo, hi] are left
    out (the walk still starts at the segment's first byte: record starts are only known by
    walking). Stops at a BLANK record (a segment's end) or the end of the valid bytes; a TOTALSIZE
    of 0 or less or an unknown magic before the valid bytes end, or a record running past them,
    is damage (those bytes were read as records by whatever set ``valid``: the manifest, a
    broker's recovery, a full segment's BLANK end), ``CorruptStore`` naming the file and
    position as ``verify`` does, never a scan that ends early in silence.
    """
    pos, valid = 0, seg.valid
    size = chunk
    while pos + cl.BLANK_SIZE <= valid:
        end = min(valid, pos + size)
        buf = np.frombuffer(read_stored(store, seg.rel, pos, end - pos), np.uint8)
        starts, stop, reason = record_starts(buf)
        if len(starts):
            keep = within(starts + (seg.base + pos), lo, hi)
            if keep is None or keep.all():
                yield buf, seg.base + pos, starts
            elif keep.any():
                yield buf, seg.base + pos, starts[keep]
        if reason == 1:
            break                                   # BLANK record: the segment's end
        need = size
        if reason == 2:                             # (its TOTALSIZE and magic are in buf)
            rec_size, magic = cl.parse_size_magic(buf, stop)
            if rec_size <= 0 or magic not in (cl.MAGIC_V1, cl.MAGIC_V2):
                raise CorruptStore(seg.rel, pos + stop, f"a zero size or an unknown magic (TOTALSIZE {rec_size}, magic "
                                                        f"{magic & 0xFFFFFFFF:#x}): the records end here, before the "
                                                        f"{valid} valid bytes")
            if end >= valid:
                raise CorruptStore(seg.rel, pos + stop, f"a record of {rec_size} bytes (TOTALSIZE) runs past the "
                                                        f"{valid} valid bytes")
            need = max(chunk, rec_size + cl.BLANK_SIZE)     # the record runs past this chunk
        if end >= valid:
            break                                   # the end of the valid bytes
        if stop == 0:
            size = max(size * 2, need)
            continue
        pos += stop
        size = max(chunk, need)
        if hi is not None and seg.base + pos > hi:
            break


def segment_messages(store: Store, seg: CommitLogSegment, begin: int | None = None, end: int | None = None,
                     topics: set[str] | None = None, lo: int | None = None, hi: int | None = None,
                     batch_rows: int = 8192, mins: QueueMins | None = None) -> Iterator[pa.Table]:
    """Yield MESSAGE_SCHEMA tables of one segment's records, filtered exactly.

    begin/end: inclusive store-timestamp bounds; topics: a set of topic names (None = all);
    lo/hi: inclusive commitlog-offset bounds of the record start; mins: the store's queue
    minimums (``queuemins.queue_minimums``): records below them are left out.
    """
    topic_arr = pa.array(sorted(topics), pa.string()) if topics is not None else None
    for buf, base, starts in iter_segment_chunks(store, seg, lo, hi):
        keep = time_mask(buf, starts, begin, end)
        if keep is not None:
            starts = starts[keep]
        for k in range(0, len(starts), batch_rows):
            part = starts[k:k + batch_rows]
            dec = drop_below_minimum(codec.decode_records(buf, base, part, origin=(seg.rel, base - seg.base)), mins)
            if topic_arr is not None:
                dec = dec.filter(pc.is_in(dec.column("topic"), value_set=topic_arr))
            if dec.num_rows:
                yield message_table(dec)


# ----------------------------------------------------------------------------- Spark
def scan_range(spark: SparkSession, store_uri: str, begin: int | None = None, end: int | None = None,
               topic: str | list[str] | None = None, as_of_batch: str | int | None = None,
               config: StoreConfig | None = None, snapshot: StoreSnapshot | None = None) -> DataFrame:
    """DataFrame (MESSAGE_DDL) of every message with begin <= store_timestamp <= end (and topic).

    The commitlog segments that survive pruning, consecutive ones grouped into ``task_count``
    tasks; rows in commitlog order per task.
    """
    from ..table.storefiles import open_files
    from ..io.storage import Store
    store = Store(store_uri)
    files, info = open_files(store, as_of_batch, config, snapshot)
    segs = prune_segments(files, info, begin, end)
    mins = queue_minimums(files)
    topics = None if topic is None else ({topic} if isinstance(topic, str) else set(topic))
    uri = store.uri
    expired = files.expired
    if not segs:
        return spark.createDataFrame([], MESSAGE_DDL)
    bsegs = spark.sparkContext.broadcast([tuple(s) for s in segs])

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from storelib.table.expired import explained
        from storelib.table.storefiles import CommitLogSegment
        from storelib.io.storage import Store as _Store
        st = _Store(uri)
        with explained(st, expired):
            for b in batches:
                for i in b.column(0).to_pylist():
                    seg = CommitLogSegment(*bsegs.value[i])
                    for t in segment_messages(st, seg, begin, end, topics, mins=mins):
                        yield from t.to_batches()

    tasks = task_count([s.valid for s in segs], spark.sparkContext.defaultParallelism)
    return spark.range(0, len(segs), 1, tasks).mapInArrow(run, MESSAGE_DDL)
