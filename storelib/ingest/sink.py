"""The ``rocketlake`` data source: ``writeStream`` and ``write`` into a store, one batch each.

    from storelib.ingest.sink import register
    register(spark)
    (df.writeStream.format("rocketlake").option("checkpointLocation", C)
       .option("config", "conf/store.properties").start(STORE))           # every micro-batch: one batch
    df.write.format("rocketlake").mode("append").save(STORE)               # one batch

    df.writeStream.foreachBatch(rocketlake_batch_writer(STORE)).option("checkpointLocation", C).start()

How a micro-batch gets in. A Python data source writer has two halves: ``write`` runs in the
tasks (one per partition), ``commit`` once on the driver, in a Python worker Spark starts there,
with no SparkSession (it cannot run Spark jobs). So the tasks only hand their rows over: each
writes its partition's Arrow batches as one Arrow IPC file under ``_rocketlake/incoming/`` and
returns the path; ``commit`` then runs the whole ingest (``driver.ingest_batch``: lease, encode,
sequence, write, commit, crash safety, errors) on those files in its own process
(``runtime.localrun.LocalSession``: the same stage code, tasks one after another), and removes
them. Commitlog order is the DataFrame's partition order, then row order, as ``ingest_dataframe``.
``foreachBatch`` with ``rocketlake_batch_writer`` runs the same ingest on Spark instead
(``ingest_dataframe``: the encode and write stages as Spark tasks), for micro-batches too large
for one process.

Exactly once. A micro-batch's batch id is ``stream-<query id>-<micro-batch id>``: the query id is
the one Spark keeps in ``<checkpointLocation>/metadata`` (stable across restarts). Its input
fingerprint is a digest of that id and of ``<checkpointLocation>/offsets/<micro-batch id>``, Spark's
offset log entry, which Spark writes before it runs the micro-batch and reads back as it is when it
runs it again (``stream_fingerprint``). So a micro-batch Spark runs again after a failure (its
commit not yet in the checkpoint) is found "already committed" and writes nothing, even if the
source's data changed meanwhile (the committed batch is the truth); a commit the failure
interrupted after the Delta switch is finished, not redone. A checkpoint whose ``offsets/`` and
``commits/`` were deleted and ``metadata`` kept (the same query id; Spark numbers micro-batches
from 0 again) writes new offset entries, whose line of batch metadata holds a new
``batchTimestampMs`` even where the sources' offsets are the same: its micro-batch of an id this
store holds fails (IngestError, ``_reset_advice``), nothing written, instead of being dropped as
"already committed". Batches committed before this identity carry the digest of the batch id
alone (``_id_fingerprint``): a rerun of one of them is still "already committed"
(``StagedInput.earlier_fingerprints``), so a reset is told apart only for batches committed since.
Another query writing the
same store takes turns with this one through the writer lease: a commit waits up to
``leaseWaitSeconds`` (default 120) for the lease, then fails naming the holder. A local store's
lease is held under the broker lock (``io.brokerlock``): while a RocketMQ broker runs on the
directory (or a repair or in-place adopt of it does), a commit waits the same, then fails with
``BrokerRunning``, nothing written.

``foreachBatch`` with ``rocketlake_batch_writer`` names micro-batches the same, but identifies one
by its records (``ingest_dataframe``'s digest of what it encodes): it never skips rows it did not
write either (a reset checkpoint's micro-batch that encodes to other records than the committed
batch of its id fails; one that encodes to the same records is those records, already in the
store), but a replay whose source data changed fails too instead of being a no-op.

A batch ``write`` (no micro-batch id) is identified as ``ingest_dataframe`` identifies a
DataFrame: ``auto-<digest of the encoded records>`` unless ``batchId`` is given, so writing the
same rows again is a no-op.

Options: ``config`` (a ``.properties`` path; default: the sizes the store was made with, recorded with
its first batch; conf/store.properties for a new store), ``topics`` (a
topics.json path; default: the queue counts the store recorded), ``updateTopics`` (``true``:
``topics`` may change them, as ``--update-topics``), ``queueBy`` (a column), ``storeTimestamp`` (ms, or ``now``: the store time
of rows without store_timestamp and born_timestamp; without it such rows are an error),
``batchId`` (batch writes), ``leaseWaitSeconds``, ``allowEmptyBody`` (``true``: write rows whose body
is empty, which RocketMQ's producers refuse; refused by default); any other name is refused
(``OPTIONS``). The rows: ``ingest_dataframe``'s columns.
Only append: ``mode("overwrite")`` / ``outputMode("complete")`` are refused.
"""
from __future__ import annotations

import hashlib
import io
import json
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from ..errors import BrokerRunning, ConcurrentWriteError
from ..format.paths import INCOMING_DIR
from ..io import storage
from ..io.condput import refuse_gs_store
from . import frame

__all__ = ["RocketLakeDataSource", "bound_source", "register", "rocketlake_batch_writer", "stream_batch_id", "query_id_of",
           "stream_fingerprint", "offset_entry", "StagedPart", "StagedInput", "ingest_staged"]

# Incoming files older than this belong to a writer that died before its commit.
_ORPHAN_AGE_S = 24 * 3600


@dataclass
class StagedPart(WriterCommitMessage):
    """What a task hands to the commit: its partition, the incoming file and its row count."""
    partition: int
    rel: str
    rows: int


def _options(options) -> dict:
    return {str(k).lower(): v for k, v in dict(options).items()}


def stream_batch_id(query_id: str, micro_batch: int) -> str:
    """The rocketlake batch id of a streaming query's micro-batch."""
    return f"stream-{query_id}-{int(micro_batch)}"


def stream_fingerprint(batch_id: str, offsets: bytes) -> str:
    """The input fingerprint of micro-batch ``batch_id``: its id and its offset log entry (the
    bytes of ``offset_entry``), every line of it. The sources' offsets say what the micro-batch
    reads; the line of batch metadata (``batchTimestampMs``) tells a reset checkpoint's entry from
    the one the batch was committed from where the offsets coincide (a Kafka source read again
    from ``earliest`` with the same ``maxOffsetsPerTrigger``)."""
    h = hashlib.sha256(f"rocketlake-stream-offsets\0{batch_id}\0".encode())
    h.update(offsets)
    return h.hexdigest()


def _id_fingerprint(batch_id: str) -> str:
    """The fingerprint stream batches were committed with before ``stream_fingerprint``: their id alone."""
    return hashlib.sha256(f"rocketlake-stream\0{batch_id}".encode()).hexdigest()


def _checkpoint_store(checkpoint: str) -> tuple[storage.Store, str]:
    """The checkpoint directory as a Store, and its name as opened (Spark's ``file:`` and
    Hadoop's ``s3a://``, which pyarrow does not open, as a path and ``s3://``)."""
    if checkpoint.startswith("file:"):
        checkpoint = checkpoint[len("file:"):]
        checkpoint = "/" + checkpoint.lstrip("/")
    elif checkpoint.startswith("s3a://"):
        checkpoint = "s3://" + checkpoint[len("s3a://"):]
    return storage.Store(checkpoint), checkpoint


def query_id_of(checkpoint: str) -> str:
    """The id Spark keeps in ``<checkpoint>/metadata`` for the query (the same after a restart)."""
    store, checkpoint = _checkpoint_store(checkpoint)
    try:
        data = store.read("metadata")
    except (OSError, ValueError) as e:
        raise ValueError(f"rocketlake sink: cannot read the query's id from {checkpoint}/metadata ({e}); "
                         f"the streaming sink needs the query's checkpointLocation") from None
    first = data.decode().splitlines()[0] if data else ""
    qid = json.loads(first or "{}").get("id")
    if not qid:
        raise ValueError(f"rocketlake sink: {checkpoint}/metadata holds no query id")
    return qid


def offset_entry(checkpoint: str, micro_batch: int) -> bytes:
    """The bytes of ``<checkpoint>/offsets/<micro_batch>``, the entry of Spark's offset log Spark
    writes before it runs the micro-batch (a version line, a line of batch metadata, a line of
    offsets per source) and runs it again from, unchanged, after a failure."""
    store, checkpoint = _checkpoint_store(checkpoint)
    try:
        data = store.read(f"offsets/{int(micro_batch)}")
    except (OSError, ValueError) as e:
        data, why = b"", str(e)
    else:
        why = "empty"
    if not data:
        raise ValueError(f"rocketlake sink: cannot read micro-batch {int(micro_batch)}'s offsets from "
                         f"{checkpoint}/offsets/{int(micro_batch)} ({why}); the sink identifies a micro-batch by "
                         "Spark's offset log entry, written before the micro-batch runs (nothing was written)")
    return data


def _reset_advice(checkpoint: str, query_id: str, micro_batch: int) -> str:
    """What the ingest's "same batch id, other input" error says of a micro-batch: the only way
    Spark hands the sink an id it committed with another offset entry is a reset checkpoint."""
    return (f"micro-batch {int(micro_batch)} of query {query_id} was committed to this store from another entry "
            f"of Spark's offset log than {checkpoint.rstrip('/')}/offsets/{int(micro_batch)}: that checkpoint's "
            "offsets were reset or reused (offsets/ and commits/ deleted, metadata kept: Spark numbers the "
            "micro-batches from 0 again) for a query already committed to this store, so its rows would be "
            "dropped as already committed. Nothing was written; start the query with a new checkpointLocation "
            "(a new query id: its micro-batches are new batches)")


# The options the sink takes (as the docs spell them; given in any case): another name is refused,
# since an ignored `queue_by` would write the batch without it.
OPTIONS = ("path", "checkpointLocation", "config", "topics", "updateTopics", "queueBy", "storeTimestamp", "batchId",
           "leaseWaitSeconds", "allowEmptyBody")


def _check_options(opts: dict) -> None:
    """ValueError for an option name the sink does not take (the nearest one suggested) or a bad
    storeTimestamp / leaseWaitSeconds, on the driver before any task runs."""
    import difflib
    known = {n.lower(): n for n in OPTIONS}
    for name in opts:
        if name not in known:
            near = difflib.get_close_matches(name.replace("_", ""), list(known), n=1, cutoff=0.6)
            hint = f"; did you mean {known[near[0]]}?" if near else ""
            raise ValueError(f"rocketlake sink: unknown option {name!r} (the options: {', '.join(OPTIONS[1:])}){hint}")
    _store_ts(opts)
    _lease_wait(opts)


def _lease_wait(opts: dict) -> float:
    v = opts.get("leasewaitseconds", 120)
    try:
        wait = float(v)
    except (TypeError, ValueError):
        wait = -1.0
    if not wait >= 0:
        raise ValueError(f"rocketlake sink: option leaseWaitSeconds={v!r}: give seconds (0 or more)")
    return wait


def _store_ts(opts: dict) -> int | None:
    v = opts.get("storetimestamp")
    if v is None or v == "":
        return None
    if str(v).lower() == "now":
        return int(time.time() * 1000)
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"rocketlake sink: option storeTimestamp={v!r}: give milliseconds or 'now'") from None


class RocketLakeDataSource(DataSource):
    """Writes only (read a store with format ``rocketmq``).

    ``register`` binds the session's master and ``ROCKETLAKE_SHARED_PATHS`` to the class it
    registers: the tasks stage their rows into the store, so on a multi-host master a store on the
    driver's disk is refused before any task runs (``runtime.multihost``), as ``ingest_dataframe``
    refuses it. The Python worker that plans the write has no SparkContext to ask."""

    master = "local"
    shared_paths: str | None = None

    @classmethod
    def name(cls):
        return "rocketlake"

    def _check(self, schema, overwrite: bool) -> dict:
        opts = _options(self.options)
        if not opts.get("path"):
            raise ValueError("rocketlake sink: give the store root: .save(STORE) / .start(STORE)")
        if overwrite:
            raise ValueError("rocketlake sink: a store is append-only: use mode('append') / outputMode('append')")
        refuse_gs_store(opts["path"])       # before a task stages rows there
        _check_options(opts)
        frame.check_frame_schema(schema)
        from ..runtime.multihost import check_bound
        check_bound(self, "store", opts["path"])
        return opts

    def writer(self, schema, overwrite: bool):
        return _BatchWriter(self._check(schema, overwrite))

    def streamWriter(self, schema, overwrite: bool):  # pyspark's name
        opts = self._check(schema, overwrite)
        if opts.get("batchid"):
            raise ValueError("rocketlake sink: option batchId is for batch writes; a query's micro-batch n is "
                             "batch stream-<query id>-n")
        if not opts.get("checkpointlocation"):
            raise ValueError("rocketlake sink: give the query a checkpointLocation (its id makes "
                             "each micro-batch's batch id; exactly-once needs it)")
        return _StreamWriter(opts)


class _Parts:
    """The task half, shared by the batch and the stream writer."""

    def __init__(self, opts: dict, owner: str = "write"):
        self.opts = opts
        self.store_uri = opts["path"]
        self.owner = owner
        self.write_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{owner}-{uuid.uuid4().hex[:12]}"

    def _stage(self, iterator) -> StagedPart:
        import pyarrow as pa
        from pyspark import TaskContext
        from ..runtime.faults import fault
        fault("sink-write")
        tc = TaskContext.get()
        part = tc.partitionId() if tc else 0
        store = storage.Store(self.store_uri)
        rel = f"{INCOMING_DIR}/{self.write_id}/part-{part:05d}-{uuid.uuid4().hex[:8]}.arrow"
        buf, writer, rows = io.BytesIO(), None, 0
        for batch in iterator:
            keep = [n for n in batch.schema.names if n in frame.INPUT_COLUMNS]
            batch = pa.RecordBatch.from_arrays([batch.column(n) for n in keep], names=keep)
            if writer is None:
                writer = pa.ipc.new_stream(buf, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is None:
            return StagedPart(part, "", 0)
        writer.close()
        store.write_file(rel, [buf.getvalue()])
        return StagedPart(part, rel, rows)

    def _discard(self, messages) -> None:
        """Delete the tasks' incoming files and their directories (one per write: left empty, a
        query would leave one per micro-batch, each listed again by every later commit)."""
        store = storage.Store(self.store_uri)
        dirs = set()
        for m in messages:
            if m is not None and m.rel:
                dirs.add(m.rel.rsplit("/", 1)[0])
                try:
                    store.delete(m.rel)
                except OSError:
                    pass
        for d in dirs:
            try:
                storage.remove_dir_if_empty(store, d)
            except OSError:
                pass

    def _ingest(self, messages, batch_id: str | None, fingerprint: str | Callable[[], str] | None,
                earlier: tuple = (), other_input: str | None = None) -> dict | None:
        """Ingest the tasks' parts as one batch (``ingest_staged``), then remove them whatever
        happens; ``fingerprint`` may be a function, called only when there are rows (an empty
        micro-batch needs no identity)."""
        parts = sorted((m for m in messages if m is not None and m.rows), key=lambda m: m.partition)
        try:
            if not parts:
                return None
            if callable(fingerprint):
                fingerprint = fingerprint()
            return ingest_staged(self.store_uri, parts, self.opts, batch_id, fingerprint, earlier, other_input)
        finally:
            self._discard(messages)
            _drop_orphans(storage.Store(self.store_uri), self.write_id, self.owner)


class _BatchWriter(_Parts, DataSourceArrowWriter):
    def write(self, iterator):
        return self._stage(iterator)

    def commit(self, messages):
        self._ingest(messages, self.opts.get("batchid") or None, None)

    def abort(self, messages):
        self._discard(messages)


class _StreamWriter(_Parts, DataSourceStreamArrowWriter):
    def __init__(self, opts: dict):
        super().__init__(opts, query_id_of(opts["checkpointlocation"]))

    def write(self, iterator):
        return self._stage(iterator)

    def commit(self, messages, batchId):  # pyspark's name
        bid = stream_batch_id(self.owner, batchId)
        ck = self.opts["checkpointlocation"]
        self._ingest(messages, bid, lambda: stream_fingerprint(bid, offset_entry(ck, batchId)),
                     earlier=(_id_fingerprint(bid),), other_input=_reset_advice(ck, self.owner, batchId))

    def abort(self, messages, batchId):
        self._discard(messages)


def _drop_orphans(store: storage.Store, current: str, owner: str) -> None:
    """Incoming files of writers that died before their commit: those of an earlier run of the
    same streaming query at once (it has restarted), any other once a day old (best effort)."""
    try:
        for d in store.list_dirs(INCOMING_DIR):
            if d == current or not d[:8].isdigit():
                continue
            mine = owner != "write" and d[16:].rsplit("-", 1)[0] == owner
            if mine or time.time() - time.mktime(time.strptime(d[:15], "%Y%m%dT%H%M%S")) > _ORPHAN_AGE_S:
                for f in store.list_files(f"{INCOMING_DIR}/{d}"):
                    store.delete(f)
                storage.remove_dir_if_empty(store, f"{INCOMING_DIR}/{d}")
    except (OSError, ValueError):
        pass


class StagedInput:
    """Incoming Arrow files as the input of ``driver.ingest_batch`` (the members of ``FrameInput``):
    file k of the commit is DataFrame partition k. ``fingerprint``: the input's identity when the
    caller knows it (a micro-batch's: ``stream_fingerprint``), else the digest of the encoded
    records; ``earlier``: identities earlier versions gave the same input; ``other_input``: what
    the error says when the batch id is committed with another input (None: the driver's words)."""

    splits: list = []

    def __init__(self, store_uri: str, parts: list, store_timestamp: int | None, fingerprint: str | None,
                 earlier: tuple = (), other_input: str | None = None):
        self.store_uri, self.parts = store_uri, parts
        self.default_store_ts = store_timestamp
        self.fingerprint = fingerprint
        self.earlier = tuple(earlier)
        self.other_input = other_input

    def earlier_fingerprints(self, kinds: list) -> list:
        """The identities earlier versions gave this input, known without reading it (``kinds``
        name file identities, which staged rows have none of)."""
        return list(self.earlier)

    def encode(self, run, ctx: dict) -> list:
        bctx = run.sc.broadcast(ctx)
        store_uri = self.store_uri
        run.prog.stage("encode", len(self.parts))

        def task(item):
            k, rel = item
            return frame.encode_partition(bctx.value, k, _read_ipc(storage.Store(store_uri), rel))

        scans = run.sc.parallelize(list(enumerate(p.rel for p in self.parts)), len(self.parts)).map(task).collect()
        run.prog.stage(None)
        return frame.scans_in_order(scans)

    def fingerprint_of(self, scans: list) -> str:
        from . import record_digest
        if self.fingerprint:
            return self.fingerprint
        return record_digest.fingerprint(record_digest.combine([s["digest"] for s in scans]))


def _read_ipc(store: storage.Store, rel: str) -> list:
    import pyarrow as pa
    return list(pa.ipc.open_stream(store.read(rel)))


def ingest_staged(store_uri: str, parts: list, opts: dict, batch_id: str | None, fingerprint: str | None,
                  earlier: tuple = (), other_input: str | None = None) -> dict:
    """Ingest the incoming files ``parts`` as one batch in this process (``StagedInput`` says what
    ``fingerprint``, ``earlier`` and ``other_input`` are); waits for the writer lease up to
    ``leaseWaitSeconds`` (another query's commit), then raises ConcurrentWriteError."""
    from ..runtime.localrun import LocalSession
    from .context import IngestOptions
    from .driver import ingest_batch
    cfg = frame.store_config(opts.get("config") or None, store_uri)      # none given: the store's own
    source = StagedInput(store_uri, parts, _store_ts(opts), fingerprint, earlier, other_input)
    wait = _lease_wait(opts)
    deadline = time.time() + wait
    options = IngestOptions(batch_id=batch_id, topics=opts.get("topics") or None,
                            update_topics=str(opts.get("updatetopics", "")).lower() == "true",
                            queue_by=opts.get("queueby") or None,
                            allow_empty_body=None if "allowemptybody" not in opts
                            else str(opts["allowemptybody"]).lower() == "true", quiet=True)
    while True:
        try:
            summary = ingest_batch(LocalSession(), store_uri, source, cfg, options)
            break
        except ConcurrentWriteError as e:
            if time.time() >= deadline:
                what = BrokerRunning if isinstance(e, BrokerRunning) else ConcurrentWriteError
                raise what(f"rocketlake sink: waited {wait:.0f}s for the writer lease: {e}") from None
            time.sleep(0.5)
    print(f"rocketlake sink: batch {summary.get('batch_id')} {summary.get('status', 'committed')}: "
          f"{summary.get('messages')} messages", file=sys.stderr)
    return summary


def register(spark) -> None:
    """Register the ``rocketlake`` data source on ``spark`` (and quiet the lines Spark logs when a
    query into it is stopped: ``runtime.stoplogs``)."""
    import os
    from ..runtime.multihost import SHARED_ENV
    from ..runtime.stoplogs import quiet_stops
    spark.dataSource.register(bound_source(spark.sparkContext.master, os.environ.get(SHARED_ENV)))
    quiet_stops(spark)


def bound_source(master: str, shared_paths: str | None) -> type:
    """``RocketLakeDataSource`` bound to a session (``runtime.multihost.bound_to``)."""
    from ..runtime.multihost import bound_to
    return bound_to(RocketLakeDataSource, master, shared_paths)


def rocketlake_batch_writer(store: str, config=None, topics=None, queue_by: str | None = None,
                            store_timestamp: int | None = None, checkpoint: str | None = None,
                            allow_empty_body: bool | None = None):
    """A ``foreachBatch`` function: each micro-batch through ``ingest_dataframe`` (on Spark) as
    batch ``stream-<query id>-<micro-batch id>``; a replayed micro-batch is "already committed"
    when it encodes to the same records (else IngestError: the input of a replay changed). The
    query id is read from Spark (or from ``checkpoint``/metadata when given).

    A micro-batch is identified by its records, not by the offset log as the sink's (its
    checkpoint is known only when ``checkpoint`` is given, and the batches it committed carry the
    records' digest, which a replay knows only once encoded): a reset checkpoint's micro-batch
    whose records differ from those of the batch of its id fails the same way, never dropped."""

    def write(df, epoch_id: int) -> dict:
        from ..runtime.stoplogs import quiet_stops
        quiet_stops(df.sparkSession)
        qid = query_id_of(checkpoint) if checkpoint else \
            df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        if not qid:
            raise ValueError("rocketlake_batch_writer: not in a streaming query (no query id); give checkpoint=")
        return frame.ingest_dataframe(df, store, config=config, batch_id=stream_batch_id(qid, epoch_id),
                                      topics=topics, queue_by=queue_by, store_timestamp=store_timestamp,
                                      quiet=True, allow_empty_body=allow_empty_body)
    return write

