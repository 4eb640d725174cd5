"""Retention per topic: the plan ``expire`` commits when topics have rules of their own.

A broker expires by CommitLog segment for every topic at once (``fileReservedTime``, ``ops.expire``).
Here a topic may keep its messages for its own number of hours (``--topic T --reserved-hours N``,
or the store configuration's ``topicRetention`` map, ``orders=72,audit=720``); topics not named
keep the store-wide rule:

* consume queues of a topic with a rule: per queue, oldest first, every file but the last whose
  newest message (the store time of the record its last unit points at) is at least N hours old;
  the first file kept stops the run, so a queue keeps a contiguous range and its minimum offset
  (the first kept file's first unit) advances, as it does when a broker removes queue files below
  its CommitLog minimum. A queue keeps its last file (as a broker does); when the rule expires all
  of it, its units pin no segment;
* topics without a rule of their own: the store-wide rule (``--reserved-hours``), applied the same
  way to their queue files (without one, they keep everything);
* commitlog: a prefix of the segments (never the last): a segment goes once no unit of any
  queue's kept files points into it, so a topic kept longer than the store-wide rule holds its
  segments back (``held_back``: those bytes per topic); a queue whose kept units all point below
  the new minimum then starts at its end, as the broker's ``correctMinOffset`` has it;
* then, as for the store-wide rule, every queue file pointing only below the new minimum offset and
  every index file ending below it.

The plan reads queue units and record heads: of the snapshot's files as every reader opens them
(``storefiles.files_from_snapshot``), so it refuses the rows every reader refuses and reads the
bytes every reader reads (objects, staged copies of an unfinished publish).
"""
from __future__ import annotations


import numpy as np

from ..format.config import parse_topic_retention as parse_rules   # the topicRetention map, checked with the config
from ..format import commitlog as cl, consumequeue, records
from ..io import storage
from ..table import storefiles
from ..table.rows import FileKind, ManifestRow
from ..table.snapshots import StoreSnapshot

__all__ = ["parse_rules", "plan_topic_expiry", "min_phy_offset_after", "expiry_plan"]

HOUR_MS = 3600 * 1000


class _Files:
    """The snapshot's files as every reader opens them (``storefiles.files_from_snapshot``: its rows
    checked first, ``rowcheck.check_snapshot``, ``CorruptStore`` for rows readers refuse; a file
    assembled from its objects on object stores; a file of a batch whose publish is unfinished read
    from its staged copy): ``read`` of a row's file reads where a reader reads it. ``files``: the
    snapshot's, when the caller opened them so already."""

    def __init__(self, store: storage.Store, snap: StoreSnapshot, files: storefiles.StoreFiles | None = None):
        if files is None:
            files, _ = storefiles.files_from_snapshot(store, snap)
        segs = {s.base: s.rel for s in files.commitlog}
        queues = {(t, q, f.base): f.rel for (t, q), fs in files.consume_queues.items() for f in fs}
        self.store = store
        self.at = {r.path: segs[r.base_offset] for r in snap.of_kind(FileKind.COMMITLOG)}
        self.at.update({r.path: queues[(str(r.topic), int(r.queue_id or 0), r.base_offset)]
                        for r in snap.of_kind(FileKind.CONSUMEQUEUE)})

    def read(self, r: ManifestRow, offset: int, size: int) -> bytes:
        return self.store.read(self.at[r.path], offset, size)


def _unit_ts(files: _Files, r: ManifestRow, i: int, segs: dict, file_size: int):
    """(phys, store time of its record) of unit ``i`` of a queue file (time None: record gone)."""
    raw = files.read(r, i * consumequeue.UNIT_SIZE, consumequeue.UNIT_SIZE)
    if len(raw) < consumequeue.UNIT_SIZE:
        return None, None
    phys, size, _ = consumequeue.parse_unit(raw)
    seg = segs.get(phys - phys % file_size)
    if seg is None or size <= 0:
        return phys, None
    head = files.read(seg, phys % file_size, min(size, cl.POS_BORNHOST + 64))
    return phys, records.pickup_store_timestamp(head)


def _newest_ts(files: _Files, r: ManifestRow, segs: dict, file_size: int):
    """Store time of the record the queue file's last unit points at (None: unreadable or gone)."""
    n = int(r.count or 0)
    return _unit_ts(files, r, n - 1, segs, file_size)[1] if n > 0 else None


def _lowest_live(files: _Files, r: ManifestRow, segs: dict, file_size: int, cutoff: int):
    """Commitlog offset of the file's first unit whose message is newer than ``cutoff`` (store
    times rise with the offset, as a broker writes them: a binary search of O(log n) reads), None
    when every message is older."""
    lo, hi = 0, int(r.count or 0)
    found = None
    while lo < hi:
        mid = (lo + hi) // 2
        phys, ts = _unit_ts(files, r, mid, segs, file_size)
        if ts is not None and ts > cutoff:
            found, hi = phys, mid
        else:
            lo = mid + 1
    return found


def _min_phys(r: ManifestRow):
    try:
        return r.min_phys
    except ValueError:
        return None


def _max_phys(r: ManifestRow):
    try:
        return r.max_phys
    except ValueError:
        return None


def _first_live(files: _Files, r: ManifestRow, min_offset: int) -> int:
    """The queue offset of the file's first unit pointing at or above ``min_offset`` (the file's
    end when none does): the queue's minimum once the segments below go (``correctMinOffset``)."""
    first = int(r.base_offset) // consumequeue.UNIT_SIZE
    if (_min_phys(r) or 0) >= min_offset:
        return r.min_offset if r.min_offset is not None else first
    n = int(r.count or 0)
    units = consumequeue.decode_units(files.read(r, 0, n * consumequeue.UNIT_SIZE))
    return first + int(np.searchsorted(units["phys"].astype(np.int64), min_offset))


def _queues(snap: StoreSnapshot) -> dict:
    queues: dict = {}
    for r in snap.of_kind(FileKind.CONSUMEQUEUE):
        queues.setdefault((r.topic, r.queue_id), []).append(r)
    return {k: sorted(v, key=lambda r: r.base_offset) for k, v in sorted(queues.items())}


def _topic_files(files: _Files, snap, queues: dict, rule_of, now_ms: int, file_size: int) -> tuple[set, set, dict]:
    """(paths of queue files the topics' rules remove, paths of queues' last files whose every
    message the rule expires (kept, as a queue keeps its last file, but pinning no segment),
    reason per path). ``rule_of(topic)``: its hours (None: kept for ever)."""
    segs = {r.base_offset: r for r in snap.of_kind(FileKind.COMMITLOG)}
    gone, idle, reasons = set(), set(), {}
    for (topic, _qid), qfiles in queues.items():
        hours = rule_of(topic)
        if hours is None:
            continue
        reserved = int(hours * HOUR_MS)
        for k, r in enumerate(qfiles):
            ts = _newest_ts(files, r, segs, file_size)
            if ts is not None and now_ms < ts + reserved:
                break
            if k == len(qfiles) - 1:
                idle.add(r.path)
                break
            gone.add(r.path)
            reasons[r.path] = (f"topic {topic}: newest message {ts} + {hours} h <= now {now_ms}"
                                  if ts is not None else f"topic {topic}: its last unit's record is gone")
    return gone, idle, reasons


def plan_topic_expiry(store: storage.Store, snap: StoreSnapshot, reserved_hours: float | None, rules: dict,
                      now_ms: int, file_size: int, opened: storefiles.StoreFiles | None = None) -> dict:
    """The plan of ``ops.expire.plan_expiry`` (same keys) with the topics' ``rules`` ({topic: hours})
    applied, plus ``reasons`` (path -> why) and ``queue_min_offsets`` (the queues whose minimum
    offset advances: topic, queue id, old and new minimum). It reads the snapshot's files as every
    reader does (``_Files``; ``opened``: them, as ``storefiles.files_from_snapshot`` gave them)."""
    files = _Files(store, snap, opened)
    queues = _queues(snap)
    gone, idle, reasons = _topic_files(files, snap, queues, lambda t: rules.get(t, reserved_hours), now_ms, file_size)
    lowest: dict[str, int] = {}                    # topic -> lowest commitlog offset of a message it keeps
    segs_at = {r.base_offset: r for r in snap.of_kind(FileKind.COMMITLOG)}
    for (topic, _), qfiles in queues.items():
        hours = rules.get(topic, reserved_hours)
        kept = [r for r in qfiles if r.path not in gone and r.path not in idle]
        if not kept:
            continue
        m = _min_phys(kept[0]) if hours is None else \
            _lowest_live(files, kept[0], segs_at, file_size, now_ms - int(hours * HOUR_MS))
        if m is not None:
            lowest[topic] = min(m, lowest.get(topic, m))
    live_min = min(lowest.values()) if lowest else None
    segs = sorted(snap.of_kind(FileKind.COMMITLOG), key=lambda r: r.base_offset)
    gone_cl = []
    for r in segs[:-1]:
        if live_min is not None and r.base_offset + r.file_size > live_min:
            break
        gone_cl.append(r)
        reasons[r.path] = f"no kept queue unit points into it (the lowest at {live_min})"
    held = _held_back(snap, segs, len(gone_cl), reserved_hours, now_ms, lowest, rules)
    min_offset = min_phy_offset_after(snap, segs, gone_cl)
    gone_cq, new_min = [], []
    for (topic, qid), qfiles in queues.items():
        first_kept = None
        for k, r in enumerate(qfiles):
            below = k < len(qfiles) - 1 and (_max_phys(r) is None or _max_phys(r) < min_offset)
            if r.path in gone or below:
                gone_cq.append(r)
                reasons.setdefault(r.path, f"points only below the new min phy offset {min_offset}")
            elif first_kept is None:
                first_kept = r
        new = _first_live(files, first_kept, min_offset) if first_kept else None
        if new != qfiles[0].min_offset:
            new_min.append({"topic": topic, "queue_id": qid, "min_offset_before": qfiles[0].min_offset,
                            "min_offset": new})
    return expiry_plan(snap, gone_cl, gone_cq, min_offset, now_ms, reserved_hours, reasons=reasons,
                       queue_min_offsets=new_min, topic_rules=dict(rules), held_back=held)


def min_phy_offset_after(snap: StoreSnapshot, segs: list, gone_cl: list) -> int:
    """The CommitLog's minimum offset once the first ``len(gone_cl)`` of ``segs`` (by base offset) go."""
    kept = segs[len(gone_cl):]
    return kept[0].base_offset if kept else ((snap.batch.min_phy_offset if snap.batch else 0) or 0)


def expiry_plan(snap: StoreSnapshot, gone_cl: list, gone_cq: list, min_offset: int, now_ms: int,
                reserved_hours: float | None, **more) -> dict:
    """An expiry plan (``ops.expire.plan_expiry``'s keys, and ``more``): the files that go, with
    every index file but the last that ends below ``min_offset`` (oldest first, up to the first
    that does not)."""
    idx = sorted(snap.of_kind(FileKind.INDEX), key=lambda r: r.path.rsplit("/", 1)[-1])
    gone_idx = []
    for r in idx[:-1]:
        if r.max_offset is None or r.max_offset >= min_offset:
            break
        gone_idx.append(r)
    return {FileKind.COMMITLOG: gone_cl, FileKind.CONSUMEQUEUE: gone_cq, FileKind.INDEX: gone_idx, "min_phy_offset": min_offset,
            "previous_min_phy_offset": (snap.batch.min_phy_offset if snap.batch else 0) or 0, "now_ms": now_ms,
            "reserved_hours": reserved_hours, **more}


def _held_back(snap, segs: list, removed: int, reserved_hours, now_ms: int, lowest: dict, rules: dict) -> dict:
    """topic with a rule -> bytes of the segments the store-wide rule alone would remove (by their
    newest message, as ``fileReservedTime`` does) that stay because a kept unit of the topic
    points into them."""
    if reserved_hours is None:
        return {}
    reserved = int(reserved_hours * HOUR_MS)
    wide = 0
    for r in segs[:-1]:
        if r.max_store_ts is None or now_ms < r.max_store_ts + reserved:
            break
        wide += 1
    out = {}
    for topic in rules:
        low = lowest.get(topic)
        out[topic] = sum(int(r.file_size) for r in segs[removed:wide]
                         if low is not None and r.base_offset + r.file_size > low)
    return out
