"""Where a command writes on an object store, however the URI is spelled: a store's key prefix and a
target's are compared as the bucket holds them. An export whose --to lies under the store's own
prefix, and a store or target URI with a '..', '.' or empty path component (listed as spelled, read
and written where the component leads: its "is the target empty" check looked at a prefix that holds
nothing while the files landed in another store), are refused with exit 2 and the bucket is left as
it was. So is a store URI with '%', '?' or '#': its files went where the key is spelled, its Delta
tables where a URL parser took it (s3://b/x?y: the Delta log at x/_delta_log, and the command then
failed as a "concurrent writer" leaving objects behind). The same on HDFS is the same code (``storage.inside``, ``filesystems.filesystem``)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from support import s3server
from support.longrun import long_only

BUCKET = "rocketlake-paths"
SAMPLE = os.path.join(ROOT, "samples", "messages.jsonl")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(env, client) of a moto server whose bucket holds two stores, ``stores/a`` and ``stores/ab``
    (one's key prefix a prefix of the other's)."""
    part = tmp_path_factory.mktemp("paths") / "part.jsonl"
    with open(SAMPLE, encoding="utf-8") as fh:
        part.write_text("".join(fh.readlines()[:200]), encoding="utf-8")
    with s3server.moto(BUCKET) as (env, client):
        for name in ("a", "ab"):
            r = _cli(env, "ingest", "--store", f"s3://{BUCKET}/stores/{name}", "--input", str(part), "--quiet")
            assert r.returncode == 0, r.stderr
        yield env, client


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storelib.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT, **env))


def _bucket(client) -> dict:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for o in page.get("Contents", []):
            out[o["Key"]] = o["ETag"]
    return out


@pytest.mark.parametrize("to", ["stores/a/x", long_only("stores/a/commitlog"), long_only("stores/a")])
def test_an_export_into_the_stores_own_prefix_is_refused(s3, to):
    env, client = s3
    before = _bucket(client)
    r = _cli(env, "export", "--store", f"s3://{BUCKET}/stores/a", "--to", f"s3://{BUCKET}/{to}")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "nothing was written" in r.stderr
    assert _bucket(client) == before
    assert _cli(env, "verify", "--store", f"s3://{BUCKET}/stores/a").returncode == 0


@pytest.mark.parametrize("args", [
    ("export", "--store", f"s3://{BUCKET}/stores/a", "--to", f"s3://{BUCKET}/stores/a/../ab/"),
    ("export", "--store", f"s3://{BUCKET}/stores/a", "--to", f"s3://{BUCKET}/stores/x/../new"),
    ("export", "--store", f"s3://{BUCKET}/stores/x/../a", "--to", f"s3://{BUCKET}/new"),
    ("ingest", "--store", f"s3://{BUCKET}/stores/x/../new", "--input", SAMPLE, "--quiet"),
    ("ingest", "--store", f"s3://{BUCKET}/stores/./new", "--input", SAMPLE, "--quiet"),
    ("ingest", "--store", f"s3://{BUCKET}/stores//new", "--input", SAMPLE, "--quiet"),
    ("ingest", "--store", f"s3://{BUCKET}/stores/a%2Fb", "--input", SAMPLE, "--quiet"),
    ("ingest", "--store", f"s3://{BUCKET}/stores/a?b", "--input", SAMPLE, "--quiet"),
    ("ingest", "--store", f"s3://{BUCKET}/stores/a#b", "--input", SAMPLE, "--quiet"),
    ("query", "--store", f"s3://{BUCKET}/stores/ab/../a", "offset", "--topic", "orders", "--queue", "0",
     "--offset", "0"),
], ids=["export-into-another-store", "export-dotdot", "store-dotdot", "ingest-dotdot", "ingest-dot",
        "ingest-empty", "ingest-escape", "ingest-query", "ingest-fragment", "query-dotdot"])
def test_a_uri_with_dot_dot_or_an_empty_component_is_refused(s3, args):
    env, client = s3
    before = _bucket(client)
    r = _cli(env, *args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert ("component in the path" in r.stderr or "in an object store or HDFS URI" in r.stderr) \
        and "Traceback" not in r.stderr
    assert _bucket(client) == before


def test_a_prefix_of_another_stores_prefix_is_its_own_store(s3, tmp_path):
    """``stores/a`` and ``stores/ab``: an export of one holds its messages only, and a trailing slash
    names the same store."""
    env, _ = s3
    for name, to in (("a", "ea"), ("a/", "ea2")):
        r = _cli(env, "export", "--store", f"s3://{BUCKET}/stores/{name}", "--to", str(tmp_path / to))
        assert r.returncode == 0, r.stderr
    assert os.listdir(tmp_path / "ea" / "commitlog") == ["00000000000000000000"]
    r = _cli(env, "inspect", "--store", f"s3://{BUCKET}/stores/a", "stats")
    assert r.returncode == 0 and "messages_readable=200 " in r.stdout, r.stdout


@pytest.mark.parametrize("inside", [long_only("stores/a/sub"), long_only("stores/a/commitlog/x"),
                                    "stores/a/_rocketlake/staging/x"])
def test_a_new_store_under_another_stores_prefix_is_refused(s3, inside):
    """Its objects would be objects of the other store no manifest names (under its _rocketlake/,
    among what that store's writers sweep)."""
    env, client = s3
    before = _bucket(client)
    r = _cli(env, "ingest", "--store", f"s3://{BUCKET}/{inside}", "--input", SAMPLE, "--quiet")
    assert r.returncode == 2 and " lies inside " in r.stderr, (r.returncode, r.stderr[-2000:])
    assert _bucket(client) == before
