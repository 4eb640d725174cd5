"""GCS must answer before pyarrow's GCS client is used: an unreachable GCS is an error, not a hang.

pyarrow's ``GcsFileSystem`` has no connect or read timeout (only ``retry_time_limit``, which bounds
the retries after a failed request, not a request that never ends): a GCS endpoint that accepts a
connection and never answers, or a route that drops every packet, blocks every read of a ``gs://``
store or input for ever, in native code, where no Python signal handler runs either. So before a
process first opens GCS at an endpoint, ``require_reachable`` asks it one plain HTTP request (the
bucket's metadata, ``GET /storage/v1/b/<bucket>``) with a connect and a read timeout of
``ROCKETLAKE_GCS_TIMEOUT`` seconds each (default ``DEFAULT_TIMEOUT``; ``storelib.io.objreach``).
Any HTTP answer (200, 401, 404, ...) is a reachable GCS: pyarrow's client then says what it says.
No answer in time, a refused connection or no route raises ``GcsUnreachable`` (a ``TimeoutError``,
an ``OSError``: each command words and ends with it as with an unreachable S3 endpoint,
``storelib.io.s3reach``). Asked once per process and endpoint.

Not covered: a GCS that answers this request and then stops answering mid-command. pyarrow's client
then gives each request 2 minutes without a byte and retries it up to its retry limit (15 minutes
by default; ``retry_time_limit`` bounds the retries, not the 2 minutes); SIGTERM / SIGINT end it
sooner (``storelib.runtime.stuck`` ends a process its signal handler cannot reach).
"""
from __future__ import annotations

from urllib.parse import quote, urlparse

from . import objreach
from .objreach import DEFAULT_TIMEOUT

__all__ = ["TIMEOUT_ENV", "DEFAULT_TIMEOUT", "GcsUnreachable", "timeout", "endpoint", "require_reachable"]

TIMEOUT_ENV = "ROCKETLAKE_GCS_TIMEOUT"
REAL_GCS = "https://storage.googleapis.com"


class GcsUnreachable(TimeoutError):
    """GCS did not answer (in time) at the endpoint named in the message."""


def timeout(env: dict[str, str] | None = None) -> float:
    """The connect and read timeout of the reachability request, in seconds (``ROCKETLAKE_GCS_TIMEOUT``)."""
    return objreach.timeout(TIMEOUT_ENV, env)


def endpoint(emulator: str | None) -> str:
    """The ``scheme://host[:port]`` pyarrow's client talks to: the emulator's, else GCS's own."""
    if not emulator:
        return REAL_GCS
    ep = urlparse(emulator if "://" in emulator else "http://" + emulator)
    return f"{ep.scheme or 'http'}://{ep.netloc or ep.path}"


def require_reachable(uri: str, emulator: str | None) -> None:
    """``GcsUnreachable`` unless GCS (the emulator at ``emulator``, else GCS itself) answers an HTTP
    request about ``uri``'s bucket within ``timeout()`` seconds to connect and as many to answer."""
    bucket = urlparse(uri).netloc
    objreach.require(uri, "GCS", endpoint(emulator), ("GET", f"/storage/v1/b/{quote(bucket, safe='')}?fields=name"),
                     TIMEOUT_ENV, GcsUnreachable)
