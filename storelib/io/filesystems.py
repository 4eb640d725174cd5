"""Which file system serves a store or input URI: local paths, ``s3://`` (pyarrow's S3 client with
``storelib.io.objstore``'s settings), ``gs://`` (a GCS emulator when ``STORAGE_EMULATOR_HOST`` is
set), ``hdfs://`` (``hdfs-native`` behind pyarrow's file system interface), anything else
``pyarrow.fs.FileSystem.from_uri`` opens. One client per process and settings."""
from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from . import objstore
from ..errors import BadInput
from ..format.paths import is_local, local_path

__all__ = ["is_local", "local_path", "filesystem", "s3_client", "check_store_uri"]


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or URI. A remote URI whose path has a
    ``.``, ``..`` or empty component is ``BadInput``: an object store's listing takes such a
    prefix as it is spelled, its reads and writes of one key as the HTTP layer resolves it
    (``a/x/../b/k`` is ``a/b/k``), so a check that lists (is the target empty, is this a store)
    would look at one place and the writes land in another (another store's files)."""
    if is_local(uri):
        return pafs.LocalFileSystem(), os.path.abspath(local_path(uri))
    _check_remote_path(uri)
    if uri.startswith("s3://"):
        u = urlparse(uri)
        return _s3(), (u.netloc + u.path).rstrip("/")
    if uri.startswith("gs://") and objstore.gcs_settings().get("STORAGE_EMULATOR_HOST"):
        u = urlparse(uri)
        return _gcs(), (u.netloc + u.path).rstrip("/")
    if uri.startswith("hdfs://"):
        u = urlparse(uri)
        return _hdfs(u.hostname, u.port), u.path.rstrip("/") or "/"
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/")


def check_store_uri(uri: str) -> None:
    """A remote store root (``storage.Store``) with ``?``, ``#``, ``%``, ``;``, a backslash or a
    control character is ``BadInput``: its files are reached by the key as spelled, its Delta tables
    through ``object_store``'s URL parser, which takes them as a query, a fragment, an escape, so
    the two would land under different keys (the Delta log of ``s3://b/x?y`` at ``x/_delta_log``,
    that of ``s3://b/a%2Fb`` under ``a/b/``). (A file's key under a root may hold them: a topic's
    ``%RETRY%`` queue directories.)"""
    if is_local(uri):
        return
    odd = sorted({c for c in uri.split("://", 1)[-1] if c in "?#%;\\" or ord(c) < 32})
    if odd:
        raise BadInput(f"{uri}: {', '.join(repr(c) for c in odd)} in an object store or HDFS URI: its files are "
                       "reached by the key as spelled, its Delta tables through a URL parser that takes it as a "
                       "query, a fragment or an escape, so the two would land under different keys; name a prefix "
                       "without it (nothing was done)")


def _check_remote_path(uri: str) -> None:
    path = urlparse(uri).path.rstrip("/")
    bad = [p for p in path.split("/")[1:] if p in ("", ".", "..")]
    if bad:
        what = f"a {bad[0]!r}" if bad[0] else "an empty ('//')"
        raise BadInput(f"{uri}: {what} component in the path: an object store or HDFS lists such a path as it is "
                       "spelled but reads and writes its files where the component leads, so its checks would see "
                       "one place and its files land in another; spell the path without it (nothing was done)")


# (scheme, pid, settings) -> file system: one client per process and settings (a forked child
# makes its own).
_fs_cache: dict[tuple[object, ...], Any] = {}


def _s3() -> pafs.FileSystem:
    """The S3 file system of this process's settings (``objstore``: on executors, the driver's)."""
    st = objstore.s3_settings()
    key = ("s3", os.getpid()) + tuple(sorted(st.items()))
    fs = _fs_cache.get(key)
    if fs is None:
        # the AWS SDK's 3 s request timeout fails a GET from a loaded server (a 2M-message store on
        # moto under load); the timeouts condput's boto3 client uses
        kw: dict[str, Any] = {"connect_timeout": 10, "request_timeout": 30}
        endpoint = st.get("AWS_ENDPOINT_URL")
        if endpoint:
            ep = urlparse(endpoint)
            kw["endpoint_override"] = ep.netloc or ep.path
            kw["scheme"] = ep.scheme or "http"
        if st.get("AWS_REGION"):
            kw["region"] = st["AWS_REGION"]
        if st.get("AWS_ACCESS_KEY_ID") and st.get("AWS_SECRET_ACCESS_KEY"):
            kw.update(access_key=st["AWS_ACCESS_KEY_ID"], secret_key=st["AWS_SECRET_ACCESS_KEY"],
                      session_token=st.get("AWS_SESSION_TOKEN") or None)
        fs = _fs_cache[key] = pafs.S3FileSystem(**kw)
    return fs


def s3_client() -> Any:                  # a botocore S3 client (botocore has no types)
    """A botocore client of this process's S3 settings (those of ``_s3``), one per process and
    settings: S3's own requests where pyarrow's file system adds to them (``storelib.io.objkeys``)
    or has none (the conditional put, ``storelib.io.condput``)."""
    st = objstore.s3_settings()
    key = ("s3-client", os.getpid()) + tuple(sorted(st.items()))
    client = _fs_cache.get(key)
    if client is None:
        # botocore reads the environment itself, and takes the empty AWS_PROFILE a Spark worker
        # is shipped (objstore.ship: unset) for a profile named "" that does not exist
        objstore.unset_empty()
        import botocore.session
        from botocore.config import Config
        kw: dict[str, str | None] = {}
        if st.get("AWS_ENDPOINT_URL"):
            kw["endpoint_url"] = st["AWS_ENDPOINT_URL"]
        if st.get("AWS_ACCESS_KEY_ID") and st.get("AWS_SECRET_ACCESS_KEY"):
            kw.update(aws_access_key_id=st["AWS_ACCESS_KEY_ID"], aws_secret_access_key=st["AWS_SECRET_ACCESS_KEY"],
                      aws_session_token=st.get("AWS_SESSION_TOKEN") or None)
        # path-style addressing at a custom endpoint, as pyarrow and delta-rs use it; pyarrow's
        # timeouts and attempts
        cfg = Config(s3={"addressing_style": "path"} if "endpoint_url" in kw else {},
                     retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=30)
        client = _fs_cache[key] = botocore.session.get_session().create_client(
            "s3", region_name=st.get("AWS_REGION") or "us-east-1", config=cfg, **kw)
    return client


def _gcs() -> pafs.FileSystem:
    """GCS through an emulator (``STORAGE_EMULATOR_HOST``): anonymous, at its scheme and address."""
    st = objstore.gcs_settings()
    key = ("gs", os.getpid()) + tuple(sorted(st.items()))
    fs = _fs_cache.get(key)
    if fs is None:
        ep = urlparse(st["STORAGE_EMULATOR_HOST"])
        fs = _fs_cache[key] = pafs.GcsFileSystem(anonymous=True, endpoint_override=ep.netloc or ep.path,
                                                 scheme=ep.scheme or "http",
                                                 project_id=st.get("GOOGLE_CLOUD_PROJECT") or None)
    return fs


def _hdfs(host: str | None, port: int | None) -> pafs.FileSystem:
    """HDFS through ``hdfs-native`` (a Rust client speaking the NameNode and DataNode protocols: no
    JVM, no libhdfs), behind pyarrow's file system interface. The name node is the URI's
    ``host:port``; ``hdfs:///path`` uses ``fs.defaultFS`` of ``$HADOOP_CONF_DIR`` on each host."""
    key = ("hdfs", os.getpid(), host, port)
    fs = _fs_cache.get(key)
    if fs is None:
        from hdfs_native.fsspec import HdfsFileSystem
        fs = _fs_cache[key] = pafs.PyFileSystem(pafs.FSSpecHandler(HdfsFileSystem(host=host, port=port)))
    return fs
