"""`make bench-cluster-sim` (bench/cluster_sim.py) at a tiny size, so its code cannot rot: the
driver's real sequencer, commit rows, Delta commits and snapshot loads over synthetic split facts
(issue 40 item 4). Segments of 4 MiB so that splits straddle them (the planner's detail path)."""
from __future__ import annotations

import argparse
import os
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))

import cluster_sim


def _args(**kw):
    a = dict(messages=200_000, splits=100, topics=50, queues=16, record_bytes=512, keys=1, batches=100, real=3,
             segment_bytes=4 << 20)
    a.update(kw)
    return argparse.Namespace(**a)


def test_one_batch_plans_rolls_and_commits_every_file():
    r = cluster_sim.run_one(_args())
    # a 4 MiB segment holds 8,191 records of 512 B (and the 8-byte BLANK that closes it): 25 segments
    assert r["segments"] == -(-200_000 // (((4 << 20) - 8) // 512)) == 25
    assert r["cq_files"] == 50 * 16 and r["index_files"] == 1
    assert r["rows"] == r["segments"] + r["cq_files"] + r["index_files"] + 1
    assert r["queue_offsets"] == 800
    assert r["manifest"]["log_bytes"] > 0 and r["checkpoints"]["log_bytes"] > 0


def test_store_of_many_batches_is_modelled_from_real_commits(monkeypatch):
    from storelib.table import manifest
    monkeypatch.setattr(manifest, "COMPACT_MIN_ROWS", 0)       # (a table of 800 live rows compacted too)
    a = _args(messages=100 * 2_000)
    res = cluster_sim.run_store(a)
    per = res["per_batch"]
    assert len(per) == 3 and res["batch_messages"] == 2_000
    # 2,000 messages a batch touch 800 queues: every batch continues all 800 queue files and the tail segment
    assert all(p["cq_files"] == 800 for p in per)
    # the commit's tail runs too: the snapshot cache written from the committed snapshot (rows rowcheck accepts)
    assert all(p["refresh_wrote"] and p["refresh_s"] > 0 and p["checkpoints_read_s"] > 0 for p in per)
    assert res["live_files"] == 800 + 1 + 1 + 1
    loads = [rows for rows, _ in res["loads"]]
    assert loads == sorted(loads) and loads[-1] == sum(p["rows"] for p in per)
    # the manifest table is compacted once its rows outnumber twice the live ones: a load reads at
    # most those and one batch's, however many batches came before
    assert any(p["compacted"] for p in per)
    assert all(p["table_rows"] <= 2 * (p["live_files"] + 1) + p["rows"] for p in per)
    m = cluster_sim.model(res, a.batches)
    assert m["manifest_rows_after"] == m["rows_per_batch"] * 100 and m["plan_commit_s"] > 0
    assert m["compacting"] and m["rows_read_after"] <= 2 * (res["live_files"] + 1) + m["rows_per_batch"]


def test_a_history_of_real_commits_before_the_real_batches(monkeypatch):
    from storelib.table import ckmerge
    monkeypatch.setattr(ckmerge, "MERGE_MIN_FILES", 8)           # (merged within a history of 40)
    res = cluster_sim.run_store(_args(messages=100 * 2_000, history=40))
    h, per = res["history"], res["per_batch"]
    assert h["batches"] == 40 and len(h["commit_s_by_hundred"]) == 1 and h["open_s"] > 0
    # the history's commits are in both tables: versions, log files, and its merged checkpoint rows
    assert [p["batches"] for p in per] == [1, 42, 43]
    assert h["log"]["manifest"]["log_files"] >= 41 and h["log"]["checkpoints"]["log_files"] >= 41
    assert h["log"]["checkpoints"]["data_files"] < 41 // 2
    # the real batches after it go through the same driver code, and the live files are the same
    assert all(p["cq_files"] == 800 and p["refresh_wrote"] for p in per) and res["live_files"] == 800 + 3
