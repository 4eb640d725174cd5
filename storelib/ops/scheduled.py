"""Scheduled messages as of a snapshot: how far the broker's delivery had got, for an export.

A RocketMQ 5.3.3 broker keeps two kinds of scheduled messages in the CommitLog, each delivered by
putting a copy into the real topic when due (docs/DESIGN.md, "Scheduled messages in an export"):

* delay-level messages in ``SCHEDULE_TOPIC_XXXX`` (queue = level - 1), delivered per level in
  queue order by ``ScheduleMessageService``; where each level got to is ``config/delayOffset.json``
  (``offsetTable``: level -> the next queue offset to deliver);
* timer messages (``setDelayTimeSec`` / ``setDeliverTimeMs``) in ``rmq_sys_wheel_timer`` queue 0,
  read in queue order into the timer wheel by ``TimerMessageStore.enqueue`` and delivered by time;
  where the enqueue got to is ``config/timercheck`` (``TimerCheckpoint``).

Neither file is in the store files a mirror copies. An export writes both from the snapshot's own
records: a scheduled entry counts as delivered only if its copy is in the snapshot after it (the
same real topic and queue, ``UNIQ_KEY``, born time, body CRC and reconsume times, an identity no
other entry shares), and each cursor is the first entry that does not (so a restored broker never
skips an undelivered message; an already delivered one after that cursor is delivered again).
"""
from __future__ import annotations

from typing import Any, Iterable

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..codec import messages as codec
from ..codec.properties import property_values
from ..format import paths
from ..format.checkpoint import TIMER_CHECK_FILE, TimerCheckpoint
from ..io import storage
from ..table import storefiles
from ..table.rows import FileKind, ManifestRow
from ..table.snapshots import StoreSnapshot

__all__ = ["SCHEDULE_TOPIC", "TIMER_TOPIC", "DELAY_OFFSET_PATH", "TIMER_CHECK_PATH", "HALF_TOPIC", "Progress",
           "DeliveryScan", "progress_of", "delay_offset_json", "timer_check_bytes", "export_config_files"]

SCHEDULE_TOPIC = codec.SCHEDULE_TOPIC
TIMER_TOPIC = "rmq_sys_wheel_timer"               # TimerMessageStore.TIMER_TOPIC
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"           # a scheduled entry for it is discarded, never delivered
DELAY_OFFSET_PATH = paths.BROKER_DELAY_OFFSET
TIMER_CHECK_PATH = TIMER_CHECK_FILE
_SEP = "\x00"


class Progress:
    """Delivery as of a snapshot: ``delay_offsets`` {level: next queue offset to deliver},
    ``timer_offset`` (the timer queue's next offset to enqueue; None: no timer queue), and counts."""

    def __init__(self, delay_offsets: dict[int, int], timer_offset: int | None, counts: dict[str, int]):
        self.delay_offsets, self.timer_offset, self.counts = delay_offsets, timer_offset, counts

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"delay_offsets": {str(k): v for k, v in sorted(self.delay_offsets.items())}, **self.counts}
        if self.timer_offset is not None:
            out["timer_offset"] = self.timer_offset
        return out


def delay_offset_json(progress: Progress) -> bytes:
    """``config/delayOffset.json`` as ``DelayOffsetSerializeWrapper`` reads it (no ``dataVersion``:
    ``ScheduleMessageService.decode`` takes the table alone)."""
    table = {str(k): int(v) for k, v in sorted(progress.delay_offsets.items())}
    return json.dumps({"offsetTable": table}, separators=(",", ":")).encode()


def timer_check_bytes(progress: Progress) -> bytes:
    """``config/timercheck`` as ``TimerCheckpoint`` reads it: lastReadTimeMs 0 (recover starts the
    wheel at now minus its window), lastTimerLogFlushPos 0 (no timer log is exported),
    lastTimerQueueOffset = masterTimerQueueOffset = the cursor, dataVersion zeros."""
    q = int(progress.timer_offset or 0)
    return TimerCheckpoint(last_timer_queue_offset=q, master_timer_queue_offset=q).to_bytes()


def export_config_files(store: storage.Store, snap: StoreSnapshot, staged: set[Any]) -> DeliveryScan:
    """What an export of ``snap`` writes under ``config/`` (``table.export.export_store``'s
    ``config_files``: a ``DeliveryScan`` of the segments the export reads), and its summary:
    ``delayOffset.json`` always (a broker without it delivers every delay-level message in the
    store again), ``timercheck`` when the snapshot has a timer queue."""
    return DeliveryScan(snap.files.values())


def progress_of(store: storage.Store, files: Iterable[ManifestRow], staged: set[Any]) -> Progress:
    """The delivery progress of the snapshot whose manifest rows are ``files`` (read as the export
    reads them: ``storefiles.reading_path``)."""
    scan = DeliveryScan(files)
    for row in scan.segments:
        scan.add(row, store.read(storefiles.reading_path(store, row, staged), 0, max(row.valid_bytes, 0)))
    return scan.progress()


class DeliveryScan:
    """The delivery progress of a snapshot (``files``: its manifest rows) from its CommitLog
    segments, handed to ``add`` in base-offset order (an export hands it each segment it reads:
    the CommitLog is read once). Wants the CommitLog only when the snapshot has a queue of either
    scheduled topic: each segment decoded at once (no bodies), the properties parsed of the
    entries and of the records that match one on everything else only."""

    def __init__(self, files: Iterable[ManifestRow]):
        rows = list(files)
        sched_queues = {r["topic"] for r in rows if r["kind"] == FileKind.CONSUMEQUEUE} & {SCHEDULE_TOPIC, TIMER_TOPIC}
        self.segments = sorted((r for r in rows if r["kind"] == FileKind.COMMITLOG),
                               key=lambda r: int(r["base_offset"])) if sched_queues else []
        self._wanted = [r.path for r in self.segments]     # those not added yet, in order
        self._paths = set(self._wanted)
        self._entries: list[pa.Table] = []
        self._copies: list[pa.Table] = []
        self._seen = pa.array([], pa.string())    # the entries' identities without UNIQ_KEY, so far

    def wants(self, row: ManifestRow) -> bool:
        return row.path in self._paths

    def add(self, row: ManifestRow, data: bytes) -> None:
        """The next segment's valid bytes (``ValueError`` out of order: a copy counts only after its entry)."""
        if not self._wanted or row.path != self._wanted[0]:
            raise ValueError(f"{row.path}: not the next CommitLog segment of the snapshot")
        self._wanted.pop(0)
        recs = _records(row, data)
        if recs is None:
            return
        is_entry = np.asarray(pc.is_in(recs["topic"], pa.array([SCHEDULE_TOPIC, TIMER_TOPIC])), bool)
        if is_entry.any():
            e = recs.filter(pa.array(is_entry))
            pv = property_values(e["properties_string"], ("REAL_TOPIC", "REAL_QID", "UNIQ_KEY"))
            pre = _identity(pv["REAL_TOPIC"], pv["REAL_QID"], e)
            self._entries.append(pa.table({
                "topic": e["topic"], "queue_id": e["queue_id"], "queue_offset": e["queue_offset"],
                "offset": e["commitlog_offset"], "real_topic": pv["REAL_TOPIC"].cast(pa.string()),
                "key": _with_uniq(pre, pv["UNIQ_KEY"])}))
            self._seen = pa.concat_arrays([self._seen, pre])
        if not len(self._seen) or is_entry.all():
            return
        c = recs.filter(pa.array(~is_entry))
        # the properties are parsed only of the records that match an entry on every other part
        c = c.filter(pc.is_in(_identity(c["topic"], c["queue_id"], c), self._seen))
        if c.num_rows:
            uniq = property_values(c["properties_string"], ("UNIQ_KEY",))["UNIQ_KEY"]
            self._copies.append(pa.table({"offset": c["commitlog_offset"],
                                          "key": _with_uniq(_identity(c["topic"], c["queue_id"], c), uniq)}))

    def progress(self) -> Progress:
        if not self.segments:
            return Progress({}, None, {})
        if self._wanted:
            raise ValueError(f"{self._wanted[0]}: a CommitLog segment of the snapshot was not read")
        return _cursors(self._entries, self._copies)

    def files(self) -> tuple[list[tuple[str, bytes]], dict[str, Any]]:
        progress = self.progress()
        out = [(DELAY_OFFSET_PATH, delay_offset_json(progress))]
        if progress.timer_offset is not None:
            out.append((TIMER_CHECK_PATH, timer_check_bytes(progress)))
        return out, progress.summary()


def _records(row: ManifestRow, data: bytes) -> pa.Table | None:
    if row.valid_bytes <= 0:
        return None
    buf = np.frombuffer(data, np.uint8)
    starts, _, _ = codec.record_starts(buf, 0, len(buf))
    if not len(starts):
        return None
    return codec.decode_records(buf, row.base_offset, np.asarray(starts, np.int64), body=False,
                                origin=(row.path, 0))


def _identity(topic: Any, queue_id: Any, recs: pa.Table) -> pa.Array:
    """What a delivered copy shares with its scheduled entry (``ScheduleMessageService.messageTimeUp``,
    ``TimerMessageStore.convertMessage``: the real topic and queue, the properties, born time,
    body and reconsume times carried over), but ``UNIQ_KEY`` (``_with_uniq``), as one string per record."""
    parts = [pc.cast(topic, pa.string()), pc.cast(queue_id, pa.string()), pc.cast(recs["born_timestamp"], pa.string()),
             pc.cast(recs["body_crc"], pa.string()), pc.cast(recs["reconsume_times"], pa.string())]
    return _joined(parts)


def _with_uniq(identity: pa.Array, uniq: Any) -> pa.Array:
    return _joined([identity, pc.cast(uniq, pa.string())])


def _joined(parts: list[Any]) -> pa.Array:
    out = pc.binary_join_element_wise(*[pc.fill_null(p, "") for p in parts], _SEP)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _cursors(entries: list[pa.Table], copies: list[pa.Table]) -> Progress:
    if not entries:
        return Progress({}, None, {"scheduled_entries": 0})
    e = pa.concat_tables(entries).combine_chunks()
    key = e["key"].chunk(0) if e["key"].num_chunks else pa.array([], pa.string())
    # an identity two entries share (a timer message rolled over, a resend in the same
    # millisecond) tells no copy apart: such entries count as undelivered
    vc = pc.value_counts(key)
    dup_keys = vc.field("values").filter(pc.greater(vc.field("counts"), 1))
    unique = ~np.asarray(pc.is_in(key, dup_keys), bool)
    last_copy = np.full(len(key), -1, np.int64)
    if copies:
        c = pa.concat_tables(copies).combine_chunks()
        g = c.group_by("key").aggregate([("offset", "max")])
        idx = np.asarray(pc.fill_null(pc.index_in(key, g["key"]), -1), np.int64)
        maxes = np.asarray(g["offset_max"], np.int64)
        last_copy = np.where(idx >= 0, maxes[np.maximum(idx, 0)], -1)
    offset = np.asarray(e["offset"], np.int64)
    delivered = unique & (last_copy > offset)
    # ScheduleMessageService discards an entry whose real topic is the half topic: it is passed, not pending
    delivered |= np.asarray(pc.fill_null(pc.equal(e["real_topic"], HALF_TOPIC), False), bool)
    topic = np.asarray(pc.equal(e["topic"], TIMER_TOPIC), bool)
    qid = np.asarray(e["queue_id"], np.int64)
    qoff = np.asarray(e["queue_offset"], np.int64)
    delay: dict[int, int] = {}
    for q in np.unique(qid[~topic]):               # one pass per delay level (at most 18 by default)
        delay[int(q) + 1] = _first_pending(qoff[~topic & (qid == q)], delivered[~topic & (qid == q)])
    timer = _first_pending(qoff[topic & (qid == 0)], delivered[topic & (qid == 0)]) if topic.any() else None
    counts = {"scheduled_entries": int((~topic).sum()), "scheduled_delivered": int((delivered & ~topic).sum()),
              "timer_entries": int(topic.sum()), "timer_delivered": int((delivered & topic).sum())}
    return Progress(delay, timer, counts)


def _first_pending(qoff: np.ndarray, delivered: np.ndarray) -> int:
    """The queue offset delivery resumes at: the first entry (in queue order) not delivered, or
    one past the last entry."""
    order = np.argsort(qoff, kind="stable")
    qoff, delivered = qoff[order], delivered[order]
    pending = np.flatnonzero(~delivered)
    return int(qoff[pending[0]]) if len(pending) else int(qoff[-1]) + 1
