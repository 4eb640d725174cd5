"""A mirror on the moto S3 server: cycles of the small-roll golden store (RocketMQ 5.3.3's own files,
grown by moving its checkpoint's physicMsgTimestamp; the broker deletes its oldest segments between
cycles) into ``s3://``, each cycle a process of its own (tests/support/local_ingest.py mirror). The
export is RocketMQ's store byte for byte, verify finds nothing, and a damaged broker tail stops the
next cycle with exit 3 and no new object. ~2 min on moto: `make mirror`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from support import goldenlib
from support import s3server
from conftest import ROOT, golden_set
from support.mirrorhelp import records, set_safe

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.environ.get("ROCKETLAKE_MIRROR"), reason="make mirror (ROCKETLAKE_MIRROR=1)")]

PY = sys.executable
BUCKET = "rocketlake-mirror"


def test_mirror_into_s3(tmp_path, monkeypatch):
    broker = goldenlib.restore(golden_set("small-roll"), str(tmp_path / "broker"))
    _, ends, ts = records(broker)
    uri = f"s3://{BUCKET}/mirror"
    runner = os.path.join(ROOT, "tests", "support", "local_ingest.py")
    with s3server.moto(BUCKET) as (env, s3):
        def cycle():
            return subprocess.run([PY, runner, "mirror", uri, broker], env=dict(os.environ, **env),
                                  capture_output=True, text=True, timeout=300)
        for k, t in enumerate([int(ts[800]), int(ts[1900]), int(ts.max()) + 1]):
            if k == 2:
                for name in sorted(os.listdir(os.path.join(broker, "commitlog")))[:10]:
                    os.remove(os.path.join(broker, "commitlog", name))
            set_safe(broker, t)
            r = cycle()
            assert r.returncode == 0 and '"committed"' in r.stdout, r.stderr[-3000:]
        out = tmp_path / "export"
        r = subprocess.run([PY, "-m", "storelib.cli.main", "export", "--store", uri, "--to", str(out)],
                           env=dict(os.environ, **env, PYTHONPATH=ROOT), capture_output=True, text=True,
                           timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-3000:]
        assert goldenlib.compare(golden_set("small-roll"), str(out)) == []
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        from storelib.verify import driver as verify
        assert verify.verify_store(uri).problems == []
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))
        last = os.path.join(broker, "commitlog", sorted(os.listdir(os.path.join(broker, "commitlog")))[-1])
        raw = bytearray(open(last, "rb").read())
        raw[int(ends[-1]) % 65536 - 30] ^= 0x11
        open(last, "wb").write(bytes(raw))
        r = cycle()
        assert r.returncode == 3 and "offset" in r.stderr, r.stderr[-3000:]
        assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])) == keys
    shutil.rmtree(broker)
