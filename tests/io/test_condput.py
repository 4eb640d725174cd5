"""The writers' backend checks without a server (storelib.io.condput): which stores are probed,
and a gs:// store is refused (exit 2). The probe against real servers: tests/e2e/test_s3proxy.py."""
from __future__ import annotations

import pytest

from storelib.errors import ExitCode, UnsafeObjectStore, exit_code
from storelib.io import condput


def test_only_s3_stores_whose_commits_rely_on_conditional_puts_are_probed(monkeypatch):
    for k in ("ROCKETLAKE_S3_UNSAFE_RENAME", "AWS_S3_LOCKING_PROVIDER", "AWS_CONDITIONAL_PUT"):
        monkeypatch.delenv(k, raising=False)
    assert condput.needs_probe("s3://bucket/store")
    assert not condput.needs_probe("/data/store") and not condput.needs_probe("hdfs://nn:8020/store")
    monkeypatch.setenv("ROCKETLAKE_S3_UNSAFE_RENAME", "1")
    assert not condput.needs_probe("s3://bucket/store")
    condput.require_conditional_put("s3://bucket/store")      # another guard chosen: nothing asked
    condput.require_conditional_put("/data/store")


def test_a_gs_store_is_refused_as_bad_input():
    with pytest.raises(UnsafeObjectStore) as e:
        condput.require_conditional_put("gs://bucket/store")
    assert exit_code(e.value) == ExitCode.BAD_INPUT
    assert "--input only" in str(e.value) and "s3:// or hdfs://" in str(e.value)


def test_a_dynamodb_locking_provider_is_refused_not_trusted(monkeypatch):
    """deltalake 1.6 has no DynamoDB log store: it ignores AWS_S3_LOCKING_PROVIDER, which main took for
    a guard and so skipped the probe. A writer of an s3:// store refuses it (exit 2) before asking
    any server, and deltalake is never handed it; other stores ignore it."""
    for k in ("ROCKETLAKE_S3_UNSAFE_RENAME", "AWS_CONDITIONAL_PUT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_S3_LOCKING_PROVIDER", "dynamodb")
    monkeypatch.setenv("DELTA_DYNAMO_TABLE_NAME", "delta_log")
    with pytest.raises(UnsafeObjectStore) as e:
        condput.require_conditional_put("s3://bucket/store")
    assert exit_code(e.value) == ExitCode.BAD_INPUT
    msg = str(e.value)
    assert "AWS_S3_LOCKING_PROVIDER=dynamodb" in msg and "Unset AWS_S3_LOCKING_PROVIDER" in msg and "\n" not in msg
    from storelib.io.storage import delta_storage_options
    opts = delta_storage_options("s3://bucket/store")
    assert "AWS_S3_LOCKING_PROVIDER" not in opts and "DELTA_DYNAMO_TABLE_NAME" not in opts
    assert opts["AWS_CONDITIONAL_PUT"] == "etag"
    condput.require_conditional_put("/data/store")
    condput.require_conditional_put("hdfs://nn:8020/store")
