"""Fault injection for crash-safety tests.

``ROCKETLAKE_FAULT=<point>`` makes the process that reaches ``<point>`` kill itself with SIGKILL
(no cleanup, no finally blocks), as a crash or an OOM kill would. ``ROCKETLAKE_FAULT_SKIP=N``
lets the point pass N times first (per process, e.g. the second segment of a task).
``ROCKETLAKE_FAULT_MARKER=FILE`` appends "<point> pid=<pid>" to FILE before the kill (tests check
the process died where they meant it to). With ``ROCKETLAKE_FAULT_ONCE=1`` the point fires only
if FILE does not exist yet (created exclusively): one kill across all processes, so a retried
Spark task, or a rerun with the same environment, passes.
``ROCKETLAKE_DELAY=<point>:<seconds>`` sleeps at a point instead, and ``ROCKETLAKE_HOLD=<point>:<FILE>``
creates ``FILE.reached`` at the point and waits (up to 10 minutes) until FILE exists: tests of
concurrent writers and of readers during an ingest. ``ROCKETLAKE_HOLD`` may list several
``<point>:<FILE>`` pairs separated by commas (one gate per point).

The environment reaches Spark's Python workers, so executor-side points work in local mode and on
a local cluster.

Points (in the order an ingest passes them):
  driver:   after-lease, after-scan, after-plan, after-files-staged, before-delta-commit,
            between-delta-tables, after-commit-before-publish, mid-apply (local stores: a
            committed batch's in-place patches half applied), mid-publish,
            after-publish-before-cleanup
  executor: encode-split (encode task start), mid-records-write (half of a split's encoded
            records staged), mid-segment-write (half of a segment file written),
            after-records-released (a split's staged records written into their segment and
            deleted: a retry must encode them again),
            after-segment-write (a segment staged, not yet reported to the driver),
            mid-file-write (half of a consume queue / index file written)
  sink:     sink-write (a task of the ``rocketlake`` sink's write half, before it stages its rows)
  objects:  after-extent-merge (object stores: a run of a continued file's extents rewritten as
            one object, the batch not committed; ``OBJECT_POINTS``); after-extent-list (a file's
            older extents written as an extent-list object, storelib.io.extentlists;
            ``EXTENT_LIST_POINTS``)
  compact:  before-compaction (a batch committed, its manifest table's compaction due),
            mid-compaction (the compacted data file in the table, no version names it yet),
            after-compaction (the compaction committed, not yet checkpointed): reached by every
            writer whose commit compacts the manifest table (``COMPACT_POINTS``)
  merge:    before-checkpoints-merge (a batch committed, its checkpoints table's merge due),
            mid-checkpoints-merge (the merged data file in the table, no version names it yet),
            after-checkpoints-merge: reached by every writer whose commit merges the checkpoints
            table's files (``MERGE_POINTS``, storelib.table.ckmerge); before-manifest-merge,
            mid-manifest-merge, after-manifest-merge: the same of the manifest table's files
            (``MANIFEST_MERGE_POINTS``; a commit that compacts the table does not merge it)
  expire:   after-lease, before-delta-commit, between-delta-tables, after-commit-before-publish,
            mid-delete (half of the removed files deleted), after-publish-before-cleanup
            (``EXPIRE_POINTS``)
  sweep:    before-sweep-delete (an expiry's housekeeping found the objects no retained manifest row
            names, none deleted yet), mid-sweep-delete (half of them deleted): reached by an expire
            on an object store whose sweep has objects to delete; before-sweep-state (every one
            deleted, the sweep's state not yet written): by every expire on an object store whose
            sweep completed (``SWEEP_POINTS``, storelib.table.objsweep, storelib.table.sweepstate)
  cache:    cache-before-write (a commit done, its snapshot cache not yet written), cache-after-base
            (a new base of the cache written, the previous delta not yet removed): reached by
            every writer after its commit (``CACHE_POINTS``, storelib.table.snapcache)
"""
from __future__ import annotations

import os
import signal
import time

__all__ = ["DRIVER_POINTS", "EXECUTOR_POINTS", "OBJECT_POINTS", "EXTENT_LIST_POINTS", "POINTS", "POST_COMMIT_POINTS", "EXPIRE_POINTS",
           "SWEEP_POINTS", "COMPACT_POINTS", "MERGE_POINTS", "MANIFEST_MERGE_POINTS", "CACHE_POINTS", "fault"]

DRIVER_POINTS = (
    "after-lease", "after-scan", "after-plan", "after-files-staged", "before-delta-commit",
    "between-delta-tables", "after-commit-before-publish", "mid-apply", "mid-publish", "after-publish-before-cleanup",
)
EXECUTOR_POINTS = ("encode-split", "mid-records-write", "mid-segment-write", "after-records-released",
                   "after-segment-write", "mid-file-write")
POINTS = DRIVER_POINTS + EXECUTOR_POINTS
# reached only by an ingest into an object store (tests/e2e/test_s3_merge_kills.py)
OBJECT_POINTS = ("after-extent-merge",)
# ... and by one whose continued file's inline extents overflow into a list object (storelib.io.extentlists)
EXTENT_LIST_POINTS = ("after-extent-list",)
# reached after a batch's switch when its commit compacts the manifest table (storelib.table.manifest)
COMPACT_POINTS = ("before-compaction", "mid-compaction", "after-compaction")
# reached after a batch's switch when its commit merges the checkpoints table's files (storelib.table.ckmerge)
MERGE_POINTS = ("before-checkpoints-merge", "mid-checkpoints-merge", "after-checkpoints-merge")
# ... and the manifest table's files, when it is not compacted
MANIFEST_MERGE_POINTS = ("before-manifest-merge", "mid-manifest-merge", "after-manifest-merge")
# reached after every commit, where its snapshot cache is written (storelib.table.snapcache)
CACHE_POINTS = ("cache-before-write", "cache-after-base")
SWEEP_POINTS = ("before-sweep-delete", "mid-sweep-delete", "before-sweep-state")
EXPIRE_POINTS = ("after-lease", "before-delta-commit", "between-delta-tables", "after-commit-before-publish",
                 "mid-delete", "after-publish-before-cleanup")
# Points after the checkpoint-table commit: the batch is committed, publishing may be unfinished.
POST_COMMIT_POINTS = ("after-commit-before-publish", "mid-apply", "mid-publish", "after-publish-before-cleanup")

_passed: dict = {}


def fault(point: str) -> None:
    delay = os.environ.get("ROCKETLAKE_DELAY")
    if delay:
        name, _, secs = delay.rpartition(":")
        if name == point:
            time.sleep(float(secs))
    hold = os.environ.get("ROCKETLAKE_HOLD")
    for item in hold.split(",") if hold else ():
        name, _, gate = item.partition(":")
        if name == point:
            open(gate + ".reached", "a").close()
            deadline = time.time() + 600
            while not os.path.exists(gate) and time.time() < deadline:
                time.sleep(0.1)
    want = os.environ.get("ROCKETLAKE_FAULT")
    if not want or want != point:
        return
    skip = int(os.environ.get("ROCKETLAKE_FAULT_SKIP", "0") or 0)
    n = _passed.get(point, 0)
    _passed[point] = n + 1
    if n < skip:
        return
    marker = os.environ.get("ROCKETLAKE_FAULT_MARKER")
    if marker and os.environ.get("ROCKETLAKE_FAULT_ONCE"):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{point} pid={os.getpid()}\n")
    elif marker:
        with open(marker, "a") as fh:
            fh.write(f"{point} pid={os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)
