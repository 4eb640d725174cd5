"""S3-compatible servers on 127.0.0.1 for the object-store tests: moto (a mock, one per test
module) and S3Proxy (a real server, Apache-2.0, from Maven Central).

S3Proxy's jars come through ``tests/s3proxy/pom-<version>.xml`` (``mvn dependency:copy-dependencies``
into ``.cache/jars/s3proxy-<version>/``, behind a stamp: ``make s3proxy``). It runs with its
``filesystem-nio2`` backend on a fresh directory, with SigV4 keys, and is stopped (its process
group killed) when the ``with`` block ends:

* ``S3PROXY`` (4.0.0) honours ``If-None-Match: *`` on PUT as it writes the file (the Delta commit's
  conditional put);
* ``S3PROXY_OLD`` (2.6.0) predates conditional writes: it answers such a PUT ``501 NotImplemented``,
  or, with ``ignore_unknown_headers``, ignores the header and overwrites the object (a server
  that would let two writers both commit).

    PYTHONPATH=tests python -m support.s3server fetch     # both S3Proxy versions
    python tests/support/s3server.py moto -H 127.0.0.1 -p PORT     # moto_server, as ``moto`` runs it
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):       # run as a script (the moto server's process): tests/ on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from support import procgroup

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POM_DIR = os.path.join(ROOT, "tests", "s3proxy")
S3PROXY = "4.0.0"
S3PROXY_OLD = "2.6.0"
KEY = "test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(port: int) -> dict:
    return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": KEY, "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def _start(launch, bucket: str, what: str, attempts: int = 3, timeout: float = 60):
    """(process, env, client) of a server that is up with ``bucket`` created. ``launch(port)``
    starts it on a port picked free, but another process (a parallel pytest-xdist worker) may
    take the port before the server binds it: a server that exits while starting is retried on
    another port."""
    import boto3
    from botocore.config import Config
    for attempt in range(attempts):
        port = free_port()
        proc = launch(port)
        env = _env(port)
        try:
            kw = dict(endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=KEY,
                      aws_secret_access_key=KEY, region_name="us-east-1")
            # short timeouts while starting: whatever else listens on a taken port must not stall us
            probe = boto3.client("s3", config=Config(connect_timeout=5, read_timeout=10,
                                                     retries={"max_attempts": 1}), **kw)
            deadline = time.time() + timeout
            while True:
                if proc.poll() is not None and attempt + 1 < attempts:
                    break                         # could not bind the port: another one
                assert proc.poll() is None and time.time() < deadline, f"{what} did not start"
                try:
                    probe.create_bucket(Bucket=bucket)
                    return proc, env, boto3.client("s3", **kw)
                except Exception:  # noqa: BLE001 - server still starting
                    time.sleep(0.3)
        except BaseException:
            procgroup.stop(proc)
            raise
        procgroup.stop(proc)
    raise AssertionError(f"{what} did not start")     # not reached


@contextlib.contextmanager
def moto(bucket: str):
    """Start ``moto_server`` on a free loopback port, create ``bucket``; yields (env, boto3 client)
    where env holds the AWS_* variables a job needs to reach it. The server is stopped on exit."""
    def launch(port):
        return subprocess.Popen([sys.executable, os.path.abspath(__file__), "moto", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    proc, env, s3 = _start(launch, bucket, "moto_server")
    try:
        yield env, s3
    finally:
        procgroup.stop(proc)


def s3proxy_jars(version: str = S3PROXY) -> str:
    """The directory of S3Proxy ``version``'s jars (fetched by mvn on first use);
    ``mavenfetch.Unavailable`` when they cannot be had."""
    from support.mavenfetch import fetch_pom
    pom = os.path.join(POM_DIR, f"pom-{version}.xml")
    with open(pom, "rb") as fh:
        want = hashlib.sha256(fh.read()).hexdigest()
    return fetch_pom(pom, os.path.join(ROOT, ".cache", "jars", f"s3proxy-{version}"), want, f"S3Proxy {version}",
                     ("-q", "-s", os.path.join(ROOT, "tests", "kafka", "settings.xml")))


@contextlib.contextmanager
def s3proxy(bucket: str, version: str = S3PROXY, ignore_unknown_headers: bool = False,
            authorization: str = "aws-v2-or-v4"):
    """Start S3Proxy ``version`` (filesystem-nio2 on a fresh temporary directory, SigV4 with the
    keys of ``_env``) on a free loopback port, create ``bucket``; yields (env, boto3 client) like
    ``moto``. The server and its directory are gone on exit. ``authorization="none"``: signatures
    are not checked (bench/backends.py's counting proxy sits in between)."""
    jars = s3proxy_jars(version)
    work = tempfile.mkdtemp(prefix="s3proxy-")
    log = open(os.path.join(work, "server.log"), "wb")

    def launch(port):
        props = os.path.join(work, f"s3proxy-{port}.properties")
        settings = {"s3proxy.endpoint": f"http://127.0.0.1:{port}", "s3proxy.authorization": authorization,
                    "s3proxy.identity": KEY, "s3proxy.credential": KEY,
                    "jclouds.provider": "filesystem-nio2", "jclouds.identity": KEY, "jclouds.credential": KEY,
                    "jclouds.filesystem.basedir": os.path.join(work, "data")}
        if ignore_unknown_headers:
            settings["s3proxy.ignore-unknown-headers"] = "true"
        with open(props, "w") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in settings.items()))
        os.makedirs(os.path.join(work, "data"), exist_ok=True)
        return subprocess.Popen(["java", "-Xmx512m", "-XX:TieredStopAtLevel=1",
                                 f"-Dlogback.configurationFile={os.path.join(POM_DIR, 'logback.xml')}",
                                 "-cp", os.path.join(jars, "*"), "org.gaul.s3proxy.Main", "--properties", props],
                                stdout=log, stderr=log, start_new_session=True)
    try:
        proc, env, s3 = _start(launch, bucket, f"S3Proxy {version}")
        try:
            yield env, s3
        finally:
            procgroup.stop(proc)
    finally:
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def moto_main(argv: list) -> int:
    """moto_server with its list of service packages read once: moto's dispatcher lists its own
    package directory (a listdir and ~180 stats) twice for every request to find the service a
    host names, about a quarter of its CPU time on the object-store tests' requests. The list is
    the installed package's, fixed while the server runs: every request is answered as before.

    And each object's time stamp (an ISO 8601 string) parsed once: the serializer of every answer
    parses them again with dateutil (a listing of a few hundred objects: most of its time), into
    a datetime, which is immutable: the same string always gives an equal one."""
    import functools

    from moto import backends
    from moto import server
    from moto.core import serialize
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    parse = serialize.parse_to_aware_datetime
    parse_str = functools.lru_cache(maxsize=1 << 16)(parse)
    serialize.parse_to_aware_datetime = lambda value: parse_str(value) if isinstance(value, str) else parse(value)
    server.main(argv)
    return 0


def main(argv: list) -> int:
    if argv[1:2] == ["moto"]:
        return moto_main(argv[2:])
    if argv[1:] == ["fetch"]:
        from support.mavenfetch import Unavailable
        try:
            for v in (S3PROXY, S3PROXY_OLD):
                d = s3proxy_jars(v)
                print(f"S3Proxy {v}: {len(glob.glob(os.path.join(d, '*.jar')))} jars in {os.path.relpath(d, ROOT)}")
        except Unavailable as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
