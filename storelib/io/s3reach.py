"""S3 must answer before pyarrow's S3 client is used: an endpoint that never answers is an error
within ``ROCKETLAKE_S3_TIMEOUT``, not a wait of minutes.

pyarrow's ``S3FileSystem`` (the AWS SDK over curl) bounds each attempt of a request by its request
timeout (30 s here, ``storelib.io.filesystems``: honoured on Linux too, as curl's low-speed limit)
and makes three attempts of each request, so an endpoint that accepts a connection and never
answers holds every read for about 90 s per request, and a command's first steps ask several (a
``verify`` waits about 3 minutes), in native code, where no Python signal handler runs. So before a
process first opens S3 at an endpoint, ``require_reachable`` asks it one unsigned request (``HEAD
/<bucket>``, path-style, as pyarrow addresses a bucket) with a connect and a read timeout of
``ROCKETLAKE_S3_TIMEOUT`` seconds each (default 30; ``storelib.io.objreach``; shipped to the
executors with the other S3 settings, ``storelib.io.objstore``). Any HTTP answer (200, 301, 403,
404, ...) is a reachable S3, whatever the credentials: pyarrow's client then signs its own requests
and says what it says. No answer in time, a refused connection, no route or an endpoint name that
does not resolve raise ``S3Unreachable`` (a ``TimeoutError``, an ``OSError``: exit 1 as any store
a command cannot read; ``repair``'s dry run 2). Asked once per process and endpoint.

The endpoint asked is the one pyarrow's client uses: ``AWS_ENDPOINT_URL`` (or a profile's
``endpoint_url``), else AWS's regional endpoint of ``AWS_REGION`` (``us-east-1`` when unset).

Not covered: an S3 that answers this request and then stops answering mid-command; its client then
gives up after its own timeouts and attempts (SIGTERM / SIGINT end it sooner: ``storelib.runtime.stuck``).
"""
from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, urlparse

from . import objreach
from .objreach import DEFAULT_TIMEOUT

__all__ = ["TIMEOUT_ENV", "DEFAULT_TIMEOUT", "S3Unreachable", "timeout", "endpoint", "require_reachable"]

TIMEOUT_ENV = "ROCKETLAKE_S3_TIMEOUT"


class S3Unreachable(TimeoutError):
    """S3 did not answer (in time) at the endpoint named in the message."""


def timeout(settings: Mapping[str, str]) -> float:
    """The connect and read timeout of the reachability request, in seconds (``ROCKETLAKE_S3_TIMEOUT``
    of ``settings``: ``objstore.s3_settings``)."""
    return objreach.timeout(TIMEOUT_ENV, settings)


def endpoint(settings: Mapping[str, str]) -> str:
    """The ``scheme://host[:port]`` pyarrow's S3 client talks to with ``settings``: the endpoint
    override read as ``storelib.io.filesystems`` gives it to pyarrow, else AWS's regional endpoint."""
    override = settings.get("AWS_ENDPOINT_URL")
    if override:
        ep = urlparse(override)
        return f"{ep.scheme or 'http'}://{ep.netloc or ep.path}"
    region = settings.get("AWS_REGION") or "us-east-1"
    return f"https://s3.{region}.amazonaws.com" + (".cn" if region.startswith("cn-") else "")


def require_reachable(uri: str, settings: Mapping[str, str]) -> None:
    """``S3Unreachable`` unless S3 at ``endpoint(settings)`` answers a request about ``uri``'s bucket
    within ``timeout(settings)`` seconds to connect and as many to answer."""
    bucket = urlparse(uri).netloc
    objreach.require(uri, "S3", endpoint(settings), ("HEAD", "/" + quote(bucket, safe="")), TIMEOUT_ENV,
                     S3Unreachable, settings)
