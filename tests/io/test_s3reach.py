"""storelib.io.s3reach: S3 must answer one unsigned request in time before pyarrow's S3 client (which
waits its request timeout on each of three attempts of each request) is used; any HTTP answer will
do, none in time is ``S3Unreachable`` (an OSError). Its setting travels to the executors."""
from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from storelib.errors import ConfigError
from storelib.io import objstore, s3reach
from storelib.io.filesystems import filesystem

NO_PROFILE = {"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}


@pytest.fixture
def s3_at(monkeypatch):
    """Point this process's S3 settings at ``url`` (keys set, no profile of the host's)."""
    def point(url: str, **more: str) -> None:
        for k, v in {**NO_PROFILE, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                     "AWS_REGION": "us-east-1", **more}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return point


def test_the_timeout_is_the_setting_or_30_seconds():
    assert s3reach.timeout({}) == s3reach.DEFAULT_TIMEOUT == 30.0
    assert s3reach.timeout({s3reach.TIMEOUT_ENV: "2.5"}) == 2.5
    for bad in ("0", "-1", "x", "nan", "inf"):
        with pytest.raises(ConfigError, match=s3reach.TIMEOUT_ENV):
            s3reach.timeout({s3reach.TIMEOUT_ENV: bad})


def test_the_endpoint_is_the_one_pyarrow_is_given_else_aws_s_regional_one():
    assert s3reach.endpoint({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000/"}) == "http://127.0.0.1:9000"
    assert s3reach.endpoint({"AWS_ENDPOINT_URL": "https://minio.example:9000"}) == "https://minio.example:9000"
    assert s3reach.endpoint({}) == "https://s3.us-east-1.amazonaws.com"
    assert s3reach.endpoint({"AWS_REGION": "eu-west-3"}) == "https://s3.eu-west-3.amazonaws.com"
    assert s3reach.endpoint({"AWS_REGION": "cn-north-1"}) == "https://s3.cn-north-1.amazonaws.com.cn"


def test_the_setting_is_shipped_to_the_executors():
    driver = {**NO_PROFILE, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", s3reach.TIMEOUT_ENV: "7"}
    shipped = objstore.executor_env(driver)
    assert shipped[s3reach.TIMEOUT_ENV] == "7"
    on_executor = {s3reach.TIMEOUT_ENV: "99", **shipped}         # its host's own value does not apply
    assert s3reach.timeout(objstore.s3_settings(on_executor)) == 7.0
    assert s3reach.timeout(objstore.s3_settings({**objstore.executor_env(NO_PROFILE), s3reach.TIMEOUT_ENV: ""})) == 30


def test_an_s3_that_does_not_answer_is_an_error_within_the_timeout(s3_at):
    silent = socket.create_server(("127.0.0.1", 0))      # accepts (backlog), never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    s3_at(url, **{s3reach.TIMEOUT_ENV: "1"})
    t0 = time.monotonic()
    try:
        with pytest.raises(s3reach.S3Unreachable, match="did not answer within 1 s") as e:
            filesystem("s3://b/s")
    finally:
        silent.close()
    assert time.monotonic() - t0 < 5 and isinstance(e.value, OSError)
    assert url in str(e.value) and "s3://b/s" in str(e.value) and s3reach.TIMEOUT_ENV in str(e.value)


def test_a_refused_connection_is_an_error_at_once(s3_at):
    s = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()                                             # nothing listens there now
    s3_at(url)
    t0 = time.monotonic()
    with pytest.raises(s3reach.S3Unreachable, match="cannot be reached"):
        filesystem("s3://b/s")
    assert time.monotonic() - t0 < 5


def test_any_answer_is_a_reachable_s3_asked_once_unsigned(s3_at):
    asked: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            asked.append((self.command, self.path, self.headers.get("Authorization")))
            self.send_response(403)                       # no credentials: still an answer
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        s3_at(f"http://127.0.0.1:{srv.server_address[1]}")
        filesystem("s3://b/s")
        filesystem("s3://other/x")
    finally:
        srv.shutdown()
        srv.server_close()
    assert asked == [("HEAD", "/b", None)]
