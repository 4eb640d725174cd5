"""`make bench-backends` (bench/backends.py) measures through bench/s3bench.py's counting proxy; its
parts are checked here against known answers: the proxy streams a large GET through instead of
holding it, and splits requests by kind and by what they touch (Delta log, Delta data, store
files); `make backends` also runs the bench at a tiny size on local disk and moto, where the Delta
commits' requests must be among the counted ones."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))

import s3bench
from support.s3server import moto

pytestmark = pytest.mark.slow

MB = 1 << 20
LONG = bool(os.environ.get("ROCKETLAKE_BACKENDS") or os.environ.get("ROCKETLAKE_LONG"))


def test_the_counting_proxy_streams_responses_and_counts_by_area():
    import boto3
    big = os.urandom(MB) * 32
    log = "store/_rocketlake/manifest/_delta_log/00000000000000000001.json"
    with moto("counted") as (env, _), s3bench.CountingProxy(env["AWS_ENDPOINT_URL"]) as proxy:
        s3 = boto3.client("s3", endpoint_url=proxy.url, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
        s3.put_object(Bucket="counted", Key="store/commitlog/00000000000000000000", Body=big)
        s3.put_object(Bucket="counted", Key=log, Body=b"{}\n")
        s3.put_object(Bucket="counted", Key="store/_rocketlake/manifest/part-0.parquet", Body=b"PAR1")
        proxy.counts.reset()
        tracemalloc.start()
        try:
            body = s3.get_object(Bucket="counted", Key="store/commitlog/00000000000000000000")["Body"]
            n = sum(len(c) for c in body.iter_chunks(MB))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert n == len(big)
        # the proxy (a thread of this process) never held the 32 MB body
        assert peak < 8 * MB, peak
        s3.list_objects_v2(Bucket="counted", Prefix="store/_rocketlake/manifest/_delta_log/")
        s3.head_object(Bucket="counted", Key=log)
        assert s3.get_object(Bucket="counted", Key=log)["Body"].read() == b"{}\n"
        s3.get_object(Bucket="counted", Key="store/_rocketlake/manifest/part-0.parquet")["Body"].read()
        s3.delete_object(Bucket="counted", Key="store/commitlog/00000000000000000000")
        got = proxy.counts.snapshot()
    listing = got["by_area"]["delta log"]["bytes"]["downloaded"] - 3        # the LIST's XML
    assert listing > 0 and got["bytes"]["downloaded"] == len(big) + 3 + 4 + listing
    assert got["by_area"] == {
        "store files": {"requests": {"GET": 1, "DELETE": 1}, "bytes": {"uploaded": 0, "copied": 0,
                                                                         "downloaded": len(big)}},
        "delta log": {"requests": {"LIST": 1, "HEAD": 1, "GET": 1}, "bytes": {"uploaded": 0, "copied": 0,
                                                                                "downloaded": 3 + listing}},
        "delta data": {"requests": {"GET": 1}, "bytes": {"uploaded": 0, "copied": 0, "downloaded": 4}}}


@pytest.mark.skipif(not LONG, reason="make backends: the backends bench at a tiny size (~1 min)")
def test_the_backends_bench_counts_the_delta_commits(tmp_path):
    """A 200-message batch into a 3,000-message store on local disk and moto: the batch's Delta
    commits (deltalake's PUTs of log files) are counted beside the store's files."""
    out = tmp_path / "backends.json"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "backends.py"), "--store-n", "3000",
                        "--batch-n", "200", "--backends", "local,moto", "--workdir", str(tmp_path / "work"),
                        "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["backend"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"local disk", "moto S3"}
    areas = rows["moto S3"]["by_area"]
    # two Delta commits (manifest, then checkpoints): each a conditional PUT of a log file
    assert areas["delta log"]["requests"].get("PUT if-none-match") == 2, areas
    assert areas["delta data"]["requests"].get("PUT", 0) >= 2, areas      # their Parquet files
    assert areas["store files"]["requests"].get("PUT", 0) >= 1, areas
    assert rows["moto S3"]["uploaded"] > rows["moto S3"]["record_bytes"] > 0
    assert "| moto S3 |" in r.stdout and "delta log: " in r.stdout
