"""Why writers refuse ``AWS_S3_LOCKING_PROVIDER`` (storelib.io.condput.refuse_locking_provider),
seen on the wire through the counting proxy of bench/s3bench.py in front of moto: the pinned
deltalake has no DynamoDB log store any more, and given ``dynamodb`` it commits each Delta log file
exactly as without it, by a PUT with ``If-None-Match: *``, asking DynamoDB nothing (moto serves
DynamoDB on the same endpoint: no request for it comes). ``AWS_S3_ALLOW_UNSAFE_RENAME`` (what
``ROCKETLAKE_S3_UNSAFE_RENAME=1`` sets) commits the same way. If this test fails, deltalake's
handling of these settings changed: revisit the refusal and docs/DESIGN.md ("No DynamoDB lock")."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))

import s3bench
from support.s3server import moto

pytestmark = pytest.mark.slow

_WRITE = """
import sys
import pyarrow as pa
from deltalake import write_deltalake
base = dict(AWS_ENDPOINT_URL=sys.argv[2], AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
            AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true")
modes = {"etag": dict(AWS_CONDITIONAL_PUT="etag"),
         "dynamodb": dict(AWS_S3_LOCKING_PROVIDER="dynamodb", DELTA_DYNAMO_TABLE_NAME="delta_log"),
         "unsafe": dict(AWS_S3_ALLOW_UNSAFE_RENAME="true")}
for mode, opts in modes.items():
    for i in range(2 if mode == "dynamodb" else 1):
        write_deltalake(f"{sys.argv[1]}/{mode}", pa.table({"x": [i]}), mode="append",
                        storage_options=dict(base, **opts))
"""


def test_deltalake_commits_by_conditional_put_whatever_lock_it_is_given(tmp_path, monkeypatch):
    log = tmp_path / "requests.tsv"
    monkeypatch.setenv("S3BENCH_LOG", str(log))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and not k.startswith("DELTA_DYNAMO")}
    with moto("locking") as (menv, _), s3bench.CountingProxy(menv["AWS_ENDPOINT_URL"]) as proxy:
        # deltalake in a child: its table check holds the GIL while it waits for the server, which
        # never answers when the proxy is a thread of the same process
        r = subprocess.run([sys.executable, "-c", _WRITE, "s3://locking", proxy.url], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
    # method, request, bytes, range, path, status, If-None-Match
    rows = [line.split("\t") for line in log.read_text().splitlines()]
    assert not [r for r in rows if r[0] == "POST"], rows            # no DynamoDB request (nor any other POST)
    for mode in ("etag", "dynamodb", "unsafe"):
        commits = [r for r in rows if f"/locking/{mode}/_delta_log/" in r[4] and r[0] in ("PUT", "COPY")]
        # each commit (a create, and for dynamodb an append too): one PUT of its log file with
        # If-None-Match: *, nothing copied into place
        assert [(r[0], r[1], r[4].rsplit("/", 1)[1], r[6]) for r in commits] == [
            ("PUT", "PutObject", f"{v:020d}.json", "*") for v in range(2 if mode == "dynamodb" else 1)], (mode, commits)
