"""Which file system serves a store or input URI: local paths, ``s3://`` (pyarrow's S3 client with
``storelib.io.objstore``'s settings; S3 must answer first, ``storelib.io.s3reach``), ``gs://`` (a GCS emulator when ``STORAGE_EMULATOR_HOST`` is
set; GCS must answer first, ``storelib.io.gcsreach``), ``hdfs://`` (``hdfs-native`` behind pyarrow's file system interface), anything else
``pyarrow.fs.FileSystem.from_uri`` opens. One client per process and settings."""
from __future__ import annotations

import os
import socket
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from . import gcsreach, objstore, s3reach
from ..errors import BadInput
from ..format.paths import is_local, local_path

__all__ = ["is_local", "local_path", "filesystem", "s3_client", "check_store_uri", "file_system_of",
           "HDFS_DEFAULT_PORT"]

# The NameNode's RPC port when a URI names none (Hadoop's and hdfs-native's default).
HDFS_DEFAULT_PORT = 8020


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
        # pyarrow's S3 client waits minutes on an endpoint that never answers (s3reach)
        s3reach.require_reachable(uri, objstore.s3_settings())
        u = urlparse(uri)
        return _s3(), (u.netloc + u.path).rstrip("/")
    if uri.startswith("gs://"):
        # pyarrow's GCS client has no timeouts: one that never answers would block for ever
        emulator = objstore.gcs_settings().get("STORAGE_EMULATOR_HOST")
        gcsreach.require_reachable(uri, emulator)
        if emulator:
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


def file_system_of(uri: str) -> tuple[str, frozenset[Any]]:
    """Which file system serves the remote ``uri``, as two URIs can be compared: (scheme, the set of
    what identifies it). S3 and GCS: the bucket, as spelled (bucket names are case-sensitive).
    HDFS: the socket addresses of its name node(s), however the URI names them: an empty host is
    ``fs.defaultFS`` of ``$HADOOP_CONF_DIR`` (or ``$HADOOP_HOME/etc/hadoop``), as hdfs-native and
    Hadoop resolve ``hdfs:///path``; a host without a port is an HA name service of that
    configuration (its name nodes' RPC addresses) or a host at port 8020; host names are resolved
    (``localhost`` and ``127.0.0.1`` are one name node). Two URIs are on one file system when
    their schemes are equal and their sets meet. ``LookupError`` (its message says why) when an
    HDFS URI's name node cannot be resolved."""
    u = urlparse(uri)
    scheme = u.scheme.lower()
    if scheme != "hdfs":
        return scheme, frozenset([u.netloc])
    netloc = u.netloc
    if not netloc:
        conf = _hadoop_conf("core-site.xml")
        default = conf.get("fs.defaultFS") or conf.get("fs.default.name") or ""     # (Hadoop 1's name)
        d = urlparse(default)
        if d.scheme.lower() != "hdfs" or not d.netloc:
            raise LookupError(f"{uri} names the default file system, and fs.defaultFS is "
                              f"{default or 'not set'} in {_hadoop_conf_dir() or 'no Hadoop configuration'} "
                              "($HADOOP_CONF_DIR)")
        netloc = d.netloc
    n = urlparse(f"hdfs://{netloc}")
    try:
        host, port = n.hostname or "", n.port          # (hostname: lower case)
    except ValueError as e:
        raise LookupError(f"{uri}: the name node {netloc} has no valid port ({e})") from None
    if port is None:
        nns = _nameservice_addresses(host)
        if nns:
            return scheme, frozenset(a for h, p in nns for a in _addresses(uri, h, p))
    return scheme, frozenset(_addresses(uri, host, port if port is not None else HDFS_DEFAULT_PORT))


def _addresses(uri: str, host: str, port: int) -> set[tuple[str, int]]:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as e:
        raise LookupError(f"{uri}: its name node {host}:{port} cannot be resolved ({e})") from None
    return {(str(i[4][0]), port) for i in infos}


def _hadoop_conf_dir() -> str | None:
    d = os.environ.get("HADOOP_CONF_DIR")
    if not d and os.environ.get("HADOOP_HOME"):
        d = os.path.join(os.environ["HADOOP_HOME"], "etc", "hadoop")
    return d or None


def _hadoop_conf(name: str) -> dict[str, str]:
    """The properties of the Hadoop configuration file ``name`` (core-site.xml, hdfs-site.xml) of
    ``_hadoop_conf_dir``; {} when there is none."""
    d = _hadoop_conf_dir()
    if not d:
        return {}
    try:
        root = ET.parse(os.path.join(d, name)).getroot()
    except (OSError, ET.ParseError):
        return {}
    return {(p.findtext("name") or "").strip(): (p.findtext("value") or "").strip() for p in root.iter("property")}


def _nameservice_addresses(host: str) -> list[tuple[str, int]]:
    """The (host, port) RPC addresses of the name nodes of HA name service ``host`` (hdfs-site.xml
    ``dfs.nameservices``, ``dfs.ha.namenodes.<ns>``, ``dfs.namenode.rpc-address.<ns>.<nn>``); []
    when ``host`` is not one."""
    conf = _hadoop_conf("hdfs-site.xml")
    services = {s.strip().lower(): s.strip() for s in conf.get("dfs.nameservices", "").split(",") if s.strip()}
    ns = services.get(host)
    if ns is None:
        return []
    out = []
    for nn in (n.strip() for n in conf.get(f"dfs.ha.namenodes.{ns}", "").split(",") if n.strip()):
        addr = conf.get(f"dfs.namenode.rpc-address.{ns}.{nn}", "")
        h, _, p = addr.rpartition(":")
        if h and p.isdigit():
            out.append((h.strip("[]").lower(), int(p)))
    return out
