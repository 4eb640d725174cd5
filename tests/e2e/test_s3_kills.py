"""Crash safety on an object store: SIGKILL at a fault point of a batch that continues a store on
the moto S3 server (its segment's extents, its index file's paged head: storelib.io.headpages),
then a rerun.

Scenario: small-roll cut in two batches, A = messages [0, 1700) committed once into ``base/``, B =
the rest. For each point a server-side copy of ``base/`` runs batch B without Spark
(tests/support/local_ingest.py) with ``ROCKETLAKE_FAULT=<point>``: the process dies there (-9).

* before the checkpoint-table commit: the committed snapshot is A's, file for file (path, size,
  checksum), and it still exports and verifies;
* after it: batch B is committed.

The rerun of B (no fault) then commits B once, its export is byte-identical to RocketMQ's golden
store, and no object of the killed attempt is left behind: every object under the store is a
Delta table's or named by a row of a committed batch (an extent, a paged head's layer).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest

from support import goldenlib
from support import s3server
from conftest import ROOT, golden_set

pytestmark = pytest.mark.slow

PY = sys.executable
BUCKET = "rocketlake-kills"
SMALL = goldenlib.SMALL_ROLL_CONFIG
CUT = 1700
# the driver's steps and both stages' writers as an object store runs them (no publish there)
POINTS = ("after-lease", "after-scan", "after-plan", "encode-split", "mid-records-write", "mid-segment-write",
          "after-segment-write", "mid-file-write", "after-files-staged", "before-delta-commit",
          "between-delta-tables", "after-commit-before-publish", "after-publish-before-cleanup")
# `make test`: the manifest committed, the checkpoint table not (the batch must stay invisible and
# its objects be cleared by the rerun); `make faults` / `make long`: every point
SAMPLED = ("between-delta-tables",)
KILL_POINTS = POINTS if os.environ.get("ROCKETLAKE_FAULTS") == "all" else SAMPLED
POST_COMMIT = ("after-commit-before-publish", "after-publish-before-cleanup")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(env, client, golden dir, B's messages file, properties file) with batch A in ``base/``."""
    with base_store(tmp_path_factory.mktemp("s3kills"), s3server.moto) as got:
        yield got


@contextlib.contextmanager
def base_store(tmp, server):
    """``s3``'s tuple on the server ``server(BUCKET)`` starts (moto here, S3Proxy in test_s3proxy.py)."""
    g = golden_set("small-roll")
    props = tmp / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()
    (tmp / "a.jsonl").write_text("".join(lines[:CUT]), encoding="utf-8")
    (tmp / "b.jsonl").write_text("".join(lines[CUT:]), encoding="utf-8")
    with server(BUCKET) as (env, client):
        r = _ingest(env, "base", str(tmp / "a.jsonl"), str(props), "A")
        assert r.returncode == 0, r.stderr[-3000:]
        yield env, client, g, str(tmp / "b.jsonl"), str(props)


def _ingest(env, prefix, src, props, batch, fault=None):
    extra = {"ROCKETLAKE_FAULT": fault, "ROCKETLAKE_FAULT_SKIP": "0"} if fault else {}
    return subprocess.run([PY, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest",
                           f"s3://{BUCKET}/{prefix}", src, props, batch], env=dict(os.environ, **env, **extra),
                          capture_output=True, text=True, timeout=300)


def _copy(client, src, dst):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{src}/")
    for page in pages:
        for o in page.get("Contents", []):
            client.copy_object(Bucket=BUCKET, Key=dst + o["Key"][len(src):],
                               CopySource={"Bucket": BUCKET, "Key": o["Key"]})


def _keys(client, prefix):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/")
    return {o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", [])}


def _in_process(env, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def _snapshot(prefix, as_of=None):
    from storelib.io import storage
    from storelib.table import manifest
    snap = manifest.load_snapshot(storage.Store(f"s3://{BUCKET}/{prefix}"), as_of)
    files = {p: (r["file_size"], r["valid_bytes"], r["checksum"]) for p, r in snap.files.items()}
    return snap, files


def _export(env, prefix, out):
    r = subprocess.run([PY, os.path.join(ROOT, "jobs", "export.py"), "--store", f"s3://{BUCKET}/{prefix}", "--to",
                        str(out)], env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def _named_objects(snap) -> set:
    """Objects a committed row names: its extents' objects, its paged head's layers, its extent
    lists' objects (what they list was named inline by an earlier batch's row)."""
    out = set()
    for r in snap.files.values():
        d = json.loads(r.get("detail") or "{}")
        out.update(e[2] for e in d.get("extents") or [])
        out.update((d.get("head") or {}).get("layers") or [])
        out.update(x[0] for x in d.get("extent_lists") or [])
    return out


def test_every_object_store_point_is_a_fault_point():
    from storelib.runtime import faults
    assert set(POINTS) <= set(faults.POINTS) and set(SAMPLED) <= set(POINTS)


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_then_rerun_on_s3(s3, point, tmp_path, monkeypatch):
    kill_then_rerun(s3, point, tmp_path, monkeypatch)


def kill_then_rerun(s3, point, tmp_path, monkeypatch, name="kill", batches=("A", "B"), check=None):
    """Batch B killed at ``point`` on a copy of ``base/``, then rerun (the module docstring);
    ``batches``: the committed batches after it, ``check(snap)``: more to check of the rerun's."""
    env, client, g, b_src, props = s3
    prefix = f"{name}-{point}"
    _copy(client, "base", prefix)
    _in_process(env, monkeypatch)
    snap_a, files_a = _snapshot(prefix)
    r = _ingest(env, prefix, b_src, props, "B", fault=point)
    assert r.returncode == -9, (point, r.returncode, r.stderr[-2000:])
    snap, files = _snapshot(prefix)
    if point in POST_COMMIT:
        assert snap.batch["batch_id"] == "B" and snap.batch_seq == len(batches)
    else:
        assert snap.batch["batch_id"] == batches[-2] and snap.batch_seq == snap_a.batch_seq and files == files_a, point
        from storelib.verify import driver as verify
        assert verify.verify_store(f"s3://{BUCKET}/{prefix}").problems == []
    r = _ingest(env, prefix, b_src, props, "B")
    assert r.returncode == 0, r.stderr[-3000:]
    snap, _ = _snapshot(prefix)
    assert [b["batch_id"] for b in snap.batches] == list(batches)
    if check is not None:
        check(snap)
    golden_and_no_stray(env, client, g, prefix, snap, tmp_path)


def golden_and_no_stray(env, client, g, prefix, snap, tmp_path):
    """The store exports byte-identical to the golden store ``g``, and every object under it is a
    Delta table's or named by a row of one of ``snap``'s committed batches."""
    _export(env, prefix, tmp_path / "export")
    assert goldenlib.compare(g, str(tmp_path / "export")) == []
    named = set().union(*(_named_objects(_snapshot(prefix, b["batch_seq"])[0]) for b in snap.batches))
    keys = _keys(client, prefix)
    stray = {k for k in keys if k not in named and (k.startswith("_rocketlake/objects/") or not k.startswith("_rocketlake/"))}
    assert named and not stray, sorted(stray)[:10]
    assert not [k for k in keys if k == "" or k.endswith("/")], "a writer added directory markers"
