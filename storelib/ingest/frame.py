"""Ingest a Spark DataFrame: ``ingest_dataframe(df, store)``, the same batch as the file ingest.

    import storelib
    summary = storelib.ingest_dataframe(spark.table("events"), "/data/store", store_timestamp=1718000000000)

The DataFrame needs the ingest schema's column names (README "Input schema"; other columns are
ignored, but one that differs from them only in case is refused), with any type that converts: an integer column wider than the field is range-checked
(never truncated), ``body`` binary or string (UTF-8), ``properties`` as
``array<struct<name,value>>`` (order kept), ``array<array<string>>`` pairs,
``map<string,string>`` or the RocketMQ properties string, timestamps as long milliseconds or as
Spark timestamps (whole milliseconds). Bad values are reported as the file ingest reports them,
naming the row (``DataFrame row N``: the row's position in partition order, then row order) and the
column, before any byte of the store is written.

It runs exactly as the file ingest (storelib.ingest.driver ``ingest_batch``): lease, encode, sequence,
write, commit, crash safety, concurrent writers, exit statuses. Only stage 1 differs: one
``mapInArrow`` task per DataFrame partition takes the partition's Arrow batches and hands them to
``encode_stage.encode_table``, the encode code of a file split. Commitlog order is the
DataFrame's partition order, then row order within a partition. The DataFrame is evaluated once
(by those tasks): the write stage reads only what they staged.

A small DataFrame (``local="auto"``: at most ``LOCAL_FRAME_ROWS`` rows and ``LOCAL_FRAME_BYTES``,
the bound of ``rocketlake ingest --local auto``; ``_small``) runs every stage in this process
instead (``runtime.localrun``): its rows come over once as Arrow (``toArrow``: a JVM job, no
Python worker) and each partition's rows go through the same ``encode_partition``, so the bytes
and the rows named in errors are the same. Starting Spark's Python workers and importing the
encoder in them costs seconds (about ten for one message on a busy two-core machine); encoding a
few MB here costs less. Sizing a frame Spark cannot size (rows a local list became) reads its
first rows once more.

Identity. A rerun of a committed ``batch_id`` is a no-op when the DataFrame encodes to the same
messages, an error otherwise (as for files). Without a ``batch_id`` the id is
``auto-<fingerprint>``, where the fingerprint is the digest of the multiset of encoded records
(storelib.ingest.record_digest): computed by the encode tasks, combined on the driver and checked against
the committed batches before anything is planned or written, so the same messages give the same
id whatever the partitioning and row order. A record holds its store time, so the fingerprint is
stable only if the store times are: rows without ``store_timestamp`` and ``born_timestamp`` take
``store_timestamp=MS`` (given by the caller), and without it they are an error (a file ingest uses
the input files' modification time; a DataFrame has none that is fixed).

Limits: a write-stage task retried after it released a partition's staged records cannot read the
partition again (a file split can), so the batch fails and leaves the store untouched; rerun it.
"""
from __future__ import annotations

import os
import pickle
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import encode as encode_stage, inputs, record_digest, split_staging
from ..io import storage
from ..io.condput import refuse_gs_store
from ..codec.messages import MESSAGE_SCHEMA
from ..errors import InputError
from ..format.config import default_config, load_config, StoreConfig
from ..runtime.faults import fault
from .context import EncodeContext, IngestOptions
from .driver import ingest_batch

__all__ = ["ingest_dataframe", "FrameInput", "check_frame_schema", "frame_to_canonical", "encode_partition",
           "check_partitions", "INPUT_COLUMNS", "store_config", "LOCAL_FRAME_BYTES", "LOCAL_FRAME_ROWS",
           "scans_in_order"]

_REQUIRED = ("topic", "body")
INPUT_COLUMNS = tuple(MESSAGE_SCHEMA.names) + ("properties",)
_TIMESTAMP_UNITS = {"s": 1000, "ms": 1, "us": 1000, "ns": 1_000_000}   # -> ms: multiply (s) or divide
LOCAL_FRAME_BYTES = 32 << 20      # local="auto": a DataFrame at most this big (``_small``) runs in this process
LOCAL_FRAME_ROWS = 100_000
_PARTITION = "_rocketlake_partition"
_LOCAL_MODES = ("auto", "always", "never")


def ingest_dataframe(df, store: str, config=None, batch_id: str | None = None, topics=None,
                     queue_by: str | None = None, store_timestamp: int | None = None, quiet: bool = False,
                     progress_interval: float = 5.0, update_topics: bool = False,
                     allow_empty_body: bool | None = None, local: str = "auto") -> dict:
    """Ingest the rows of ``df`` into ``store`` as one batch; returns the summary dict (what
    ``jobs/ingest.py --json-summary`` writes).

    ``config``: a ``.properties`` path, a dict of RocketMQ keys or a ``StoreConfig`` (default: the
    store's own, recorded with its first batch; conf/store.properties for a new store). ``topics`` /
    ``queue_by`` / ``update_topics``: as ``run_ingest``.
    ``store_timestamp``: store time (ms) of rows without store_timestamp and born_timestamp.
    ``allow_empty_body``: write rows with an empty body (refused by default, as RocketMQ's producers do;
    None: ``ROCKETLAKE_ALLOW_EMPTY_BODY=1`` allows them).
    ``local``: where the stages run: ``auto`` (default) in this process for a small DataFrame
    (LOCAL_FRAME_BYTES, LOCAL_FRAME_ROWS), else on Spark; ``always`` / ``never`` (the module docstring).
    Raises what ``run_ingest`` raises; InputError for a missing column or an unusable column type
    (before the store is touched).
    """
    if local not in _LOCAL_MODES:
        raise ValueError(f"ingest_dataframe: local={local!r}: give one of {', '.join(_LOCAL_MODES)}")
    refuse_gs_store(store)                  # before anything there (its recorded config) is read
    cfg = store_config(config, store)
    source = FrameInput(df, store_timestamp)
    session = df.sparkSession
    if local == "always" or (local == "auto" and _small(source.df)):
        from ..runtime.localrun import LocalSession
        source.collect()
        session = LocalSession()
    else:
        from ..runtime.multihost import check_reachable
        from ..runtime.sparkenv import python_for_workers
        # the executors write the store: on a multi-host master a path on the driver's disk is not theirs
        check_reachable(session.sparkContext.master, {"store": store})
        python_for_workers(session.sparkContext)     # local workers run this interpreter, not PATH's python3
    return ingest_batch(session, store, source, cfg, IngestOptions(
        batch_id=batch_id, topics=topics, update_topics=update_topics, queue_by=queue_by,
        allow_empty_body=allow_empty_body, quiet=quiet, progress_interval=progress_interval))


def store_config(config, store: str | None = None) -> StoreConfig:
    """``config`` as a StoreConfig; None: the sizes ``store`` was written with (recorded with its
    first batch) over conf/store.properties, which alone serves a new store."""
    if isinstance(config, StoreConfig):
        return config
    if isinstance(config, dict):
        return load_config(None, config)
    if config is None:
        base = default_config()
        if store is None:
            return base
        from ..table.snapshots import open_snapshot
        return open_snapshot(storage.Store(store), base=base).config
    return load_config(os.fspath(config))


def _small(df) -> bool:
    """``df`` holds at most LOCAL_FRAME_ROWS rows of at most LOCAL_FRAME_BYTES of bodies: by
    Spark's estimate of its plan's size where Spark has one (a local relation, files), else (rows
    a local list became: an RDD Spark cannot size) by counting, in one JVM job, the first rows of
    a frame of a few partitions without a shuffle (a larger one runs on Spark without a look)."""
    try:
        qe = df._jdf.queryExecution()
        size = int(str(qe.optimizedPlan().stats().sizeInBytes()))     # a Scala BigInt
        if size <= LOCAL_FRAME_BYTES:
            return True
        sc = df.sparkSession.sparkContext
        if size < (1 << 63) - 1 or "Exchange" in str(qe.executedPlan().toString()) \
                or df.rdd.getNumPartitions() > 2 * sc.defaultParallelism:
            return False
        from pyspark.sql import functions as F
        rows, body = df.limit(LOCAL_FRAME_ROWS + 1).agg(F.count(F.lit(1)), F.sum(F.octet_length("body"))).first()
        return rows <= LOCAL_FRAME_ROWS and (body or 0) <= LOCAL_FRAME_BYTES
    except Exception:  # noqa: BLE001 - no estimate (Spark Connect, a plan Spark cannot size): on Spark
        return False


class FrameInput:
    """A DataFrame as the input of ``ingest.ingest_batch`` (the members of ``ingest.FileInput``)."""

    splits: list = []            # no files: nothing a task could read again
    fingerprint = None           # known once encoded (``fingerprint_of``)
    parts = None                 # [(partition, pa.Table)]: the rows of a frame encoded in this process

    def __init__(self, df, store_timestamp: int | None):
        check_frame_schema(df.schema)
        self.df = df.select(*[c for c in df.columns if c in INPUT_COLUMNS])
        self.default_store_ts = store_timestamp

    def collect(self) -> None:
        """Bring the rows to this process (Arrow, through the JVM: no Python worker), cut into
        the DataFrame's partitions (those with rows), for an in-process encode."""
        from pyspark.sql import functions as F
        rows = self.df.withColumn(_PARTITION, F.spark_partition_id()).toArrow()    # in partition order
        ids = rows.column(_PARTITION).to_numpy()
        rows = rows.drop_columns([_PARTITION])
        cuts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), len(ids)]
        self.parts = [(int(ids[a]), rows.slice(a, b - a)) for a, b in zip(cuts, cuts[1:]) if b > a]

    def encode(self, run, ctx: EncodeContext) -> list:
        """Stage 1: one task per DataFrame partition; the non-empty partitions' summaries, in
        partition order, as splits 0, 1, ... (InputError naming rows and columns if any is bad).
        Collected rows (``collect``): the same, in this process."""
        if self.parts is not None:
            run.prog.say(f"encode: {sum(t.num_rows for _, t in self.parts)} DataFrame row(s) in this process")
            return scans_in_order([encode_partition(ctx, p, t.to_batches()) for p, t in self.parts])
        bctx = run.sc.broadcast(ctx)
        parts = self.df.rdd.getNumPartitions()
        run.prog.say(f"encode: {parts} DataFrame partition(s)")
        run.prog.stage("encode", parts)

        def task(batches):
            from pyspark import TaskContext
            scan = encode_partition(bctx.value, TaskContext.get().partitionId(), batches)
            yield pa.RecordBatch.from_pydict({"scan": [pickle.dumps(scan)]})

        rows = self.df.mapInArrow(task, "scan binary").collect()
        run.prog.stage(None)
        return scans_in_order([pickle.loads(r.scan) for r in rows])

    def fingerprint_of(self, scans: list) -> str:
        return record_digest.fingerprint(record_digest.combine([s["digest"] for s in scans]))


def scans_in_order(scans: list) -> list:
    """The partitions' encode summaries as splits 0, 1, ... in partition order, the empty ones
    left out (InputError with every partition's problems: ``check_partitions``)."""
    scans = sorted(scans, key=lambda s: s["index"])
    check_partitions(scans)
    scans = [s for s in scans if s["count"]]
    for k, s in enumerate(scans):
        s["partition"], s["index"] = s["index"], k
    return scans


_ROW = re.compile(r"DataFrame partition (\d+) row #(\d+)")


def check_partitions(scans: list) -> None:
    """InputError with every partition's problems, rows numbered across the whole DataFrame."""
    if not any("errors" in s for s in scans):
        return
    first_row, n = {}, 0
    for s in scans:
        first_row[s["index"]] = n
        n += s.get("count", s.get("rows")) or 0

    def where(m) -> str:
        p, i = int(m.group(1)), int(m.group(2))
        return f"DataFrame row {first_row[p] + i} (partition {p} row {i})"
    problems = [_ROW.sub(where, msg) for s in scans for msg in s.get("errors", [])]
    raise InputError(problems, sum(s.get("error_total", 0) for s in scans))


# ---------------------------------------------------------------------------- the columns
def check_frame_schema(schema) -> None:
    """InputError for a missing required column or a column whose Spark type cannot convert
    (checked on the driver, before the store is touched)."""
    from pyspark.sql import types as T
    strings = (T.StringType, T.VarcharType, T.CharType)
    numbers = (T.IntegralType, T.DecimalType, T.FloatType, T.DoubleType) + strings
    name_value = lambda t: isinstance(t, T.StructType) and {"name", "value"} <= set(t.fieldNames())  # noqa: E731
    times = numbers + (T.TimestampType, T.TimestampNTZType)
    allowed = {"topic": strings, "born_host": strings, "store_host": strings, "properties_string": strings,
               "body": strings + (T.BinaryType,), "born_timestamp": times, "store_timestamp": times}
    wants = {strings: "string", strings + (T.BinaryType,): "binary or string",
             times: "long milliseconds or timestamp", numbers: "an integer or a value that converts to one"}
    fields = {f.name: f.dataType for f in schema.fields}
    problems = [f"DataFrame column '{c}' is missing (required)" for c in _REQUIRED if c not in fields]
    # Spark matches names in any case, the ingest exactly: a `Properties` column would be left out
    # as an extra column, its messages written without their keys.
    exact = {c.lower(): c for c in INPUT_COLUMNS}
    problems += [f"DataFrame column '{n}': column names are matched exactly: rename it '{exact[n.lower()]}' "
                 f"(or drop it)" for n in fields if n not in INPUT_COLUMNS and n.lower() in exact]
    for name, typ in fields.items():
        if name == "properties":
            ok = (isinstance(typ, strings)
                  or (isinstance(typ, T.MapType) and isinstance(typ.keyType, strings)
                      and isinstance(typ.valueType, strings))
                  or (isinstance(typ, T.ArrayType) and (name_value(typ.elementType) or (
                      isinstance(typ.elementType, T.ArrayType) and isinstance(typ.elementType.elementType, strings)))))
            want = "array<struct<name,value>>, array<array<string>>, map<string,string> or the properties string"
        elif name in MESSAGE_SCHEMA.names:
            ok = isinstance(typ, allowed.get(name, numbers))
            want = wants[allowed.get(name, numbers)]
        else:
            continue
        if not ok:
            problems.append(f"DataFrame column '{name}': type {typ.simpleString()} cannot be converted "
                            f"(expected {want})")
    if problems:
        raise InputError(problems)


def frame_to_canonical(table: pa.Table, label) -> pa.Table:
    """A partition's Arrow table (Spark's types) -> codec.MESSAGE_SCHEMA, through the same
    ``inputs.to_canonical`` as a Parquet split: Spark timestamps become milliseconds (a value with
    a sub-millisecond part is an error), a string ``properties`` column is the properties string."""
    cols = {}
    problems = []
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            col, bad = _timestamp_ms(col)
            problems += [f"{label(int(r))}: field '{name}': has a sub-millisecond part" for r in bad[:10]]
        if name == "properties" and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            if "properties_string" in table.column_names:
                problems.append(f"{label(0)}: field 'properties': a properties string and 'properties_string' "
                                f"both given; give one")
            name = "properties_string"
        cols[name] = col
    if problems:
        raise InputError(problems)
    return inputs.to_canonical(pa.table(cols), label, "body")


def _timestamp_ms(col):
    """(int64 ms column, rows with a sub-millisecond part)."""
    unit = col.type.unit
    raw = col.cast(pa.int64())
    if unit == "s":
        return pc.multiply_checked(raw, 1000), []
    factor = _TIMESTAMP_UNITS[unit]
    if factor == 1:
        return raw, []
    v = raw.to_numpy(zero_copy_only=False)
    valid = ~np.isnan(v) if v.dtype.kind == "f" else np.ones(len(v), bool)
    bad = np.flatnonzero(valid & (np.nan_to_num(v).astype(np.int64) % factor != 0))
    return pc.divide(raw, factor), bad


# ---------------------------------------------------------------------------- the task
def encode_partition(ctx: EncodeContext, partition: int, batches) -> dict:
    """Stage 1 task of one DataFrame partition: its Arrow batches -> the canonical table ->
    ``encode_stage.encode_table`` (staged records and facts, the split summary) + the digest of
    its encoded records (``record_digest``)."""
    fault("encode-split")
    batches = list(batches)
    table = pa.Table.from_batches(batches) if batches else None
    if table is None or table.num_rows == 0:
        return {"index": partition, "count": 0}
    label = _label(partition)
    try:
        canonical = frame_to_canonical(table, label)
    except InputError as e:
        return {"index": partition, "errors": e.problems, "error_total": e.total, "rows": table.num_rows}
    del table, batches
    scan = encode_stage.encode_table(ctx, partition, canonical, label)
    if "errors" not in scan:
        staged = split_staging.staging_store(ctx.local_staging, storage.Store(ctx.store))   # where encode_table staged
        facts = encode_stage.load_split_facts(staged, scan["meta_path"])
        scan["digest"] = record_digest.digest_staged(staged, scan["records_path"], facts["sizes"],
                                                     facts["rr_topic"] >= 0)
    return scan


def _label(partition: int):
    """Row i of a partition, in a task (its position in the DataFrame is known on the driver)."""
    return lambda i, p=partition: f"DataFrame partition {p} row #{i}"
