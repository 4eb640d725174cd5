"""Fault injection for crash-safety tests.

``ROCKETLAKE_FAULT=<point>`` makes the process that reaches ``<point>`` kill itself with SIGKILL
(no cleanup, no finally blocks), as a crash or an OOM kill would. ``ROCKETLAKE_FAULT_SKIP=N``
lets the point pass N times first (e.g. the second segment). The environment reaches Spark's
Python workers, so executor-side points work in local mode and on a local cluster.

Points (in the order an ingest passes them):
  driver:   after-scan, after-plan, after-segments-staged, after-files-staged,
            before-delta-commit, between-delta-tables, after-commit-before-publish,
            mid-publish, after-publish-before-cleanup
  executor: scan-split, mid-segment-write, after-segment-write, mid-file-write
"""
from __future__ import annotations

import os
import signal

POINTS = (
    "after-scan", "after-plan", "after-segments-staged", "after-files-staged", "before-delta-commit",
    "between-delta-tables", "after-commit-before-publish", "mid-publish", "after-publish-before-cleanup",
    "scan-split", "mid-segment-write", "after-segment-write", "mid-file-write",
)

_passed: dict = {}


def fault(point: str) -> None:
    want = os.environ.get("ROCKETLAKE_FAULT")
    if not want or want != point:
        return
    skip = int(os.environ.get("ROCKETLAKE_FAULT_SKIP", "0") or 0)
    n = _passed.get(point, 0)
    _passed[point] = n + 1
    if n < skip:
        return
    marker = os.environ.get("ROCKETLAKE_FAULT_MARKER")
    if marker:
        with open(marker, "a") as fh:
            fh.write(f"{point} pid={os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)
