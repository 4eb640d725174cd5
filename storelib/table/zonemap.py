"""A commitlog segment's zone map: where its records start and their store times, zone by zone.

A segment is cut into zones of ``zone_bytes(file size)`` bytes (64 zones a segment, at least
4 KiB each). A record belongs to the zone its first byte lies in. For each zone that holds the
start of a record the map keeps the position of its first record (relative to the segment) and
the least and greatest store timestamp of its records. Ingest writes the map into the segment's
manifest row (``detail["zones"]``) and merges it with the map of the prefix the batch continues.

Readers use it twice (``storelib.read.splits``, ``storelib.read.jvmsource`` and the JVM reader):

* split boundaries without a search: a zone's first record is a record start, so a segment's
  splits start on zone starts;
* pruning by store time inside a segment: the records of zones [i, j) are exactly those starting
  in [pos[i], pos[j]) (``pos[j]``: the segment's valid end when j is past the last zone), so a
  split can be narrowed to the runs of zones whose time range meets the query's.

A map is exact or absent. A row without one (a store adopted from a broker, a segment continued
from a prefix written without one) reads as before: segment-wide time bounds, boundaries found
through the consume queues. Zones at or past the segment's valid bytes (a repair that cut the
segment short) are ignored; the zone the cut falls in keeps a time range that may be wider than
its records', which costs reading, never rows.
"""
from __future__ import annotations

import json
from typing import Any, NamedTuple

import numpy as np

__all__ = ["ZONES_PER_SEGMENT", "ZoneMap", "zone_bytes", "build", "merge", "from_detail", "of_row", "to_detail"]

ZONES_PER_SEGMENT = 64
_MIN_ZONE = 4096


def zone_bytes(file_size: int) -> int:
    """Bytes per zone of a segment of ``file_size`` bytes."""
    return max(_MIN_ZONE, int(file_size) // ZONES_PER_SEGMENT)


class ZoneMap(NamedTuple):
    bytes: int              # zone size
    pos: np.ndarray         # int64, ascending: first record start of each non-empty zone (segment-relative)
    min_ts: np.ndarray      # int64 per zone
    max_ts: np.ndarray

    def clip(self, valid: int) -> "ZoneMap":
        """The zones whose first record starts before ``valid``."""
        k = int(np.searchsorted(self.pos, valid, "left"))
        return self if k == len(self.pos) else ZoneMap(self.bytes, self.pos[:k], self.min_ts[:k], self.max_ts[:k])

    def meets(self, begin: int | None = None, end: int | None = None) -> np.ndarray:
        """Per zone: whether its time range meets [begin, end]."""
        ok = np.ones(len(self.pos), bool)
        if begin is not None:
            ok &= self.max_ts >= begin
        if end is not None:
            ok &= self.min_ts <= end
        return ok

    def within(self, start: int, stop: int) -> "ZoneMap":
        """The zones whose first record starts in [start, stop)."""
        k0, k1 = np.searchsorted(self.pos, [start, stop], "left")
        return ZoneMap(self.bytes, self.pos[k0:k1], self.min_ts[k0:k1], self.max_ts[k0:k1])

    def runs(self, valid: int, begin: int | None = None, end: int | None = None) -> list[Any]:
        """[(a, b, min_ts, max_ts)]: segment-relative record-start ranges of the maximal runs of
        zones meeting [begin, end] (a and b: zone starts, or b the valid end)."""
        zm = self.clip(valid)
        ok = zm.meets(begin, end)
        out = []
        k = 0
        while k < len(ok):
            if not ok[k]:
                k += 1
                continue
            j = k
            while j + 1 < len(ok) and ok[j + 1]:
                j += 1
            b = int(zm.pos[j + 1]) if j + 1 < len(zm.pos) else valid
            out.append((int(zm.pos[k]), b, int(zm.min_ts[k:j + 1].min()), int(zm.max_ts[k:j + 1].max())))
            k = j + 1
        return out

    def aligned(self, valid: int, target: int) -> int | None:
        """The first zone start at or after ``target`` (segment-relative), None if none before ``valid``."""
        zm = self.clip(valid)
        k = int(np.searchsorted(zm.pos, target, "left"))
        return int(zm.pos[k]) if k < len(zm.pos) else None


def _grouped(zone: int, pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> ZoneMap:
    """The map of entries at ascending positions ``pos`` with time ranges [lo, hi], one per zone."""
    if not len(pos):
        return ZoneMap(zone, pos, lo, hi)
    z = pos // zone
    cut = np.concatenate([[0], np.flatnonzero(z[1:] != z[:-1]) + 1])
    return ZoneMap(zone, pos[cut], np.minimum.reduceat(lo, cut), np.maximum.reduceat(hi, cut))


def build(zone: int, rel_pos: np.ndarray, ts: np.ndarray) -> ZoneMap:
    """The map of records starting at ``rel_pos`` (segment-relative, ascending) with store times ``ts``."""
    ts = np.asarray(ts, np.int64)
    return _grouped(zone, np.asarray(rel_pos, np.int64), ts, ts)


def merge(*maps: ZoneMap | None) -> ZoneMap | None:
    """One map of records from several (in any order; zones shared are combined); None if any is None."""
    present = [m for m in maps if m is not None]
    if len(present) != len(maps):
        return None
    zone = present[0].bytes
    if any(m.bytes != zone for m in present):
        raise ValueError(f"zone maps of different zone sizes: {sorted({m.bytes for m in present})}")
    pos = np.concatenate([m.pos for m in present])
    lo = np.concatenate([m.min_ts for m in present])
    hi = np.concatenate([m.max_ts for m in present])
    order = np.argsort(pos, kind="stable")
    return _grouped(zone, pos[order], lo[order], hi[order])


def to_detail(m: ZoneMap) -> dict[Any, Any]:
    return {"bytes": int(m.bytes), "pos": m.pos.tolist(), "min_ts": m.min_ts.tolist(), "max_ts": m.max_ts.tolist()}


def from_detail(d: dict[Any, Any] | None) -> ZoneMap | None:
    """The map kept in a row's detail (``detail["zones"]``), None if absent or malformed."""
    if not isinstance(d, dict):
        return None
    try:
        pos = np.asarray(d["pos"], np.int64)
        lo = np.asarray(d["min_ts"], np.int64)
        hi = np.asarray(d["max_ts"], np.int64)
        zone = int(d["bytes"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if zone <= 0 or not (len(pos) == len(lo) == len(hi)) or (len(pos) and (np.diff(pos) <= 0).any()):
        return None
    return ZoneMap(zone, pos, lo, hi)


def of_row(row: dict[Any, Any] | None) -> ZoneMap | None:
    """The zone map of a commitlog manifest row, None if it has none."""
    if not row or not row.get("detail") or '"zones"' not in row["detail"]:
        return None
    try:
        return from_detail(json.loads(row["detail"]).get("zones"))
    except ValueError:
        return None
