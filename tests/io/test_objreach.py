"""storelib.io.objreach through its two users, storelib.io.s3reach and storelib.io.gcsreach: before
pyarrow's client for S3 or GCS is used, the endpoint must answer one request within the timeout
setting (a positive number of seconds, default 30); one that accepts and never answers is an error
(an OSError) within that time, a refused connection is one at once. What differs between the two
(the endpoint, the request, the setting's travel to executors): tests/io/test_s3reach.py,
tests/io/test_gcsreach.py."""
from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time

import pytest

from storelib.errors import ConfigError
from storelib.io import gcsreach, s3reach
from storelib.io.filesystems import filesystem

@contextlib.contextmanager
def answering(method: str, status: int):
    """An HTTP server on 127.0.0.1 answering every ``method`` request with ``status`` and no body:
    its URL, and the requests it got (method, path, Authorization header)."""
    asked: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            asked.append((self.command, self.path, self.headers.get("Authorization")))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    setattr(Handler, f"do_{method}", Handler._answer)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", asked
    finally:
        srv.shutdown()
        srv.server_close()


KINDS = {"s3": (s3reach, s3reach.S3Unreachable), "gs": (gcsreach, gcsreach.GcsUnreachable)}
NO_PROFILE = {"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}


def _point(monkeypatch, kind: str, url: str, seconds: str | None = None) -> str:
    """This process's settings for ``kind`` at ``url`` (S3: keys set, no profile of the host's); the
    store's URI there."""
    if kind == "s3":
        for k, v in {**NO_PROFILE, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                     "AWS_REGION": "us-east-1"}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    else:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    if seconds is not None:
        monkeypatch.setenv(KINDS[kind][0].TIMEOUT_ENV, seconds)
    return f"{kind}://b/s"


@pytest.mark.parametrize("kind", KINDS)
def test_the_timeout_is_the_setting_or_30_seconds(kind):
    mod = KINDS[kind][0]
    assert mod.timeout({}) == mod.DEFAULT_TIMEOUT == 30.0
    assert mod.timeout({mod.TIMEOUT_ENV: "2.5"}) == 2.5
    for bad in ("0", "-1", "x", "nan", "inf"):
        with pytest.raises(ConfigError, match=mod.TIMEOUT_ENV):
            mod.timeout({mod.TIMEOUT_ENV: bad})


@pytest.mark.parametrize("kind", KINDS)
def test_an_endpoint_that_does_not_answer_is_an_error_within_the_timeout(kind, monkeypatch):
    mod, unreachable = KINDS[kind]
    silent = socket.create_server(("127.0.0.1", 0))      # accepts (backlog), never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    uri = _point(monkeypatch, kind, url, "1")
    t0 = time.monotonic()
    try:
        with pytest.raises(unreachable, match="did not answer within 1 s") as e:
            filesystem(uri)
    finally:
        silent.close()
    assert time.monotonic() - t0 < 5 and isinstance(e.value, OSError)
    assert url in str(e.value) and uri in str(e.value) and mod.TIMEOUT_ENV in str(e.value)


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_connection_is_an_error_at_once(kind, monkeypatch):
    unreachable = KINDS[kind][1]
    s = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()                                             # nothing listens there now
    uri = _point(monkeypatch, kind, url)
    t0 = time.monotonic()
    with pytest.raises(unreachable, match="cannot be reached"):
        filesystem(uri)
    assert time.monotonic() - t0 < 5
