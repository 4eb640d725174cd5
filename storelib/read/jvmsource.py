"""``spark.read.format("rocketmq")`` through the JVM reader: Python plans, the JVM reads.

The planner is the Python source's (``datasource``: the snapshot, segment pruning by the options'
bounds, ``splits.plan_splits``' record-start boundaries); the plan goes to
``org.rocketlake.spark.RocketMQSource`` (``jvm/src``, built by ``storelib.runtime.jvmjar``) as an
option. The JVM reader then serves Spark only the columns a query names, as column batches, and
applies the pushable filters itself (topic =/IN; =, <, <=, >, >= on store_timestamp and
commitlog_offset): no Python worker, no Arrow conversion of twenty columns per row. A topic filter
on a snapshot where every live record has one live unit (``splits.queue_plan_ok``) reads the
topics' records through their consume queues, like the Python source's queue splits; the plan
carries the queues' files for that. Each split carries its zones (``table.zonemap``): a store-time
filter pushed after ``load()`` narrows the split to the zones whose time range meets it.

What it reads: local stores whose committed files are plain files (``Store.os_paths``, no file of
the snapshot read through a staged patch or a publish in flight), and stores on ``s3://`` and
``hdfs://`` through the Hadoop file systems Spark itself reads (S3A, from ``hadoop-aws`` at
pyspark's Hadoop version: ``make s3a``, ``S3A_JARS``; HDFS, pyspark's own client). There the plan
gives each file as its extents in objects (``storelib.io.fragments``) and the reader fetches byte
ranges: a split's windows, a time range's zones, a topic's records through its consume-queue
units (records at most ``rangeGapBytes`` apart in one range, default ``RANGE_GAP``; a split in
windows of ``windowBytes``, ``readAhead`` of them in flight, cut into about ``tasksPerCore``
tasks a core: the JVM reader's defaults, docs/CLUSTERS.md). ``minPartitions`` is the Python
reader's: no fewer tasks than that where the splits allow, local or remote (the JVM cuts a split
on its zone starts; a topic read through the queues keeps its splits). The S3
endpoint, region and keys are the store's (``storelib.io.objstore``), set as S3A's per-bucket
settings (``fs.s3a.bucket.<bucket>.*``) of the session. Anything else (a publish in flight, no JDK
to build the reader, no S3A classes, ``option("engine", "python")``) reads through the Python
source, with the same rows.

A DataFrame reads the snapshot that was committed when it was loaded (its plan is made then):
load again to see later batches. A load of an older batch (``asOfBatch``) whose plan reads a file an
expiry after it deleted is refused then, naming the file and the expiry
(``splits.refuse_expired``): the JVM tasks never meet the missing file. A plan of the latest batch
may meet one, deleted by an expiry that committed after the load: a task cannot tell that from a
file the store lost (that takes the manifest's history), so its error names the store, the file
and the plan's batch (``MISSING_MARKER``), and the driver, as pyspark turns the JVM's error into
the Python exception (``explain_task_failures``), raises what the Python tasks raise there: the
expiry's ``BadInput`` (``table.expired``); a file no expiry removed stays the task's
``CorruptStore`` error.
"""
from __future__ import annotations

import glob
import json
import os
from urllib.parse import urlparse

from .schema import MESSAGE_DDL

__all__ = ["ENGINE_OPTION", "RANGE_GAP", "S3A_DIR", "plain_files", "hadoop_uri", "s3a_settings", "s3a_jars",
           "jvm_plan", "load_jvm", "ensure_loadable", "fetched", "MISSING_MARKER", "explained_failure",
           "explain_task_failures"]

ENGINE_OPTION = "engine"            # "jvm" | "python" | "auto" (the default: jvm where it can)
_JVM_BATCH_ROWS = 4096              # rows per column batch (Spark's own vectorized readers use 4096)
# Remote topic reads: records at most this far apart are fetched in one range (a range request
# costs about what this many bytes do on a nearby S3 server).
RANGE_GAP = 256 << 10
_HADOOP_SCHEMES = {"s3": "s3a", "hdfs": "hdfs"}     # store URI scheme -> the Hadoop file system's
_S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
# ends a JVM task's missing-file error, with {"store", "rel", "batch": {"batch_id", "batch_seq"}}
# (org.rocketlake.spark.Corrupt)
MISSING_MARKER = "rocketlake-missing "
# hadoop-aws at pyspark's Hadoop version and its AWS SDK bundle (jvm/pom-s3a.xml, `make s3a`)
S3A_DIR = os.environ.get("S3A_JARS") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".cache", "jars", "hadoop-aws-3.4.2")


def hadoop_uri(uri: str) -> str | None:
    """``uri`` as the Hadoop file system Spark reads it at (s3:// -> s3a://), or None when the JVM
    reader does not read that scheme remotely."""
    scheme = urlparse(uri).scheme
    return _HADOOP_SCHEMES[scheme] + uri[len(scheme):] if scheme in _HADOOP_SCHEMES else None


def s3a_settings(uri: str, env=None) -> dict:
    """S3A's per-bucket settings for the store at ``uri`` from its object-store settings
    (``storelib.io.objstore``: endpoint, region, static keys); {} for other schemes."""
    from ..io import objstore
    u = urlparse(uri)
    if u.scheme != "s3":
        return {}
    st = objstore.s3_settings(env)
    pre = f"fs.s3a.bucket.{u.netloc}."
    out = {pre + "endpoint.region": st.get("AWS_REGION") or "us-east-1"}
    endpoint = st.get("AWS_ENDPOINT_URL")
    if endpoint:
        out.update({pre + "endpoint": endpoint, pre + "path.style.access": "true",
                    pre + "connection.ssl.enabled": str(urlparse(endpoint).scheme == "https").lower()})
    if st.get("AWS_ACCESS_KEY_ID") and st.get("AWS_SECRET_ACCESS_KEY"):
        out.update({pre + "access.key": st["AWS_ACCESS_KEY_ID"], pre + "secret.key": st["AWS_SECRET_ACCESS_KEY"]})
        if st.get("AWS_SESSION_TOKEN"):
            out.update({pre + "session.token": st["AWS_SESSION_TOKEN"],
                        pre + "aws.credentials.provider": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"})
        else:
            out[pre + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    return out


def s3a_jars() -> list:
    """The jars of S3A (``S3A_DIR``), [] when they were not fetched."""
    return sorted(glob.glob(os.path.join(S3A_DIR, "*.jar")))


def plain_files(store, rels) -> bool:
    """Whether ``rels`` of ``store`` are plain local files the JVM reader can open (module docstring)."""
    if not getattr(store, "os_paths", False) or getattr(store, "moved", None):
        return False
    assembled = getattr(store, "assembled", None) or {}
    return not any(r in assembled for r in rels)


def jvm_plan(reader, split_bytes: int | None = None, batch_rows: int | None = None) -> str | None:
    """The JSON plan of ``reader`` (a ``datasource.RocketMQReader`` made from the load's options:
    its path, bounds, snapshot and config), or None when the JVM reader cannot read this store
    (module docstring)."""
    from .pruning import prune_segments
    from .queuemins import queue_minimums
    from .splits import SPLIT_BYTES, plan_splits, refuse_expired
    from ..table.storefiles import as_store, open_files
    b = reader.bounds
    store = as_store(reader.path)
    remote = not getattr(store, "os_paths", False)
    if remote and hadoop_uri(store.uri) is None:
        return None
    files, info = open_files(store, reader.options.get("asofbatch") or None, reader.config())
    segs = prune_segments(files, info, b.lo["store_timestamp"], b.hi["store_timestamp"],
                          b.lo["commitlog_offset"], b.hi["commitlog_offset"])
    if not (_remote_files(store, [s.rel for s in segs]) if remote else plain_files(store, [s.rel for s in segs])):
        return None
    begin, end = b.lo["store_timestamp"], b.hi["store_timestamp"]
    splits = plan_splits(store, files, segs, None, False, b.lo["commitlog_offset"], b.hi["commitlog_offset"],
                         split_bytes or SPLIT_BYTES, info, begin, end)
    queues = _queues(store, files, info, reader)
    refuse_expired(reader.options.get("asofbatch"), store, files, {s.rel for s in splits}
                   | {f[1] for qs in (queues or {}).values() for q in qs for f in q})
    where = _remote_file if remote else _local_file
    rows = [where(store, s.rel)[:1] + [s.rel, s.base, s.valid, s.start, s.stop] + _split_times(info, s)
            + where(store, s.rel)[1:] for s in splits]
    bounds = {"begin": b.lo["store_timestamp"], "end": b.hi["store_timestamp"], "lo": b.lo["commitlog_offset"],
              "hi": b.hi["commitlog_offset"], "topics": sorted(b.topics) if b.topics is not None else None}
    gap = reader.options.get("rangegapbytes")
    tuning = _tuning(reader.options)
    return json.dumps({"store": reader.path, "splits": rows, "bounds": bounds, "remote": remote, **tuning,
                       "gap_bytes": int(gap) if gap not in (None, "") else RANGE_GAP,
                       "batch_rows": batch_rows or _JVM_BATCH_ROWS, "queues": queues,
                       "queue_mins": queue_minimums(files).entries(), "batch": _batch(files)})


def _batch(files) -> dict | None:
    """The committed batch the plan's files are of (None: a broker's store), for a task that meets
    one of them missing (``MISSING_MARKER``)."""
    ex = files.expired
    return None if ex is None else {"batch_id": ex.batch_id, "batch_seq": ex.batch_seq}


# the reader's own tuning (org.rocketlake.spark: SplitReader, Plan), plan key -> option
_TUNING = {"window_bytes": "windowBytes", "read_ahead": "readAhead", "tasks_per_core": "tasksPerCore",
           "min_partitions": "minPartitions"}


def _tuning(options: dict) -> dict:
    """The tuning options given (plan key -> int); a bad value is a ValueError naming the option."""
    out = {}
    for key, shown in _TUNING.items():
        v = options.get(shown.lower())
        if v in (None, ""):
            continue
        try:
            out[key] = int(str(v))
        except (TypeError, ValueError):
            raise ValueError(f"rocketmq data source: option {shown}={v!r}: expected an integer") from None
    return out


def _local_file(store, rel) -> list:
    return [store.path(rel)]


def _remote_file(store, rel) -> list:
    """[the file's Hadoop URI, [file size, [[file_pos, length, object URI, object_pos], ...]] or None
    for a file that is one object]."""
    got = store.assembled.get(rel)
    source = None if got is None else [int(got[0]), [[int(e[0]), int(e[1]), hadoop_uri(store.uri_of(e[2])), int(e[3])]
                                                      for e in got[1]]]
    return [hadoop_uri(store.uri_of(rel)), source]


def _remote_files(store, rels) -> bool:
    """Whether the JVM reader reads ``rels`` of a remote store as the Python reader would: not
    while a publish moves staged files, nor through a staged patch."""
    return not getattr(store, "moved", None) and not any(rel == r for rel, _ in store.patched.values() for r in rels)


def _split_times(info, s) -> list:
    """[min_ts, max_ts, zones] of a split: its zones' time range and [[first record start, min_ts,
    max_ts] per zone] (``table.zonemap``: the JVM narrows the split to the zones a pushed time
    filter meets) when it starts on a zone start; else the segment's range and no zones."""
    zm = info.zones(s.base) if info is not None else None
    if zm is not None:
        zm = zm.clip(s.valid).within(s.start - s.base, s.stop - s.base)
        if len(zm.pos) and int(zm.pos[0]) == s.start - s.base:
            zones = [[s.base + int(p), int(lo), int(hi)] for p, lo, hi in zip(zm.pos, zm.min_ts, zm.max_ts)]
            return [int(zm.min_ts.min()), int(zm.max_ts.max()), zones]
    lo_ts, hi_ts = (info.seg_ts.get(s.base) if info is not None else None) or (None, None)
    return [lo_ts, hi_ts, None]


def _queues(store, files, info, reader) -> dict | None:
    """topic -> [[[path, rel, valid units] of each file] of each queue], for topic filters read
    through the queues (``splits.queue_plan_ok``); None: a topic filter walks every record."""
    from .splits import queue_plan_ok
    if str(reader.options.get("topicqueues", "true")).lower() == "false" or not queue_plan_ok(files, info):
        return None
    rels = [f.rel for fs in files.consume_queues.values() for f in fs]
    remote = not getattr(store, "os_paths", False)
    if not (_remote_files(store, rels) if remote else plain_files(store, rels)):
        return None
    where = _remote_file if remote else _local_file
    out: dict = {}
    for (topic, _), fs in sorted(files.consume_queues.items()):
        live = [where(store, f.rel)[:1] + [f.rel, f.units] + where(store, f.rel)[1:] for f in fs if f.units > 0]
        if live:
            out.setdefault(topic, []).append(live)
    return out


def ensure_loadable(spark, plan: str | None = None) -> bool:
    """Whether this session can load the JVM reader: on its class path already (``--jars``), or
    added now (``ADD JAR`` of the jar ``jvmjar`` builds); the calling thread's context class
    loader is the session's, so Spark's lookup of the source finds it. For a ``plan`` of a store
    on S3 also S3A (``--jars`` / ``spark.jars``, else ``ADD JAR`` of ``s3a_jars``), and the store's
    S3 settings are set as the session's per-bucket S3A settings."""
    from ..runtime import jvmjar
    jvm = spark._jvm
    state = spark._jsparkSession.sharedState()
    thread = jvm.java.lang.Thread.currentThread()
    if getattr(spark, "_rocketlake_jvm_reader", None) is None:
        ok = _class_loads(jvm, thread.getContextClassLoader())
        if not ok:
            jar = jvmjar.cached_jar()
            if jar is not None:
                spark._jsparkSession.sessionState().resourceLoader().addJar(jar)
                ok = _class_loads(jvm, state.jarClassLoader())
        spark._rocketlake_jvm_reader = ok
    if spark._rocketlake_jvm_reader and not _class_loads(jvm, thread.getContextClassLoader()):
        thread.setContextClassLoader(state.jarClassLoader())
    if not spark._rocketlake_jvm_reader or plan is None or not plan.startswith('{"store": "s3://'):
        return spark._rocketlake_jvm_reader
    if not _class_loads(jvm, state.jarClassLoader(), _S3A_CLASS):
        for jar in s3a_jars():
            spark._jsparkSession.sessionState().resourceLoader().addJar(jar)
        if not _class_loads(jvm, state.jarClassLoader(), _S3A_CLASS):
            return False
    conf = spark._jsc.hadoopConfiguration()
    for k, v in s3a_settings(json.loads(plan)["store"]).items():
        conf.set(k, v)
    return True


def _class_loads(jvm, loader, name: str | None = None) -> bool:
    from ..runtime.jvmjar import SOURCE_CLASS
    try:
        jvm.java.lang.Class.forName(name or SOURCE_CLASS, False, loader)
        return True
    except Exception:  # noqa: BLE001 - py4j reports ClassNotFoundException as a generic error
        return False


def fetched(spark, scheme: str) -> tuple:
    """(bytes, read operations) read from ``scheme``'s Hadoop file systems (``s3a``, ``hdfs``) in
    this session's JVM so far, by any reader (Hadoop's own statistics; local mode: the executors'
    reads too): the difference over a query is what it fetched."""
    total = [0, 0]
    for st in spark._jvm.org.apache.hadoop.fs.FileSystem.getAllStatistics():
        if st.getScheme() == scheme:
            total[0] += int(st.getBytesRead())
            total[1] += int(st.getReadOps())
    return tuple(total)


def explained_failure(text: str):
    """The error of the expiry that deleted the file a JVM task's failure (its text) names missing
    (``MISSING_MARKER``), when an expiry committed after the plan's batch did (``table.expired``:
    ``BadInput``); else None (another failure, or a file the store lost: damage)."""
    at = text.rfind(MISSING_MARKER)
    if at < 0:
        return None
    try:
        mark = json.loads(text[at + len(MISSING_MARKER):].split("\n", 1)[0])
        batch, store, rel = mark["batch"], str(mark["store"]), str(mark["rel"])
    except (ValueError, KeyError, TypeError):
        return None
    if not batch:
        return None
    from ..table.expired import ExpiredFiles
    from ..table.storefiles import as_store
    try:
        return ExpiredFiles(str(batch["batch_id"]), int(batch["batch_seq"])).error(as_store(store), [rel])
    except Exception:  # noqa: BLE001 - no explanation: the file is missing, as far as is known
        return None


def _failure_text(java_exception, converted) -> str:
    """The text of a JVM failure and of its causes (a task's error is in a cause's message)."""
    parts, e = [str(converted)], java_exception
    for _ in range(8):
        if e is None or MISSING_MARKER in parts[-1]:
            break
        try:
            parts.append(str(e.getMessage()))
            e = e.getCause()
        except Exception:  # noqa: BLE001 - not a Java throwable (py4j): nothing more to read
            break
    return "\n".join(parts)


def explain_task_failures() -> None:
    """pyspark's conversion of a JVM error into a Python exception (every action on the driver:
    ``count``, ``collect``, a write) raises, for a JVM task's file an expiry after the plan's
    batch deleted, the expiry's error (``explained_failure``), as a Python task does; any other
    error converts as before. Once per process; a patch of pyspark's module function, by name
    (its wrapper of every Py4J call looks it up there at each error)."""
    from pyspark.errors.exceptions import captured
    if getattr(captured, "_rocketlake_explained", False):
        return
    plain = captured.convert_exception

    def convert(e):
        converted = plain(e)
        text = _failure_text(e, converted)
        known = explained_failure(text) if MISSING_MARKER in text else None
        return converted if known is None else known

    captured.convert_exception = convert
    captured._rocketlake_explained = True  # type: ignore[attr-defined]


def load_jvm(spark, plan: str):
    """The DataFrame of a plan, read by the JVM reader."""
    from ..runtime.jvmjar import SOURCE_CLASS
    explain_task_failures()
    return spark.read.format(SOURCE_CLASS).option("plan", plan).option("schema", MESSAGE_DDL).load()
