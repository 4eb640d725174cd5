"""Every command that reads a store or input on an object store it cannot reach ends with one line
(no traceback) and the exit status of any store it cannot read (storelib.cli.failures: 1, repair's
dry run 2), within about its reachability timeout: S3 at an endpoint that refuses connections or
accepts and never answers (storelib.io.s3reach, ``ROCKETLAKE_S3_TIMEOUT``), GCS that refuses
(storelib.io.gcsreach; GCS that never answers: test_gs_writers.py). Nothing is written: the local
target of export and ingest is not even made.

Each command runs as its own process (tests/cli/test_gs_writers.py's), so a hang fails the case.
"""
from __future__ import annotations

import socket
import time

import pytest

from test_first_hour import one_line_error
from test_gs_writers import READERS, TIMEOUT, SilentGcs, _run

OBJ_TIMEOUT = "2"        # ROCKETLAKE_S3_TIMEOUT / ROCKETLAKE_GCS_TIMEOUT of these runs
BOUND = 25               # what a command may take then: its start and imports, and those 2 + 2 seconds
# (READERS: argv on gs://b/s, exit status) and a scan, whose query mode differs from a single lookup's
COMMANDS = {**READERS, "query range": (("query", "--store", "gs://b/s", "range", "--begin", "0", "--end", "1"), 1)}
S3_ENV = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1",
          "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
          "ROCKETLAKE_S3_TIMEOUT": OBJ_TIMEOUT, "ROCKETLAKE_GCS_TIMEOUT": OBJ_TIMEOUT}


class RefusingPort:
    """A port nothing listens on (a connection to it is refused); ``url`` as SilentGcs's."""

    def __init__(self):
        s = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{s.getsockname()[1]}"
        s.close()
        self.reached = 0

    def close(self) -> None:
        pass


@pytest.fixture(params=["refused", "silent"])
def server(request):
    s = RefusingPort() if request.param == "refused" else SilentGcs()
    yield s
    s.close()


def _case(name: str, scheme: str, tmp_path) -> tuple[list[str], int, str]:
    """(argv of command ``name`` on ``scheme``, its exit status, the URI its line names)."""
    argv, status = COMMANDS[name]
    uri = f"{scheme}://b/in/messages.jsonl" if "--input" in argv else f"{scheme}://b/s"
    argv = [a.replace("gs://", f"{scheme}://").format(target=tmp_path / "target") for a in argv]
    return argv, status, uri


def _expected(name: str, what: str, uri: str, url: str, refused: bool) -> str:
    why = ("it cannot be reached ([Errno 111] Connection refused)" if refused
           else f"it did not answer within {OBJ_TIMEOUT} s")
    voice = "query failed: " if name.startswith("query") else ""
    return (f"error: {voice}{uri}: {what} at {url}: {why} (connect and read timeout {OBJ_TIMEOUT} s each, "
            f"ROCKETLAKE_{what}_TIMEOUT); nothing was read or changed")


def _check(name, server, argv, status, line, tmp_path, **env) -> None:
    before = server.reached
    t0 = time.monotonic()
    code, out, err = _run(server, *argv, **env)
    took = time.monotonic() - t0
    assert code is not None, f"{name}: still running after {TIMEOUT}s: {err[-2000:]}"
    assert "Traceback" not in err, (name, err[-3000:])
    assert (code, out) == (status, ""), (name, code, out, err[-2000:])
    assert one_line_error(err) == line
    assert took < BOUND, (name, took)
    assert isinstance(server, RefusingPort) or server.reached > before, name
    assert not (tmp_path / "target").exists(), name


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_reader_of_an_unreachable_s3_ends_with_its_line(server, tmp_path, name):
    argv, status, uri = _case(name, "s3", tmp_path)
    line = _expected(name, "S3", uri, server.url, isinstance(server, RefusingPort))
    _check(name, server, argv, status, line, tmp_path, AWS_ENDPOINT_URL=server.url, **S3_ENV)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_reader_of_a_refusing_gcs_ends_with_its_line(tmp_path, name):
    refusing = RefusingPort()
    argv, status, uri = _case(name, "gs", tmp_path)
    line = _expected(name, "GCS", uri, refusing.url, True)
    _check(name, refusing, argv, status, line, tmp_path, **S3_ENV)
