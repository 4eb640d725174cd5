"""Which commitlog segments a read needs: the manifest's per-segment store-time range and the
offset bounds. Without a decoder or pyarrow: the planners (the data sources, the stream source,
the local range scan) run it in processes that never decode a record."""
from __future__ import annotations

__all__ = ["prune_segments"]


def prune_segments(files, info, begin=None, end=None, lo=None, hi=None):
    """Segments that may hold records with store time in [begin, end] / offsets in [lo, hi]."""
    out = []
    for seg in files.commitlog:
        if lo is not None and seg.base + seg.valid <= lo:
            continue
        if hi is not None and seg.base > hi:
            continue
        if seg.valid <= 0:
            continue
        stats = info.seg_ts.get(seg.base) if info is not None else None
        if stats and stats[0] is not None and stats[1] is not None:
            if begin is not None and stats[1] < begin:
                continue
            if end is not None and stats[0] > end:
                continue
        out.append(seg)
    return out
