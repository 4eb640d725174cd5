"""Object-store settings: read once on the driver, the same on every executor.

A store or input at ``s3://`` or ``gs://`` is opened by ``storage.filesystem`` on the driver and in
every Spark task. The settings come from the driver's environment:

* S3: ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``),
  ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_ALLOW_HTTP``,
  and a named profile (``AWS_PROFILE``) whose static keys, ``region`` and ``endpoint_url`` are
  read from the shared files (``~/.aws/credentials``, ``~/.aws/config``, or
  ``AWS_SHARED_CREDENTIALS_FILE`` / ``AWS_CONFIG_FILE``) for what the environment leaves unset.
  ``ROCKETLAKE_S3_TIMEOUT``: seconds S3 has to answer first (``storelib.io.s3reach``).
* GCS: ``STORAGE_EMULATOR_HOST`` (an emulator's ``http://host:port``, anonymous access),
  ``GOOGLE_CLOUD_PROJECT``, ``GOOGLE_APPLICATION_CREDENTIALS`` (a key file path: it must exist at
  that path on every host; only the emulator is tested), ``ROCKETLAKE_GCS_TIMEOUT`` (seconds GCS
  has to answer first, ``storelib.io.gcsreach``).

``ship(sc)`` puts the resolved settings into ``sc.environment``: PySpark sends that map with every
Python function it runs (RDD functions, ``mapInArrow``, Python data sources), and each Python
worker starts with it as its environment, on any master. So executors use the driver's endpoint,
region and keys without ``spark.executorEnv`` options, and a variable the executor's host sets
itself (an ``AWS_ENDPOINT_URL`` or ``AWS_PROFILE`` of its own) is overridden: an unset driver
setting is shipped as an empty value, which reads as unset. The map is not part of the Spark
configuration, so it is not on the Environment page nor in event logs, and nothing here prints a
value (``describe`` names the settings, with key ids and secrets masked).

Credentials the driver gets from neither the environment nor a profile's static keys (instance
roles, SSO) are not shipped: each executor then uses its own host's credential chain, still
against the driver's endpoint and region.
"""
from __future__ import annotations

import configparser
import os
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["MARK", "S3_VARS", "GCS_VARS", "SHIPPED", "s3_settings", "gcs_settings", "executor_env", "ship", "describe",
           "unset_empty"]

S3_VARS = ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
           "AWS_SESSION_TOKEN", "AWS_ALLOW_HTTP", "ROCKETLAKE_S3_TIMEOUT")
GCS_VARS = ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS", "ROCKETLAKE_GCS_TIMEOUT")
# Variables that would make an executor pick other settings than the driver's; shipped empty.
_OVERRIDDEN = ("AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE")
# Set on executors by ``ship``: their settings are the shipped ones, never their host's profile files.
MARK = "ROCKETLAKE_OBJSTORE_SHIPPED"
SHIPPED = S3_VARS + GCS_VARS + _OVERRIDDEN + (MARK,)
_SECRET = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


Env = Mapping[str, str]                 # an environment (``os.environ`` unless a test gives one)


def _get(env: Env, *names: str) -> str:
    for n in names:
        v = env.get(n)
        if v:
            return v
    return ""


def _profile(env: Env) -> dict[str, str]:
    """The static settings of the named profile (``AWS_PROFILE``; else ``default``) from the shared
    files, as S3_VARS names; {} when there are no such files or no such profile."""
    name = _get(env, "AWS_PROFILE", "AWS_DEFAULT_PROFILE") or "default"
    home = os.path.expanduser("~")
    creds = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials")
    conf = env.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config")
    stamp = (name, creds, conf, _mtime(creds), _mtime(conf))
    hit = _profiles.get(stamp)
    if hit is not None:
        return dict(hit)
    out: dict[str, str] = {}
    for path, section in ((conf, name if name == "default" else f"profile {name}"), (creds, name)):
        cp = configparser.RawConfigParser()
        try:
            if not cp.read(path) or not cp.has_section(section):
                continue
        except configparser.Error:
            continue
        for key, var in (("aws_access_key_id", "AWS_ACCESS_KEY_ID"), ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                         ("aws_session_token", "AWS_SESSION_TOKEN"), ("region", "AWS_REGION"),
                         ("endpoint_url", "AWS_ENDPOINT_URL")):
            if cp.has_option(section, key) and cp.get(section, key).strip():
                out[var] = cp.get(section, key).strip()
    _profiles[stamp] = dict(out)
    return out


_profiles: dict[tuple[str, str, str, int | None, int | None], dict[str, str]] = {}
# (profile, files, their mtimes) -> its settings


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def s3_settings(env: Env | None = None) -> dict[str, str]:
    """The S3 settings of this process, S3_VARS names -> values (unset ones absent)."""
    env = os.environ if env is None else env
    out = {"AWS_ENDPOINT_URL": _get(env, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
           "AWS_REGION": _get(env, "AWS_REGION", "AWS_DEFAULT_REGION"),
           "AWS_ACCESS_KEY_ID": _get(env, "AWS_ACCESS_KEY_ID"),
           "AWS_SECRET_ACCESS_KEY": _get(env, "AWS_SECRET_ACCESS_KEY"),
           "AWS_SESSION_TOKEN": _get(env, "AWS_SESSION_TOKEN"),
           "AWS_ALLOW_HTTP": _get(env, "AWS_ALLOW_HTTP"),
           "ROCKETLAKE_S3_TIMEOUT": _get(env, "ROCKETLAKE_S3_TIMEOUT")}
    prof = {} if env.get(MARK) else _profile(env)
    if out["AWS_ACCESS_KEY_ID"] and out["AWS_SECRET_ACCESS_KEY"]:
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            prof.pop(k, None)              # keys from the environment win as a set, never mixed
    for k, v in prof.items():
        if not out.get(k):
            out[k] = v
    return {k: v for k, v in out.items() if v}


def gcs_settings(env: Env | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: env[k] for k in GCS_VARS if env.get(k)}


def executor_env(env: Env | None = None) -> dict[str, str]:
    """What ``ship`` puts into ``sc.environment``: every SHIPPED name, the driver's resolved value
    or "" (unset: an executor's own value of it must not apply)."""
    got = {**s3_settings(env), **gcs_settings(env), MARK: "1"}
    return {k: got.get(k, "") for k in SHIPPED}


def ship(sc: SparkContext, env: Env | None = None) -> None:
    """Send this driver's object-store settings with every Python function ``sc`` runs from now on
    (see the module docstring). Idempotent; call it before the job's first Spark work."""
    sc.environment.update(executor_env(env))


def unset_empty(env: MutableMapping[str, str] | None = None) -> None:
    """Remove the SHIPPED variables ``ship`` set empty from this process's environment (``os.environ``):
    they read as unset here, but deltalake's Rust client reads the environment itself and takes an
    empty ``AWS_ENDPOINT_URL_S3`` for an endpoint (it panics) and an empty ``AWS_SESSION_TOKEN``
    for a token (it sends an empty security-token header, which a server rejects). A Python worker
    that opens a Delta table (the streaming source's planner) calls this first."""
    env = os.environ if env is None else env
    for k in SHIPPED:
        if k in env and not env[k]:
            del env[k]


def describe(env: Env | None = None) -> str:
    """The settings for a log line: names and endpoints, key ids and secrets masked."""
    got = {**s3_settings(env), **gcs_settings(env)}
    return " ".join(f"{k}={'***' if k in _SECRET else v}" for k, v in sorted(got.items())) or "(none)"
