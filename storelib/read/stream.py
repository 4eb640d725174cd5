"""``spark.readStream.format("rocketmq").load(STORE)``: tail a store's committed batches.

    from storelib.read.stream import register
    register(spark)                     # rocketmq (batch and streaming), rocketlake_manifest, ...
    q = (spark.readStream.format("rocketmq").option("topic", "orders").load(STORE)
           .writeStream.format("console").option("checkpointLocation", C).start())

Offsets are commitlog offsets: ``{"offset": O, "batch_seq": S}`` is the end of committed batch S
(its ``max_phy_offset``, the next record's offset). A micro-batch from offset A to B yields every
message with A <= commitlog_offset < B, read from the snapshot of batch S (so a batch committed
meanwhile is never half seen), in commitlog order within each segment partition, with the batch
reader's columns (``rangescan.MESSAGE_DDL``) and its options ``topic``, ``beginTimestamp``,
``endTimestamp`` (applied exactly by the reader, as ``storelib.read.datasource``). Filters in
``.where(...)`` are applied by Spark (a Python stream reader gets no filter pushdown in pyspark 4.1).

Options of the stream: ``startingOffsets`` = ``earliest`` (default: the first message still in
the store), ``latest`` (only batches committed after the query starts) or a commitlog offset;
``minPartitions``: a micro-batch is read by a task per segment it spans or, when that is fewer,
by about this many, its range cut on record starts (``splits.plan_splits``, as a batch read's);
``maxBatchesPerTrigger`` / ``maxMessagesPerTrigger``: a micro-batch takes whole committed
batches, at least one, up to that many batches / messages (pyspark 4.1 gives a Python source no
admission control, so this reader keeps the previous end itself: exact within a run; the first
micro-batch after a restart that replays nothing is uncapped). ``failOnDataLoss`` (default
true): messages expired (``ops.expire``) before the query read them fail the micro-batch naming
the lost offsets; with ``false`` they are reported on stderr and the stream goes on.

Works while another process ingests (it reads only committed snapshots; ``latestOffset`` sees a
batch once its checkpoint row is committed). A RocketMQ broker's live store has no batches, so it
cannot be tailed (``StoreNotFound``-style error at start): adopt it (``ops.adopt``) and tail that.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from . import datasource

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from ..format.config import StoreConfig
    from ..table.rows import BatchRow
    from ..table.snapshots import StoreSnapshot
    from ..table.storefiles import StoreFiles

Offset = dict[str, int]          # a micro-batch's end: {"offset": commitlog offset, "batch_seq": batch}

__all__ = ["RocketMQStreamingDataSource", "RocketMQStreamReader", "register", "DataLossError"]


class DataLossError(RuntimeError):
    """Messages a stream had not read yet were expired from the store."""


def _snapshot(path: str) -> StoreSnapshot:
    from ..io.storage import Store
    from ..table.snapshots import open_snapshot
    from ..format.paths import CHECKPOINTS_DIR
    store = Store(path)
    if not store.exists(CHECKPOINTS_DIR):
        raise ValueError(f"rocketmq stream: {path} has no committed rocketlake batches to tail (a broker's "
                         f"store: adopt it first, storelib.adopt_store)")
    return open_snapshot(store, history=True)


def _store_config(options: dict[str, Any]) -> StoreConfig | None:
    """The store configuration the options give (``config`` path, MessageStoreConfig keys), as the
    batch reader takes it; None: fitted to the files."""
    import dataclasses
    from ..format.config import StoreConfig, load_config
    lower = {f.name.lower(): f.name for f in dataclasses.fields(StoreConfig) if f.name != "extra"}
    overrides = {lower[k]: v for k, v in options.items() if k in lower}
    return load_config(options.get("config"), overrides) if options.get("config") or overrides else None


def _published(path: str, batches: Sequence[BatchRow]) -> list[BatchRow]:
    """The committed batches up to the first whose publish is unfinished (its staging directory is
    still there): a micro-batch planned on one could be read by its tasks after the publish moved or
    patched its files under them (the tasks open the store afresh, without the planner's view)."""
    from ..io.storage import Store
    from ..table.storefiles import staging_batches
    staged = staging_batches(Store(path))
    out = []
    for b in batches:
        if b.batch_id in staged:
            break
        out.append(b)
    return out


def _end_of(batch: BatchRow) -> Offset:
    return {"offset": batch.max_phy_offset, "batch_seq": batch.batch_seq}


class RocketMQStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, Any]):
        self.batch_reader = datasource.RocketMQReader(options, stream=True)     # options, bounds, config
        self.options = self.batch_reader.options
        self.path = self.batch_reader.path
        self.max_batches = datasource.int_option(self.options, "maxbatchespertrigger")
        self.max_messages = datasource.int_option(self.options, "maxmessagespertrigger")
        self.fail_on_loss = str(self.options.get("failondataloss", "true")).lower() != "false"
        self.last_end: Offset | None = None      # the end of the latest micro-batch this reader planned

    def initialOffset(self) -> Offset:  # pyspark's names
        snap = _snapshot(self.path)
        start = str(self.options.get("startingoffsets", "earliest")).lower()
        if snap.batch is None:
            off = {"offset": 0, "batch_seq": 0}
        elif start == "latest":
            off = _end_of(snap.batch)
        elif start == "earliest":
            off = {"offset": snap.batch.min_phy_offset, "batch_seq": 0}
        else:
            try:
                off = {"offset": int(start), "batch_seq": 0}
            except ValueError:
                raise ValueError(f"rocketmq stream: startingOffsets={start!r}: earliest, latest or a "
                                 f"commitlog offset") from None
        self.last_end = off
        return off

    def latestOffset(self) -> Offset:
        snap = _snapshot(self.path)
        published = _published(self.path, snap.batches)
        if not published:
            return {"offset": 0, "batch_seq": 0}
        end = _end_of(published[-1])
        if (self.max_batches or self.max_messages) and self.last_end is not None:
            end = self._capped(published, self.last_end["offset"], end)
        return end

    def _capped(self, batches: list[BatchRow], start: int, end: Offset) -> Offset:
        """The end of the last whole batch after ``start`` within the limits (at least one)."""
        taken, msgs = 0, 0
        last: BatchRow | None = None
        for b in batches:
            if b.max_phy_offset <= start or not b.messages:
                continue
            if last is not None and ((self.max_batches and taken + 1 > self.max_batches)
                                     or (self.max_messages and msgs + b.messages > self.max_messages)):
                break
            taken, msgs, last = taken + 1, msgs + b.messages, b
        return _end_of(last) if last is not None else end

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        from ..table.storefiles import as_store, open_files
        from .pruning import prune_segments
        from .queuemins import queue_minimums
        self.last_end = end
        lo, hi = int(start["offset"]), int(end["offset"])
        if hi <= lo:
            return []
        b = self.batch_reader.bounds
        if b.topics is not None and not b.topics:
            return []
        store = as_store(self.path)
        files, info = open_files(store, str(end["batch_seq"]), _store_config(self.options))
        self._check_loss(files, lo, hi)
        lo_b = max(lo, b.lo["commitlog_offset"] or 0)
        hi_b = hi - 1 if b.hi["commitlog_offset"] is None else min(hi - 1, b.hi["commitlog_offset"])
        if hi_b < lo_b:
            return []
        segs = prune_segments(files, info, b.lo["store_timestamp"], b.hi["store_timestamp"], lo_b, hi_b)
        # object stores: the task reads the segment through the objects this planner mapped it to
        mins = queue_minimums(files)
        least = datasource.int_option(self.options, "minpartitions") or 0
        if len(segs) < least:
            return self._split_partitions(store, files, info, segs, lo_b, hi_b, least, mins)
        return [InputPartition((s.rel, s.base, s.valid, lo_b, hi_b, datasource.task_view(store, {s.rel}), mins,
                                files.expired)) for s in segs]

    def _split_partitions(self, store: Any, files: StoreFiles, info: Any, segs: Sequence[Any], lo: int, hi: int,
                          least: int, mins: Any) -> list[InputPartition]:
        """``minPartitions`` more than the micro-batch's segments: the range cut into splits on
        record starts (``splits.plan_splits``, as the batch reader's), about ``least`` of them."""
        from .splits import group_splits, plan_splits
        b = self.batch_reader.bounds
        size = sum(max(0, min(s.base + s.valid, hi + 1) - max(s.base, lo)) for s in segs)
        split_bytes = max(1, -(-size // least))
        splits = plan_splits(store, files, segs, None, False, lo, hi, split_bytes, info, b.lo["store_timestamp"],
                             b.hi["store_timestamp"])
        return [InputPartition((tuple(tuple(s) for s in group), lo, hi,
                                datasource.task_view(store, {s.rel for s in group}), mins, files.expired))
                for group in group_splits(splits, least, split_bytes)]

    def _check_loss(self, files: StoreFiles, lo: int, hi: int) -> None:
        first = min((s.base for s in files.commitlog if s.valid > 0), default=hi)
        if first <= lo:
            return
        msg = (f"rocketmq stream {self.path}: the messages at commitlog offsets [{lo}, {min(first, hi)}) "
               f"were expired from the store before this query read them")
        if self.fail_on_loss:
            raise DataLossError(msg + " (option failOnDataLoss=false: report and go on)")
        print(f"WARNING: {msg}; skipped (failOnDataLoss=false)", file=sys.stderr, flush=True)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from ..io.storage import Store
        from ..table.expired import explained
        from ..table.storefiles import CommitLogSegment
        from .rangescan import segment_messages
        from .splits import Split, split_messages
        b = self.batch_reader.bounds
        if len(partition.value) == 6:         # splits (_split_partitions)
            splits, lo, hi, view, mins, expired = partition.value
            store = Store(self.path).apply_mappings(view)
            with explained(store, expired):
                for sp in splits:
                    for t in split_messages(store, Split(*sp), b.lo["store_timestamp"], b.hi["store_timestamp"],
                                            b.topics, lo, hi, mins=mins):
                        yield from t.to_batches()
            return
        rel, base, valid, lo, hi, view, mins, expired = partition.value
        store = Store(self.path).apply_mappings(view)
        with explained(store, expired):       # a segment an expiry after the planned batch deleted: said so
            for t in segment_messages(store, CommitLogSegment(rel, base, valid), b.lo["store_timestamp"],
                                      b.hi["store_timestamp"], b.topics, lo, hi, mins=mins):
                yield from t.to_batches()

    def commit(self, end: Offset) -> None:
        self.last_end = end


class RocketMQStreamingDataSource(datasource.RocketMQDataSource):
    """``rocketmq`` for ``spark.read`` (storelib.read.datasource) and ``spark.readStream``."""

    def streamReader(self, schema: StructType) -> RocketMQStreamReader:
        self.check_reachable()
        return RocketMQStreamReader(self.options)


def register(spark: SparkSession) -> None:
    """``datasource.register`` (batch formats, filter pushdown, the reuse guard), then ``rocketmq``
    again with its streaming reader."""
    datasource.register(spark)
    datasource.register_python_sources(spark, RocketMQStreamingDataSource)
    spark.dataSource.register(RocketMQStreamingDataSource)    # over a batch-only one registered before
