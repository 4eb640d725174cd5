"""Crash safety of extent lists on an object store (storelib.io.extentlists: a batch writes a
continued file's older extents as a list object, and merges two lists into one): SIGKILL at a
fault point of such a batch, on the moto S3 server, then a rerun.

Scenario: small-roll cut in three batches, A1 and A2 committed into ``base/`` with an inline bound
of one extent (tests/support/local_ingest.py), so A2's rows name list objects and B, the rest,
writes and merges more. For each point a server-side copy of ``base/`` runs B killed there: before
the checkpoint-table commit the snapshot is A2's, file for file, and verifies; after it, B is
committed. The rerun commits B once; its export is byte-identical to RocketMQ's golden store; no
object of the killed attempt (its list objects included) is left behind.
"""
from __future__ import annotations

import json
import os

import pytest

from test_s3_kills import kill_then_rerun
from test_s3_merge_kills import three_batch_base

pytestmark = pytest.mark.slow

LIST_ENV = {"ROCKETLAKE_TEST_INLINE_EXTENTS": "1"}
POINTS = ("after-extent-list", "after-files-staged", "between-delta-tables", "after-commit-before-publish")
# `make faults` / `make long`; `make test` kills a batch at after-extent-list in tests/e2e/test_extent_lists_s3.py
KILL_POINTS = POINTS if os.environ.get("ROCKETLAKE_FAULTS") == "all" else ()


@pytest.fixture(scope="module")
def s3l(tmp_path_factory):
    with three_batch_base(tmp_path_factory.mktemp("s3lists"), LIST_ENV) as got:
        yield got


def test_the_list_point_is_a_fault_point():
    from storelib.runtime import faults
    assert set(faults.EXTENT_LIST_POINTS) <= set(POINTS) <= set(faults.POINTS + faults.EXTENT_LIST_POINTS)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_during_a_batch_writing_extent_lists_then_rerun(s3l, point, tmp_path, monkeypatch):
    def listed(snap):
        lists = [x for row in snap.files.values() for x in json.loads(row["detail"] or "{}").get("extent_lists") or []]
        assert any("/B/" in x[0] for x in lists), "batch B wrote no extent list: the scenario tests nothing"
        assert any(x[4] > 1 for x in lists), "no lists were merged"
    kill_then_rerun(s3l, point, tmp_path, monkeypatch, name="lists", batches=("A1", "A2", "B"), check=listed)
