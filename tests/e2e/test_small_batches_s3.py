"""Several small batches into a store on the moto S3 server, each continuing the index file's
paged head (storelib.io.headpages), without Spark (tests/support/local_ingest.py): the exported
directory is byte-identical to RocketMQ's golden store, and verify (in this process) finds
nothing wrong, then finds the one byte changed in a head page object; the snapshot cache is its
base plus a delta, and gives the snapshot the Delta tables give. Both tables' data files are
merged every two batches here (``MERGE_MIN_FILES`` 2: storelib.table.ckmerge, through delta-rs'
conditional put)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from support import goldenlib
from support import s3server
from conftest import ROOT, golden_set

PY = sys.executable
BUCKET = "rocketlake-small"
SMALL = goldenlib.SMALL_ROLL_CONFIG


def test_export_stays_golden_after_several_small_batches(tmp_path, monkeypatch):
    g = golden_set("small-roll")
    props = tmp_path / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    lines = open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()
    cuts = [0, 1000, 1700, 2400, len(lines)]
    uri = f"s3://{BUCKET}/store"
    with s3server.moto(BUCKET) as (env, s3):
        for k in range(len(cuts) - 1):
            part = tmp_path / f"part{k}.jsonl"
            part.write_text("".join(lines[cuts[k]:cuts[k + 1]]), encoding="utf-8")
            r = subprocess.run([PY, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest", uri,
                                str(part), str(props), f"b{k}"], capture_output=True,
                               env=dict(os.environ, **env, ROCKETLAKE_TEST_MERGE_MIN_FILES="2"),
                               text=True, timeout=300)
            assert r.returncode == 0, r.stderr[-3000:]
        out = tmp_path / "export"
        r = subprocess.run([PY, os.path.join(ROOT, "jobs", "export.py"), "--store", uri, "--to", str(out)],
                           env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        assert goldenlib.compare(g, str(out)) == []
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        from storelib.table import manifest
        from storelib.io import storage
        from storelib.verify import driver as verify
        st = storage.Store(uri)
        rows = [r for r in manifest.load_snapshot(st).files.values() if r["kind"] == "index"]
        heads = [json.loads(r["detail"])["head"] for r in rows]
        assert heads and any(h["layers"][-1].endswith(".pages") for h in heads)   # continued by pages
        assert verify.verify_store(uri).problems == []
        # the snapshot cache: its base and the delta the later batches wrote beside it, applied
        from storelib.format import paths
        from storelib.table import snapcache
        cached, snap = snapcache.load(st), manifest.load_snapshot(st)
        assert cached is not None and cached.batch == snap.batch and cached.files == snap.files
        assert st.exists(paths.SNAPSHOT_CACHE_DELTA)
        from storelib.table import ckmerge
        for rel in (paths.MANIFEST_DIR, paths.CHECKPOINTS_DIR):     # b0 and b1 merged by b2's commit
            dt = manifest.open_table(st, rel)
            files = ckmerge.files_of(dt).column("path").to_pylist()
            dt = None
            assert len(files) < len(cuts) - 1 and any(".merged." in f for f in files), (rel, files)
        # one wrong byte in the newest head page object: verify names the index file
        layer = max((h["layers"][-1] for h in heads), key=len)
        key = f"store/{layer}"
        body = bytearray(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        body[45 % len(body)] ^= 0x40
        s3.put_object(Bucket=BUCKET, Key=key, Body=bytes(body))
        problems = verify.verify_store(uri).problems
        assert any(str(p).startswith("index/") for p in problems), problems
