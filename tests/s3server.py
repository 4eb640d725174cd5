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


@contextlib.contextmanager
def moto(bucket: str):
    """Start ``moto_server`` on a free loopback port, create ``bucket``; yields (env, boto3 client)
    where env holds the AWS_* variables a job needs to reach it. The server is stopped on exit."""
    port = free_port()
    proc = subprocess.Popen([os.path.join(BIN, "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "test",
           "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    try:
        import boto3
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
        deadline = time.time() + 60
        while True:
            try:
                s3.create_bucket(Bucket=bucket)
                break
            except Exception:  # noqa: BLE001 - server still starting
                assert proc.poll() is None and time.time() < deadline, "moto_server did not start"
                time.sleep(0.3)
        yield env, s3
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
