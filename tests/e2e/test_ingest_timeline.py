"""bench/ingest_timeline.py's buckets (no Spark): a quarter second goes to the driver's last
milestone when no task runs, to a stage's "both slots" / "tail" by the tasks running and queued,
and the idle core-seconds follow from the tree's CPU."""
from __future__ import annotations

import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import ingest_timeline as tl

MARKS = [(0.5, "preflight"), (1.0, "stage encode"), (5.0, "plan"), (5.1, "stage write"), (9.0, "committed batch b1")]
STAGES = {0: (1.0, 5.0), 1: (5.1, 9.0)}
TASKS = [(0, 1.0, 3.0), (0, 1.0, 2.0), (0, 2.0, 4.5),          # encode: 1.0-2.0 both, 2.0-3.0 both, 3.0-4.5 tail
         (1, 5.2, 8.0), (1, 5.2, 6.0), (1, 6.0, 6.5)]          # write: 6.5-8.0 one task, none queued


def test_stage_names_come_from_the_drivers_milestones():
    assert tl.stage_names(STAGES, MARKS) == {0: "encode", 1: "write"}


@pytest.mark.parametrize("t, want", [
    (0.2, "driver: spark-submit, JVM start"),
    (0.7, "driver: preflight"),
    (1.5, "encode: both slots"),
    (4.0, "encode: tail"),
    (5.05, "driver: plan"),
    (5.5, "write: both slots"),
    (7.0, "write: tail"),
    (9.5, "driver: committed"),
])
def test_a_moment_goes_to_one_bucket(t, want):
    assert tl.bucket_of(t, TASKS, tl.stage_names(STAGES, MARKS), MARKS) == want


def test_one_slot_with_a_task_queued_is_not_a_tail():
    tasks = [(0, 1.0, 2.0), (0, 1.5, 3.0)]         # the second waits for a slot until 1.5 (a slot held elsewhere)
    assert tl.bucket_of(1.2, tasks, {0: "encode"}, MARKS) == "encode: one slot, more queued"


def test_idle_core_seconds_per_bucket():
    t0 = 100.0
    # CPU of the tree: 2 cores busy in the encode stage, 1 in its tail, none after
    samples = [(t0 + t, cpu, 0, 0) for t, cpu in [(1.0, 0.0), (2.0, 2.0), (3.0, 4.0), (4.0, 5.0), (4.5, 5.5)]]
    runnable = [(t0 + t, r, 0) for t, r in [(1.5, 2), (2.5, 3), (3.5, 1), (4.2, 1)]]
    ev = {"tasks": [(s, a + t0, b + t0) for s, a, b in TASKS], "stages": {k: (a + t0, b + t0) for k, (a, b) in STAGES.items()}}
    marks = [(t + t0, n) for t, n in MARKS]
    rows = tl.buckets({"t0": t0, "samples": samples, "runnable": runnable}, ev, marks)
    both, tail = rows["encode: both slots"], rows["encode: tail"]
    assert both[:2] == [2.0, 4.0] and both[5] == 0          # 2 s, 4 CPU-s, no free core sampled
    assert tail[:2] == [1.5, 1.5] and tail[5] == 2 and tail[7] == 2     # one core free at both samples
    assert tl.quiet_idle(both[1], both[5], both[7]) == 0
    assert tl.quiet_idle(tail[1], tail[5], tail[7]) == pytest.approx(1.5)   # half the cores free: idle = CPU
