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
    monkeypatch.setenv("AWS_S3_LOCKING_PROVIDER", "dynamodb")
    assert not condput.needs_probe("s3://bucket/store")
    monkeypatch.delenv("AWS_S3_LOCKING_PROVIDER")
    monkeypatch.setenv("ROCKETLAKE_S3_UNSAFE_RENAME", "1")
    assert not condput.needs_probe("s3://bucket/store")
    condput.require_conditional_put("s3://bucket/store")      # another guard chosen: nothing asked
    condput.require_conditional_put("/data/store")


def test_a_gs_store_is_refused_as_bad_input():
    with pytest.raises(UnsafeObjectStore) as e:
        condput.require_conditional_put("gs://bucket/store")
    assert exit_code(e.value) == ExitCode.BAD_INPUT
    assert "--input only" in str(e.value) and "s3:// or hdfs://" in str(e.value)
