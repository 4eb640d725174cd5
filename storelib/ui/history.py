"""What the Batches, Topics and Segments pages draw: the store's history batch by batch.

* ``batches``: every committed checkpoint row (the timeline: messages and bytes per batch, the
  operation, its summary) with the Delta versions of both tables its commit made;
* ``queue_series``: a queue's next offset after each batch, and its offsets against store time
  sampled from its consume queue;
* ``segment_map``: which batch wrote which bytes of each CommitLog segment. A batch appends the
  commitlog bytes between the previous batch's ``max_phy_offset`` and its own (an expiry moves
  none), so the spans come from the checkpoint rows alone; each segment's zone map
  (``table.zonemap``) gives the store times of its zones.
"""
from __future__ import annotations


from typing import Any, Mapping, NamedTuple

from ..cli.timeargs import iso
from ..table import manifest, tableread
from ..table.rows import manifest_rows
from ..table.zonemap import of_row

__all__ = ["batches", "batches_spans", "Span", "queue_series", "segment_map", "SAMPLES"]

SAMPLES = 200          # points of a queue's offset-by-store-time curve


def batches(store, snap: manifest.Snapshot) -> list:
    """The committed batches up to ``snap`` (oldest first): the checkpoint row's numbers, its
    summary (``detail``), the commitlog bytes it appended and the Delta versions behind it."""
    versions: dict = {}
    for h in tableread.history(store):
        if h["batch_id"]:
            versions.setdefault(h["batch_id"], []).append(f"{h['table']} v{h['version']}")
    appended = {s.batch_seq: list(s.appended) for s in batches_spans(snap)}
    out = []
    for b in snap.batches:
        try:
            detail: Mapping[str, Any] = b.detail
        except ValueError:
            detail = {"detail": b.get("detail")}      # (shown as stored: it does not parse)
        out.append({"batch_seq": b.batch_seq, "batch_id": b.batch_id, "operation": b.operation,
                    "committed_at": b.committed_at, "committed": iso(b.committed_at),
                    "messages": b.messages, "bytes": b.record_bytes, "total_messages": b.total_messages,
                    "index_entries": b.index_entries, "wall_time_ms": b.wall_time_ms,
                    "min_store_time": iso(b.min_store_ts), "max_store_time": iso(b.max_store_ts),
                    "min_phy_offset": b.min_phy_offset, "max_phy_offset": b.max_phy_offset,
                    "appended": appended.get(b.batch_seq),
                    "queues": len(b.queue_offsets), "summary": detail,
                    "delta_versions": versions.get(b.batch_id, [])})
    return out


def queue_series(reader, snap: manifest.Snapshot | None, topic: str, queue_id: int) -> dict:
    """A queue's bounds, its next offset after each committed batch, and (offset, store time) at up
    to ``SAMPLES`` offsets spread over what is still readable."""
    lo = reader.get_min_offset_in_queue(topic, queue_id)
    hi = reader.get_max_offset_in_queue(topic, queue_id)
    per_batch = []
    for b in (snap.batches if snap is not None else []):
        for q in b.queue_offsets:
            if q["topic"] == topic and q["queue_id"] == queue_id:
                per_batch.append({"batch": f"{b.batch_seq}: {b.batch_id}", "operation": b.operation,
                                  "next_offset": q["max_offset"]})
    n = hi - lo
    offsets = range(lo, hi) if n <= SAMPLES else sorted({lo + (n - 1) * i // (SAMPLES - 1) for i in range(SAMPLES)})
    sampled = []
    for off in offsets:
        ts = reader.get_message_store_timestamp(topic, queue_id, off)
        if ts >= 0:
            sampled.append({"offset": off, "store_time": iso(ts)})
    return {"topic": topic, "queue_id": queue_id, "min_offset": lo, "max_offset": hi,
            "per_batch": per_batch, "sampled": sampled}


def segment_map(snap: manifest.Snapshot, rows: list, file_size: int) -> list:
    """Per commitlog segment (``rows``: its manifest rows, or a broker's segments as dicts with
    path, base_offset, valid_bytes): the spans each batch appended to it and its zones."""
    spans = [(b.batch_seq, b.batch_id, b.operation, b.appended) for b in batches_spans(snap)]
    out = []
    for r in sorted(manifest_rows(rows), key=lambda r: r.base_offset):
        base, valid = r.base_offset, r.valid_bytes
        parts = []
        for seq, bid, op, (a, z) in spans:
            lo, hi = max(a, base), min(z, base + file_size)
            if hi > lo:
                parts.append({"batch_seq": seq, "batch_id": bid, "operation": op,
                              "start": lo - base, "end": hi - base, "bytes": hi - lo})
        zm = of_row(r)
        zones = []
        if zm is not None:
            zm = zm.clip(valid)
            for k in range(len(zm.pos)):
                stop = int(zm.pos[k + 1]) if k + 1 < len(zm.pos) else valid
                zones.append({"start": int(zm.pos[k]), "end": stop, "min_store_time": iso(int(zm.min_ts[k])),
                              "max_store_time": iso(int(zm.max_ts[k]))})
        out.append({"path": r.path, "base_offset": base, "file_size": file_size, "valid_bytes": valid,
                    "count": r.count, "batch_id": r.get("batch_id"),
                    "min_store_time": iso(r.min_store_ts), "max_store_time": iso(r.max_store_ts),
                    "spans": parts, "zones": zones, "zone_bytes": zm.bytes if zm is not None else None})
    return out


class Span(NamedTuple):
    """The commitlog bytes [start, end) one batch appended."""
    batch_seq: int
    batch_id: str
    operation: str
    appended: tuple[int, int]


def batches_spans(snap: manifest.Snapshot) -> list[Span]:
    """The committed batches that appended commitlog bytes, with [start, end) of what they appended."""
    out, prev_end = [], None
    for b in snap.batches:
        start = b.min_phy_offset if prev_end is None else prev_end
        end = b.max_phy_offset
        if end > start:
            out.append(Span(b.batch_seq, b.batch_id, b.operation, (start, end)))
        prev_end = end
    return out
