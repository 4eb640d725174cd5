"""storelib.io.gcsreach: GCS must answer one request in time before pyarrow's GCS client (which has no
timeouts) is used; any HTTP answer will do, none in time is ``GcsUnreachable`` (an OSError)."""
from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from storelib.errors import ConfigError
from storelib.io import gcsreach
from storelib.io.filesystems import filesystem


def test_the_timeout_is_the_setting_or_30_seconds():
    assert gcsreach.timeout({}) == gcsreach.DEFAULT_TIMEOUT == 30.0
    assert gcsreach.timeout({gcsreach.TIMEOUT_ENV: "2.5"}) == 2.5
    for bad in ("0", "-1", "x", "nan", "inf"):
        with pytest.raises(ConfigError, match=gcsreach.TIMEOUT_ENV):
            gcsreach.timeout({gcsreach.TIMEOUT_ENV: bad})


def test_the_endpoint_is_the_emulator_s_else_gcs_s_own():
    assert gcsreach.endpoint(None) == "https://storage.googleapis.com"
    assert gcsreach.endpoint("http://127.0.0.1:9023/") == "http://127.0.0.1:9023"
    assert gcsreach.endpoint("localhost:9023") == "http://localhost:9023"


def test_a_gcs_that_does_not_answer_is_an_error_within_the_timeout(monkeypatch):
    silent = socket.create_server(("127.0.0.1", 0))      # accepts (backlog), never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    monkeypatch.setenv(gcsreach.TIMEOUT_ENV, "1")
    t0 = time.monotonic()
    try:
        with pytest.raises(gcsreach.GcsUnreachable, match="did not answer within 1 s") as e:
            filesystem("gs://b/s")
    finally:
        silent.close()
    assert time.monotonic() - t0 < 5 and isinstance(e.value, OSError)
    assert url in str(e.value) and "gs://b/s" in str(e.value)


def test_a_refused_connection_is_an_error_at_once(monkeypatch):
    s = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()                                             # nothing listens there now
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    with pytest.raises(gcsreach.GcsUnreachable, match="cannot be reached"):
        filesystem("gs://b/s")


def test_any_answer_is_a_reachable_gcs_asked_once(monkeypatch):
    asked: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(404)                       # no such bucket: still an answer
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        gcsreach.require_reachable("gs://b/s", url)
        gcsreach.require_reachable("gs://other/x", url)
    finally:
        srv.shutdown()
        srv.server_close()
    assert asked == ["/storage/v1/b/b?fields=name"]
