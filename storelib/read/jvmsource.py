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
the snapshot read through a staged patch or a publish in flight). Anything else (object stores, a
publish in flight, no JDK to build the reader, ``option("engine", "python")``) reads through the
Python source, with the same rows.

A DataFrame reads the snapshot that was committed when it was loaded (its plan is made then):
load again to see later batches.
"""
from __future__ import annotations

import json

from .schema import MESSAGE_DDL

__all__ = ["ENGINE_OPTION", "plain_files", "jvm_plan", "load_jvm", "ensure_loadable"]

ENGINE_OPTION = "engine"            # "jvm" | "python" | "auto" (the default: jvm where it can)
_JVM_BATCH_ROWS = 4096              # rows per column batch (Spark's own vectorized readers use 4096)


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
    from .splits import SPLIT_BYTES, plan_splits
    from ..table.storefiles import as_store, open_files
    b = reader.bounds
    store = as_store(reader.path)
    if not getattr(store, "os_paths", False):          # object stores: the Python source reads them
        return None
    files, info = open_files(store, reader.options.get("asofbatch") or None, reader.config())
    segs = prune_segments(files, info, b.lo["store_timestamp"], b.hi["store_timestamp"],
                          b.lo["commitlog_offset"], b.hi["commitlog_offset"])
    if not plain_files(store, [s.rel for s in segs]):
        return None
    begin, end = b.lo["store_timestamp"], b.hi["store_timestamp"]
    splits = plan_splits(store, files, segs, None, False, b.lo["commitlog_offset"], b.hi["commitlog_offset"],
                         split_bytes or SPLIT_BYTES, info, begin, end)
    rows = [[store.path(s.rel), s.rel, s.base, s.valid, s.start, s.stop] + _split_times(info, s) for s in splits]
    bounds = {"begin": b.lo["store_timestamp"], "end": b.hi["store_timestamp"], "lo": b.lo["commitlog_offset"],
              "hi": b.hi["commitlog_offset"], "topics": sorted(b.topics) if b.topics is not None else None}
    return json.dumps({"store": reader.path, "splits": rows, "bounds": bounds,
                       "batch_rows": batch_rows or _JVM_BATCH_ROWS, "queues": _queues(store, files, info, reader)})


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
    if not plain_files(store, rels):
        return None
    out: dict = {}
    for (topic, _), fs in sorted(files.consume_queues.items()):
        live = [[store.path(f.rel), f.rel, f.units] for f in fs if f.units > 0]
        if live:
            out.setdefault(topic, []).append(live)
    return out


def ensure_loadable(spark) -> bool:
    """Whether this session can load the JVM reader: on its class path already (``--jars``), or
    added now (``ADD JAR`` of the jar ``jvmjar`` builds); the calling thread's context class
    loader is the session's, so Spark's lookup of the source finds it."""
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
    return spark._rocketlake_jvm_reader


def _class_loads(jvm, loader) -> bool:
    from ..runtime.jvmjar import SOURCE_CLASS
    try:
        jvm.java.lang.Class.forName(SOURCE_CLASS, False, loader)
        return True
    except Exception:  # noqa: BLE001 - py4j reports ClassNotFoundException as a generic error
        return False


def load_jvm(spark, plan: str):
    """The DataFrame of a plan, read by the JVM reader."""
    from ..runtime.jvmjar import SOURCE_CLASS
    return spark.read.format(SOURCE_CLASS).option("plan", plan).option("schema", MESSAGE_DDL).load()
