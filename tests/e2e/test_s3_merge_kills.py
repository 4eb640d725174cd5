"""Crash safety of the extent merge on an object store (storelib.io.fragments: a batch rewrites a
budgeted run of a continued file's extents as one object): SIGKILL at a fault point of a batch
that merges, on the moto S3 server, then a rerun.

Scenario: small-roll cut in three batches, A1 and A2 committed into ``base/`` (so the files B
continues have two extents each), B the rest, every ingest with ``MAX_EXTENTS`` 1 and a generous
merge share (tests/support/local_ingest.py), so B merges the extents of its segment, consume
queues and index entries. For each point a server-side copy of ``base/`` runs B killed there: before
the checkpoint-table commit the snapshot is A2's, file for file, and verifies; after it, B is
committed. The rerun commits B once; its export is byte-identical to RocketMQ's golden store; no
object of the killed attempt (its merged objects included) is left behind.
"""
from __future__ import annotations

import contextlib
import json
import os

import pytest

from support import s3server
from conftest import golden_set
from test_s3_kills import BUCKET, SMALL, _ingest, kill_then_rerun

pytestmark = pytest.mark.slow

CUTS = (0, 1000, 1700)
MERGE_ENV = {"ROCKETLAKE_TEST_MAX_EXTENTS": "1", "ROCKETLAKE_TEST_MERGE_SHARE": "4"}
POINTS = ("after-extent-merge", "after-files-staged", "before-delta-commit", "between-delta-tables",
          "after-commit-before-publish")
# ~3 min a point: `make faults` / `make long` only (ROCKETLAKE_FAULTS=all)
KILL_POINTS = POINTS if os.environ.get("ROCKETLAKE_FAULTS") == "all" else ()


@contextlib.contextmanager
def three_batch_base(tmp, extra_env: dict):
    """(env, client, golden dir, B's messages, properties) with A1 and A2 in ``base/``, every ingest
    with ``extra_env`` (tests/support/local_ingest.py's test settings)."""
    g = golden_set("small-roll")
    props = tmp / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()
    bounds = list(CUTS) + [len(lines)]
    for k, name in enumerate(("a1", "a2", "b")):
        (tmp / f"{name}.jsonl").write_text("".join(lines[bounds[k]:bounds[k + 1]]), encoding="utf-8")
    with s3server.moto(BUCKET) as (env, client):
        env = dict(env, **extra_env)
        for name in ("a1", "a2"):
            r = _ingest(env, "base", str(tmp / f"{name}.jsonl"), str(props), name.upper())
            assert r.returncode == 0, r.stderr[-3000:]
        yield env, client, g, str(tmp / "b.jsonl"), str(props)


@pytest.fixture(scope="module")
def s3m(tmp_path_factory):
    with three_batch_base(tmp_path_factory.mktemp("s3merge"), MERGE_ENV) as got:
        yield got


def test_the_merge_point_is_a_fault_point():
    from storelib.runtime import faults
    assert set(POINTS) <= set(faults.POINTS + faults.OBJECT_POINTS) and set(faults.OBJECT_POINTS) <= set(POINTS)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_during_a_merging_batch_then_rerun(s3m, point, tmp_path, monkeypatch):
    def merged(snap):
        ext = [e for row in snap.files.values() for e in json.loads(row["detail"] or "{}").get("extents") or []]
        assert any(".merged" in e[2] for e in ext), "batch B merged no extents: the scenario tests nothing"
    kill_then_rerun(s3m, point, tmp_path, monkeypatch, name="merge", batches=("A1", "A2", "B"), check=merged)
