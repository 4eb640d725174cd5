"""The conditional-put probe: a writer refuses an S3 server that does not honour ``If-None-Match: *``.

On an object store the Delta commit that makes a batch visible is delta-rs' put-if-absent of the
table's next log file (``AWS_CONDITIONAL_PUT=etag``: ``PUT`` with ``If-None-Match: *``). A server
that ignores the header overwrites the log file instead: two racing writers would then both
"commit" version N, one silently replacing the other's batch. A server that does not implement
it fails every commit. So before a writer takes the store's lease (``WriterLease.acquire``) it
asks the server once per process and bucket:

1. ``PUT <store>/_rocketlake/probe-<random>`` with ``If-None-Match: *`` must succeed;
2. the same ``PUT`` again must fail with ``412 Precondition Failed`` (or ``409``: a conflicting
   conditional write in flight);

and the probe object is deleted. Anything else (the second ``PUT`` succeeds, or the server
answers the header with ``501 NotImplemented`` / ``400``) raises ``UnsafeObjectStore`` (exit 2)
naming the endpoint and what to do, before anything of the batch is written.

A ``gs://`` store is refused the same way (exit 2): its Delta tables would go through deltalake's
GCS client, which no test here can run (the GCS emulator lacks the API it uses), so ``gs://`` is
for inputs only.

Not probed: stores whose user set ``ROCKETLAKE_S3_UNSAFE_RENAME=1``, declaring that one writer at a
time is guaranteed from outside (deltalake 1.6 still commits with ``If-None-Match: *``; a server that
ignores it overwrites), see ``storage.delta_storage_options``.

Refused (exit 2) before anything else: ``AWS_S3_LOCKING_PROVIDER`` in the environment of a writer
of an ``s3://`` store. The pinned deltalake has no DynamoDB log store (delta-rs removed it in
python-v1.6.1): given ``dynamodb`` it logs an error and commits exactly as without it, by a PUT
with ``If-None-Match: *`` that asks DynamoDB nothing (tests/e2e/test_deltalake_locking.py). Taken
for a guard, as rocketlake did before, the setting skipped this probe: on a server that ignores the
header two writers could both commit while their user believed in a lock.
"""
from __future__ import annotations

import os
import uuid
from urllib.parse import urlparse

from ..errors import UnsafeObjectStore
from . import objstore
from .filesystems import s3_client

__all__ = ["PROBE_PREFIX", "needs_probe", "require_conditional_put", "refuse_locking_provider", "refuse_gs_store", "probe"]

PROBE_PREFIX = "_rocketlake/probe-"
# (endpoint, bucket) this process found honouring conditional puts
_honoured: set[tuple[str, str]] = set()
# what a server answers a conditional PUT it cannot evaluate
_UNSUPPORTED = ("NotImplemented", "InvalidArgument", "InvalidRequest", "501", "400")
_TAKEN = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


def needs_probe(uri: str) -> bool:
    """Whether the Delta commits of the store at ``uri`` rely on the server's conditional put."""
    if not uri.startswith("s3://"):
        return False
    from .storage import delta_storage_options
    return (delta_storage_options(uri) or {}).get("AWS_CONDITIONAL_PUT") == "etag"


def _code(err: Exception) -> tuple[str, str, str]:
    """(error code, HTTP status, Server header) of a botocore ClientError."""
    resp = getattr(err, "response", {}) or {}
    meta = resp.get("ResponseMetadata", {})
    return (str(resp.get("Error", {}).get("Code", "")), str(meta.get("HTTPStatusCode", "")),
            str((meta.get("HTTPHeaders") or {}).get("server", "")))


def probe(uri: str) -> tuple[bool, str]:
    """Ask the S3 server of the store at ``uri`` whether it honours ``If-None-Match: *`` on PUT:
    (honoured, what it did). The probe object is deleted again."""
    from botocore.exceptions import ClientError
    u = urlparse(uri)
    bucket, prefix = u.netloc, u.path.strip("/")
    key = (prefix + "/" if prefix else "") + PROBE_PREFIX + uuid.uuid4().hex
    s3 = s3_client()
    server = ""
    try:
        try:
            r = s3.put_object(Bucket=bucket, Key=key, Body=b"1", IfNoneMatch="*")
            server = (r.get("ResponseMetadata", {}).get("HTTPHeaders") or {}).get("server", "")
        except ClientError as e:
            code, status, server = _code(e)
            if code in _UNSUPPORTED or status in _UNSUPPORTED:
                return False, (f"it answered a PUT with If-None-Match: * with {status} {code} (conditional writes "
                               f"not implemented){_named(server)}")
            raise
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=b"2", IfNoneMatch="*")
        except ClientError as e:
            code, status, server = _code(e)
            if code in _TAKEN or status in _TAKEN:
                return True, f"a second conditional PUT of one key was refused ({status} {code})"
            if code in _UNSUPPORTED or status in _UNSUPPORTED:
                return False, (f"it answered the second PUT with If-None-Match: * with {status} {code}"
                               f"{_named(server)}")
            raise
        return False, (f"it ignored If-None-Match: * (a second conditional PUT of one key succeeded and replaced "
                       f"the object){_named(server)}")
    finally:
        try:
            s3.delete_object(Bucket=bucket, Key=key)
        except ClientError:
            pass


def _named(server: str) -> str:
    return f"; the server calls itself {server!r}" if server else ""


def refuse_gs_store(uri: str) -> None:
    """``UnsafeObjectStore`` for a store on ``gs://`` (an input only): a writer says so before it
    reads anything there."""
    if uri.startswith("gs://"):
        raise UnsafeObjectStore(
            f"{uri}: a store on gs:// is not supported (its Delta tables on GCS are untested); gs:// URIs are "
            f"read as --input only. Put the store on a local path, s3:// or hdfs://")


def require_conditional_put(uri: str) -> None:
    """Raise ``UnsafeObjectStore`` unless the store at ``uri`` is safe for concurrent Delta commits
    (module docstring). Once per process, endpoint and bucket; a no-op for stores that are not
    on S3 or that use another guard; a ``gs://`` store is refused."""
    refuse_gs_store(uri)
    refuse_locking_provider(uri)
    if not needs_probe(uri):
        return
    settings = objstore.s3_settings()
    endpoint = settings.get("AWS_ENDPOINT_URL") or "AWS S3"
    bucket = urlparse(uri).netloc
    if (endpoint, bucket) in _honoured:
        return
    ok, what = probe(uri)
    if not ok:
        raise UnsafeObjectStore(
            f"the S3 server at {endpoint} (bucket {bucket}) does not honour conditional puts: {what}. "
            f"A Delta commit there could not stop a second writer from committing the same table version, "
            f"so rocketlake refuses to write {uri}. Use a server that honours If-None-Match: * on PUT "
            f"(AWS S3; S3Proxy 4.0 or newer on its filesystem-nio2 backend) or, only if you make sure "
            f"from outside that one writer at a time ever runs, set ROCKETLAKE_S3_UNSAFE_RENAME=1")
    _honoured.add((endpoint, bucket))


def refuse_locking_provider(uri: str) -> None:
    """``UnsafeObjectStore`` when ``AWS_S3_LOCKING_PROVIDER`` is set for a writer of an ``s3://``
    store: deltalake would ignore it and commit without any lock (module docstring)."""
    provider = os.environ.get("AWS_S3_LOCKING_PROVIDER")
    if not uri.startswith("s3://") or not provider:
        return
    raise UnsafeObjectStore(
        f"AWS_S3_LOCKING_PROVIDER={provider} is set, but deltalake (rocketlake's Delta writer) has no DynamoDB "
        f"lock any more (delta-rs removed it): it would ignore the setting and rely on the server's conditional "
        f"puts alone, so rocketlake refuses to write {uri} rather than let you believe in a lock. Unset "
        f"AWS_S3_LOCKING_PROVIDER (and DELTA_DYNAMO_TABLE_NAME): every writer then probes that the server "
        f"honours If-None-Match: * on PUT and refuses one that does not")
