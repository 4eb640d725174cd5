"""gs:// through a local GCS emulator (gcp-storage-emulator, JSON API, anonymous): the store's file
operations on gs://, and an ingest whose input is read from gs:// (run without Spark), whose store
is byte-identical to RocketMQ's. A gs:// *store* also needs its Delta tables there, which
deltalake writes through GCS's XML API; the emulator has only the JSON API, so that part is not
tested here (docs/CLUSTERS.md)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from support import goldenlib
from support import s3server
from conftest import ROOT, golden_set

PY = sys.executable
BIN = os.path.dirname(PY)
BUCKET = "rl-gcs"
SMALL = goldenlib.SMALL_ROLL_CONFIG


# The emulator serves one request at a time (http.server.HTTPServer): a reader that leaves one
# download half read while it opens another (pyarrow's ranged reads) would wait on it forever.
# Its own entry point, with the threading server.
EMULATOR = ("import sys, http.server as h; h.HTTPServer = h.ThreadingHTTPServer; "
            "from gcp_storage_emulator.__main__ import main; sys.argv[0] = 'gcp-storage-emulator'; sys.exit(main())")


@pytest.fixture(scope="module")
def gcs():
    try:
        import gcp_storage_emulator  # noqa: F401
    except ImportError:
        pytest.skip("gcp-storage-emulator is not installed (requirements.txt; make install)")
    port = s3server.free_port()
    proc = subprocess.Popen([PY, "-c", EMULATOR, "start", "-H", "127.0.0.1", "--port", str(port), "--default-bucket",
                             BUCKET, "-M", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b/{BUCKET}", timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "gcp-storage-emulator did not start"
                time.sleep(0.2)
        yield {"STORAGE_EMULATOR_HOST": url}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def test_store_files_on_gs(gcs, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs["STORAGE_EMULATOR_HOST"])
    from storelib.io import fragments
    from storelib.io import storage
    st = storage.Store(f"gs://{BUCKET}/stores/files")
    st.write_file("commitlog/00000000000000000000", [b"abc" * 10], total_size=100)
    assert st.size("commitlog/00000000000000000000") == 100
    assert st.read("commitlog/00000000000000000000", 0, 32) == b"abc" * 10 + bytes(2)
    data = os.urandom(5000)
    objs = st.write_objects(lambda k: f"_rocketlake/objects/x.{k}", [data], 2048)
    assert [n for _, n in objs] == [2048, 2048, 904]
    st.map_file("commitlog/x", 6000, fragments.extents_from_detail(
        [[0, 2048, objs[0][0], 0], [2048, 2048, objs[1][0], 0], [4096, 904, objs[2][0], 0]]))
    assert st.read("commitlog/x") == data + bytes(1000)
    st.publish("commitlog/00000000000000000000", "commitlog/final")
    assert st.list_files("commitlog") == ["commitlog/final"]
    st.delete("commitlog")
    assert st.list_files("") == [f"_rocketlake/objects/x.{k}" for k in range(3)]


def test_ingest_reads_its_input_from_gs(gcs, tmp_path):
    g = golden_set("small-roll")
    req = urllib.request.Request(
        f"{gcs['STORAGE_EMULATOR_HOST']}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=in/messages.jsonl",
        data=open(os.path.join(g, "messages.jsonl"), "rb").read(), method="POST")
    urllib.request.urlopen(req, timeout=30).read()
    props = tmp_path / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    store = tmp_path / "store"
    r = subprocess.run([PY, os.path.join(ROOT, "tests", "support", "local_ingest.py"), "ingest", str(store),
                        f"gs://{BUCKET}/in/messages.jsonl", str(props), "gs-0"],
                       env=dict(os.environ, **gcs), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    diffs = goldenlib.compare(g, str(store))
    assert diffs == [], diffs[:20]
