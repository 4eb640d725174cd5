"""Looking at a store: the manifest as tables, checkpoints, Delta history, totals and disk cost.

Everything here reads an opened snapshot (``table.snapshots.open_snapshot``) and, for ``stats``, a few
bytes of the consume-queue files; nothing starts Spark. ``storefiles.files_from_snapshot`` turns
a snapshot into the ``storefiles.StoreFiles`` a ``StoreReader`` answers from, so queries on a
snapshot see exactly the files (and valid lengths) that batch committed, expired files included.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ..format import consumequeue, paths
from ..table import manifest, tableread
from ..io import storage
from ..format.config import StoreConfig
from ..io.checked import read_stored
from ..read.query import StoreReader
from ..table.expired import explained
from ..table.rows import FILE_KINDS, FileKind, recorded_config
from ..table.snapshots import StoreSnapshot, open_snapshot
from ..table.storefiles import files_from_snapshot, StoreFiles

__all__ = ["snapshot_reader", "SEGMENT_COLUMNS", "segment_rows", "known_topics",
           "CHECKPOINT_COLUMNS", "checkpoint_rows", "TOPIC_COLUMNS", "topic_rows", "HISTORY_COLUMNS", "history_rows", "format_table",
           "to_json_lines", "allocated_bytes", "stats", "disk_cost", "read_unit"]


# ---------------------------------------------------------------------------- snapshots
def snapshot_reader(store_uri: str, as_of_batch=None, version: int | None = None,
                    base_config: StoreConfig | None = None) -> StoreReader:
    """A ``StoreReader`` over a committed snapshot (a broker's scan for a store without a manifest)."""
    store = storage.Store(store_uri)
    snap = open_snapshot(store, as_of_batch, version, base_config)
    if snap.batch is None:
        return StoreReader(store, snap.config)
    cfg = snap.config
    return StoreReader(store, cfg, files_from_snapshot(store, snap, cfg)[0])


# ---------------------------------------------------------------------------- tables
SEGMENT_COLUMNS = ("kind", "path", "topic", "queue_id", "base_offset", "file_size", "valid_bytes", "count",
                   "min_offset", "max_offset", "min_store_ts", "max_store_ts", "batch_id", "batch_seq")


def segment_rows(snap: manifest.Snapshot, kind: str | None = None, topic: str | None = None) -> list:
    rows = [r for r in snap.files.values()
            if (kind is None or r.kind == kind) and (topic is None or r.topic == topic)]
    order: dict[str, int] = {k: i for i, k in enumerate((*FILE_KINDS, FileKind.CHECKPOINT))}
    rows.sort(key=lambda r: (order.get(r.kind, 9), r.topic or "", r.queue_id or 0, r.base_offset, r.path))
    return rows


def known_topics(snap: StoreSnapshot) -> set[str]:
    """The topics of ``snap``'s store: one with a live consume-queue file, or one a batch wrote a
    queue of (every file of it expired since: still the store's topic, with no live files)."""
    have = {str(r.topic) for r in snap.files.values() if r.kind == FileKind.CONSUMEQUEUE}
    for b in snap.batches:
        try:
            have.update(str(q["topic"]) for q in b.queue_offsets)
        except KeyError:            # (a row read without its queue offsets: the live files say enough)
            pass
    return have


CHECKPOINT_COLUMNS = ("batch_seq", "batch_id", "operation", "committed_at", "messages", "bytes",
                      "index_entries", "total_messages", "min_phy_offset", "max_phy_offset", "queues",
                      "physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp",
                      "min_store_ts", "max_store_ts", "wall_time_ms")


def checkpoint_rows(snap: manifest.Snapshot) -> list:
    out = []
    for b in snap.batches:
        out.append(dict(b, queues=len(b.queue_offsets)))
    return out


TOPIC_COLUMNS = ("topic", "read_queue_nums", "write_queue_nums", "perm", "placed", "set_by_batch")


def topic_rows(snap: manifest.Snapshot) -> list:
    """The topic config the store recorded (what a batch without --topics uses): per topic its
    queue numbers, whether messages were placed by them (round robin / --queue-by: a --topics
    that disagrees is refused) and the batch that set its writeQueueNums (its first, or the last
    batch that changed it); the default for unlisted topics as ``*``."""
    rec = snap.last_detail("topics")
    if not rec:
        return []
    set_by: dict[str, str] = {}
    last: dict[str, Any] = {}
    for b in snap.batches:
        for name, value in ((b.detail.get("topics") or {}).get("topics") or {}).items():
            if last.get(name) != value[1]:
                set_by[name], last[name] = b.batch_id, value[1]
    placed = set(rec.get("placed", ()))
    rows = [{"topic": name, "read_queue_nums": r, "write_queue_nums": w, "perm": perm,
             "placed": "yes" if name in placed else "no", "set_by_batch": set_by.get(name)}
            for name, (r, w, perm) in sorted(rec["topics"].items())]
    rows.append({"topic": "*", "read_queue_nums": rec["default"], "write_queue_nums": rec["default"],
                 "perm": None, "placed": None, "set_by_batch": None})
    return rows


HISTORY_COLUMNS = ("table", "version", "timestamp", "operation", "rocketlake_operation", "batch_id")


def history_rows(store: storage.Store, version: int | None = None) -> list:
    rows = tableread.history(store)
    if version is not None:
        rows = [r for r in rows if r["table"] != "checkpoints" or (r["version"] or 0) <= version]
    return rows


def format_table(rows: list, columns) -> str:
    """Plain fixed-width text table."""
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    numeric = [all(_is_num(r.get(c)) for r in rows) and rows for c in columns]
    lines = ["  ".join(c.ljust(w) if not numeric[i] else c.rjust(w) for i, (c, w) in enumerate(zip(columns, widths)))]
    for row in cells:
        lines.append("  ".join(v.rjust(w) if numeric[i] else v.ljust(w)
                               for i, (v, w) in enumerate(zip(row, widths))))
    return "\n".join(x.rstrip() for x in lines)


def _is_num(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def to_json_lines(rows: list, columns=None) -> str:
    out = []
    for r in rows:
        d = {c: r.get(c) for c in columns} if columns else r
        out.append(json.dumps(d, sort_keys=False, default=str))
    return "\n".join(out)


# ---------------------------------------------------------------------------- stats
def allocated_bytes(store: storage.Store, rel: str) -> int:
    """Bytes the storage really holds for a file: allocated blocks locally, object size elsewhere."""
    if store.os_paths:
        try:
            return os.stat(store.path(rel)).st_blocks * 512
        except OSError:
            return 0
    return store.size(rel) or 0


def stats(store: storage.Store, snap: StoreSnapshot | None, config: StoreConfig | None = None,
          now_ms: int | None = None) -> dict:
    """Totals per topic/queue (messages, bytes, offsets, times) and the store's disk cost.

    Per queue: messages = max offset - min offset (what a consumer can still read), bytes = sum
    of the sizes in those units, store time range of the first/last readable unit. A light message
    queue (``%LMQ%...``, docs/FORMAT.md §2.1) is listed like a topic, but its units are records of
    other topics: the totals leave them out and count them as ``lmq_units_readable``.
    Per topic also its retention rule, oldest live message and the bytes its rule holds back.
    Cost: RocketMQ broker disk (every file at full size, as mmapped files take) against what the
    storage holds (allocated blocks of the sparse files locally, object sizes on object stores).
    """
    if snap is not None and snap.batch is not None:
        cfg = recorded_config(snap.batch, config)
        files = files_from_snapshot(store, snap, cfg)[0]
    else:
        cfg = config or StoreConfig()
        files = StoreFiles.scan(store, cfg)
    with explained(store, files.expired):      # a file of an older batch an expiry deleted: said so
        return _stats(store, snap, cfg, files, manifest.now_ms() if now_ms is None else now_ms)


def _stats(store: storage.Store, snap: StoreSnapshot | None, cfg: StoreConfig, files: StoreFiles,
           now_ms: int) -> dict:
    reader = StoreReader(store, cfg, files)
    queues = []
    topics: dict[str, dict[str, Any]] = {}
    for (topic, qid) in sorted(files.consume_queues):
        mn = reader.get_min_offset_in_queue(topic, qid)
        mx = reader.get_max_offset_in_queue(topic, qid)
        nbytes = 0
        for f in files.consume_queues[(topic, qid)]:
            lo = max(mn * consumequeue.UNIT_SIZE, f.base) - f.base
            hi = f.units * consumequeue.UNIT_SIZE
            if hi > lo:
                raw = read_stored(store, f.rel, lo, hi - lo)
                u = consumequeue.decode_units(raw)
                nbytes += int(u["size"].sum(dtype="int64"))
        first_ts = reader.get_message_store_timestamp(topic, qid, mn) if mx > mn else -1
        last_ts = reader.get_message_store_timestamp(topic, qid, mx - 1) if mx > mn else -1
        q: dict[str, Any] = {"topic": topic, "queue_id": qid, "messages": mx - mn, "bytes": nbytes, "min_offset": mn,
             "max_offset": mx, "first_store_ts": first_ts, "last_store_ts": last_ts}
        queues.append(q)
        t = topics.setdefault(topic, {"topic": topic, "queues": 0, "messages": 0, "bytes": 0,
                                      "first_store_ts": None, "last_store_ts": None})
        t["queues"] += 1
        t["messages"] += q["messages"]
        t["bytes"] += nbytes
        for k, fn in (("first_store_ts", min), ("last_store_ts", max)):
            v = q[k]
            if v is not None and v >= 0:
                t[k] = v if t[k] is None else fn(t[k], v)
    _retention_columns(store, snap, cfg, files, topics, now_ms)
    cost = disk_cost(store, snap, cfg, files)
    # A light message queue's units point at records of other topics, already counted there.
    own = [q for q in queues if not consumequeue.is_lmq(q["topic"])]
    total: dict[str, Any] = {"messages_readable": sum(q["messages"] for q in own),
             "bytes_readable": sum(q["bytes"] for q in own),
             "min_phy_offset": reader.get_min_phy_offset(), "max_phy_offset": reader.get_max_phy_offset(),
             "topics": len(topics), "queues": len(queues)}
    if len(own) < len(queues):
        total["lmq_units_readable"] = sum(q["messages"] for q in queues) - total["messages_readable"]
    if snap is not None and snap.batch is not None:
        # The store times still stored (an expiry removes the oldest; the batch row keeps all
        # written): the range of the live segments' records, whatever order batches came in (a
        # queue's first and last message need not be its oldest and newest).
        lo, hi = _live_store_times(snap, topics)
        total.update(batch_id=snap.batch.batch_id, batch_seq=snap.batch.batch_seq,
                     total_messages_written=snap.batch.total_messages, min_store_ts=lo, max_store_ts=hi)
    return {"total": total, "topics": sorted(topics.values(), key=lambda t: t["topic"]), "queues": queues,
            "cost": cost}


def _live_store_times(snap: StoreSnapshot, topics: dict) -> tuple:
    """(min, max) store time of the live commitlog segments' records (their manifest rows); the
    queues' first/last readable messages for segments whose rows lack them."""
    segs = snap.of_kind(FileKind.COMMITLOG)
    lows = [r.min_store_ts for r in segs if r.min_store_ts is not None]
    highs = [r.max_store_ts for r in segs if r.max_store_ts is not None]
    if len(lows) < len(segs) or len(highs) < len(segs):
        lows += [t["first_store_ts"] for t in topics.values() if t["first_store_ts"] is not None]
        highs += [t["last_store_ts"] for t in topics.values() if t["last_store_ts"] is not None]
    return (min(lows) if lows else None), (max(highs) if highs else None)


def _retention_columns(store: storage.Store, snap, cfg: StoreConfig, files: StoreFiles, topics: dict,
                       now_ms: int) -> None:
    """Per topic: its retention rule (``topicRetention``, else the store-wide ``fileReservedTime``),
    the store time of its oldest live message, and (rocketlake stores) the bytes of commitlog
    segments the store-wide rule alone would remove now that a kept message of the topic holds."""
    from .topic_retention import parse_rules, plan_topic_expiry
    rules = parse_rules(cfg.extra.get("topicRetention"))
    held = {}
    if snap is not None and snap.batch is not None and rules:
        plan = plan_topic_expiry(store, snap, cfg.fileReservedTime, rules, now_ms, cfg.mappedFileSizeCommitLog,
                                 files)
        held = plan["held_back"]
    for t in topics.values():
        name = t["topic"]
        t["retention"] = f"{rules[name]:g}h (topic)" if name in rules else f"{cfg.fileReservedTime:g}h (store)"
        t["oldest_live_ts"] = t["first_store_ts"]
        t["held_back_bytes"] = held.get(name, 0)


def disk_cost(store: storage.Store, snap, cfg: StoreConfig, files: StoreFiles) -> dict:
    by_kind: dict[str, dict[str, Any]] = {}

    def add(kind, rel, full):
        k = by_kind.setdefault(kind, {"kind": kind, "files": 0, "broker_bytes": 0, "stored_bytes": 0,
                                      "valid_bytes": 0})
        k["files"] += 1
        k["broker_bytes"] += full
        k["stored_bytes"] += allocated_bytes(store, rel)

    if snap is not None and snap.batch is not None:
        for r in snap.files.values():
            add(r.kind, r.path, r.file_size)
            by_kind[r.kind]["valid_bytes"] += r.valid_bytes
    else:
        for s in files.commitlog:
            add(FileKind.COMMITLOG, s.rel, cfg.mappedFileSizeCommitLog)
        for fs in files.consume_queues.values():
            for f in fs:
                add(FileKind.CONSUMEQUEUE, f.rel, cfg.cq_file_size)
        for ref in files.index:
            add(FileKind.INDEX, ref.rel, cfg.index_file_size)
        if store.exists(paths.CHECKPOINT_FILE):
            add(FileKind.CHECKPOINT, paths.CHECKPOINT_FILE, 4096)
    meta: dict[str, Any] = {"kind": "_rocketlake (Delta tables)", "files": 0, "broker_bytes": 0, "stored_bytes": 0,
            "valid_bytes": 0}
    for rel in store.list_files(paths.META_DIR):
        meta["files"] += 1
        meta["stored_bytes"] += allocated_bytes(store, rel)
    rows = [by_kind[k] for k in (*FILE_KINDS, FileKind.CHECKPOINT) if k in by_kind]
    tot = {"kind": "total", "files": sum(r["files"] for r in rows),
           "broker_bytes": sum(r["broker_bytes"] for r in rows),
           "stored_bytes": sum(r["stored_bytes"] for r in rows) + meta["stored_bytes"],
           "valid_bytes": sum(r["valid_bytes"] for r in rows)}
    if meta["files"]:
        rows.append(meta)
    rows.append(tot)
    return {"measure": "st_blocks*512" if store.os_paths else "object bytes", "rows": rows}


def read_unit(store: storage.Store, rel: str, unit: int) -> tuple:
    return consumequeue.parse_unit(read_stored(store, rel, unit * consumequeue.UNIT_SIZE, consumequeue.UNIT_SIZE))
