"""Which commitlog segments a read needs: the manifest's per-segment store-time range and the
offset bounds. Without a decoder or pyarrow: the planners (the data sources, the stream source,
the local range scan) run it in processes that never decode a record."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..table.storefiles import CommitLogSegment, SnapshotInfo, StoreFiles

__all__ = ["prune_segments"]


def prune_segments(files: StoreFiles, info: SnapshotInfo | None, begin: int | None = None, end: int | None = None,
                   lo: int | None = None, hi: int | None = None) -> list[CommitLogSegment]:
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
