"""An object store must answer one plain HTTP request in time before its client is used.

The object-store clients under pyarrow wait long, or for ever, on an endpoint that accepts a
connection and never answers, or on a route that drops every packet: GCS's has no connect or read
timeout at all (``storelib.io.gcsreach``), S3's waits its request timeout on each of its attempts
of each request (``storelib.io.s3reach``), all in native code, where no Python signal handler runs
either. So before a process first opens such a store at an endpoint, ``require`` asks the endpoint
one request with a connect and a read timeout of that store's setting (``timeout``) each. Any answer
is a reachable endpoint: an HTTP status of any kind (200, 301, 403, 404, ...) or a TLS handshake that
fails (the server spoke TLS: its client says what it says about certificates). No answer in time, a
refused connection, no route or a name that does not resolve raise the store's error class (an
``OSError``): each command words and ends with it as with any store it cannot read. Asked once per
process and endpoint; no credentials are sent.

Not covered: an endpoint that answers this request and then stops answering mid-command.
"""
from __future__ import annotations

import http.client
import os
import socket
import ssl
from collections.abc import Mapping
from urllib.parse import urlparse

from ..errors import ConfigError

__all__ = ["DEFAULT_TIMEOUT", "timeout", "require"]

DEFAULT_TIMEOUT = 30.0
# (pid, endpoint) this process found answering (a forked child asks again)
_answered: set[tuple[int, str]] = set()


def timeout(name: str, env: Mapping[str, str] | None = None) -> float:
    """The connect and read timeout of the reachability request, in seconds: the setting ``name``
    (``ROCKETLAKE_GCS_TIMEOUT``, ``ROCKETLAKE_S3_TIMEOUT``), else ``DEFAULT_TIMEOUT``."""
    raw = (os.environ if env is None else env).get(name, "")
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise ConfigError(f"{name}={raw!r}: give a positive number of seconds")
    return value


def require(uri: str, what: str, endpoint: str, request: tuple[str, str], setting: str,
            error: type[OSError], env: Mapping[str, str] | None = None) -> None:
    """``error`` unless ``endpoint`` (``scheme://host[:port]``) answers ``request`` (method, path)
    within ``timeout(setting, env)`` seconds to connect and as many to answer; ``what`` names the
    store in the message (``GCS``, ``S3``), ``uri`` what was asked for."""
    key = (os.getpid(), endpoint)
    if key in _answered:
        return
    limit = timeout(setting, env)
    u = urlparse(endpoint)
    conn_cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(u.netloc, timeout=limit)
    why = ""
    try:
        conn.request(*request)
        conn.getresponse().read(1 << 16)
    except (socket.timeout, TimeoutError):
        why = f"it did not answer within {limit:g} s"
    except ssl.SSLError:
        pass                            # it answered, in TLS
    except (OSError, http.client.HTTPException) as e:
        why = f"it cannot be reached ({e})"
    finally:
        conn.close()
    if why:
        raise error(f"{uri}: {what} at {endpoint}: {why} (connect and read timeout {limit:g} s each, "
                    f"{setting}); nothing was read or changed")
    _answered.add(key)
