"""Message columns of a batch key lookup's result, decoded only when a query asks for them.

Spark cannot prune the output of a ``mapInArrow`` (nor of a Python data source: PySpark 4.1's
``DataSourceReader`` offers ``pushFilters`` but no column pruning), so a lookup whose tasks
returned whole rows made ``count()`` carry every body and properties map from the Python workers
into the JVM. The lookup tasks therefore return only the light columns (the query, the matched
record's commitlog offset and size); every other message column is one struct computed by a
scalar Arrow UDF from (offset, size). Spark's optimizer drops an unused UDF column like any
other, so ``count()`` or a select of the light columns never reads a record twice, while a
query that wants message columns gets them decoded from the records, read with one range read
per run of nearby records (the lookup's rows come in commitlog order per task).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Tuple

import numpy as np
import pyarrow as pa

from ..codec import messages as codec
from ..errors import CorruptStore
from ..io.checked import open_stored, read_stored_at
from .rangescan import MESSAGE_DDL, MESSAGE_SCHEMA, message_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..io.storage import Store
    from ..table.expired import ExpiredFiles
    from ..table.storefiles import CommitLogSegment

# segment base -> its memory map (``mapped_segment``; None: read instead), kept across calls
SegmentMaps = dict[int, "np.ndarray | None"]

__all__ = ["QUERY_NAMES", "LIGHT_NAMES", "LIGHT_DDL", "LAZY_NAMES", "LAZY_DDL", "light_table", "mapped_segment",
           "fetch_messages", "with_message_columns"]

QUERY_NAMES = ["query_topic", "query_key", "query_begin", "query_end"]
_LIGHT_MESSAGE = ("commitlog_offset", "store_size")
LIGHT_NAMES = QUERY_NAMES + list(_LIGHT_MESSAGE)
LIGHT_DDL = ("query_topic string, query_key string, query_begin bigint, query_end bigint, "
             "commitlog_offset bigint, store_size int")
LAZY_NAMES = [n for n in MESSAGE_SCHEMA.names if n not in _LIGHT_MESSAGE]
# MESSAGE_DDL's fields are separated by ", " (the map type's own comma has no space after it)
LAZY_DDL = "struct<" + ", ".join(f.replace(" ", ": ", 1) for f in MESSAGE_DDL.split(", ")
                                 if f.split(" ", 1)[0] not in _LIGHT_MESSAGE) + ">"
_LAZY_SCHEMA = pa.schema([MESSAGE_SCHEMA.field(n) for n in LAZY_NAMES])
# Records closer than this share one range read (where a segment cannot be mapped): reading the
# bytes between costs less than another read call.
_GAP = 256 << 10


def light_table(query: pa.Table, commitlog_offset: pa.Array | pa.ChunkedArray,
                store_size: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The light columns of result rows: ``query`` (topic, key, begin, end) and the record's
    offset and size."""
    return pa.table([query.column("topic"), query.column("key"), query.column("begin"), query.column("end"),
                     commitlog_offset, store_size], names=LIGHT_NAMES)


def mapped_segment(store: Store, seg: CommitLogSegment) -> np.ndarray | None:
    """The first ``seg.valid`` bytes of a local commitlog segment as a read-only memory map (a
    uint8 array), or None where the file has to be read instead (object stores, a file being
    published under another name, a file shorter than its snapshot says: the read path reports
    those). A lookup's records are a fraction of the bytes between them: reading the span copies
    all of it (3 s per 550 MB on a busy 2-core machine), a map costs only the pages touched."""
    if not store.os_paths or seg.rel in store.assembled or seg.valid <= 0:
        return None
    try:
        mm = pa.memory_map(store.path(seg.rel), "r")
        if mm.size() < seg.valid:
            return None
        return np.frombuffer(mm.read_buffer(seg.valid), np.uint8)
    except OSError:
        return None


def _runs(seg_of: np.ndarray, start: np.ndarray, end: np.ndarray, gap: int) -> np.ndarray:
    """Start indexes of the runs of sorted records read together: a run ends at a segment
    boundary or where the next record starts more than ``gap`` after every record so far."""
    n = len(start)
    new = np.ones(n, bool)
    if n > 1:
        reach = np.maximum.accumulate(end)[:-1]
        new[1:] = (seg_of[1:] != seg_of[:-1]) | (start[1:] - reach > gap)
    return np.flatnonzero(new)


def _decode_segment(store: Store, seg: CommitLogSegment | None, base: int, sp: np.ndarray, end: np.ndarray,
                    maps: SegmentMaps) -> list[pa.Table]:
    """Decoded tables of the records at sorted offsets ``sp`` (ending at ``end``) of one segment:
    straight from its memory map, else by range reads of runs of nearby records."""
    if seg is None or int(end.max()) - base > seg.valid:
        raise CorruptStore(seg.rel if seg else f"commitlog@{base}", int(sp[0]) - base, "a looked-up record is gone")
    if base not in maps:
        maps[base] = mapped_segment(store, seg)
    mapped = maps[base]
    if mapped is not None:
        return [codec.decode_records(mapped, base, sp - base, origin=(seg.rel, 0))]
    out = []
    cuts = _runs(np.zeros(len(sp), np.int64), sp, end, _GAP)
    with open_stored(store, seg.rel) as fh:
        for a, b in zip(cuts, np.append(cuts[1:], len(sp))):     # one iteration per range read
            lo, hi = int(sp[a]) - base, int(end[a:b].max()) - base
            buf = np.frombuffer(read_stored_at(fh, seg.rel, hi - lo, lo), np.uint8)
            out.append(codec.decode_records(buf, base + lo, sp[a:b] - base - lo, origin=(seg.rel, lo)))
    return out


def fetch_messages(store: Store, segs: dict[int, CommitLogSegment], fsize: int, phy: np.ndarray, size: np.ndarray,
                   maps: SegmentMaps | None = None) -> pa.Table:
    """The LAZY_NAMES columns of the records at commitlog offsets ``phy`` (sizes ``size``), row
    i for phy[i]. The records were found by the lookup, so one that is not there any more is a
    damaged store (``CorruptStore``). ``maps``: segment base -> ``mapped_segment``, kept by the
    caller across calls."""
    n = len(phy)
    if not n:
        return _LAZY_SCHEMA.empty_table()
    maps = {} if maps is None else maps
    order = np.argsort(phy, kind="stable")
    in_order = bool((order == np.arange(n)).all())
    sp, ss = (phy, size) if in_order else (phy[order], size[order])
    seg_of = sp - sp % fsize
    end = sp + ss
    cuts = np.flatnonzero(np.concatenate([[True], seg_of[1:] != seg_of[:-1]]))
    decoded = []
    for a, b in zip(cuts, np.append(cuts[1:], n)):        # one iteration per segment
        base = int(seg_of[a])
        decoded += _decode_segment(store, segs.get(base), base, sp[a:b], end[a:b], maps)
    dec = pa.concat_tables(decoded)
    if not (np.asarray(dec.column("commitlog_offset")) == sp).all():
        raise CorruptStore("commitlog", int(sp[0]), "a looked-up record is not where the index said")
    msgs = message_table(dec).select(LAZY_NAMES)
    if not in_order:
        inverse = np.empty(n, np.int64)
        inverse[order] = np.arange(n)
        msgs = msgs.take(pa.array(inverse))
    return msgs


def with_message_columns(light: DataFrame, uri: str, segs: list[CommitLogSegment], fsize: int,
                         expired: ExpiredFiles | None = None) -> DataFrame:
    """``light`` (a DataFrame of LIGHT_DDL) with the other message columns, in RESULT order:
    query columns, then rangescan.MESSAGE_DDL. The message columns come from one Arrow UDF that
    Spark leaves out when a query does not use them. ``expired``: the batch ``segs`` are of
    (``table.expired``)."""
    from pyspark.sql import functions as F
    b_segs = light.sparkSession.sparkContext.broadcast([(s.rel, s.base, s.valid) for s in segs])

    def fetch(batches: Iterator[Tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
        from storelib.read.keylookup_rows import fetch_messages as _fetch
        from storelib.io.storage import Store as _Store
        from storelib.table.expired import explained
        from storelib.table.storefiles import CommitLogSegment
        st = _Store(uri)
        seg_map = {s[1]: CommitLogSegment(*s) for s in b_segs.value}
        maps: SegmentMaps = {}               # each segment mapped once per task
        with explained(st, expired):
            for phy, size in batches:
                t = _fetch(st, seg_map, fsize, np.asarray(phy, np.int64), np.asarray(size, np.int64), maps)
                yield pa.StructArray.from_arrays([c.combine_chunks() for c in t.columns], names=LAZY_NAMES)

    # an iterator UDF (told by its type hints): the segment maps are kept for the whole task.
    # (pyspark's stubs know arrow_udf only with an explicit functionType, not the form told by hints)
    message = F.arrow_udf(fetch, LAZY_DDL)(F.col("commitlog_offset"), F.col("store_size"))  # type: ignore[call-overload]
    # Two selects: the struct is computed once, then split (a UDF is never inlined twice).
    return light.select(*LIGHT_NAMES, message.alias("_message")).select(
        *LIGHT_NAMES, *[F.col("_message." + n).alias(n) for n in LAZY_NAMES])
