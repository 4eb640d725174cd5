"""A moto S3 server on 127.0.0.1 for the object-store tests (one per test module)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

BIN = os.path.dirname(sys.executable)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(bucket: str, attempts: int = 3):
    """(process, env, client) of a moto_server that is up with ``bucket`` created. The port is
    picked free, but another process (a parallel pytest-xdist worker) may take it before the
    server binds it: a server that exits while starting is retried on another port."""
    import boto3
    from botocore.config import Config
    for attempt in range(attempts):
        port = free_port()
        proc = subprocess.Popen([os.path.join(BIN, "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
        try:
            kw = dict(endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="test",
                      aws_secret_access_key="test", region_name="us-east-1")
            # short timeouts while starting: whatever else listens on a taken port must not stall us
            probe = boto3.client("s3", config=Config(connect_timeout=5, read_timeout=10,
                                                     retries={"max_attempts": 1}), **kw)
            deadline = time.time() + 60
            while True:
                if proc.poll() is not None and attempt + 1 < attempts:
                    break                         # could not bind the port: another one
                assert proc.poll() is None and time.time() < deadline, "moto_server did not start"
                try:
                    probe.create_bucket(Bucket=bucket)
                    return proc, env, boto3.client("s3", **kw)
                except Exception:  # noqa: BLE001 - server still starting
                    time.sleep(0.3)
        except BaseException:
            _stop(proc)
            raise
    raise AssertionError("moto_server did not start")     # not reached


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def moto(bucket: str):
    """Start ``moto_server`` on a free loopback port, create ``bucket``; yields (env, boto3 client)
    where env holds the AWS_* variables a job needs to reach it. The server is stopped on exit."""
    proc, env, s3 = _start(bucket)
    try:
        yield env, s3
    finally:
        _stop(proc)
