"""A real S3-compatible server beside moto: S3Proxy (tests/support/s3server.py, `make s3proxy`).

One S3Proxy 4.0.0 (filesystem-nio2 backend, SigV4 keys) on 127.0.0.1 serves the module:

* the conditional-put probe (storelib.io.condput) finds that it honours ``If-None-Match: *``;
* two writers racing on one store: exactly one commits, the other exits 3 and leaves nothing
  (test_ingest_race; `make test`: its ``ordered`` round: both past the lease, the first commits
  and is held before publishing, the second, planned on the same snapshot, loses at the Delta
  commit and removes its own objects only, a reader meanwhile sees the first batch; `make
  backends`: the three rounds of the moto test, the store then byte-identical to RocketMQ's);
* a batch SIGKILLed at a fault point, then rerun, its export byte-identical to RocketMQ's
  (test_s3_kills; `make test`: its sampled point, `make backends` and `make faults`: every point);
* (`make backends`) small-roll in two spark-submit batches is byte-identical to RocketMQ's once
  exported (test_ingest_s3.golden_two_batches, which `make test` runs on moto).

And S3Proxy 2.6.0, which predates conditional writes, is refused by every writer with exit 2 and a
line naming the server and what to do, and nothing is left in its bucket: configured to ignore
unknown headers it overwrites an object on a second ``If-None-Match: *`` PUT (two writers would
both commit); as shipped it answers ``501 NotImplemented`` (every Delta commit would fail; `make
backends` only). ``AWS_S3_LOCKING_PROVIDER=dynamodb`` is refused there too (exit 2): deltalake 1.6
has no DynamoDB lock and ignores it (before, the setting skipped the probe).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import pytest

from support import s3server
from conftest import ROOT

import test_ingest_race as race_cases
import test_ingest_s3 as ingest_cases
import test_s3_kills as kill_cases

pytestmark = pytest.mark.slow

PY = sys.executable
LONG = bool(os.environ.get("ROCKETLAKE_BACKENDS") or os.environ.get("ROCKETLAKE_LONG"))
KILL_POINTS = kill_cases.POINTS if LONG else kill_cases.KILL_POINTS
BUCKET = "rocketlake-s3proxy"


def _jars_or_skip(version: str) -> None:
    from support.mavenfetch import Unavailable
    try:
        s3server.s3proxy_jars(version)
    except Unavailable as e:
        pytest.skip(f"S3Proxy {version} unavailable: {e}")


@pytest.fixture(scope="module")
def proxy():
    """(env, client) of the module's S3Proxy 4.0.0, with ``BUCKET`` created."""
    _jars_or_skip(s3server.S3PROXY)
    with s3server.s3proxy(BUCKET) as env_s3:
        yield env_s3


@contextlib.contextmanager
def _bucket_on(proxy, bucket: str):
    """The module's server as a ``server(bucket)`` factory: another bucket on it."""
    proxy[1].create_bucket(Bucket=bucket)
    yield proxy


def _in_process(env, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def test_s3proxy_honours_conditional_puts(proxy, monkeypatch):
    env, s3 = proxy
    _in_process(env, monkeypatch)
    from storelib.io import condput
    uri = f"s3://{BUCKET}/probe/store"
    ok, what = condput.probe(uri)
    assert ok, what
    assert "412" in what
    condput.require_conditional_put(uri)
    # the probe leaves nothing behind
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="probe/").get("KeyCount", 0) == 0
    # another guard chosen by the user: nothing to probe
    monkeypatch.setenv("ROCKETLAKE_S3_UNSAFE_RENAME", "1")
    assert not condput.needs_probe(uri)
    assert not condput.needs_probe("/tmp/local/store") and not condput.needs_probe("gs://b/store")


@pytest.mark.skipif(not LONG, reason="make backends: test_ingest_s3's two spark-submit batches on S3Proxy "
                    "(make test: on moto, and the kill and rerun here compares with RocketMQ's bytes)")
def test_ingest_to_s3proxy_is_golden(proxy, tmp_path):
    ingest_cases.golden_two_batches(proxy, tmp_path, BUCKET)


def test_racing_ingests_on_s3proxy(proxy, tmp_path):
    env, s3 = proxy
    bucket = race_cases.BUCKET
    s3.create_bucket(Bucket=bucket)
    race = race_cases.Race(tmp_path, f"s3://{bucket}/stores/race", env, (1000, 2000))
    # make test: two batches planned on one snapshot (leases off); the first commits and is held
    # before publishing, then the second reaches the Delta commit: the server's conditional put
    # alone refuses it, and its clean-up must spare the first one's objects and staging
    rounds = race_cases.S3_ROUNDS if LONG else [(("b0", "b1"), (0, 1), "ordered")]
    race_cases.run_rounds(race, rounds)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="stores/race/")
            for o in page.get("Contents", [])]
    assert not [k for k in keys if "/_rocketlake/staging/" in k or k.endswith("writer.lock")
                or condput_key(k)], keys[:20]
    if LONG:
        local = tmp_path / "export"
        r = ingest_cases.export(race.uri, local, env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert race_cases.goldenlib.compare(race_cases.golden_set("small-roll"), str(local)) == []


def condput_key(key: str) -> bool:
    return "/_rocketlake/probe-" in key


@pytest.fixture(scope="module")
def kill_base(proxy, tmp_path_factory):
    with kill_cases.base_store(tmp_path_factory.mktemp("s3proxy-kills"),
                               lambda bucket: _bucket_on(proxy, bucket)) as got:
        yield got


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_then_rerun_on_s3proxy(kill_base, point, tmp_path, monkeypatch):
    kill_cases.kill_then_rerun(kill_base, point, tmp_path, monkeypatch)


@pytest.mark.parametrize("ignore", [True, pytest.param(False, marks=pytest.mark.skipif(
    not LONG, reason="make backends: the 501 server (make test: the one that ignores the header)"))],
    ids=["ignores-the-header", "not-implemented"])
def test_a_server_without_conditional_puts_is_refused(ignore, tmp_path):
    """Every writer (ingest through spark-submit, expire, import) exits 2 before writing anything."""
    _jars_or_skip(s3server.S3PROXY_OLD)
    small = tmp_path / "m.jsonl"
    small.write_text('{"topic": "T", "body": "x"}\n')
    with s3server.s3proxy(BUCKET, s3server.S3PROXY_OLD, ignore_unknown_headers=ignore) as (env, s3):
        uri = f"s3://{BUCKET}/stores/unsafe"
        r = ingest_cases.submit(["--store", uri, "--input", str(small), "--batch-id", "b0"], env)
        out = r.stdout + r.stderr
        assert r.returncode == 2, (r.returncode, out[-3000:])
        what = "ignored If-None-Match: *" if ignore else "501 NotImplemented"
        assert "does not honour conditional puts" in out and what in out and env["AWS_ENDPOINT_URL"] in out, \
            out[-3000:]
        assert "ROCKETLAKE_S3_UNSAFE_RENAME=1" in out and "Traceback" not in out, out[-3000:]
        r = subprocess.run([PY, os.path.join(ROOT, "jobs", "expire.py"), "--store", uri, "--reserved-hours", "1"],
                           env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "does not honour conditional puts" in r.stderr, (r.returncode, r.stderr[-2000:])
        assert "DynamoDB" not in out + r.stderr, out[-3000:]        # deltalake 1.6 has no DynamoDB lock
        # the DynamoDB locking provider deltalake no longer has is refused, not taken as a guard
        # (deltalake ignores it: its conditional puts, which this server ignores, would be all there is)
        r = subprocess.run([PY, os.path.join(ROOT, "jobs", "expire.py"), "--store", uri, "--reserved-hours", "1"],
                           env=dict(os.environ, **env, AWS_S3_LOCKING_PROVIDER="dynamodb",
                                    DELTA_DYNAMO_TABLE_NAME="delta_log"),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "AWS_S3_LOCKING_PROVIDER=dynamodb is set" in r.stderr \
            and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
        assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0


@pytest.mark.skipif(not LONG, reason="make backends: the stream on S3Proxy (a spark-submit, ~1.5 min)")
def test_a_stream_tails_a_store_on_s3proxy(proxy, tmp_path):
    """readStream.format("rocketmq") on an object store: its tasks read each segment through the
    objects the planning driver mapped it to; a batch committed while the query runs is read."""
    from support import stream_tail
    from conftest import golden_set
    got = stream_tail.tail(f"s3://{BUCKET}/stores/tail", tmp_path, os.path.join(golden_set("small-roll"),
                                                                               "messages.jsonl"), proxy[0])
    assert got["same"] and got["phases"] == [1000, 1000, 1000], got


@pytest.mark.skipif(not LONG, reason="make backends: the ROCKETLAKE_S3_UNSAFE_RENAME fallback on S3Proxy 2.6")
def test_the_unsafe_rename_fallback_on_a_server_that_ignores_conditional_puts(tmp_path):
    """``ROCKETLAKE_S3_UNSAFE_RENAME=1`` on a server that ignores ``If-None-Match: *``: not probed,
    the Delta commits are deltalake's PUTs with ``If-None-Match: *``, which this server ignores. What it
    holds: one writer at a time commits batch after batch, byte-identical to RocketMQ's, and a
    writer started while another holds the writer lease is refused (exit 3) and changes nothing.
    What it does not hold (docs/DESIGN.md): two writers starting at the same instant can both take
    the lease (a write then a read-back, no conditional put) and both commit."""
    _jars_or_skip(s3server.S3PROXY_OLD)
    from conftest import golden_set
    g = golden_set("small-roll")
    props, parts = ingest_cases.small_roll_parts(tmp_path)
    ingest = [PY, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest"]
    gate = tmp_path / "go"
    with s3server.s3proxy(BUCKET, s3server.S3PROXY_OLD, ignore_unknown_headers=True) as (env, s3):
        # S3Proxy 2.6 cannot check the AWS SDK's newer streaming checksums (pyarrow's uploads fail
        # with XAmzContentSHA256Mismatch): the SDK's own setting for such servers
        env = dict(env, ROCKETLAKE_S3_UNSAFE_RENAME="1", AWS_REQUEST_CHECKSUM_CALCULATION="when_required",
                   AWS_RESPONSE_CHECKSUM_VALIDATION="when_required")
        uri = f"s3://{BUCKET}/stores/unsafe"
        first = subprocess.Popen([*ingest, uri, parts[0], str(props), "b0"], env=dict(os.environ, **env,
                                 ROCKETLAKE_HOLD=f"after-lease:{gate}"), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(1200):
                if os.path.exists(f"{gate}.reached") or first.poll() is not None:
                    break
                time.sleep(0.1)
            assert os.path.exists(f"{gate}.reached"), first.communicate()[1][-3000:]
            r = subprocess.run([*ingest, uri, parts[1], str(props), "b1"], env=dict(os.environ, **env),
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 3 and "being written by batch 'b0'" in r.stderr, (r.returncode, r.stderr[-2000:])
        finally:
            gate.write_text("")
            out, err = first.communicate(timeout=300)
        assert first.returncode == 0, err[-3000:]
        r = subprocess.run([*ingest, uri, parts[1], str(props), "b1"], env=dict(os.environ, **env),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="stores/unsafe/").get("Contents", [])]
        assert not [k for k in keys if condput_key(k)], keys      # never probed
        local = tmp_path / "export"
        r = ingest_cases.export(uri, local, env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert race_cases.goldenlib.compare(g, str(local)) == []
