"""Object storage: ingest into s3:// on a local S3-compatible server (moto_server), Delta tables
included; the downloaded store is byte-identical to the golden set (issue #3, item 5)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import goldenlib
import s3server
from conftest import ROOT, golden_set

pytestmark = pytest.mark.slow

PY = sys.executable
BIN = os.path.dirname(PY)
SMALL = {"mappedFileSizeCommitLog": 65536, "mappedFileSizeConsumeQueue": 600, "maxHashSlotNum": 64,
         "maxIndexNum": 256}
BUCKET = "rocketlake-test"


@pytest.fixture(scope="module")
def s3_env():
    with s3server.moto(BUCKET) as env_s3:
        yield env_s3


def submit(args, env_extra):
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY, **env_extra)
    cmd = [os.path.join(BIN, "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false",
           "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
           os.path.join(ROOT, "jobs", "ingest.py"), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_ingest_to_s3_is_golden(s3_env, tmp_path):
    env, s3 = s3_env
    g = golden_set("small-roll")
    props = tmp_path / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()
    parts = []
    for k, (lo, hi) in enumerate(((0, 1700), (1700, len(lines)))):
        p = tmp_path / f"part{k}.jsonl"
        p.write_text("".join(lines[lo:hi]), encoding="utf-8")
        parts.append(str(p))
    uri = f"s3://{BUCKET}/stores/small"
    for k, part in enumerate(parts):
        r = submit(["--store", uri, "--input", part, "--config", str(props), "--batch-id", f"s3-{k}",
                    "--json-summary", str(tmp_path / f"s{k}.json")], env)
        assert r.returncode == 0, r.stderr[-4000:]
        assert json.loads((tmp_path / f"s{k}.json").read_text())["status"] == "committed"
    # Download every object under the store and compare with the golden set.
    local = tmp_path / "download"
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="stores/small/"):
        keys += [o["Key"] for o in page.get("Contents", [])]
    assert any(k.startswith("stores/small/_rocketlake/checkpoints/_delta_log/") for k in keys)
    assert not [k for k in keys if "/_rocketlake/staging/" in k or k.endswith("writer.lock")]
    for key in keys:
        if key.endswith("/"):
            continue                      # directory markers pyarrow.fs creates
        dst = local / key[len("stores/small/"):]
        dst.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(BUCKET, key, str(dst))
    diffs = goldenlib.compare(g, str(local))
    assert diffs == [], diffs[:20]
    # The manifest reads over s3:// (deltalake + pyarrow.fs), in a clean process.
    code = ("import sys, json; sys.path.insert(0, %r); from storelib import manifest, storage; "
            "s = manifest.load_snapshot(storage.Store(%r)); "
            "print(json.dumps({'batches': [b['batch_id'] for b in s.batches], 'files': len(s.files), "
            "'max': s.batch['max_phy_offset']}))") % (ROOT, uri)
    out = subprocess.run([PY, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"batches": ["s3-0", "s3-1"], "files": 231, "max": 4113502}
    # Rerunning a committed batch over s3 changes nothing and says so.
    r = submit(["--store", uri, "--input", parts[1], "--config", str(props), "--batch-id", "s3-1"], env)
    assert r.returncode == 0 and "status=already-committed" in r.stdout, (r.stdout, r.stderr[-3000:])
