"""``spark.read.format("rocketmq").load(STORE)``: a PySpark Python data source over a store.

    from storelib.read.datasource import register
    register(spark)
    df = spark.read.format("rocketmq").load("/data/store")            # latest committed batch
    df = spark.read.format("rocketmq").option("asOfBatch", "b-7").load(uri)
    df = spark.read.format("rocketmq").option("topic", "orders").option("beginTimestamp", 1710000000000).load(s)
    spark.read.format("rocketmq").load(s).where("topic = 'orders'")           # filters pushed to the reader

Two readers, one plan. On a local store, and on s3:// and hdfs:// stores through Hadoop's file
systems (wherever the JVM reader can be loaded: a JDK built its jar, ``storelib.runtime.jvmjar``;
S3A's jars for s3://) ``register``'s ``load`` plans here and hands the splits to the
JVM reader (``storelib.read.jvmsource``): Spark gets only the columns a query names, as column
batches, with the pushable filters applied by the reader, and a DataFrame reads the snapshot that
was committed when it was loaded. Elsewhere (gs://, a publish in flight,
``option("engine", "python")``) the Python source below reads the same rows, planning at every
query. ``option("engine", "jvm")`` makes "cannot use the JVM reader" an error.

Columns: ``rangescan.MESSAGE_DDL`` (commitlog_offset, store_size, msg_id, topic, queue_id,
queue_offset, flag, sys_flag, body_crc, born_timestamp, born_host, store_timestamp, store_host,
reconsume_times, prepared_transaction_offset, body, properties map<string,string>, tags, keys,
uniq_key). Partitions are splits of the commitlog segments (``storelib.read.splits``: about
``splitBytes`` each, default 256 MiB, each starting on a record start found through the consume
queues), consecutive small ones sharing a partition (``splits.group_splits``: a task's fixed cost
outweighs the read of a small segment) but no fewer partitions than ``minPartitions`` (default:
the session's cores); a task walks its splits (numba), decodes vectorized
(``codec.decode_records``) and yields Arrow record batches. A ``topic`` filter (=, IN) on a store where every record has a
consume-queue unit reads only the topic's records, found through its queues' units
(``storelib.read.splits``; ``option("topicQueues", "false")``: walk every record instead).

Pruning: the options ``topic`` (comma-separated), ``beginTimestamp``, ``endTimestamp`` (epoch ms or ISO-8601),
``minOffset``, ``maxOffset`` (inclusive) are applied exactly by the reader: segments are pruned
by the manifest's per-segment min/max store time, splits by offset range, records are filtered
on their store time before decoding. The reader also implements ``DataSourceReader.pushFilters``
(pyspark 4.1; ``register`` turns on ``spark.sql.python.filterPushdown.enabled``): ``topic`` =/IN
and =, <, <=, >, >= on ``store_timestamp`` / ``commitlog_offset`` in ``.where(...)`` become the
same bounds and Spark does not re-check them (``option("pushdown", "false")``: Spark filters).

The reader-reuse pitfall of pyspark 4.1.4, and how ``register`` avoids it: Spark keeps the reader
that the last filter pushdown made on the relation and plans a later query over the same
DataFrame that has *no* pushable filter with it, without asking Python again, so
``df.where(f).count()`` then ``df.count()`` would count the filtered rows. ``register`` makes
every ``spark.read.format("rocketmq").load(...)`` DataFrame carry the filter
``commitlog_offset >= 0`` (true of every record): every query over it then has a pushable filter,
so every query's reader is made for its own filters.

Other options: ``engine`` (``auto``, ``jvm``, ``python``), ``batchRows`` (rows per JVM column batch), ``asOfBatch`` (batch id or sequence number of a rocketlake store), ``config``
(a broker-style .properties file for stores without a manifest; sizes are otherwise fitted to
the files found), and any ``MessageStoreConfig`` key by name.

A read of an older batch (``asOfBatch``) that needs a file an expiry after it deleted fails with
one error naming the file and the expiry (``table.expired``; exit 2 in a command), at planning
(``splits.refuse_expired``) or in a Python task, whichever meets it first.

Reads rocketlake stores (a snapshot of one committed batch) and RocketMQ broker stores (no
manifest: the broker's own view after a restart) alike.
"""
from __future__ import annotations

import os

from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualTo, GreaterThan,
                                    GreaterThanOrEqual, In, InputPartition, LessThan, LessThanOrEqual)

from .schema import MESSAGE_DDL

__all__ = ["RocketMQDataSource", "bound_source", "RocketMQReader", "ManifestDataSource", "CheckpointsDataSource", "register",
           "register_python_sources", "REUSE_GUARD", "int_option", "task_view", "check_option_names",
           "READ_OPTIONS", "STREAM_OPTIONS"]

# A filter true of every record, on every rocketmq DataFrame (see the module docstring).
REUSE_GUARD = "commitlog_offset >= 0"

_INT_COLS = ("store_timestamp", "commitlog_offset")


def task_view(store, rels) -> dict | None:
    """What a Spark task needs to read ``rels`` of ``store`` as the planning driver does: on object
    stores, the objects the driver mapped each file to (``Store.mappings``; a task opening the store
    afresh would find a file assembled from objects missing); None where files are read in place."""
    view = getattr(store, "mappings", None)
    return view(rels) if view and not store.os_paths else None


def _split_rels(split) -> set:
    """The store files a split reads: its segment and the consume-queue files of its queues."""
    rels = {split.rel}
    for queue in split.queues or ():
        rels.update(f[0] for f in queue)
    return rels


class _Bounds:
    """Inclusive [lo, hi] on an integer column; topic set."""

    def __init__(self):
        self.lo = {c: None for c in _INT_COLS}
        self.hi = {c: None for c in _INT_COLS}
        self.topics = None
        self.empty = False

    def lower(self, col, v):
        cur = self.lo[col]
        self.lo[col] = v if cur is None else max(cur, v)

    def upper(self, col, v):
        cur = self.hi[col]
        self.hi[col] = v if cur is None else min(cur, v)

    def topic_in(self, values):
        vals = {v for v in values if isinstance(v, str)}
        self.topics = vals if self.topics is None else self.topics & vals

    def push(self, f) -> bool:
        attr = getattr(f, "attribute", None)
        col = attr[0] if attr is not None and len(attr) == 1 else None
        if not hasattr(f, "value"):
            return False
        if col == "topic":
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                self.topic_in([f.value])
                return True
            if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                self.topic_in(f.value)
                return True
            return False
        if col in _INT_COLS and isinstance(f.value, int) and not isinstance(f.value, bool):
            v = f.value
            if isinstance(f, EqualTo):
                self.lower(col, v)
                self.upper(col, v)
            elif isinstance(f, GreaterThan):
                self.lower(col, v + 1)
            elif isinstance(f, GreaterThanOrEqual):
                self.lower(col, v)
            elif isinstance(f, LessThan):
                self.upper(col, v - 1)
            elif isinstance(f, LessThanOrEqual):
                self.upper(col, v)
            else:
                return False
            return True
        return False


# The options a read takes (as spelt in the docs; given in any case), beside the MessageStoreConfig
# keys: a name outside them is refused, since an ignored `topik` would read every topic.
READ_OPTIONS = ("path", "topic", "beginTimestamp", "endTimestamp", "minOffset", "maxOffset", "engine", "batchRows",
                "asOfBatch", "config", "splitBytes", "topicQueues", "pushdown", "coalesceBytes", "rangeGapBytes",
                "windowBytes", "readAhead", "tasksPerCore", "minPartitions")
STREAM_OPTIONS = ("startingOffsets", "maxBatchesPerTrigger", "maxMessagesPerTrigger", "failOnDataLoss")
# an option as the docs spell it (a message names it so; the options arrive in lower case)
_OPTION_NAMES = {n.lower(): n for n in READ_OPTIONS + STREAM_OPTIONS}


def check_option_names(options: dict, stream: bool) -> None:
    """ValueError for an option name no read takes (a close name suggested), or a stream's own
    option on a batch read."""
    import dataclasses
    import difflib
    from ..format.config import StoreConfig
    names = READ_OPTIONS + (STREAM_OPTIONS if stream else ()) + tuple(
        f.name for f in dataclasses.fields(StoreConfig) if f.name != "extra")
    known = {n.lower(): n for n in names}
    for name in options:
        key = str(name).lower()
        if key in known:
            continue
        if key in {n.lower() for n in STREAM_OPTIONS}:
            raise ValueError(f"rocketmq data source: option {_OPTION_NAMES.get(key, name)} is a readStream option; "
                             f"a batch read (spark.read) does not take it")
        near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        hint = f"; did you mean {known[near[0]]}?" if near else ""
        raise ValueError(f"rocketmq data source: unknown option {str(name)!r} (the options: "
                         f"{', '.join(READ_OPTIONS + (STREAM_OPTIONS if stream else ()))}, and "
                         f"MessageStoreConfig keys){hint}")


def int_option(options: dict, name: str) -> int | None:
    """An integer option; the timestamps also as ISO-8601 (UTC without an offset). A bad value is a
    ValueError naming the option."""
    v = options.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        pass
    shown = _OPTION_NAMES.get(name, name)
    if name.endswith("timestamp"):
        import datetime as dt
        try:
            t = dt.datetime.fromisoformat(str(v).strip().replace("Z", "+00:00"))
            return int((t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp() * 1000)
        except ValueError:
            raise ValueError(f"rocketmq data source: option {shown}={v!r}: expected epoch milliseconds or an "
                             f"ISO-8601 time (e.g. 2024-06-01T08:00:00Z)") from None
    raise ValueError(f"rocketmq data source: option {shown}={v!r}: expected an integer") from None


class RocketMQReader(DataSourceReader):
    def __init__(self, options: dict, stream: bool = False):
        check_option_names(dict(options), stream)
        self.options = {str(k).lower(): v for k, v in dict(options).items()}   # option names: any case
        path = self.options.get("path")
        if not path:
            raise ValueError("rocketmq data source: give the store root: .load(STORE)")
        self.path: str = str(path)
        b = _Bounds()
        if self.options.get("topic"):
            b.topic_in([t for t in self.options["topic"].split(",") if t])
        for opt, col, fn in (("begintimestamp", "store_timestamp", b.lower),
                             ("endtimestamp", "store_timestamp", b.upper),
                             ("minoffset", "commitlog_offset", b.lower),
                             ("maxoffset", "commitlog_offset", b.upper)):
            v = int_option(self.options, opt)
            if v is not None:
                fn(col, v)
        self.bounds = b

    def config(self):
        from ..format.config import StoreConfig, load_config
        import dataclasses
        known = {f.name for f in dataclasses.fields(StoreConfig)} - {"extra"}
        lower = {k.lower(): k for k in known}
        overrides = {lower[k.lower()]: v for k, v in self.options.items() if k.lower() in lower}
        if self.options.get("config") or overrides:
            return load_config(self.options.get("config"), overrides)
        return None

    def partitions(self):
        from .pruning import prune_segments
        from .queuemins import queue_minimums
        from .splits import SPLIT_BYTES, group_splits, plan_splits, queue_plan_ok, refuse_expired
        from ..table.storefiles import as_store, open_files
        b = self.bounds
        store = as_store(self.path)
        files, info = open_files(store, self.options.get("asofbatch") or None, self.config())
        if b.topics is not None and not b.topics:
            return []
        segs = prune_segments(files, info, b.lo["store_timestamp"], b.hi["store_timestamp"],
                              b.lo["commitlog_offset"], b.hi["commitlog_offset"])
        split_bytes = int_option(self.options, "splitbytes") or SPLIT_BYTES
        queue_plan = b.topics is not None and queue_plan_ok(files, info) \
            and str(self.options.get("topicqueues", "true")).lower() != "false"
        splits = plan_splits(store, files, segs, b.topics, queue_plan, b.lo["commitlog_offset"],
                             b.hi["commitlog_offset"], split_bytes, info, b.lo["store_timestamp"],
                             b.hi["store_timestamp"])
        refuse_expired(self.options.get("asofbatch"), store, files, set().union(*map(_split_rels, splits)))
        mins = queue_minimums(files)
        parallelism = int_option(self.options, "minpartitions") or os.cpu_count() or 1
        return [InputPartition((tuple(tuple(s) for s in group), task_view(store, set().union(*map(_split_rels, group))),
                                mins, files.expired))
                for group in group_splits(splits, parallelism, split_bytes)]

    def read(self, partition):
        from .splits import Split, split_messages
        from ..io.storage import Store
        from ..table.expired import explained
        splits, view, mins, expired = partition.value
        b = self.bounds
        store = Store(self.path).apply_mappings(view)
        with explained(store, expired):       # a file an expiry deleted after the planned batch: said so
            for split in splits:
                for t in split_messages(store, Split(*split), b.lo["store_timestamp"], b.hi["store_timestamp"],
                                        b.topics, b.lo["commitlog_offset"], b.hi["commitlog_offset"],
                                        coalesce_gap=int_option(self.options, "coalescebytes"), mins=mins):
                    yield from t.to_batches()


class RocketMQPushdownReader(RocketMQReader):
    """RocketMQReader + ``pushFilters`` (the default; ``option("pushdown", "false")`` turns it off).
    Safe on a reused DataFrame only with ``register``'s guard filter (module docstring)."""

    def pushFilters(self, filters):
        for f in filters:
            if not self.bounds.push(f):
                yield f


class RocketMQDataSource(DataSource):
    """``register_python_sources`` registers it bound to the session's master and
    ``ROCKETLAKE_SHARED_PATHS`` (``bound_source``): the tasks open the store's files, so on a
    multi-host master a store on the driver's disk is refused before any task runs
    (``runtime.multihost``). The Python worker that plans the read has no SparkContext to ask."""

    master = "local"
    shared_paths: str | None = None

    @classmethod
    def name(cls):
        return "rocketmq"

    def schema(self):
        return MESSAGE_DDL

    def check_reachable(self) -> None:
        from ..runtime.multihost import check_bound
        check_bound(self, "path", next((v for k, v in dict(self.options).items() if str(k).lower() == "path"), None))

    def reader(self, schema):
        self.check_reachable()
        opts = {str(k).lower(): v for k, v in dict(self.options).items()}
        if str(opts.get("pushdown", "true")).lower() == "false":
            return RocketMQReader(self.options)
        return RocketMQPushdownReader(self.options)


# ---------------------------------------------------------------------------- the Delta tables
def _spark_schema(arrow_schema):
    from pyspark.sql.pandas.types import from_arrow_schema
    return from_arrow_schema(arrow_schema)


class _TableReader(DataSourceReader):
    """One partition: the rows of one snapshot of a store's Delta table (storelib.table.manifest, read
    with deltalake and pyarrow: no delta-spark)."""

    def __init__(self, options: dict, rows_of, arrow_schema):
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        path = opts.get("path")
        if not path:
            raise ValueError("rocketlake data sources: give the store root: .load(STORE)")
        self.path: str = str(path)
        self.as_of = opts.get("asofbatch") or None
        self.rows_of, self.arrow_schema = rows_of, arrow_schema

    def read(self, partition):
        import pyarrow as pa
        from ..table.snapshots import open_snapshot
        from ..io import storage
        snap = open_snapshot(storage.Store(self.path), self.as_of, history=True)
        yield from pa.Table.from_pylist(self.rows_of(snap), schema=self.arrow_schema).to_batches()


def _live_files(snap) -> list:
    return sorted(snap.files.values(), key=lambda r: (r.kind, r.path))


def _committed_batches(snap) -> list:
    return list(snap.batches)


class _TableDataSource(DataSource):
    """A data source over one of a store's Delta tables: ``table_schema`` names the table's Arrow
    schema in storelib.table.manifest (imported when Spark asks: not at registration), ``rows_of``
    gives a snapshot's rows of it."""
    table_schema: str
    rows_of: staticmethod

    def _arrow_schema(self):
        from ..table import manifest
        return getattr(manifest, self.table_schema)

    def schema(self):
        return _spark_schema(self._arrow_schema())

    def reader(self, schema):
        return _TableReader(self.options, self.rows_of, self._arrow_schema())


class ManifestDataSource(_TableDataSource):
    """``rocketlake_manifest``: one row per file of a snapshot (the latest committed batch, or
    ``asOfBatch``): the manifest row that wrote the file's current version (MANIFEST_SCHEMA)."""
    table_schema = "MANIFEST_SCHEMA"
    rows_of = staticmethod(_live_files)

    @classmethod
    def name(cls):
        return "rocketlake_manifest"


class CheckpointsDataSource(_TableDataSource):
    """``rocketlake_checkpoints``: one row per committed batch, up to ``asOfBatch`` if given
    (CHECKPOINTS_SCHEMA)."""
    table_schema = "CHECKPOINTS_SCHEMA"
    rows_of = staticmethod(_committed_batches)

    @classmethod
    def name(cls):
        return "rocketlake_checkpoints"


# ---------------------------------------------------------------------------- registration
_PYTHON_SOURCES = "_rocketlake_python_sources"     # attribute of a session whose Python sources are registered


def register(spark) -> None:
    """Make ``rocketmq``, ``rocketlake_manifest`` and ``rocketlake_checkpoints`` loadable on
    ``spark``: enable Python filter pushdown and hook ``DataFrameReader`` (the JVM reader, the reuse
    guard). The Python data sources are registered when first needed (``register_python_sources``):
    a session's first registration starts a Python worker (2-3 s), which a read through the JVM
    reader never needs."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    _guard_loads()


def register_python_sources(spark, rocketmq=None) -> None:
    """Register the Python data sources on ``spark`` now (once per session): ``rocketmq`` (the
    given class: the stream source registers its batch-and-stream one), the manifest and the
    checkpoints."""
    if getattr(spark, _PYTHON_SOURCES, False):
        return
    from ..runtime.multihost import SHARED_ENV
    spark.dataSource.register(bound_source(rocketmq or RocketMQDataSource, spark.sparkContext.master,
                                           os.environ.get(SHARED_ENV)))
    for source in (ManifestDataSource, CheckpointsDataSource):
        spark.dataSource.register(source)
    setattr(spark, _PYTHON_SOURCES, True)


def bound_source(source: type, master: str, shared_paths: str | None) -> type:
    """``source`` (a ``RocketMQDataSource``) bound to a session (``runtime.multihost.bound_to``)."""
    from ..runtime.multihost import bound_to
    return bound_to(source, master, shared_paths)


def _guard_loads() -> None:
    """``DataFrameReader.load`` of format rocketmq reads through the JVM reader where it can
    (``jvmsource``), else returns the Python source's DataFrame with ``REUSE_GUARD`` (once per
    process; other formats are untouched). The reader's options are noted as they are set, for the
    planner."""
    from pyspark.sql.readwriter import DataFrameReader
    if getattr(DataFrameReader, "_rocketlake_guarded", False):
        return
    plain_format, plain_option, plain_options, plain_load = (DataFrameReader.format, DataFrameReader.option,
                                                             DataFrameReader.options, DataFrameReader.load)

    def noted(self) -> dict:
        if getattr(self, "_rocketlake_options", None) is None:
            self._rocketlake_options = {}
        return self._rocketlake_options

    def remember_format(self, source):
        self._rocketlake_format = source
        if str(source).lower() in (ManifestDataSource.name(), CheckpointsDataSource.name()):
            register_python_sources(self._spark)
        return plain_format(self, source)

    def remember_option(self, key, value):
        noted(self)[str(key)] = value
        return plain_option(self, key, value)

    def remember_options(self, **options):
        noted(self).update({str(k): v for k, v in options.items()})
        return plain_options(self, **options)

    def load(self, path=None, format=None, schema=None, **options):
        if str(format or getattr(self, "_rocketlake_format", "")).lower() != RocketMQDataSource.name():
            return plain_load(self, path, format, schema, **options)
        opts = dict(noted(self), **options)
        if path is not None:
            opts["path"] = path
        from ..runtime.multihost import check_reachable
        check_reachable(self._spark.sparkContext.master,       # the tasks, of either engine, open the files
                        {"path": next((v for k, v in opts.items() if str(k).lower() == "path"), None)})
        df = None if schema is not None else _jvm_dataframe(self._spark, opts)
        if df is not None:
            return df
        register_python_sources(self._spark)
        if not any(str(k).lower() == "minpartitions" for k in opts):
            # the planner runs in a Python worker, without the session: it is told the session's cores
            options = dict(options, minPartitions=self._spark.sparkContext.defaultParallelism)
        return plain_load(self, path, format, schema, **options).where(REUSE_GUARD)

    # pyspark's reader class gets the guarded methods: a patch of the class, by name
    for name, method in (("format", remember_format), ("option", remember_option), ("options", remember_options),
                         ("load", load), ("_rocketlake_guarded", True)):
        setattr(DataFrameReader, name, method)


def _jvm_dataframe(spark, options: dict):
    """The JVM reader's DataFrame for these load options, or None where the Python source reads
    (``option("engine", "python")``, or a store or session the JVM reader cannot serve; with
    ``engine`` ``jvm`` that is an error instead)."""
    from . import jvmsource
    opts = {str(k).lower(): v for k, v in options.items()}
    engine = str(opts.get(jvmsource.ENGINE_OPTION) or "auto").lower()
    if engine not in ("auto", "jvm", "python"):
        raise ValueError(f"rocketmq data source: option engine={engine!r}: expected auto, jvm or python")
    if engine == "python":
        return None
    # planned first: a store the JVM reader does not read (an object store) costs the session no jar
    plan = jvmsource.jvm_plan(RocketMQReader(options), int_option(opts, "splitbytes"), int_option(opts, "batchrows"))
    if plan is not None and not jvmsource.ensure_loadable(spark, plan):
        plan = None
    if plan is None:
        if engine == "jvm":
            raise ValueError("rocketmq data source: engine=jvm, but the JVM reader cannot read this store here "
                             "(a publish in flight, no JDK to build the reader, or no S3A classes: make s3a): use "
                             "engine=auto")
        return None
    return jvmsource.load_jvm(spark, plan)
