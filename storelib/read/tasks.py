"""How many Spark tasks read a store's files: a task's fixed cost (a Python worker's round trip,
~0.1-0.2 s) outweighs the read of a small segment, so consecutive small ones share a task, as
Spark's file sources pack small files (``spark.sql.files.maxPartitionBytes``); never fewer tasks
than the cores. Used by the range scan (``rangescan.scan_range``: segments) and the Python
reader's plan (``splits.group_splits``: splits)."""
from __future__ import annotations

from collections.abc import Sequence

__all__ = ["TASK_BYTES", "task_count"]

TASK_BYTES = 128 << 20          # the range scan's bytes per task (the data source's: its splitBytes)


def task_count(sizes: Sequence[int], parallelism: int, task_bytes: int = TASK_BYTES) -> int:
    """How many tasks read items of these sizes (bytes), consecutive items sharing a task: one per
    item when items are large (a full 1 GiB segment is its own task), fewer when they are small,
    never fewer than ``parallelism`` (the cores) nor more than the items."""
    if not sizes:
        return 0
    return min(len(sizes), max(parallelism, -(-sum(sizes) // max(1, task_bytes))))
